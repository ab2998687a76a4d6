"""The simulated nvidia-ctk against what the real NVIDIA Container Toolkit 1.20.0 wrote (corpus nvidia_ctk/,
copied into tests/fixtures/nvidia_ctk/ with the names kept).

The corpus holds outputs only; the inputs are reconstructed from the corpus README and stated per test.
Timestamps in logrus lines (time="...") are the only part not compared byte for byte.
"""
import io
import json
import os
import re
import stat
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SIM = os.path.join(ROOT, "molecule", "simulator")
if SIM not in sys.path:
    sys.path.insert(0, SIM)
FIX = os.path.join(ROOT, "tests", "fixtures", "nvidia_ctk")

from gpusim import cdi, ctk  # noqa: E402

UUID = "GPU-f8ddbc2d-77d0-4c5a-9594-0afcab382164"
TIME = re.compile(r'^time="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)" ')


def fixture(name, mode="r"):
    with open(os.path.join(FIX, name), mode) as fh:
        return fh.read()


def untimed(text):
    """logrus lines without their time= field (asserting each line has one)."""
    out = []
    for line in text.splitlines():
        assert TIME.match(line), line
        out.append(TIME.sub("", line))
    return out


def run(argv, version="1.20.0", env=None):
    out, err = io.StringIO(), io.StringIO()
    rc = ctk.main(list(argv), version=version, commit="0" * 40, stdout=out, stderr=err,
                  env=dict(os.environ, **(env or {})))
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def _umask():
    old = os.umask(0o022)
    yield
    os.umask(old)


def write(path, text, mode=None):
    with open(str(path), "w") as fh:
        fh.write(text)
    if mode is not None:
        os.chmod(str(path), mode)


def read(path):
    with open(str(path)) as fh:
        return fh.read()


# --------------------------------------------------------------------------------------------------
# --version

@pytest.mark.parametrize("version,commit", [("1.17.8", "f202b80a9b9d0db00d9b1d73c0128c8962c55f4d"),
                                            ("1.18.0", "f8daa5e26de9fd7eb79259040b6dd5a52060048c")])
def test_version_is_urfave_format_with_release_commit(version, commit):
    out, err = io.StringIO(), io.StringIO()
    assert ctk.main(["--version"], version=version, stdout=out, stderr=err) == 0
    assert out.getvalue() == "NVIDIA Container Toolkit CLI version %s\ncommit: %s\n" % (version, commit)
    assert err.getvalue() == ""


def test_version_short_flag():
    assert run(["-v"], version="1.18.0")[1].startswith("NVIDIA Container Toolkit CLI version 1.18.0\n")


# --------------------------------------------------------------------------------------------------
# runtime configure --runtime=docker

def test_docker_missing_file_is_corpus_missing_file(tmp_path):
    cfg = tmp_path / "docker" / "daemon.json"       # neither the file nor its directory exist
    rc, out, err = run(["runtime", "configure", "--runtime=docker", "--config=%s" % cfg])
    assert (rc, out) == (0, "")
    assert read(cfg) == fixture("docker_configure_missing-file.json")
    assert stat.S_IMODE(os.stat(str(cfg)).st_mode) == 0o644
    assert untimed(err) == ['level=info msg="Config file does not exist; using empty config"',
                            'level=info msg="Wrote updated config to %s"' % cfg,
                            'level=info msg="It is recommended that docker daemon be restarted."']


def test_docker_existing_keys_sorted_stderr_is_corpus(tmp_path):
    # reconstructed input: two unrelated keys, deliberately unsorted and compact
    cfg = tmp_path / "daemon.json"
    write(cfg, '{"registry-mirrors":["https://mirror.example"],"log-driver":"json-file"}\n')
    rc, out, err = run(["runtime", "configure", "--runtime=docker", "--config", str(cfg)])
    assert (rc, out) == (0, "")
    assert read(cfg) == fixture("docker_configure_existing-keys.json")
    expected = [l.replace("/etc/docker/daemon.json", str(cfg)) for l in untimed(fixture("docker_configure.stderr"))]
    assert untimed(err) == expected


def test_docker_default_path_is_etc_docker(monkeypatch):
    o = {}
    monkeypatch.setattr(ctk, "configure_docker", lambda opts, log, stdout: o.update(opts))
    assert run(["runtime", "configure"])[0] == 0
    assert o["config"] == "/etc/docker/daemon.json" and o["runtime"] == "docker"


@pytest.mark.parametrize("before", [None, '{"default-runtime": "runc"}'])
def test_docker_set_as_default_is_corpus(tmp_path, before):
    # reconstructed inputs: no file, or an explicit runc default that --set-as-default replaces
    cfg = tmp_path / "daemon.json"
    if before is not None:
        write(cfg, before)
    assert run(["runtime", "configure", "--config=%s" % cfg, "--set-as-default"])[0] == 0
    assert read(cfg) == fixture("docker_configure_set-as-default.json")


def test_docker_set_as_default_keeps_crun_is_corpus(tmp_path):
    # reconstructed input: crun registered and default; nvidia becomes the default, crun stays
    cfg = tmp_path / "daemon.json"
    write(cfg, '{"default-runtime": "crun", "runtimes": {"crun": {"path": "/usr/bin/crun"}}}')
    assert run(["runtime", "configure", "--config=%s" % cfg, "--nvidia-set-as-default"])[0] == 0
    assert read(cfg) == fixture("docker_configure_set-as-default_keeps-crun.json")


def test_docker_without_flag_leaves_default_runtime(tmp_path):
    cfg = tmp_path / "daemon.json"
    write(cfg, '{"default-runtime": "crun"}')
    assert run(["runtime", "configure", "--config=%s" % cfg])[0] == 0
    assert json.loads(read(cfg))["default-runtime"] == "crun"


def test_docker_existing_nvidia_entry_replaced_whole(tmp_path):
    cfg = tmp_path / "daemon.json"
    write(cfg, '{"runtimes": {"nvidia": {"path": "/opt/old/nvidia-container-runtime", "runtimeArgs": ["--x"]}}}')
    assert run(["runtime", "configure", "--config=%s" % cfg])[0] == 0
    assert read(cfg) == fixture("docker_configure_missing-file.json")


def test_docker_cdi_enabled_replaces_features_map_is_corpus(tmp_path):
    # reconstructed input: another feature flag; up to 1.20.0 the whole features map is replaced
    cfg = tmp_path / "daemon.json"
    write(cfg, '{"features": {"buildkit": true, "containerd-snapshotter": false}}')
    assert run(["runtime", "configure", "--config=%s" % cfg, "--cdi.enabled"])[0] == 0
    assert read(cfg) == fixture("docker_configure_cdi-enabled.json")


@pytest.mark.parametrize("alias", ["--cdi.enabled", "--cdi.enable", "--enable-cdi", "--cdi.enabled=true"])
def test_docker_cdi_flag_aliases(tmp_path, alias):
    cfg = tmp_path / "daemon.json"
    assert run(["runtime", "configure", "--config=%s" % cfg, alias])[0] == 0
    assert read(cfg) == fixture("docker_configure_cdi-enabled.json")


def test_docker_rewritten_in_place_every_run_same_inode_mode_kept(tmp_path):
    cfg = tmp_path / "daemon.json"
    write(cfg, '{"log-driver": "json-file", "registry-mirrors": ["https://mirror.example"]}', mode=0o600)
    ino = os.stat(str(cfg)).st_ino
    assert run(["runtime", "configure", "--config=%s" % cfg])[0] == 0
    first = read(cfg)
    os.utime(str(cfg), (1, 1))
    assert run(["runtime", "configure", "--config=%s" % cfg])[0] == 0
    st = os.stat(str(cfg))
    assert read(cfg) == first == fixture("docker_configure_existing-keys.json")   # byte-identical
    assert st.st_ino == ino                  # same inode: not temp + rename
    assert stat.S_IMODE(st.st_mode) == 0o600  # mode kept
    assert st.st_mtime > 1                    # rewritten even though nothing changed


def test_docker_dry_run_prints_and_writes_nothing(tmp_path):
    cfg = tmp_path / "daemon.json"
    write(cfg, '{"log-driver":"json-file","registry-mirrors":["https://mirror.example"]}')
    before = os.stat(str(cfg))
    rc, out, err = run(["runtime", "configure", "--config=%s" % cfg, "--dry-run"])
    assert rc == 0
    assert out == fixture("docker_configure_existing-keys.json") + "\n"
    assert read(cfg) == '{"log-driver":"json-file","registry-mirrors":["https://mirror.example"]}'
    assert os.stat(str(cfg)).st_mtime_ns == before.st_mtime_ns
    assert untimed(err) == ['level=info msg="Loading config from %s"' % cfg]


def test_docker_dry_run_missing_file_creates_nothing(tmp_path):
    cfg = tmp_path / "sub" / "daemon.json"
    rc, out, _err = run(["runtime", "configure", "--config=%s" % cfg, "--dry-run"])
    assert (rc, out) == (0, fixture("docker_configure_missing-file.json") + "\n")
    assert not os.path.exists(str(tmp_path / "sub"))


def test_docker_empty_file_is_eof_exit_1_untouched(tmp_path):
    cfg = tmp_path / "daemon.json"
    write(cfg, "")
    rc, out, err = run(["runtime", "configure", "--config=%s" % cfg])
    assert (rc, out) == (1, "")
    assert untimed(err) == ['level=info msg="Loading config from %s"' % cfg,
                            'level=error msg="unable to load config for runtime docker: EOF"']
    assert read(cfg) == ""


@pytest.mark.parametrize("text,error", [
    ("{bad json", "invalid character 'b' looking for beginning of object key string"),
    ("   \n\t", "EOF"),
    ('{"a": 1,}', "invalid character '}' looking for beginning of object key string"),
    ('{"a" 1}', "invalid character '1' after object key"),
    ('{"a": 1 "b": 2}', "invalid character '\"' after object key:value pair"),
    ('{"a": [1 2]}', "invalid character '2' after array element"),
    ('{"a": [1,]}', "invalid character ']' looking for beginning of value"),
    ('{"a": }', "invalid character '}' looking for beginning of value"),
    ('{"a": tru}', "invalid character '}' in literal true (expecting 'e')"),
    ('{"a": nul}', "invalid character '}' in literal null (expecting 'l')"),
    ('{"a": -x}', "invalid character 'x' in numeric literal"),
    ('{"a": 1.}', "invalid character '}' after decimal point in numeric literal"),
    ('{"a": 1e}', "invalid character '}' in exponent of numeric literal"),
    ('{"a": "\\q"}', "invalid character 'q' in string escape code"),
    ('{"a": "\\u12g4"}', "invalid character 'g' in \\\\u hexadecimal character escape"),
    ('{"a": "x\ny"}', "invalid character '\\\\n' in string literal"),
    ("{'a': 1}", "invalid character '\\\\'' looking for beginning of object key string"),
    ("\ufeff{}", "invalid character 'ï' looking for beginning of value"),
    ('{"a": 1', "unexpected EOF"),
    ('{"a": "x', "unexpected EOF"),
    ("[]", "json: cannot unmarshal array into Go value of type docker.Config"),
    ('"x"', "json: cannot unmarshal string into Go value of type docker.Config"),
    ("42", "json: cannot unmarshal number into Go value of type docker.Config"),
])
def test_docker_malformed_json_has_go_error_text(tmp_path, text, error):
    cfg = tmp_path / "daemon.json"
    with open(str(cfg), "w", encoding="utf-8") as fh:
        fh.write(text)
    rc, out, err = run(["runtime", "configure", "--config=%s" % cfg])
    assert (rc, out) == (1, "")
    # the error is a logrus msg: Go %q quoting of the whole message
    assert untimed(err)[-1] == "level=error msg=%s" % cdi.go_quote(
        "unable to load config for runtime docker: " + error.replace("\\\\", "\\"))
    with open(str(cfg), encoding="utf-8") as fh:
        assert fh.read() == text


def test_docker_corpus_malformed_line_exact(tmp_path):
    cfg = tmp_path / "daemon.json"
    write(cfg, "{bad json}\n")
    err = run(["runtime", "configure", "--config=%s" % cfg])[2]
    assert untimed(err)[-1] == ('level=error msg="unable to load config for runtime docker: invalid character '
                                "'b' looking for beginning of object key string\"")


def test_docker_trailing_data_after_first_value_is_ignored(tmp_path):
    cfg = tmp_path / "daemon.json"
    write(cfg, '{"log-driver": "json-file", "registry-mirrors": ["https://mirror.example"]} trailing junk')
    assert run(["runtime", "configure", "--config=%s" % cfg])[0] == 0
    assert read(cfg) == fixture("docker_configure_existing-keys.json")


def test_docker_null_panics_like_go(tmp_path):
    cfg = tmp_path / "daemon.json"
    write(cfg, "null")
    rc, out, err = run(["runtime", "configure", "--config=%s" % cfg])
    assert rc == 2
    assert "panic: assignment to entry in nil map\n\ngoroutine 1 [running]:\n" in err
    assert read(cfg) == "null"


def test_docker_runtimes_not_an_object_panics_like_go(tmp_path):
    cfg = tmp_path / "daemon.json"
    write(cfg, '{"runtimes": []}')
    rc, _out, err = run(["runtime", "configure", "--config=%s" % cfg])
    assert rc == 2
    assert "panic: interface conversion: interface {} is []interface {}, not map[string]interface {}" in err


def test_docker_config_is_directory(tmp_path):
    rc, _out, err = run(["runtime", "configure", "--config=%s" % tmp_path])
    assert rc == 1
    assert untimed(err)[-1] == 'level=error msg="unable to load config for runtime docker: unable to read ' \
                               'config: read %s: is a directory"' % tmp_path


def test_docker_go_encoding_html_escapes_numbers_unicode(tmp_path):
    cfg = tmp_path / "daemon.json"
    write(cfg, '{"a": "<x>&y\u2028", "f": 1.0, "g": 1e21, "h": 0.0000001, "i": 12345678, "j": -0.5,'
               ' "k": "héllo", "l": [], "m": {}, "n": null, "o": 1.5e300, "p": "\\u0007\\b"}')
    assert run(["runtime", "configure", "--config=%s" % cfg])[0] == 0
    out = read(cfg)
    assert '"a": "\\u003cx\\u003e\\u0026y\\u2028"' in out
    assert '"f": 1,' in out and '"g": 1e+21,' in out and '"h": 1e-7,' in out
    assert '"i": 12345678,' in out and '"j": -0.5,' in out and '"k": "héllo",' in out
    assert '"l": [],' in out and '"m": {},' in out and '"n": null,' in out and '"o": 1.5e+300,' in out
    assert '"p": "\\u0007\\b",' in out
    assert not out.endswith("\n")


def test_docker_quiet_suppresses_info(tmp_path):
    cfg = tmp_path / "daemon.json"
    rc, _out, err = run(["--quiet", "runtime", "configure", "--config=%s" % cfg])
    assert (rc, err) == (0, "")


def test_unknown_runtime_and_dropin_for_docker(tmp_path):
    rc, _o, err = run(["runtime", "configure", "--runtime=podman"])
    assert rc == 1 and untimed(err)[-1] == "level=error msg=\"unrecognized runtime 'podman'\""
    rc, _o, err = run(["runtime", "configure", "--runtime=docker", "--drop-in-config=/etc/docker/x.json"])
    assert rc == 1 and untimed(err)[-1] == 'level=error msg="runtime docker does not support drop-in configs"'


# --------------------------------------------------------------------------------------------------
# runtime configure --runtime=containerd

def test_containerd_dropin_and_imports_are_corpus(tmp_path):
    top = tmp_path / "containerd" / "config.toml"
    dropin = tmp_path / "containerd" / "conf.d" / "99-nvidia.toml"
    rc, out, err = run(["runtime", "configure", "--runtime=containerd", "--config=%s" % top,
                        "--drop-in-config=%s" % dropin])
    assert (rc, out) == (0, "")
    assert read(dropin) == fixture("containerd_configure_99-nvidia.toml")
    assert read(top) == fixture("containerd_configure_config.toml").replace(
        "/etc/containerd/conf.d", str(dropin.parent))
    assert untimed(err) == [
        'level=info msg="Using config version 2"',
        'level=info msg="Using CRI runtime plugin name \\"io.containerd.grpc.v1.cri\\""',
        'level=warning msg="Could not infer options from runtimes [runc crun]"',
        'level=info msg="Wrote updated config to %s"' % dropin,
        'level=info msg="It is recommended that containerd daemon be restarted."']


def test_containerd_default_paths(monkeypatch):
    seen = {}
    monkeypatch.setattr(ctk, "configure_containerd", lambda o, *a: seen.update(o))
    assert run(["runtime", "configure", "--runtime=containerd"])[0] == 0
    assert seen["config"] == "/etc/containerd/config.toml"
    assert seen["drop-in-config"] == "/etc/containerd/conf.d/99-nvidia.toml"
    assert seen["nvidia-runtime-path"] == "/usr/bin/nvidia-container-runtime"   # absolute for containerd


def test_containerd_existing_config_keeps_imports_and_copies_runc_options(tmp_path):
    pytest.importorskip("tomllib")
    top = tmp_path / "config.toml"
    dropin = tmp_path / "conf.d" / "99-nvidia.toml"
    write(top, 'version = 2\nimports = ["/etc/containerd/other/*.toml"]\n'
               '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
               'runtime_type = "io.containerd.runc.v2"\n'
               '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\nSystemdCgroup = true\n')
    assert run(["runtime", "configure", "--runtime=containerd", "--config=%s" % top,
                "--drop-in-config=%s" % dropin, "--set-as-default"])[0] == 0
    assert read(top).startswith('imports = ["/etc/containerd/other/*.toml", "%s/*.toml"]\nversion = 2\n'
                                % dropin.parent)
    d = read(dropin)
    assert 'default_runtime_name = "nvidia"' in d
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n' \
           '            BinaryName = "/usr/bin/nvidia-container-runtime"\n            SystemdCgroup = true\n' in d


# --------------------------------------------------------------------------------------------------
# cdi generate

def make_state(path, version="999.88.77", gpus=((0, UUID, "a100"),), installed=True, loaded=True,
               modules="open", loaded_version=None):
    s = {"schema": 1,
         "gpus": [{"index": i, "uuid": u, "model": m, "pci_bus_id": "00000000:%02X:00.0" % (0x17 + i)}
                  for i, u, m in gpus],
         "driver": {"installed": {"version": version, "kernel_modules": modules, "packages": []} if installed else None,
                    "loaded": {"version": loaded_version or version, "kernel_modules": modules} if loaded else None}}
    with open(str(path), "w") as fh:
        json.dump(s, fh)
    return s


def mock_driver_root(root, version="999.88.77"):
    """The go-nvml mock's driver root that made the corpus spec: libcuda, the vdpau library, /dev/nvidiactl."""
    libdir = root / "lib" / "x86_64-linux-gnu"
    (libdir / "vdpau").mkdir(parents=True)
    (libdir / ("libcuda.so.%s" % version)).write_text("")
    (libdir / "vdpau" / ("libvdpau_nvidia.so.%s" % version)).write_text("")
    (root / "dev").mkdir()
    (root / "dev" / "nvidiactl").write_text("")
    return root


@pytest.fixture
def state_env(tmp_path, monkeypatch):
    p = tmp_path / "state.json"
    monkeypatch.setenv("GPUSIM_STATE", str(p))
    monkeypatch.delenv("NVIDIA_CTK_CDI_OUTPUT_FILE_PATH", raising=False)
    return p


def test_cdi_generate_no_driver_is_corpus_stderr_and_no_file(tmp_path, state_env):
    make_state(state_env, installed=False, loaded=False)
    out_file = tmp_path / "cdi" / "nvidia.yaml"
    rc, out, err = run(["cdi", "generate", "--output=%s" % out_file])
    assert (rc, out) == (1, "")
    assert untimed(err) == untimed(fixture("cdi-generate_no-driver.stderr"))
    assert not os.path.exists(str(out_file))


def test_cdi_generate_mock_a100_is_corpus_byte_for_byte(tmp_path, state_env):
    make_state(state_env)
    root = mock_driver_root(tmp_path / "root")
    out_file = tmp_path / "etc-cdi" / "nvidia.yaml"
    rc, out, err = run(["cdi", "generate", "--driver-root=%s" % root, "--output=%s" % out_file],
                       version="1.20.0")
    assert (rc, out) == (0, "")
    assert read(out_file) == fixture("cdi-generate_mock-A100_nvidia.yaml")
    assert stat.S_IMODE(os.stat(str(out_file)).st_mode) == 0o644
    assert untimed(err)[-1] == 'level=info msg="Generated CDI spec with version 0.5.0"'


def _structure(text):
    """(indent, key) of every mapping key, and the device names: the spec's shape without values."""
    keys = [(len(l) - len(l.lstrip(" -")), l.strip(" -").split(":")[0])
            for l in text.splitlines() if re.match(r"^\s*(- )?[A-Za-z]+:", l)]
    names = re.findall(r"^    - name: (.*)$", text, re.M)
    return keys, names


def test_cdi_generate_versioned_names_carry_loaded_version(tmp_path, state_env):
    # a host state with the same GPU and the 580.95.05 driver loaded; the files a driver package installs
    make_state(state_env, version="580.95.05")
    root = mock_driver_root(tmp_path / "root", version="580.95.05")
    rc, out, _err = run(["cdi", "generate", "--driver-root=%s" % root], version="1.20.0")
    assert rc == 0
    expected = fixture("cdi-generate_mock-A100_nvidia.yaml").replace("999.88.77", "580.95.05")
    assert out == expected
    assert _structure(out) == _structure(fixture("cdi-generate_mock-A100_nvidia.yaml"))
    assert _structure(out)[1] == ['"0"', UUID, "all"]
    assert "- --host-driver-version=580.95.05" in out
    assert "/lib/x86_64-linux-gnu/libcuda.so.580.95.05" in out


def test_cdi_generate_stale_spec_visible_after_upgrade(tmp_path, state_env):
    # installed 580.105.08 (upgrade) while 580.95.05 is loaded: NVML refuses, like the real library
    make_state(state_env, version="580.105.08", loaded_version="580.95.05")
    rc, _out, err = run(["cdi", "generate"])
    assert rc == 1
    assert untimed(err)[-1] == ('level=error msg="failed to generate CDI spec: failed to create device CDI specs: '
                                'failed to construct device spec generators: failed to initialize NVML: '
                                'ERROR_LIB_RM_VERSION_MISMATCH"')


def test_cdi_generate_driver_not_loaded(tmp_path, state_env):
    make_state(state_env, version="580.95.05", loaded=False)
    rc, _out, err = run(["cdi", "generate"])
    assert rc == 1 and untimed(err)[-1].endswith('failed to initialize NVML: ERROR_DRIVER_NOT_LOADED"')


def test_cdi_generate_multi_gpu_device_order_and_all(tmp_path, state_env):
    make_state(state_env, version="580.95.05",
               gpus=((0, "GPU-aaaaaaaa-0000-0000-0000-000000000000", "h100"),
                     (1, "GPU-bbbbbbbb-0000-0000-0000-000000000000", "h100")))
    root = mock_driver_root(tmp_path / "root", "580.95.05")
    out = run(["cdi", "generate", "--driver-root=%s" % root])[1]
    assert re.findall(r"^    - name: (.*)$", out, re.M) == [
        '"0"', "GPU-aaaaaaaa-0000-0000-0000-000000000000", '"1"', "GPU-bbbbbbbb-0000-0000-0000-000000000000", "all"]
    all_dev = out.split("    - name: all\n")[1].split("containerEdits:\n    env")[0]
    assert "/dev/nvidia0" in all_dev and "/dev/nvidia1" in all_dev


def test_cdi_generate_toolkit_version_hooks(tmp_path, state_env):
    make_state(state_env)
    root = mock_driver_root(tmp_path / "root")
    v118 = run(["cdi", "generate", "--driver-root=%s" % root], version="1.18.0")[1]
    assert v118 == fixture("cdi-generate_mock-A100_nvidia.yaml").replace(
        "        - hookName: createContainer\n          path: /usr/bin/nvidia-cdi-hook\n          args:\n"
        "            - nvidia-cdi-hook\n            - update-application-profile\n          env:\n"
        "            - NVIDIA_CTK_DEBUG=false\n", "")
    v117 = run(["cdi", "generate", "--driver-root=%s" % root], version="1.17.8")[1]
    # sigs.k8s.io/yaml: keys sorted, 2 spaces, no LIBCUDA_DIR / void env, no 1.18 hooks
    assert v117.startswith("---\ncdiVersion: 0.5.0\ncontainerEdits:\n  deviceNodes:\n  - hostPath: /dev/nvidiactl\n"
                           "    path: /dev/nvidiactl\n  hooks:\n  - args:\n    - nvidia-cdi-hook\n")
    assert "disable-device-node-modification" not in v117 and "NVIDIA_VISIBLE_DEVICES" not in v117
    assert v117.endswith("kind: nvidia.com/gpu\n")


def test_cdi_generate_json_format_and_extension(tmp_path, state_env):
    make_state(state_env)
    root = mock_driver_root(tmp_path / "root")
    rc, out, _ = run(["cdi", "generate", "--driver-root=%s" % root, "--format", "json"])
    spec = json.loads(out)
    assert list(spec) == ["cdiVersion", "kind", "devices", "containerEdits"]
    assert [d["name"] for d in spec["devices"]] == ["0", UUID, "all"]
    assert not out.endswith("\n")
    target = tmp_path / "out.json"
    assert run(["cdi", "generate", "--driver-root=%s" % root, "--output=%s" % target])[0] == 0
    assert json.loads(read(target)) == spec          # format from the extension
    noext = tmp_path / "nvidia"
    assert run(["cdi", "generate", "--driver-root=%s" % root, "--output=%s" % noext])[0] == 0
    assert os.path.exists(str(noext) + ".yaml")      # the real tool appends the format's extension
    rc, _o, err = run(["cdi", "generate", "--format=toml"])
    assert rc == 1 and untimed(err)[-1] == 'level=error msg="invalid output format: toml"'


def test_cdi_generate_output_from_env_written_atomically(tmp_path, state_env, monkeypatch):
    make_state(state_env)
    root = mock_driver_root(tmp_path / "root")
    target = tmp_path / "run-cdi" / "nvidia.yaml"
    os.makedirs(str(target.parent))
    write(target, "old spec\n")
    renames = []
    real_rename = os.rename

    def spy(src, dst):
        renames.append((src, dst))
        assert read(dst) == "old spec\n"           # the old spec stays whole until the rename
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", spy)
    rc, out, _ = run(["cdi", "generate", "--driver-root=%s" % root],
                     env={"NVIDIA_CTK_CDI_OUTPUT_FILE_PATH": str(target)})
    assert (rc, out) == (0, "")
    assert len(renames) == 1
    src, dst = renames[0]
    assert dst == str(target) and os.path.dirname(src) == str(target.parent)
    assert re.match(r"^spec\..+\.tmp$", os.path.basename(src))
    assert read(target) == fixture("cdi-generate_mock-A100_nvidia.yaml")
    assert stat.S_IMODE(os.stat(str(target)).st_mode) == 0o644
    assert os.listdir(str(target.parent)) == ["nvidia.yaml"]


def test_cdi_generate_blackwell_under_proprietary_has_no_device(tmp_path, state_env):
    make_state(state_env, version="580.95.05", modules="proprietary",
               gpus=((0, "GPU-cccccccc-0000-0000-0000-000000000000", "rtx-pro-6000-bse"),))
    rc, _out, err = run(["cdi", "generate", "--driver-root=%s" % mock_driver_root(tmp_path / "r", "580.95.05")])
    assert rc == 1 and "no NVIDIA devices found" in untimed(err)[-1]


# --------------------------------------------------------------------------------------------------
# cdi list

def test_cdi_list_no_spec_is_corpus(tmp_path):
    rc, out, err = run(["cdi", "list", "--spec-dir=%s" % (tmp_path / "etc-cdi"),
                        "--spec-dir=%s" % (tmp_path / "run-cdi")])
    assert (rc, out) == (0, "")
    assert untimed(err) == untimed(fixture("cdi-list_no-spec.stderr"))


def test_cdi_list_with_spec_is_corpus(tmp_path):
    etc = tmp_path / "etc-cdi"
    etc.mkdir()
    (etc / "nvidia.yaml").write_text(fixture("cdi-generate_mock-A100_nvidia.yaml"))
    rc, out, err = run(["cdi", "list", "--spec-dir=%s" % etc, "--spec-dir=%s" % (tmp_path / "run-cdi")])
    assert (rc, out) == (0, fixture("cdi-list_with-spec.stdout"))
    assert untimed(err) == ['level=info msg="Found 3 CDI devices"']


def test_cdi_list_reads_the_sorted_layout_of_1_17(tmp_path, state_env):
    # What 1.17.8's generate writes, `cdi list` must read back: the same devices as 1.18.0's layout.
    make_state(state_env)
    root = mock_driver_root(tmp_path / "root")
    listed = {}
    for version in ("1.17.8", "1.18.0"):
        etc = tmp_path / version
        etc.mkdir()
        (etc / "nvidia.yaml").write_text(run(["cdi", "generate", "--driver-root=%s" % root], version=version)[1])
        listed[version] = run(["cdi", "list", "--spec-dir=%s" % etc], version=version)[1]
    assert listed["1.17.8"] == listed["1.18.0"] == fixture("cdi-list_with-spec.stdout")


def test_cdi_list_default_dirs_and_json_spec(tmp_path, monkeypatch):
    monkeypatch.setattr(cdi, "DEFAULT_SPEC_DIRS", [str(tmp_path / "etc"), str(tmp_path / "run")])
    os.makedirs(str(tmp_path / "run"))
    spec = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
            "devices": [{"name": "all", "containerEdits": {}}, {"name": "0", "containerEdits": {}}]}
    write(tmp_path / "run" / "nvidia.json", json.dumps(spec))
    rc, out, _ = run(["cdi", "list"])
    assert (rc, out) == (0, "nvidia.com/gpu=0\nnvidia.com/gpu=all\n")


def test_cdi_list_same_device_in_etc_and_run_resolves_once(tmp_path):
    for d in ("etc", "run"):
        os.makedirs(str(tmp_path / d))
        (tmp_path / d / "nvidia.yaml").write_text(fixture("cdi-generate_mock-A100_nvidia.yaml"))
    devices, errors = cdi.list_devices([str(tmp_path / "etc"), str(tmp_path / "run")])
    assert devices == ["nvidia.com/gpu=0", "nvidia.com/gpu=%s" % UUID, "nvidia.com/gpu=all"] and not errors


# --------------------------------------------------------------------------------------------------
# system create-device-nodes, config

def test_create_device_nodes_dry_run(state_env):
    make_state(state_env, version="580.95.05")
    rc, out, err = run(["system", "create-device-nodes", "--control-devices", "--dry-run", "--dev-root=/"])
    assert (rc, out) == (0, "")
    lines = untimed(err)
    assert lines[0] == 'level=info msg="Creating control device nodes at /"'
    assert lines[1:3] == ['level=info msg="Running: mknod --mode=0666 /dev/nvidiactl c 195 255"',
                          'level=info msg="Running: mknod --mode=0666 /dev/nvidia-modeset c 195 254"']
    assert re.match(r'level=info msg="Running: mknod --mode=0666 /dev/nvidia-uvm c \d+ 0"', lines[3])
    assert re.match(r'level=info msg="Running: mknod --mode=0666 /dev/nvidia-uvm-tools c \d+ 1"', lines[4])


def test_create_device_nodes_existing_are_skipped(tmp_path, state_env):
    make_state(state_env, version="580.95.05")
    (tmp_path / "dev").mkdir()
    for n in ("nvidiactl", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools"):
        (tmp_path / "dev" / n).write_text("")
    rc, _o, err = run(["system", "create-device-nodes", "--control-devices", "--dev-root=%s" % tmp_path])
    assert rc == 0
    assert untimed(err)[1] == 'level=info msg="Skipping: %s/dev/nvidiactl already exists"' % tmp_path


def test_create_device_nodes_without_module(state_env):
    make_state(state_env, version="580.95.05", loaded=False)
    rc, _o, err = run(["system", "create-device-nodes", "--control-devices"])
    assert rc == 1
    assert untimed(err) == ['level=info msg="Using dev-root \\"/\\""',
                            'level=error msg="failed to create NVIDIA control device nodes: failed to create device '
                            'node nvidiactl: failed to determine major: invalid device node"']
    rc, _o, err = run(["system", "create-device-nodes", "--load-kernel-modules"])
    assert rc == 1 and untimed(err)[-1] == ('level=error msg="failed to load NVIDIA kernel modules: failed to '
                                            'load module nvidia: exit status 1"')


def test_config_in_place_writes_the_default_config(tmp_path):
    target = tmp_path / "nvidia-container-runtime" / "config.toml"
    rc, out, err = run(["--quiet", "config", "--config-file=%s" % target, "--in-place"])
    assert (rc, out, err) == (0, "", "")
    assert read(target) == fixture("nvidia-container-runtime_config-default.toml")
    # an existing file is kept; --set edits one key in place
    rc = run(["config", "--config-file=%s" % target, "--in-place", "--set", "nvidia-container-cli.no-cgroups"])[0]
    assert rc == 0
    text = read(target)
    assert "\nno-cgroups = true\n" in text and "#no-cgroups" not in text
    assert text.replace("no-cgroups = true", "#no-cgroups = false") == \
        fixture("nvidia-container-runtime_config-default.toml")


def test_unknown_flag_is_an_error():
    rc, _o, err = run(["runtime", "configure", "--bogus"])
    assert rc == 1 and untimed(err)[-1] == 'level=error msg="flag provided but not defined: -bogus"'


def test_containerd_before_1_18_rewrites_the_top_level_config(tmp_path):
    top = tmp_path / "config.toml"
    rc, _out, err = run(["runtime", "configure", "--runtime=containerd", "--config=%s" % top], version="1.17.8")
    assert rc == 0
    assert read(top) == fixture("containerd_configure_99-nvidia.toml")       # the same tree, in the main file
    assert untimed(err)[-2] == 'level=info msg="Wrote updated config to %s"' % top
    rc, _out, err = run(["runtime", "configure", "--runtime=containerd", "--drop-in-config=/x.toml"],
                        version="1.17.8")
    assert rc == 1 and untimed(err)[-1] == 'level=error msg="flag provided but not defined: -drop-in-config"'


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_create_device_nodes_makes_a_missing_uvm_node_and_the_fault_ends(tmp_path, state_env):
    # The fault "nothing made /dev/nvidia-uvm this boot" ends once the toolkit makes it (the remedy the
    # stack check names), so containers get the node again.
    make_state(state_env, version="580.95.05")
    s = json.loads(state_env.read_text())
    s.setdefault("faults", {})["missing_device_nodes"] = ["nvidia-uvm", "nvidia1"]
    state_env.write_text(json.dumps(s))
    (tmp_path / "dev").mkdir()
    rc, _o, _e = run(["system", "create-device-nodes", "--control-devices", "--load-kernel-modules",
                      "--dev-root=%s" % tmp_path])
    assert rc == 0 and stat.S_ISCHR(os.stat(str(tmp_path / "dev" / "nvidia-uvm")).st_mode)
    assert json.loads(state_env.read_text())["faults"]["missing_device_nodes"] == ["nvidia1"]
