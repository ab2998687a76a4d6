"""The simulator's NVIDIA kernel modules (gpusim/kmod.py): /proc/modules in the kernel's format (read back by the
product's parser), `modprobe -r` refusing a module in use with kmod's words (tests/fixtures/kernel_modules), and
`modprobe nvidia` loading the installed driver as a boot would."""
import os

from simhelpers import edit, make_state, run_smi, st

from gpusim import kmod  # noqa: E402
from driver import kernel_modules as km  # noqa: E402  (tests/conftest.py serves module_utils)
from conftest import read_fixture  # noqa: E402


def booted(tmp_path, **extra):
    path = tmp_path / "s.json"
    make_state(path, models=("h100-80gb", "l4"), **extra)
    return path


def test_the_boot_modules_in_proc_modules_read_as_the_kernel_writes_them(tmp_path):
    state = st.load(str(booted(tmp_path)))
    text = kmod.render(state)
    read = km.parse_proc_modules(text)
    assert km.loaded_nvidia(read) == ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"]
    assert read["nvidia"]["holders"] == ["nvidia_modeset", "nvidia_uvm"] and read["nvidia"]["refcount"] == 2
    assert read["nvidia_modeset"]["holders"] == ["nvidia_drm"]
    # The same shape as the driver pod's line (gpu-operator#180): holders, a trailing comma, Live, (POE).
    real = read_fixture("kernel_modules", "proc-modules_460.32.03").splitlines()[1]
    assert [len(line.split()) for line in (text.splitlines()[-1], real)] == [7, 7]


def test_modprobe_r_refuses_a_module_held_open_and_unloads_it_once_let_go(tmp_path):
    path = booted(tmp_path)
    alive = os.getpid()
    edit(path, lambda s: s.update(persistenced={"pid": alive, "persistence": True, "enabled": []}))
    state = st.load(str(path))
    errors, rc, _log = kmod.remove(state, ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"])
    # drm and uvm go; modeset and nvidia are held by the daemon's open files: kmod's line, as optimus-manager#170.
    assert rc == 1 and errors == ["modprobe: FATAL: Module nvidia_modeset is in use.",
                                  "modprobe: FATAL: Module nvidia is in use."]
    assert kmod.loaded(state) == ["nvidia", "nvidia_modeset"]
    assert km.in_use("\n".join(errors)) == [{"module": "nvidia_modeset", "holders": []},
                                            {"module": "nvidia", "holders": []}]
    state["persistenced"] = {"pid": None, "persistence": False, "enabled": []}
    errors, rc, log = kmod.remove(state, ["nvidia-modeset", "nvidia"])
    assert (errors, rc) == ([], 0) and kmod.loaded(state) == [] and state["driver"]["loaded"] is None
    assert log == ["nvidia-modeset: Unloading", "nvidia-nvlink: Unregistered the Nvlink Core, major device number 234"]
    # Not loaded: nothing to say (kmod 30 without --first-time).
    assert kmod.remove(state, ["nvidia"]) == ([], 0, [])


def test_a_running_container_given_gpus_holds_the_driver(tmp_path):
    state = st.load(str(booted(tmp_path)))
    state["device_users"] = [{"pid": os.getpid()}]
    assert kmod.refcount(state, "nvidia_uvm") == 1
    assert kmod.remove(state, ["nvidia_uvm"])[0] == ["modprobe: FATAL: Module nvidia_uvm is in use."]
    state["device_users"] = [{"pid": 2 ** 22 + 7}]   # gone
    assert kmod.remove(state, ["nvidia_uvm"])[1] == 0


def test_modprobe_nvidia_loads_the_installed_driver_as_a_boot_would(tmp_path):
    path = booted(tmp_path)
    state = st.load(str(path))
    kmod.remove(state, ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"])
    state["driver"]["installed"]["version"] = "580.105.08"
    state["gpus"][0]["persistence_mode"] = True
    errors, rc, log = kmod.load(state, ["nvidia_drm"], release="6.1.0-28-amd64")
    assert (errors, rc) == ([], 0)
    assert kmod.loaded(state) == ["nvidia", "nvidia_modeset", "nvidia_drm"]
    assert state["driver"]["loaded"]["version"] == "580.105.08" and not state["gpus"][0]["persistence_mode"]
    assert log[0].startswith("NVRM: loading NVIDIA UNIX") and "580.105.08" in log[0]
    kmod.load(state, ["nvidia-uvm"])
    assert kmod.loaded(state)[-1] == "nvidia_uvm"
    st.save(state, str(path))
    out, rc = run_smi(path, "--query-gpu=driver_version", "--format=csv,noheader")
    assert rc == 0 and set(out.split()) == {"580.105.08"}


def test_without_an_installed_module_modprobe_says_not_found(tmp_path):
    state = st.load(str(booted(tmp_path)))
    kmod.remove(state, ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"])
    state["driver"]["installed"] = None
    errors, rc, _log = kmod.load(state, ["nvidia"], release="6.1.0-28-amd64")
    # nvidia-docker#481's form: "modprobe: FATAL: Module nvidia_uvm not found in directory /lib/modules/4.4.0-83-generic"
    assert rc == 1 and errors == ["modprobe: FATAL: Module nvidia not found in directory /lib/modules/6.1.0-28-amd64"]
