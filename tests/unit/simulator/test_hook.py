"""The simulated container hook (nvidia-container-runtime-hook prestart), runtime wrapper, nvidia-cdi-hook
and nvidia-container-cli, injecting into a fake rootfs (no container, no nsenter)."""
import io
import json
import os
import stat
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SIM = os.path.join(ROOT, "molecule", "simulator")
if SIM not in sys.path:
    sys.path.insert(0, SIM)
BIN = os.path.join(SIM, "bin")

from gpusim import hook  # noqa: E402

V = "580.95.05"
UUIDS = ["GPU-11111111-1111-1111-1111-111111111111", "GPU-22222222-2222-2222-2222-222222222222",
         "GPU-33333333-3333-3333-3333-333333333333"]


def state(condition="ok", models=("h100", "h100", "h100"), modules="open"):
    s = {"schema": 1,
         "gpus": [{"index": i, "model": m, "uuid": UUIDS[i], "pci_bus_id": "00000000:%02X:00.0" % (0x17 + i),
                   "memory_used_mib": 0} for i, m in enumerate(models)],
         "driver": {"installed": {"version": V, "kernel_modules": modules, "packages": []},
                    "loaded": {"version": V, "kernel_modules": modules}},
         "processes": [{"pid": 4242, "name": "python3", "gpu_index": 1, "used_mib": 1024, "type": "C"},
                       {"pid": 4343, "name": "python3", "gpu_index": 2, "used_mib": 2048, "type": "C"}],
         "faults": {}}
    if condition == "no_driver":
        s["driver"] = {"installed": None, "loaded": None}
    elif condition == "not_loaded":
        s["driver"]["loaded"] = None
    elif condition == "mismatch":
        s["driver"]["installed"]["version"] = "580.105.08"
    return s


@pytest.fixture
def host(tmp_path):
    """A host root with what the simulated driver package installed."""
    h = tmp_path / "host"
    libdir = h / "usr" / "lib" / "x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    for lib in ("libcuda", "libnvidia-ml", "libnvidia-nvvm", "libnvidia-ptxjitcompiler"):
        (libdir / ("%s.so.%s" % (lib, V))).write_bytes(b"\x7fELF-sim " + lib.encode())
    (h / "usr" / "bin").mkdir(parents=True)
    with open(os.path.join(BIN, "nvidia-smi"), "rb") as src:
        (h / "usr" / "bin" / "nvidia-smi").write_bytes(src.read())
    return h


@pytest.fixture
def rootfs(tmp_path):
    r = tmp_path / "bundle" / "rootfs"
    (r / "usr" / "bin").mkdir(parents=True)
    (r / "dev").mkdir()
    return r


class Nodes(list):
    def __call__(self, pid, path, major, minor):
        self.append((pid, path, major, minor))


def inject(st, rootfs, host, env, nodes=None):
    return hook.inject(st, str(rootfs), env, pid=4711, make_node=nodes if nodes is not None else Nodes(),
                       host_root=str(host))


def test_inject_visible_gpu_files_state_copy_and_nodes(rootfs, host):
    nodes = Nodes()
    done = inject(state(), rootfs, host, {"NVIDIA_VISIBLE_DEVICES": "1,2"}, nodes)
    assert done["gpus"] == UUIDS[1:]
    # driver files and their SONAME links
    lib = rootfs / "usr" / "lib" / "x86_64-linux-gnu"
    for name in ("libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler"):
        assert (lib / ("%s.so.%s" % (name, V))).is_file()
        assert os.readlink(str(lib / ("%s.so.1" % name))) == "%s.so.%s" % (name, V)
    assert os.readlink(str(lib / "libnvidia-nvvm.so.4")) == "libnvidia-nvvm.so.%s" % V
    smi = rootfs / "usr" / "bin" / "nvidia-smi"
    assert smi.read_bytes() == (host / "usr" / "bin" / "nvidia-smi").read_bytes()
    assert stat.S_IMODE(smi.stat().st_mode) == 0o755
    assert (rootfs / "usr" / "lib" / "gpu-sim" / "gpusim" / "state.py").is_file()
    assert not list((rootfs / "usr" / "lib" / "gpu-sim" / "gpusim").glob("__pycache__"))
    # the state copy: only the visible GPUs, re-indexed from 0, host minor numbers kept
    copy = json.loads((rootfs / "var" / "lib" / "gpu-sim" / "state.json").read_text())
    assert [(g["index"], g["uuid"], g["minor"]) for g in copy["gpus"]] == [(0, UUIDS[1], 1), (1, UUIDS[2], 2)]
    assert [(p["pid"], p["gpu_index"]) for p in copy["processes"]] == [(4242, 0), (4343, 1)]
    assert copy["container"] is True
    assert copy["driver"]["loaded"]["version"] == V
    # device nodes, through the container's mount namespace
    assert nodes == [(4711, str(rootfs / "dev" / "nvidia1"), 195, 1),
                     (4711, str(rootfs / "dev" / "nvidia2"), 195, 2),
                     (4711, str(rootfs / "dev" / "nvidiactl"), 195, 255),
                     (4711, str(rootfs / "dev" / "nvidia-uvm"), 511, 0),
                     (4711, str(rootfs / "dev" / "nvidia-uvm-tools"), 511, 1)]


@pytest.mark.parametrize("value,expected", [
    ("all", UUIDS), ("0", UUIDS[:1]), ("2,0", [UUIDS[0], UUIDS[2]]), (UUIDS[1], UUIDS[1:2]),
    ("GPU-33333333", UUIDS[2:]), ("none", []),
])
def test_visible_devices_forms(rootfs, host, value, expected):
    done = inject(state(), rootfs, host, {"NVIDIA_VISIBLE_DEVICES": value})
    assert done["gpus"] == expected
    copy = json.loads((rootfs / "var" / "lib" / "gpu-sim" / "state.json").read_text())
    assert [g["uuid"] for g in copy["gpus"]] == expected
    assert [g["index"] for g in copy["gpus"]] == list(range(len(expected)))


@pytest.mark.parametrize("env", [{}, {"NVIDIA_VISIBLE_DEVICES": "void"}, {"NVIDIA_VISIBLE_DEVICES": ""}])
def test_no_gpu_requested_does_nothing(rootfs, host, env):
    nodes = Nodes()
    assert inject(state(), rootfs, host, env, nodes) == {"skipped": True}
    assert nodes == [] and not (rootfs / "var").exists()


def test_legacy_cuda_image_gets_all(rootfs, host):
    assert inject(state(), rootfs, host, {"CUDA_VERSION": "12.8.1"})["gpus"] == UUIDS


def test_capabilities_select_files(rootfs, host):
    nodes = Nodes()
    inject(state(), rootfs, host, {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": "utility"}, nodes)
    lib = rootfs / "usr" / "lib" / "x86_64-linux-gnu"
    assert (lib / ("libnvidia-ml.so.%s" % V)).exists() and not (lib / ("libcuda.so.%s" % V)).exists()
    assert [os.path.basename(n[1]) for n in nodes] == ["nvidia0", "nvidiactl"]   # no uvm without compute
    nodes = Nodes()
    inject(state(), rootfs, host, {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": "all"}, nodes)
    assert "nvidia-modeset" in [os.path.basename(n[1]) for n in nodes]


@pytest.mark.parametrize("condition,text", [
    ("no_driver", "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: "
                  "cannot open shared object file: no such file or directory"),
    ("not_loaded", "nvidia-container-cli: initialization error: nvml error: driver not loaded"),
    ("mismatch", "nvidia-container-cli: initialization error: nvml error: driver/library version mismatch"),
])
def test_broken_driver_refuses_with_libnvidia_container_text(rootfs, host, condition, text):
    nodes = Nodes()
    with pytest.raises(hook.HookError) as exc:
        inject(state(condition), rootfs, host, {"NVIDIA_VISIBLE_DEVICES": "all"}, nodes)
    assert str(exc.value) == text
    assert nodes == [] and not (rootfs / "var").exists()


def test_unknown_device(rootfs, host):
    with pytest.raises(hook.HookError) as exc:
        inject(state(), rootfs, host, {"NVIDIA_VISIBLE_DEVICES": "7"})
    assert str(exc.value) == "nvidia-container-cli: device error: 7: unknown device"


def test_blackwell_under_proprietary_modules_is_unknown(rootfs, host):
    st = state(models=("rtx-pro-6000-bse",), modules="proprietary")
    with pytest.raises(hook.HookError) as exc:
        inject(st, rootfs, host, {"NVIDIA_VISIBLE_DEVICES": "0"})
    assert str(exc.value) == "nvidia-container-cli: device error: 0: unknown device"
    assert inject(st, rootfs, host, {"NVIDIA_VISIBLE_DEVICES": "all"})["gpus"] == []


def test_symlink_escaping_rootfs_is_refused(rootfs, host, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.rmdir(str(rootfs / "usr" / "bin"))
    os.symlink(str(outside), str(rootfs / "usr" / "bin"))
    with pytest.raises(hook.HookError):
        inject(state(), rootfs, host, {"NVIDIA_VISIBLE_DEVICES": "0"})
    assert os.listdir(str(outside)) == []


def test_nvidia_smi_inside_the_container_sees_only_its_gpu(rootfs, host):
    inject(state(), rootfs, host, {"NVIDIA_VISIBLE_DEVICES": UUIDS[2]})
    env = dict(os.environ, GPUSIM_STATE=str(rootfs / "var" / "lib" / "gpu-sim" / "state.json"),
               PYTHONPATH=str(rootfs / "usr" / "lib" / "gpu-sim"), NVIDIA_VISIBLE_DEVICES=UUIDS[2])
    res = subprocess.run([sys.executable, str(rootfs / "usr" / "bin" / "nvidia-smi"), "-L"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("\n") == 1
    assert res.stdout.startswith("GPU 0: NVIDIA H100") and UUIDS[2] in res.stdout


# --------------------------------------------------------------------------------------------------
# the executable: OCI state on stdin, config.json in the bundle

def bundle(tmp_path, rootfs, env):
    cfg = {"ociVersion": "1.0.2", "root": {"path": str(rootfs)},
           "process": {"env": ["PATH=/usr/bin:/bin"] + ["%s=%s" % kv for kv in env.items()]}}
    (tmp_path / "bundle" / "config.json").write_text(json.dumps(cfg))
    return json.dumps({"ociVersion": "1.0.2", "id": "c0ffee", "status": "creating", "pid": 4711,
                       "bundle": str(tmp_path / "bundle")})


def run_hook(stdin, monkeypatch, st, state_path, nodes=None):
    state_path.write_text(json.dumps(st))
    monkeypatch.setenv("GPUSIM_STATE", str(state_path))
    monkeypatch.setenv("GPUSIM_HOOK_SKIP_CLI_CHECK", "1")
    err = io.StringIO()
    rc = hook.hook_main(["prestart"], version="1.18.0", stdin=io.StringIO(stdin), stderr=err,
                        make_node=nodes if nodes is not None else Nodes())
    return rc, err.getvalue()


def test_hook_prestart_reads_oci_state_and_bundle(tmp_path, rootfs, monkeypatch):
    nodes = Nodes()
    rc, err = run_hook(bundle(tmp_path, rootfs, {"NVIDIA_VISIBLE_DEVICES": "0"}), monkeypatch, state(),
                       tmp_path / "s.json", nodes)
    assert (rc, err) == (0, "Auto-detected mode as 'legacy'\n")
    assert [n[1] for n in nodes][:2] == [str(rootfs / "dev" / "nvidia0"), str(rootfs / "dev" / "nvidiactl")]
    assert json.loads((rootfs / "var" / "lib" / "gpu-sim" / "state.json").read_text())["gpus"][0]["uuid"] == UUIDS[0]


def test_hook_prestart_broken_driver_exit_1_with_text(tmp_path, rootfs, monkeypatch):
    rc, err = run_hook(bundle(tmp_path, rootfs, {"NVIDIA_VISIBLE_DEVICES": "all"}), monkeypatch,
                       state("not_loaded"), tmp_path / "s.json")
    assert rc == 1
    assert err == ("Auto-detected mode as 'legacy'\n"
                   "nvidia-container-cli: initialization error: nvml error: driver not loaded\n")


def test_hook_prestart_without_gpu_request_is_silent(tmp_path, rootfs, monkeypatch):
    rc, err = run_hook(bundle(tmp_path, rootfs, {}), monkeypatch, state("no_driver"), tmp_path / "s.json")
    assert (rc, err) == (0, "")


def test_hook_without_nvidia_container_cli(tmp_path, rootfs, monkeypatch):
    stdin = bundle(tmp_path, rootfs, {"NVIDIA_VISIBLE_DEVICES": "0"})
    monkeypatch.setattr(hook.shutil, "which", lambda *a, **k: None)
    monkeypatch.delenv("GPUSIM_HOOK_SKIP_CLI_CHECK", raising=False)
    (tmp_path / "s.json").write_text(json.dumps(state()))
    monkeypatch.setenv("GPUSIM_STATE", str(tmp_path / "s.json"))
    err = io.StringIO()
    assert hook.hook_main(["prestart"], stdin=io.StringIO(stdin), stderr=err, make_node=Nodes()) == 1
    assert 'exec: "nvidia-container-cli": executable file not found in $PATH' in err.getvalue()


def test_hook_binary_no_nsenter_mode_makes_nodes(tmp_path, rootfs):
    stdin = bundle(tmp_path, rootfs, {"NVIDIA_VISIBLE_DEVICES": "0"})
    (tmp_path / "s.json").write_text(json.dumps(state()))
    env = dict(os.environ, GPUSIM_STATE=str(tmp_path / "s.json"), GPUSIM_HOOK_NO_NSENTER="1",
               GPUSIM_HOOK_SKIP_CLI_CHECK="1")
    res = subprocess.run([sys.executable, os.path.join(BIN, "nvidia-container-runtime-hook"), "prestart"],
                         input=stdin, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True)
    assert res.returncode == 0, res.stderr
    dev = rootfs / "dev"
    made = set(os.listdir(str(dev)))
    if ".gpusim-nodes" in made:        # not root: the nodes are recorded instead
        assert (dev / ".gpusim-nodes").read_text().splitlines()[0] == "%s c 195 0" % (dev / "nvidia0")
    else:
        assert {"nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"} <= made
        assert stat.S_ISCHR(os.stat(str(dev / "nvidia0")).st_mode)
        assert os.major(os.stat(str(dev / "nvidia0")).st_rdev) == 195


def test_hook_version_and_usage(capsys):
    assert hook.hook_main(["-version"], version="1.17.8") == 0
    assert capsys.readouterr().out == ("NVIDIA Container Runtime Hook version 1.17.8\n"
                                       "commit: f202b80a9b9d0db00d9b1d73c0128c8962c55f4d\n")
    err = io.StringIO()
    assert hook.hook_main([], stderr=err) == 2 and "Commands:\n  prestart\n" in err.getvalue()
    assert hook.hook_main(["poststop"]) == 0


# --------------------------------------------------------------------------------------------------
# nvidia-container-runtime

def test_runtime_adds_prestart_hook_and_execs_runc(tmp_path, monkeypatch):
    fake_runc = tmp_path / "bin" / "runc"
    fake_runc.parent.mkdir()
    fake_runc.write_text("#!/bin/sh\n")
    fake_runc.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake_runc.parent))
    b = tmp_path / "b"
    b.mkdir()
    (b / "config.json").write_text(json.dumps({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=all"]},
                                               "root": {"path": "rootfs"}}))
    calls = []
    argv = ["--root", "/run/runc", "create", "--bundle", str(b), "--pid-file", "/run/x.pid", "c0ffee"]
    hook.runtime_main(argv, execv=lambda path, args: calls.append((path, args)))
    assert calls == [(str(fake_runc), [str(fake_runc)] + argv)]
    cfg = json.loads((b / "config.json").read_text())
    assert cfg["hooks"]["prestart"] == [{"path": "/usr/bin/nvidia-container-runtime-hook",
                                         "args": ["nvidia-container-runtime-hook", "prestart"]}]
    hook.runtime_main(argv, execv=lambda path, args: None)          # not added twice
    assert len(json.loads((b / "config.json").read_text())["hooks"]["prestart"]) == 1


def test_runtime_without_gpu_request_leaves_spec_alone(tmp_path, monkeypatch):
    fake_runc = tmp_path / "runc"
    fake_runc.write_text("#!/bin/sh\n")
    fake_runc.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    (tmp_path / "config.json").write_text('{"process": {"env": []}}')
    hook.runtime_main(["create", "-b", str(tmp_path), "x"], execv=lambda p, a: None)
    assert (tmp_path / "config.json").read_text() == '{"process": {"env": []}}'


# --------------------------------------------------------------------------------------------------
# nvidia-cdi-hook, nvidia-container-cli

def test_cdi_hooks_in_fake_rootfs(tmp_path):
    r = tmp_path / "rootfs"
    lib = r / "lib" / "x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / ("libcuda.so.%s" % V)).write_text("")
    (lib / ("libnvidia-nvvm.so.%s" % V)).write_text("")
    (tmp_path / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    st = json.dumps({"pid": 1, "bundle": str(tmp_path)})
    assert hook.cdi_hook_main(["update-ldcache", "--folder", "/lib/x86_64-linux-gnu"], stdin=io.StringIO(st)) == 0
    assert os.readlink(str(lib / "libcuda.so.1")) == "libcuda.so.%s" % V
    assert os.readlink(str(lib / "libnvidia-nvvm.so.4")) == "libnvidia-nvvm.so.%s" % V
    assert hook.cdi_hook_main(["create-symlinks", "--link", "libcuda.so.1::/lib/x86_64-linux-gnu/libcuda.so"],
                              stdin=io.StringIO(st)) == 0
    assert os.readlink(str(lib / "libcuda.so")) == "libcuda.so.1"
    for name in ("enable-cuda-compat", "disable-device-node-modification", "update-application-profile"):
        assert hook.cdi_hook_main([name, "--host-driver-version=%s" % V], stdin=io.StringIO(st)) == 0


def test_nvidia_container_cli_info_and_errors(tmp_path, monkeypatch, capsys):
    p = tmp_path / "s.json"
    p.write_text(json.dumps(state(models=("h100",))))
    monkeypatch.setenv("GPUSIM_STATE", str(p))
    assert hook.cli_main(["info"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("NVRM version:   580.95.05\nCUDA version:   13.0\n\nDevice Index:   0\nDevice Minor:   0\n"
                          "Model:          NVIDIA H100 80GB HBM3\n")
    assert "GPU UUID:       %s\nBus Location:   00000000:17:00.0\nArchitecture:   9.0\n" % UUIDS[0] in out
    p.write_text(json.dumps(state("mismatch")))
    assert hook.cli_main(["info"]) == 1
    assert capsys.readouterr().err == \
        "nvidia-container-cli: initialization error: nvml error: driver/library version mismatch\n"
    assert hook.cli_main(["--version"], version="1.18.0") == 0
    assert capsys.readouterr().out.startswith("cli-version: 1.18.0\nlib-version: 1.18.0\n")


# --- the vectorAdd stand-in in the check image (gpusim/cuda_sample.py) against the real sample's texts ----

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "cuda_probe")


def _real(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


def _vector_add(rootfs, env=None):
    from gpusim import cuda_sample
    out, err = io.StringIO(), io.StringIO()
    rc = cuda_sample.vector_add_main(str(rootfs), out, err, env or {})
    return rc, out.getvalue(), err.getvalue()


class MadeNodes(Nodes):
    """Nodes made as files in the fake rootfs, so the sample sees them."""
    def __call__(self, pid, path, major, minor):
        Nodes.__call__(self, pid, path, major, minor)
        open(path, "w").close()


def test_vector_add_passes_with_what_the_hook_injects(rootfs, host):
    inject(state(), rootfs, host, {"NVIDIA_VISIBLE_DEVICES": "all"}, MadeNodes())
    rc, out, err = _vector_add(rootfs)
    assert (rc, out, err) == (0, _real("001_success_gpu-operator-346.txt"), "")


def test_without_uvm_cuda_fails_with_the_real_unknown_error(rootfs, host):
    broken = state()
    broken["faults"] = {"missing_device_nodes": ["nvidia-uvm"]}
    nodes = MadeNodes()
    inject(broken, rootfs, host, {"NVIDIA_VISIBLE_DEVICES": "all"}, nodes)
    assert not [n for n in nodes if "uvm" in os.path.basename(n[1])]  # nvidia-modprobe -u cannot make them: not injected
    rc, out, err = _vector_add(rootfs)
    real = _real("012_other-unknown-error-gpu-fault_gpu-operator-1146.txt").splitlines()
    assert rc == 1 and out.splitlines() == [real[1]] and err.splitlines() == [real[0]]


def test_without_gpus_or_compute_the_real_texts(rootfs, host):
    inject(state(), rootfs, host, {"NVIDIA_VISIBLE_DEVICES": "none"}, MadeNodes())
    rc, _out, err = _vector_add(rootfs)
    assert rc == 1 and err.strip() == "Failed to allocate device vector A (error code no CUDA-capable device is detected)!"
    assert _real("006_no_device_gpu-operator-1900.txt").splitlines()[0].endswith(err.strip())
    bare = rootfs.parent / "bare"
    (bare / "dev").mkdir(parents=True)
    rc, _out, err = _vector_add(bare)
    assert rc == 1 and err.splitlines() == [_real("003_driver_too_old_gpu-operator-389.txt").splitlines()[1]]


def test_a_driver_older_than_the_images_cuda(rootfs, host):
    inject(state(), rootfs, host, {"NVIDIA_VISIBLE_DEVICES": "all"}, MadeNodes())
    rc, _out, err = _vector_add(rootfs, {"CUDA_VERSION": "13.1.0"})  # 580 -> CUDA 13.0
    assert rc == 1 and "CUDA driver version is insufficient for CUDA runtime version" in err


def test_whole_gpus_in_mig_mode_give_cuda_no_usable_device(rootfs, host):
    mig = state()
    for gpu in mig["gpus"]:
        gpu["mig_mode"] = True
    inject(mig, rootfs, host, {"NVIDIA_VISIBLE_DEVICES": "all"}, MadeNodes())
    rc, _out, err = _vector_add(rootfs)
    assert rc == 1 and err.splitlines() == [_real("008_other-busy-unavailable_nvidia-container-toolkit-614.txt").splitlines()[0]]


def test_exclusive_gpus_held_by_others_leave_cuda_the_free_one_and_busy_when_none(tmp_path):
    """The real 5th vectorAdd on four Exclusive_Process GH200s (tests/fixtures/compute_mode/) fails busy; with one GPU
    free the sample runs there."""
    from gpusim import cuda_sample
    with open(os.path.join(ROOT, "tests", "fixtures", "compute_mode",
                           "cuda-error_vectorAdd_5th-process-on-4xGH200-exclusive-process_dedented.txt"),
              encoding="utf-8") as handle:
        real = handle.read().strip()
    exclusive = state()
    for gpu in exclusive["gpus"]:
        gpu["compute_mode"] = "Exclusive_Process"
    exclusive["processes"].append({"pid": 4141, "name": "python3", "gpu_index": 0, "used_mib": 512, "type": "C"})
    root = str(tmp_path)
    for name in ("nvidia0", "nvidiactl", "nvidia-uvm"):
        os.makedirs(os.path.join(root, "dev"), exist_ok=True)
        open(os.path.join(root, "dev", name), "w").close()
    os.makedirs(os.path.join(root, os.path.dirname(cuda_sample.LIBCUDA).lstrip("/")))
    open(os.path.join(root, cuda_sample.LIBCUDA.lstrip("/")), "w").close()
    os.makedirs(os.path.join(root, "var/lib/gpu-sim"))
    with open(os.path.join(root, cuda_sample.STATE_IN_CONTAINER.lstrip("/")), "w") as handle:
        json.dump(exclusive, handle)
    rc, _out, err = _vector_add(root)
    assert rc == 1 and err.strip() == real
    exclusive["processes"] = [p for p in exclusive["processes"] if p["gpu_index"] != 2]
    with open(os.path.join(root, cuda_sample.STATE_IN_CONTAINER.lstrip("/")), "w") as handle:
        json.dump(exclusive, handle)
    assert _vector_add(root)[0] == 0
