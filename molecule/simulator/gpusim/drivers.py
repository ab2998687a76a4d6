"""ubuntu-drivers (ubuntu-drivers-common) for the simulated host.

Formats from public captures of the real tool:
  `ubuntu-drivers devices`:
    == /sys/devices/pci0000:00/0000:00:03.0 ==
    modalias : pci:v000010DEd000027B8sv000010DEsd000016EEbc03sc02i00
    vendor   : NVIDIA Corporation
    model    : AD104GL [L4]
    driver   : nvidia-driver-580-server-open - distro non-free
    driver   : nvidia-driver-595-open - distro non-free recommended
    ...
    driver   : xserver-xorg-video-nouveau - distro free builtin
  (driver lines come in no particular order — the tool iterates a dict; the nouveau line is last)
  `ubuntu-drivers list --gpgpu`:
    nvidia-driver-535-server-open, (kernel modules provided by linux-modules-nvidia-535-server-open-generic-hwe-22.04)
    nvidia-driver-535-open, (kernel modules provided by linux-modules-nvidia-535-open-generic-hwe-22.04)
    nvidia-driver-535-server, (...)
    nvidia-driver-535, (...)
    <empty line between branches>

Candidates: every branch in state["repo_branches"] that is >= the GPU model's min_branch, in the four
flavours (desktop, -open, -server, -server-open). Recommended: the newest branch; `-open` when the GPU
needs the open modules (Blackwell), else the proprietary flavour. state["ubuntu_drivers"]["recommended"]
(a package name) overrides that, to reproduce a tool that recommends the wrong flavour (a real
capture: a Blackwell RTX 5070 Ti got `nvidia-driver-580 ... recommended`, the proprietary one, which
then gives `No devices were found`). state["ubuntu_drivers"]["kernel_flavour"] is the suffix of the
linux-modules packages (default "generic", Ubuntu 24.04; "generic-hwe-22.04" on a 22.04 HWE kernel).
"""
import random
import subprocess
import sys

from . import catalogue
from . import state as st

FLAVOURS = ("", "-open", "-server", "-server-open")


def _nvidia_gpus(state):
    return [g for g in state["gpus"]]


def candidates(state, model):
    branches = sorted({int(b) for b in state.get("repo_branches", [])}, reverse=True)
    return [b for b in branches if b >= int(model["min_branch"])]


def recommended(state, model):
    override = (state.get("ubuntu_drivers") or {}).get("recommended")
    if override:
        return override
    bs = candidates(state, model)
    if not bs:
        return None
    return "nvidia-driver-%d%s" % (bs[0], "-open" if model["needs_open_modules"] else "")


def sysfs_path(bus_id):
    dom, bus, devfn = bus_id.lower().split(":")
    dom = dom[-4:]
    b = int(bus, 16)
    if b == 0:
        return "/sys/devices/pci%s:00/%s:00:%s" % (dom, dom, devfn)
    root = "%02x" % max(b - 1, 0)
    return "/sys/devices/pci%s:%s/%s:%s:01.0/%s:%s:%s" % (dom, root, dom, root, dom, bus, devfn)


def modalias(model):
    cls = model.get("pci_class", "0302")
    return "pci:v000010DEd0000%04Xsv0000%04Xsd0000%04Xbc%ssc%si00" % (
        model["pci_device_id"], model.get("pci_subsystem_vendor", 0x10DE), model["pci_subsystem_id"],
        cls[:2].upper(), cls[2:].upper())


def devices_text(state):
    out = []
    for gpu in _nvidia_gpus(state):
        m = catalogue.get(gpu["model"])
        alias = modalias(m)
        rec = recommended(state, m)
        pkgs = ["nvidia-driver-%d%s" % (b, f) for b in candidates(state, m) for f in FLAVOURS]
        random.Random(alias).shuffle(pkgs)
        out.append("== %s ==" % sysfs_path(gpu["pci_bus_id"]))
        out.append("modalias : %s" % alias)
        out.append("vendor   : NVIDIA Corporation")
        out.append("model    : %s" % m["pci_name"])
        for p in pkgs:
            out.append("driver   : %s - distro non-free%s" % (p, " recommended" if p == rec else ""))
        out.append("driver   : xserver-xorg-video-nouveau - distro free builtin")
        out.append("")
    return "\n".join(out) + ("\n" if out else "")


def list_text(state, gpgpu):
    flavour = (state.get("ubuntu_drivers") or {}).get("kernel_flavour", "generic")
    branches = set()
    for gpu in _nvidia_gpus(state):
        branches.update(candidates(state, catalogue.get(gpu["model"])))
    groups = []
    order = ("-server-open", "-open", "-server", "") if gpgpu else ("-open", "")
    for b in sorted(branches, reverse=True):
        lines = []
        for f in order:
            lines.append("nvidia-driver-%d%s, (kernel modules provided by linux-modules-nvidia-%d%s-%s)" % (
                b, f, b, f, flavour))
        groups.append("\n".join(lines))
    return "\n\n".join(groups) + ("\n" if groups else "")


USAGE = """Usage: ubuntu-drivers [OPTIONS] COMMAND [ARGS]...

Options:
  --gpgpu                 gpgpu drivers
  --free-only             Only consider free packages
  --package-list PATH     Create file with list of installed packages (in
                          install mode)
  --no-oem                Do not include OEM enablement packages (these
                          enable an external archive)
  --kernel TEXT           The kernel to use (e.g. linux-image-4.15.0-40-generic)
  --recommended           Only show the recommended driver packages
  --include-dkms          Also consider DKMS packages
  --help                  Show this message and exit.

Commands:
  autoinstall  Deprecated, please use "install" instead
  debug        Print all available information and debug data about...
  devices      Show all devices which need drivers, and which packages...
  install      Install drivers [<driver>[:<version>][,<driver>[:<version>]]]
  list         Show all driver packages which apply to the current system.
  list-oem     Show all OEM enablement packages which apply to this system
"""


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    gpgpu = "--gpgpu" in argv
    recommended_only = "--recommended" in argv
    args = [a for a in argv if not a.startswith("--")]
    if not args or "--help" in argv:
        sys.stdout.write(USAGE)
        return 0 if "--help" in argv else 2
    state = st.load()
    cmd = args[0]
    if cmd == "devices":
        sys.stdout.write(devices_text(state))
        return 0
    if cmd == "list":
        if recommended_only:
            recs = sorted({recommended(state, catalogue.get(g["model"])) for g in state["gpus"]} - {None})
            if gpgpu:
                recs = [r.replace("-open", "-server-open") if r.endswith("-open") else r + "-server" for r in recs]
            sys.stdout.write("".join(r + "\n" for r in recs))
        else:
            sys.stdout.write(list_text(state, gpgpu))
        return 0
    if cmd in ("install", "autoinstall"):
        # ubuntu-drivers install [--gpgpu] [nvidia:580-server]: apt-get install the metapackage
        if len(args) > 1:
            spec = args[1].split(",")[0]
            pkg = "nvidia-driver-" + spec.split(":", 1)[1] if spec.startswith("nvidia:") else spec
        else:
            recs = [recommended(state, catalogue.get(g["model"])) for g in state["gpus"]]
            recs = [r for r in recs if r]
            if not recs:
                return 0
            pkg = recs[0]
            if gpgpu:
                pkg = pkg.replace("-open", "-server-open") if pkg.endswith("-open") else pkg + "-server"
        return subprocess.call(["apt-get", "install", "-y", pkg])
    sys.stderr.write("Usage: ubuntu-drivers [OPTIONS] COMMAND [ARGS]...\nTry 'ubuntu-drivers --help' for help.\n\n"
                     "Error: No such command '%s'.\n" % cmd)
    return 2


if __name__ == "__main__":
    sys.exit(main())
