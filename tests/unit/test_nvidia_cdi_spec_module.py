"""The nvidia_cdi_spec module run by real ansible: engine versions read, the feature flag chosen for an old
engine. nvidia-ctk is the simulated one (molecule/simulator/gpusim), the engines are stand-ins that print
what the real ones print (tests/fixtures/cdi_versions/), device nodes are real char devices (mknod)."""
import json
import os
import stat
import subprocess
import sys

import pytest

from conftest import ANSIBLE, ROOT

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE), reason="ansible not installed in this venv")

SIM = os.path.join(ROOT, "molecule", "simulator")
FLAG = "no-additional-gids-for-device-nodes"
DRIVER = "999.88.77"


def script(path, body):
    path.write_text("#!/bin/sh\n" + body)
    os.chmod(str(path), 0o755)


@pytest.fixture
def host(tmp_path):
    """A GPU host: the simulator's state, a driver root with /dev/nvidia0 0660 root:44 and nvidiactl 0666,
    the simulated nvidia-ctk and a bin directory for engine stand-ins."""
    state = {"schema": 1, "gpus": [{"index": 0, "uuid": "GPU-f8ddbc2d-77d0-4c5a-9594-0afcab382164", "model": "a100",
                                     "pci_bus_id": "00000000:17:00.0"}],
             "driver": {"installed": {"version": DRIVER, "kernel_modules": "open", "packages": []},
                        "loaded": {"version": DRIVER, "kernel_modules": "open"}}}
    (tmp_path / "state.json").write_text(json.dumps(state))
    root = tmp_path / "root"
    (root / "lib" / "x86_64-linux-gnu").mkdir(parents=True)
    (root / "lib" / "x86_64-linux-gnu" / ("libcuda.so.%s" % DRIVER)).write_text("")
    (root / "dev").mkdir()
    for name, minor, mode, gid in (("nvidia0", 0, 0o660, 44), ("nvidiactl", 255, 0o666, 0)):
        try:
            os.mknod(str(root / "dev" / name), stat.S_IFCHR | mode, os.makedev(195, minor))
        except OSError as exc:
            pytest.skip("mknod not permitted here: %s" % exc)
        os.chmod(str(root / "dev" / name), mode)
        os.chown(str(root / "dev" / name), 0, gid)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script(bin_dir / "nvidia-ctk", 'exec %s -c "import sys; sys.path.insert(0, \'%s\'); from gpusim import ctk; '
                                   'sys.exit(ctk.main())" "$@"\n' % (sys.executable, SIM))
    (tmp_path / "etc-cdi").mkdir()
    return tmp_path


def docker(host, server, client=None):
    """docker version --format: the server's version, or (no daemon) the client's and exit 1."""
    if server:
        body = 'case "$*" in *Server*) echo "%s";; *) echo "%s";; esac\n' % (server, client or server)
    else:
        body = ('case "$*" in *Client*) echo "%s";; esac\n'
                'echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. '
                'Is the docker daemon running?" >&2\nexit 1\n' % client)
    script(host / "bin" / "docker", body)


def engine(host, name, line):
    script(host / "bin" / name, 'echo "%s"\n' % line)


def run_module(host, toolkit="1.20.0", *flags, **args):
    args = dict({"output": str(host / "etc-cdi" / "nvidia.yaml"), "loaded_driver_version": DRIVER,
                 "backup_dir": str(host / "backups")}, **args)
    env = dict(os.environ, ANSIBLE_LIBRARY=os.path.join(ROOT, "library"),
               ANSIBLE_MODULE_UTILS=os.path.join(ROOT, "module_utils"),
               ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               PATH="%s:%s" % (host / "bin", os.environ.get("PATH", "")),
               GPUSIM_STATE=str(host / "state.json"), GPUSIM_CTK_VERSION=toolkit,
               NVIDIA_CTK_DRIVER_ROOT=str(host / "root"), NVIDIA_CTK_CDI_SPEC_DIRS=str(host / "etc-cdi"))
    proc = subprocess.run([ANSIBLE, "localhost", "-c", "local", "-m", "nvidia_cdi_spec", "-a", json.dumps(args)]
                          + list(flags), capture_output=True, text=True, env=env, timeout=120, cwd=str(host))
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def spec_text(host):
    return (host / "etc-cdi" / "nvidia.yaml").read_text()


def test_old_podman_gets_the_feature_flag(host):
    docker(host, "26.1.5+dfsg1")
    engine(host, "podman", "podman version 4.9.3")
    engine(host, "containerd", "containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da")
    res = run_module(host)
    assert res["changed"] is True and not res.get("failed"), res
    assert res["toolkit_version"] == "1.20.0"
    assert res["engines"] == {"docker": {"version": "26.1.5+dfsg1", "reads": "0.7.0"},
                              "containerd": {"version": "1.7.27", "reads": "0.8.0"},
                              "podman": {"version": "4.9.3", "reads": "0.6.0"}}
    assert res["feature_flags"] == res["refresh_feature_flags"] == [FLAG]
    assert res["engine_compat_reasons"][0].startswith("spec version too new for podman 4.9.3")
    assert res["spec_version"] == "0.5.0" and res["too_new_for"] == []
    assert "additionalGids" not in spec_text(host) and "cdiVersion: 0.5.0" in spec_text(host)
    assert run_module(host)["changed"] is False


def test_engines_that_read_0_7_0_get_no_flag_and_off_reads_none(host):
    docker(host, "26.1.5+dfsg1")
    res = run_module(host)
    assert res["feature_flags"] == res["refresh_feature_flags"] == [] and res["spec_version"] == "0.7.0"
    assert "additionalGids:" in spec_text(host)
    engine(host, "podman", "podman version 4.9.3")
    off = run_module(host, engine_compat="off")
    assert off["changed"] is False and off["engines"] == {} and off["feature_flags"] == []
    assert off["refresh_feature_flags"] == []
    assert off["spec_version"] == "0.7.0" and off["too_new_for"] == []


def test_docker_without_daemon_is_judged_by_its_client(host):
    docker(host, None, client="26.0.2")
    res = run_module(host)
    assert res["engines"]["docker"] == {"version": "26.0.2", "reads": "0.6.0"}
    assert res["feature_flags"] == [FLAG] and res["spec_version"] == "0.5.0"


def test_check_mode_and_diff_show_the_flagged_spec_and_write_nothing(host):
    docker(host, "26.1.5+dfsg1")
    assert run_module(host)["spec_version"] == "0.7.0"
    before = spec_text(host)
    engine(host, "podman", "podman version 4.9.3")
    res = run_module(host, "1.20.0", "--check", "--diff")
    assert res["changed"] is True and res["feature_flags"] == [FLAG]
    assert res["spec_version"] == "0.5.0"
    assert res["stale_reasons"] == ["a fresh generation differs from %s" % (host / "etc-cdi" / "nvidia.yaml")]
    assert "additionalGids" in res["diff"]["before"] and "additionalGids" not in res["diff"]["after"]
    assert spec_text(host) == before


def test_toolkit_1_17_is_never_given_the_flag(host):
    engine(host, "podman", "podman version 4.9.3")
    res = run_module(host, "1.17.8")
    assert not res.get("failed"), res
    assert res["feature_flags"] == [] and res["spec_version"] == "0.5.0" and res["too_new_for"] == []
    assert res["refresh_feature_flags"] == [FLAG]


def test_an_engine_too_old_for_any_spec_is_warned_about(host):
    engine(host, "podman", "podman version 4.1.1")
    res = run_module(host)
    assert res["feature_flags"] == [FLAG] and res["spec_version"] == "0.5.0"
    message = ("spec version too new for podman 4.1.1: %s is cdiVersion 0.5.0, podman 4.1.1 reads up to 0.4.0"
               % (host / "etc-cdi" / "nvidia.yaml"))
    assert res["too_new_for"] == [message]
    assert any(w.startswith(message) for w in res["warnings"])


def module_docs():
    import yaml
    with open(os.path.join(ROOT, "library", "nvidia_cdi_spec.py"), encoding="utf-8") as handle:
        src = handle.read()
    return dict((name, yaml.safe_load(src.split('%s = r"""' % name)[1].split('"""')[0]))
                for name in ("DOCUMENTATION", "EXAMPLES", "RETURN"))


def test_documentation_names_the_option_and_every_return_key(host):
    docs = module_docs()
    option = docs["DOCUMENTATION"]["options"]["engine_compat"]
    assert option["choices"] == ["auto", "off"] and option["default"] == "auto"
    engine(host, "podman", "podman version 4.9.3")
    res = run_module(host)
    standard = {"changed", "warnings", "diff", "backup_file", "invocation", "failed", "msg", "deprecations",
                "action", "_ansible_no_log"}
    assert set(res) - standard <= set(docs["RETURN"]), set(res) - standard - set(docs["RETURN"])
