"""The NVIDIA kernel modules of the simulated host: `modprobe` for them, and `/proc/modules` (test code, stdlib only).

What a real host does (tests/fixtures/kernel_modules/, research in the fixtures' README):
- A boot loads nvidia, nvidia_modeset, nvidia_drm and nvidia_uvm. nvidia_modeset and nvidia_uvm depend on nvidia,
  nvidia_drm on nvidia_modeset.
- A module's refcount counts the loaded modules that depend on it and every open file of its device nodes:
  nvidia-persistenced (/dev/nvidia*, /dev/nvidia-modeset: lsof on a DGX Spark), the fabric manager
  (/dev/nvidia-nvswitch*, /dev/nvidia-nvlink: fuser on an 8 x H200 host), DCGM's nv-hostengine (its NVML handles
  on /dev/nvidiactl and /dev/nvidia*), every CUDA process and every container
  given GPUs (its processes open /dev/nvidia*, /dev/nvidia-uvm).
- `modprobe -r A B ...` (kmod 30, Debian 12; the same in 29-34) tries every name in turn and returns the last error:
  a module that is not loaded is skipped without a word, one with references left prints
  `modprobe: FATAL: Module nvidia is in use.` (exit 1). The kernel logs the unload (`nvidia-modeset: Unloading`,
  `nvidia-uvm: Unloaded the UVM driver.`, `nvidia-nvlink: Unregistered the Nvlink Core, major device number 234`:
  NVIDIA/gpu-operator#137).
- `modprobe nvidia` loads the installed driver's module for the running kernel (what a boot would load), or
  `modprobe: FATAL: Module nvidia not found in directory /lib/modules/<release>` where there is none. The GPUs come
  up as after a boot: persistence off, MIG per generation, the fabric set up again by the fabric manager.

The simulation: the loaded modules are state.driver.modules (None: what a boot loads, while the driver is loaded).
`/usr/local/sbin/modprobe` (bin/modprobe, ahead of kmod's on root's PATH) handles the NVIDIA names and hands every
other name to kmod's. `/proc/modules` is the kernel's own list with the simulated NVIDIA lines on top: gpusim-boot
bind-mounts /run/gpu-sim/proc-modules over it, and every state change writes the file again. Its refcounts are those
of the last simulator event: a container that exits is seen at the next one (modprobe counts afresh each time).
"""
import os
import platform
import subprocess
import sys

from . import boot as bootmod
from . import dcgm as _dcgm
from . import fabric as _fabric
from . import mig as _mig
from . import state as st
from .smi import pid_alive

BOOT_MODULES = ("nvidia", "nvidia_modeset", "nvidia_drm", "nvidia_uvm")
# What each depends on (modinfo's depends: nvidia-drm names nvidia-modeset, not nvidia).
DEPENDS = {"nvidia_modeset": ("nvidia",), "nvidia_drm": ("nvidia_modeset",), "nvidia_uvm": ("nvidia",),
           "nvidia_peermem": ("nvidia",)}
# Sizes as lsmod printed them on NVIDIA's GDS/GDRDMA sample and a display-held laptop (fixtures).
SIZES = {"nvidia": 39059456, "nvidia_modeset": 1159168, "nvidia_uvm": 1048576, "nvidia_drm": 53248,
         "nvidia_peermem": 16384}
UNLOAD_LOG = {"nvidia_modeset": "nvidia-modeset: Unloading", "nvidia_uvm": "nvidia-uvm: Unloaded the UVM driver.",
              "nvidia": "nvidia-nvlink: Unregistered the Nvlink Core, major device number 234"}
PROC_MODULES_FILE = "/run/gpu-sim/proc-modules"
HOST_MODULES_FILE = "/run/gpu-sim/proc-modules.host"
REAL_MODPROBE = ("/usr/sbin/modprobe", "/sbin/modprobe")
FM_PID_FILE = os.path.join(_fabric.RUN_DIR, _fabric.PID_FILE)


def normal(name):
    return (name or "").replace("-", "_")


def is_nvidia(name):
    return normal(name) in SIZES


def loaded(state):
    """The NVIDIA modules loaded now, in load order."""
    drv = state.get("driver") or {}
    if not drv.get("loaded"):
        return []
    mods = drv.get("modules")
    return list(BOOT_MODULES if mods is None else mods)


def _pid_file_alive(path):
    try:
        with open(path) as fh:
            return pid_alive(int(fh.read().strip()))
    except (OSError, ValueError):
        return False


def openers(state, fm_pid_file=FM_PID_FILE):
    """Who has the device nodes open now: {"persistenced", "fabric_manager", "hostengine", "processes", "containers"}.
    nv-hostengine (DCGM, gpusim/hostengine.py) holds them while it runs and manages GPUs (opened through NVML)."""
    pid = (state.get("persistenced") or {}).get("pid")
    procs = [p for p in state.get("processes") or [] if not p.get("holder") or pid_alive(p["pid"])]
    users = [u for u in state.get("device_users") or [] if pid_alive(u.get("pid"))]
    he = _dcgm.hostengine(state)
    return {"persistenced": bool(pid and pid_alive(pid)), "fabric_manager": _pid_file_alive(fm_pid_file),
            "hostengine": bool(he and he.get("gpus")), "processes": procs, "containers": users}


def refcount(state, name, opened=None):
    opened = opened if opened is not None else openers(state)
    mods = loaded(state)
    if name not in mods:
        return 0
    dependents = [m for m in mods if name in DEPENDS.get(m, ())]
    cuda = len(opened["processes"]) + len(opened["containers"])
    files = {"nvidia": cuda + int(opened["persistenced"]) + int(opened["fabric_manager"])
             + int(opened.get("hostengine", False)),
             "nvidia_modeset": int(opened["persistenced"]), "nvidia_uvm": cuda}.get(name, 0)
    return len(dependents) + files


def render(state, opened=None):
    """The NVIDIA lines of /proc/modules, newest first as the kernel lists them."""
    opened = opened if opened is not None else openers(state)
    mods = loaded(state)
    lines = []
    for name in reversed(mods):
        holders = [m for m in mods if name in DEPENDS.get(m, ()) and m != name]
        lines.append("%s %d %d %s Live 0x0000000000000000 (POE)" % (
            name, SIZES[name], refcount(state, name, opened), "".join(h + "," for h in holders) or "-"))
    return "\n".join(lines) + ("\n" if lines else "")


def refresh(state, root="/"):
    """Write /proc/modules' stand-in again where gpusim-boot bind-mounted it (on a simulated host only)."""
    path = os.path.join(root, PROC_MODULES_FILE.lstrip("/"))
    if not os.path.exists(path):
        return
    try:
        with open(os.path.join(root, HOST_MODULES_FILE.lstrip("/"))) as fh:
            host = fh.read()
    except OSError:
        host = ""
    with open(path, "w") as fh:
        fh.write(render(state) + host)


def mount_proc_modules(state, root="/"):
    """At boot: keep the kernel's own /proc/modules and bind-mount the simulated list over it."""
    if os.path.abspath(root) != "/":
        return
    os.makedirs(os.path.dirname(PROC_MODULES_FILE), exist_ok=True)
    if not os.path.exists(HOST_MODULES_FILE):
        try:
            with open("/proc/modules") as fh:
                host = fh.read()
        except OSError:
            host = ""
        with open(HOST_MODULES_FILE, "w") as fh:
            fh.write(host)
    with open(PROC_MODULES_FILE, "w") as fh:
        fh.write("")
    refresh(state)
    if subprocess.call(["mountpoint", "-q", "/proc/modules"]) != 0:
        subprocess.call(["mount", "--bind", PROC_MODULES_FILE, "/proc/modules"])


def remove(state, names, opened=None):
    """`modprobe -r NAMES`: (stderr lines, rc, kernel log lines); the state is changed in place."""
    opened = opened if opened is not None else openers(state)
    errors, log = [], []
    for name in [normal(n) for n in names]:
        mods = loaded(state)
        if name not in mods:
            continue
        if refcount(state, name, opened):
            errors.append("modprobe: FATAL: Module %s is in use." % name)
            continue
        mods.remove(name)
        state["driver"]["modules"] = mods
        if name in UNLOAD_LOG:
            log.append(UNLOAD_LOG[name])
        if name == "nvidia":
            state["driver"]["loaded"] = None
            state["driver"]["modules"] = []
    return errors, (1 if errors else 0), log


def _with_dependencies(name):
    """name and what it needs, what it needs first."""
    out = []
    for need in DEPENDS.get(name, ()):
        out.extend(m for m in _with_dependencies(need) if m not in out)
    return out + [name]


def load(state, names, release=None):
    """`modprobe NAME...`: (stderr lines, rc, kernel log lines). Loading a module loads what it depends on."""
    release = release or platform.release()
    errors, log = [], []
    for name in [normal(n) for n in names]:
        for need in _with_dependencies(name):
            if need in loaded(state):
                continue
            if need == "nvidia":
                inst = (state.get("driver") or {}).get("installed")
                modules = inst.get("kernel_modules", "open") if inst else None
                if not modules or bootmod.secure_boot_rejects(state):
                    errors.append("modprobe: FATAL: Module %s not found in directory /lib/modules/%s" % (name, release))
                    break
                state["driver"]["loaded"] = {"version": inst["version"], "kernel_modules": modules}
                state["driver"]["modules"] = ["nvidia"]
                # The GPUs start over as at a boot: no persistence, no MIG instances, the fabric to set up again.
                for gpu in state.get("gpus") or []:
                    gpu["persistence_mode"] = False
                _mig.reset_at_boot(state)
                _fabric.reset_at_boot(state)
                state["processes"] = [p for p in state.get("processes") or [] if p.get("holder") and pid_alive(p["pid"])]
                log.append("NVRM: loading %s" % bootmod.module_banner(state["driver"]["loaded"]))
            else:
                state["driver"]["modules"] = loaded(state) + [need]
    return errors, (1 if errors else 0), log


def _real_modprobe():
    return next((p for p in REAL_MODPROBE if os.path.exists(p)), None)


def main(argv=None, state_path=None, root="/"):
    argv = list(sys.argv[1:] if argv is None else argv)
    flags = [a for a in argv if a.startswith("-")]
    words = [a for a in argv if not a.startswith("-")]
    removing = bool(set(flags) & {"-r", "--remove"}) or any(f.startswith("-") and not f.startswith("--") and "r" in f
                                                            for f in flags)
    every = bool(set(flags) & {"-a", "--all"}) or removing
    names = words if every else words[:1]
    ours = [n for n in names if is_nvidia(n)]
    if not ours:
        real = _real_modprobe()
        if not real:
            sys.stderr.write("modprobe: no kmod modprobe on this host\n")
            return 1
        os.execv(real, [real] + argv)
    others = [n for n in names if not is_nvidia(n)]
    rc = 0
    if others and _real_modprobe():
        rc = subprocess.call([_real_modprobe()] + flags + others)
    result = {}

    def fn(s):
        result["out"] = remove(s, ours) if removing else load(s, ours)
        result["state"] = s
    st.update(fn, state_path)
    errors, code, log = result["out"]
    state = result["state"]
    if not removing and not code:
        bootmod.lay_down(state, root)
    elif removing and not state["driver"].get("loaded"):
        _clear_proc_driver(root)
    if log:
        st.update(lambda s: s.setdefault("kernel_log", []).extend(log), state_path)
        if state.get("kmsg"):
            bootmod.write_kmsg(log, root)
    refresh(st.load(state_path), root)
    quiet = bool(set(flags) & {"-q", "--quiet"})
    for line in errors:
        if not quiet:
            sys.stderr.write(line + "\n")
    return code or rc


def _clear_proc_driver(root="/"):
    """The module is gone: /proc/driver/nvidia goes with it (the device nodes stay, as udev made them)."""
    nv = os.path.join(root, "proc/driver/nvidia")
    if os.path.isdir(nv):
        bootmod._rmtree(nv)  # pylint: disable=protected-access
