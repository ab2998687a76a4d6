"""What a boot does to the simulated host (gpusim-boot.service, oneshot, before docker and persistenced).

- a reboot ends every process, resets persistence mode and the kernel log, recovers lost GPUs, and gives the kernel
  a new boot id (/proc/sys/kernel/random/boot_id, bound over the machine's: mount_boot_id);
- loaded := installed (the kernel module of the installed package is what the new kernel loads),
  unless faults.module_not_loaded;
- when loaded: /proc/driver/nvidia/version (and gpus/<bus>/information) in the real format, and the
  device nodes /dev/nvidia<minor> (c 195 <minor>), /dev/nvidiactl (c 195 255), /dev/nvidia-uvm and
  /dev/nvidia-uvm-tools (c 508 0/1: the dynamic major seen on a real 580 host), minus
  faults.missing_device_nodes;
- the kernel log gets the module's load line, and for a GPU the loaded module refuses the real NVRM lines.

Everything below takes `root` so that unit tests run without privileges: with root != "/" the device
nodes are plain files holding "c MAJOR MINOR" and nothing is mounted. With root == "/" a tmpfs is
mounted on /proc/driver (the target container has CAP_SYS_ADMIN) and real nodes are made with mknod.

Real texts (public captures):
  NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U22-I3-B17-02-5)  Tue Sep 23 09:55:41 UTC 2025
  GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04.2)<space>
  NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.113.01  Tue Sep 12 19:41:24 UTC 2023
  NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.173.02  Release Build  (dvs-builder@U22-I3-AK02-24-4)  Tue Jun 23 08:17:01 UTC 2026
  NVRM: The NVIDIA GPU 0000:05:00.0 (PCI ID: 10de:2bb5)
  NVRM: installed in this system requires use of the NVIDIA open kernel modules.
"""
import os
import re
import shlex
import stat
import subprocess
import sys
import uuid

from . import catalogue
from . import fabric as _fabric
from . import load as _load
from . import mig as _mig
from . import state as st

NVIDIA_MAJOR = 195
UVM_MAJOR = 508
BUILD_DATE = "Tue Sep 23 09:55:41 UTC 2025"
BUILDER = "dvs-builder@U22-I3-B17-02-5"

GCC = {
    "bookworm": "gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) ",
    "trixie": "gcc version 14.2.0 (Debian 14.2.0-19) ",
    "noble": "gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04) ",
    "jammy": "gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04.2) ",
}


def _codename(root):
    try:
        with open(os.path.join(root, "etc/os-release"), encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("VERSION_CODENAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return "bookworm"


def module_banner(loaded):
    ver = loaded["version"]
    if loaded.get("kernel_modules", "open") == "open":
        return "NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  (%s)  %s" % (ver, BUILDER, BUILD_DATE)
    return "NVIDIA UNIX x86_64 Kernel Module  %s  %s" % (ver, BUILD_DATE)


def version_text(loaded, root="/"):
    return "NVRM version: %s\nGCC version:  %s\n" % (module_banner(loaded), GCC.get(_codename(root), GCC["bookworm"]))


def driven(state, gpu):
    loaded = state["driver"].get("loaded")
    if not loaded:
        return False
    m = catalogue.get(gpu["model"])
    if m["needs_open_modules"] and loaded.get("kernel_modules") != "open":
        return False
    try:
        branch = int(str(loaded["version"]).split(".")[0])
    except ValueError:
        branch = 0
    return branch >= int(m["min_branch"])


def device_nodes(state):
    """[(name, major, minor)] the loaded driver creates, before faults are applied."""
    if not state["driver"].get("loaded"):
        return []
    nodes = [("nvidia%d" % g["index"], NVIDIA_MAJOR, g["index"]) for g in state["gpus"] if driven(state, g)]
    # the control and UVM nodes come with the module even when it refuses every GPU (then
    # nvidia-smi says "No devices were found", as on a Blackwell card with the proprietary module)
    return nodes + [("nvidiactl", NVIDIA_MAJOR, 255), ("nvidia-uvm", UVM_MAJOR, 0), ("nvidia-uvm-tools", UVM_MAJOR, 1)]


def _make_node(path, major, minor, real):
    if os.path.lexists(path):
        os.unlink(path)
    if real:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))
        os.chmod(path, 0o666)
    else:
        with open(path, "w") as fh:
            fh.write("c %d %d\n" % (major, minor))


def _is_mounted(path):
    try:
        with open("/proc/mounts") as fh:
            return any(line.split()[1] == path for line in fh)
    except OSError:
        return False


# Packages whose module DKMS builds (Debian's, Ubuntu's). Installed beside Canonical's signed modules they
# still win: depmod searches updates/ (DKMS) before kernel/.
DKMS_PACKAGES = re.compile(r"^nvidia-(?:open-)?kernel-dkms$|^nvidia-dkms-\d+")


def secure_boot_rejects(state):
    """Whether this boot's module is a DKMS build the firmware's Secure Boot refuses: Secure Boot on and the
    DKMS signing key not enrolled (firmware.dkms_key_enrolled)."""
    firmware = state.get("firmware") or {}
    packages = ((state.get("driver") or {}).get("installed") or {}).get("packages") or []
    return bool(firmware.get("secure_boot") and not firmware.get("dkms_key_enrolled")
                and any(DKMS_PACKAGES.match(p) for p in packages))


def apply_state(state):
    """The state part of a boot (pure; returns the kernel log lines of this boot)."""
    drv = state["driver"]
    state["boot"] = {"count": int((state.get("boot") or {}).get("count") or 0) + 1, "id": str(uuid.uuid4())}
    state["processes"] = []
    state["persistenced"] = {"pid": None, "persistence": False, "enabled": []}
    if state.get("hostengine"):
        state["hostengine"] = dict(state["hostengine"], pid=None, gpus=[])   # DCGM's engine did not survive the boot
    _fabric.reset_at_boot(state)
    _mig.reset_at_boot(state)   # MIG: instances gone, mode per generation (gpusim/mig.py)
    for g in state["gpus"]:
        g["persistence_mode"] = False
        g.pop("lost", None)
    inst = drv.get("installed")
    # Userspace alone (no kernel module package: kernel_modules None) gives the new kernel nothing to load.
    modules = inst.get("kernel_modules", "open") if inst else None
    rejected = modules and secure_boot_rejects(state)
    if modules and not rejected and not state["faults"].get("module_not_loaded"):
        drv["loaded"] = {"version": inst["version"], "kernel_modules": modules}
    else:
        drv["loaded"] = None
    drv["modules"] = None   # what a boot loads (gpusim/kmod.py BOOT_MODULES)
    state["device_users"] = []
    # The kernel's module-signing check (kernel/module/signing.c): DKMS signs with its own key, which the
    # firmware trusts only once someone enrolled it as a MOK at the console (siderolabs/talos#7174's line).
    log = ["Loading of module with unavailable key is rejected"] if rejected else []
    if drv["loaded"]:
        log.append("NVRM: loading %s" % module_banner(drv["loaded"]))
        for g in state["gpus"]:
            m = catalogue.get(g["model"])
            if m["needs_open_modules"] and drv["loaded"].get("kernel_modules") != "open":
                log.append("NVRM: The NVIDIA GPU %s (PCI ID: 10de:%04x)" % (g["pci_bus_id"][4:].lower(),
                                                                          m["pci_device_id"]))
                log.append("NVRM: installed in this system requires use of the NVIDIA open kernel modules.")
                log.append("NVRM: GPU %s: RmInitAdapter failed! (0x22:0x56:889)" % g["pci_bus_id"][4:].lower())
                log.append("NVRM: GPU %s: rm_init_adapter failed, device minor number %d"
                           % (g["pci_bus_id"][4:].lower(), g["index"]))
    state["kernel_log_previous"] = list(state.get("kernel_log") or [])
    state["kernel_log"] = log
    return log


def lay_down(state, root="/"):
    """The filesystem part of a boot: /proc/driver/nvidia and /dev/nvidia*. Returns the nodes made."""
    real = os.path.abspath(root) == "/"
    dev = os.path.join(root, "dev")
    os.makedirs(dev, exist_ok=True)
    for name in os.listdir(dev):
        if name.startswith("nvidia"):
            path = os.path.join(dev, name)
            if not os.path.isdir(path):
                os.unlink(path)
    proc_driver = os.path.join(root, "proc/driver")
    loaded = state["driver"].get("loaded")
    if not loaded:
        if not real:
            _rmtree(os.path.join(proc_driver, "nvidia"))
        return []
    if real:
        os.makedirs(proc_driver, exist_ok=True)
        if not _is_mounted("/proc/driver"):
            subprocess.check_call(["mount", "-t", "tmpfs", "-o", "mode=0555,size=1m", "tmpfs", "/proc/driver"])
    else:
        _rmtree(os.path.join(proc_driver, "nvidia"))
    nv = os.path.join(proc_driver, "nvidia")
    os.makedirs(os.path.join(nv, "gpus"), exist_ok=True)
    with open(os.path.join(nv, "version"), "w") as fh:
        fh.write(version_text(loaded, root))
    for g in state["gpus"]:
        if not driven(state, g):
            continue
        m = catalogue.get(g["model"])
        bus = g["pci_bus_id"][4:].lower()
        os.makedirs(os.path.join(nv, "gpus", bus), exist_ok=True)
        with open(os.path.join(nv, "gpus", bus, "information"), "w") as fh:
            fh.write("Model: \t\t %s\nIRQ:   \t\t %d\nGPU UUID: \t %s\nVideo BIOS: \t %s\nBus Type: \t PCIe\n"
                     "DMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t %s\n"
                     "Device Minor: \t %d\nGPU Firmware: \t %s\nGPU Excluded:\t No\n"
                     % (m["name"], 150 + g["index"], g["uuid"], m.get("vbios", "N/A").lower(), bus, g["index"],
                        loaded["version"]))
    made = []
    missing = set(state["faults"].get("missing_device_nodes") or [])
    for name, major, minor in device_nodes(state):
        if name in missing:
            continue
        _make_node(os.path.join(dev, name), major, minor, real)
        made.append(name)
    return made


def _rmtree(path):
    if not os.path.isdir(path):
        return
    for base, dirs, files in os.walk(path, topdown=False):
        for f in files:
            os.unlink(os.path.join(base, f))
        for d in dirs:
            os.rmdir(os.path.join(base, d))
    os.rmdir(path)


def write_kmsg(lines, root="/"):
    """Copy kernel-log lines to /dev/kmsg when the state asks for it and the device is writable."""
    path = os.path.join(root, "dev/kmsg")
    try:
        with open(path, "w") as fh:
            for line in lines:
                fh.write("<4>%s\n" % line)
        return True
    except OSError:
        return False


# udev's rule directories, highest priority first (a name in /etc hides the same name further down).
UDEV_RULE_DIRS = ("etc/udev/rules.d", "run/udev/rules.d", "usr/lib/udev/rules.d", "lib/udev/rules.d")
_DRIVER_BIND_RUN = re.compile(r'ACTION=="add".*DEVPATH=="/bus/pci/drivers/nvidia".*RUN\+="([^"]+)"')


def driver_bind_commands(root="/"):
    """The RUN commands of the udev rules that match the nvidia driver's "add" event (the driver binding
    to the GPUs at module load), in udev's order: by file name over all directories."""
    files = {}
    for directory in reversed(UDEV_RULE_DIRS):
        path = os.path.join(root, directory)
        for name in os.listdir(path) if os.path.isdir(path) else []:
            if name.endswith(".rules"):
                files[name] = os.path.join(path, name)
    commands = []
    for name in sorted(files):
        with open(files[name], errors="replace") as fh:
            for line in fh:
                match = _DRIVER_BIND_RUN.search(line)
                if match and not line.lstrip().startswith("#"):
                    commands.append(match.group(1))
    return commands


def run_driver_bind_rules(root="/"):
    """What udevd does when the driver binds: each matching rule's program; a failure is logged as udev
    logs it (tests/fixtures/devchar: "(udev-worker)[N]: nvidia: Process '...' failed with exit code 1.")."""
    for command in driver_bind_commands(root):
        res = subprocess.run(shlex.split(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if res.returncode != 0:
            sys.stderr.write("(udev-worker)[%d]: nvidia: Process '%s' failed with exit code %d.\n"
                             % (os.getpid(), command, res.returncode))


# UEFI's global-variable GUID; efivarfs shows a variable as its 4 attribute bytes (NV+BS+RT: 06 00 00 00) then
# its data, one byte for SecureBoot (tests/fixtures/secure_boot: the salt-66955 and mokutil-89 hexdumps).
EFI_GLOBAL_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
EFIVAR_ATTRIBUTES = b"\x06\x00\x00\x00"


def lay_down_firmware(state, root="/"):
    """The firmware's Secure Boot as the kernel shows it: /sys/firmware/efi/efivars/SecureBoot-<guid>. No
    firmware.secure_boot in the state is a host booted without EFI (no efivars at all). Docker masks
    /sys/firmware with a read-only tmpfs; a writable one goes over it (the target has CAP_SYS_ADMIN)."""
    secure_boot = (state.get("firmware") or {}).get("secure_boot")
    firmware = os.path.join(root, "sys/firmware")
    efivars = os.path.join(firmware, "efi/efivars")
    path = os.path.join(efivars, "SecureBoot-" + EFI_GLOBAL_GUID)
    if secure_boot is None:
        if os.path.exists(path):
            os.unlink(path)
        return None
    if os.path.abspath(root) == "/" and not os.access(firmware, os.W_OK):
        subprocess.check_call(["mount", "-t", "tmpfs", "-o", "mode=0755,size=64k", "tmpfs", "/sys/firmware"])
    os.makedirs(efivars, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(EFIVAR_ATTRIBUTES + (b"\x01" if secure_boot else b"\x00"))
    return bool(secure_boot)


def boot(state_path=None, root="/"):
    holder = {}

    def fn(s):
        holder["log"] = apply_state(s)
        holder["state"] = s
    st.update(fn, state_path)
    state = holder["state"]
    _load.clear(_load.load_dir(state_path))   # no serving engine survives a boot
    made = lay_down(state, root)
    lay_down_firmware(state, root)
    from . import kmod  # pylint: disable=import-outside-toplevel  # kmod imports this module
    kmod.mount_proc_modules(state, root)
    if made and os.path.abspath(root) == "/":
        run_driver_bind_rules(root)
    marker = os.path.join(root, "run/gpu-sim")
    os.makedirs(marker, exist_ok=True)
    with open(os.path.join(marker, "boot-id"), "w") as fh:
        fh.write(state["boot"]["id"] + "\n")
    if os.path.abspath(root) == "/":
        mount_boot_id(os.path.join(marker, "boot-id"))
    if state.get("kmsg"):
        write_kmsg(holder["log"], root)
    return state, made


KERNEL_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def _mounted(path):
    with open("/proc/self/mountinfo") as fh:
        return any(line.split()[4] == path for line in fh if len(line.split()) > 4)


def mount_boot_id(source):
    """The kernel's boot id for this boot: a container restart keeps the machine's kernel, whose boot id never
    changes, while a real reboot gets a new one (gpuhost's Xid cursor and out-of-service marks are per boot). The
    boot's id is bound over /proc/sys/kernel/random/boot_id, and journald restarted so that its entries carry the
    id `journalctl -b` filters by."""
    try:
        if _mounted(KERNEL_BOOT_ID):
            subprocess.check_call(["umount", KERNEL_BOOT_ID])
        subprocess.check_call(["mount", "--bind", source, KERNEL_BOOT_ID])
    except (OSError, subprocess.CalledProcessError) as exc:
        sys.stderr.write("gpusim-boot: boot id not bound over %s: %s\n" % (KERNEL_BOOT_ID, exc))
        return False
    if os.path.isdir("/run/systemd/system"):
        subprocess.call(["systemctl", "restart", "systemd-journald.service"])
    return True


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    root = "/"
    if argv and argv[0].startswith("--root="):
        root = argv[0].split("=", 1)[1]
    state, made = boot(root=root)
    loaded = state["driver"]["loaded"]
    if loaded:
        print("gpusim-boot: boot %d: loaded NVIDIA %s (%s kernel modules); device nodes: %s"
              % (state["boot"]["count"], loaded["version"], loaded.get("kernel_modules"), " ".join(made) or "none"))
    else:
        print("gpusim-boot: boot %d: no NVIDIA kernel module loaded" % state["boot"]["count"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
