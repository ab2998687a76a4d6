"""lspci (pciutils) for the simulated host: the state's GPUs plus a few ordinary host devices.

Line formats as pciutils prints them, e.g. (public captures):
  `lspci -nn`: `05:00.0 3D controller [0302]: NVIDIA Corporation GB202GL [RTX PRO 6000 Blackwell Server Edition] [10de:2bb5] (rev a1)`
  `lspci -D`:  `0000:1b:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)`
  `lspci -mm -D`: `0000:04:00.0 "3D controller" "NVIDIA Corporation" "GH100 [H100 SXM5 80GB]" -ra1 -p00 "NVIDIA Corporation" "Device 16c1"`
  `lspci -nn` host side: `0000:02:00.0 VGA compatible controller [0300]: ASPEED Technology, Inc. ASPEED Graphics Family [1a03:2000] (rev 52)`
Options: -n, -nn, -D, -d [vendor]:[device][:class], -s [[[domain]:]bus]:[slot][.[func]], -k, -mm, -v (short).
The host devices are there so that a parser must filter on vendor 10de (one of them is a VGA controller).
"""
import sys

from . import catalogue
from . import state as st

CLASS_NAMES = {
    "0600": "Host bridge", "0601": "ISA bridge", "0604": "PCI bridge", "0300": "VGA compatible controller",
    "0302": "3D controller", "0200": "Ethernet controller", "0108": "Non-Volatile memory controller",
    "0106": "SATA controller", "0680": "Bridge",
}
VENDORS = {"8086": "Intel Corporation", "1a03": "ASPEED Technology, Inc.", "10de": "NVIDIA Corporation",
           "144d": "Samsung Electronics Co Ltd", "1458": "Gigabyte Technology Co., Ltd"}

# An HGX H100/H200 board's NVSwitch (gen3) as real `lspci -nn` prints it (docs/research/hgx-fabric-manager.md
# Q5): "bd:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] (rev a1)", subsystem
# 10de:1796. The nvidia module drives it on a real host; the simulator names no driver for it.
NVSWITCH = {"class": "0680", "vendor": "10de", "device": "22a3", "name": "GH100 [H100 NVSwitch]", "rev": "a1",
            "svendor": "10de", "sdevice": "1796"}

# (domain, bus, dev, fn, class, vendor, device, name, rev, subsystem vendor, subsystem device, driver)
HOST_DEVICES = [
    ("0000", "00", "00", "0", "0600", "8086", "2020", "Sky Lake-E DMI3 Registers", "04", "8086", "0000", None),
    ("0000", "00", "1f", "0", "0601", "8086", "a1cb", "C620 Series Chipset Family LPC Controller", "09",
     "8086", "7270", None),
    ("0000", "00", "17", "0", "0106", "8086", "a182",
     "C620 Series Chipset Family SATA Controller [AHCI mode]", "09", "8086", "7270", "ahci"),
    ("0000", "01", "00", "0", "0604", "1a03", "1150", "AST1150 PCI-to-PCI Bridge", "06", "1a03", "1150", None),
    ("0000", "02", "00", "0", "0300", "1a03", "2000", "ASPEED Graphics Family", "52", "1a03", "2000", "ast"),
    ("0000", "03", "00", "0", "0200", "8086", "1572", "Ethernet Controller X710 for 10GbE SFP+", "02",
     "8086", "0000", "i40e"),
    ("0000", "04", "00", "0", "0108", "144d", "a80a", "NVMe SSD Controller PM9A1/PM9A3/980PRO", None,
     "144d", "a801", "nvme"),
]


def devices(state):
    drv = state["driver"]
    loaded = drv.get("loaded") or {}
    installed = drv.get("installed")
    out = []
    gpu_slots = set()
    for gpu in state["gpus"]:
        m = catalogue.get(gpu["model"])
        dom, bus, devfn = gpu["pci_bus_id"].lower().split(":")
        dev, fn = devfn.split(".")
        dom = dom[-4:]
        gpu_slots.add((dom, bus, dev, fn))
        driven = bool(loaded) and not (m["needs_open_modules"] and loaded.get("kernel_modules") != "open")
        modules = ["nvidiafb", "nouveau"] + (["nvidia_drm", "nvidia"] if installed else [])
        out.append({"domain": dom, "bus": bus, "dev": dev, "fn": fn, "class": m.get("pci_class", "0302"),
                    "vendor": "10de", "device": "%04x" % m["pci_device_id"], "name": m["pci_name"],
                    "rev": m.get("pci_rev", "a1"), "svendor": "%04x" % m.get("pci_subsystem_vendor", 0x10DE),
                    "sdevice": "%04x" % m["pci_subsystem_id"],
                    "sname": None, "driver": "nvidia" if driven else None, "modules": modules})
    for switch in state.get("nvswitches") or []:
        dom, bus, devfn = switch["pci_bus_id"].lower().split(":")
        dev, fn = devfn.split(".")
        gpu_slots.add((dom[-4:], bus, dev, fn))
        generation = catalogue.NVSWITCH_GENERATIONS[switch.get("generation") or "gen3"]
        out.append(dict(NVSWITCH, device=generation["device"], name=generation["name"], sdevice=generation["sdevice"],
                        domain=dom[-4:], bus=bus, dev=dev, fn=fn, sname=generation.get("sname"), driver=None,
                        modules=[]))
    for (dom, bus, dev, fn, cls, ven, did, name, rev, sv, sd, driver) in HOST_DEVICES:
        if (dom, bus, dev, fn) in gpu_slots:
            continue
        out.append({"domain": dom, "bus": bus, "dev": dev, "fn": fn, "class": cls, "vendor": ven, "device": did,
                    "name": name, "rev": rev, "svendor": sv, "sdevice": sd, "sname": None, "driver": driver,
                    "modules": [driver] if driver else []})
    out.sort(key=lambda d: (d["domain"], int(d["bus"], 16), int(d["dev"], 16), int(d["fn"], 16)))
    return out


def _slot(d, with_domain):
    s = "%s:%s.%s" % (d["bus"], d["dev"], d["fn"])
    return ("%s:%s" % (d["domain"], s)) if with_domain else s


def _match_d(d, spec):
    parts = spec.split(":")
    if len(parts) < 2 or len(parts) > 4:
        raise ValueError(spec)
    ven, dev = parts[0].lower(), parts[1].lower()
    cls = parts[2].lower() if len(parts) > 2 else ""
    if ven and int(ven, 16) != int(d["vendor"], 16):
        return False
    if dev and int(dev, 16) != int(d["device"], 16):
        return False
    if cls and int(cls, 16) != int(d["class"], 16):
        return False
    return True


def _match_s(d, spec):
    spec = spec.lower()
    func = None
    if "." in spec:
        spec, func = spec.split(".", 1)
    parts = spec.split(":")
    dom = bus = slot = ""
    if len(parts) == 1:
        slot = parts[0]
    elif len(parts) == 2:
        bus, slot = parts
    elif len(parts) == 3:
        dom, bus, slot = parts
    else:
        raise ValueError(spec)
    for want, have in ((dom, d["domain"]), (bus, d["bus"]), (slot, d["dev"]), (func, d["fn"])):
        if want and int(want, 16) != int(have, 16):
            return False
    return True


def _line(d, numeric, with_domain):
    cls_name = CLASS_NAMES.get(d["class"], "Class %s" % d["class"])
    rev = " (rev %s)" % d["rev"] if d["rev"] else ""
    slot = _slot(d, with_domain)
    if numeric == 1:
        return "%s %s: %s:%s%s" % (slot, d["class"], d["vendor"], d["device"], rev)
    vendor = VENDORS.get(d["vendor"], "Device %s" % d["vendor"])
    if numeric == 2:
        return "%s %s [%s]: %s %s [%s:%s]%s" % (slot, cls_name, d["class"], vendor, d["name"], d["vendor"],
                                               d["device"], rev)
    return "%s %s: %s %s%s" % (slot, cls_name, vendor, d["name"], rev)


def _mm_line(d, numeric, with_domain):
    cls_name = CLASS_NAMES.get(d["class"], "Class %s" % d["class"])
    vendor = VENDORS.get(d["vendor"], "Device %s" % d["vendor"])
    svendor = VENDORS.get(d["svendor"], "Device %s" % d["svendor"])
    sname = d.get("sname") or "Device %s" % d["sdevice"]
    if numeric == 2:
        fields = ["%s [%s]" % (cls_name, d["class"]), "%s [%s]" % (vendor, d["vendor"]),
                  "%s [%s]" % (d["name"], d["device"]), "%s [%s]" % (svendor, d["svendor"]),
                  "%s [%s]" % (d.get("sname") or "Device", d["sdevice"])]
    elif numeric == 1:
        fields = [d["class"], d["vendor"], d["device"], d["svendor"], d["sdevice"]]
    else:
        fields = [cls_name, vendor, d["name"], svendor, sname]
    rev = " -r%s" % d["rev"] if d["rev"] else ""
    return '%s "%s" "%s" "%s"%s -p00 "%s" "%s"' % ((_slot(d, with_domain),) + tuple(fields[:3]) + (rev,) +
                                                   tuple(fields[3:]))


def render(state, argv):
    numeric = 0
    with_domain = False
    kernel = False
    mm = 0
    verbose = 0
    dspec = sspec = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-d", "-s"):
            if i + 1 >= len(argv):
                return "", "lspci: option requires an argument -- '%s'\n" % a[1], 2
            if a == "-d":
                dspec = argv[i + 1]
            else:
                sspec = argv[i + 1]
            i += 2
            continue
        if a.startswith("-d") and len(a) > 2:
            dspec = a[2:]
        elif a.startswith("-s") and len(a) > 2:
            sspec = a[2:]
        elif a.startswith("-") and len(a) > 1 and not a.startswith("--"):
            for ch in a[1:]:
                if ch == "n":
                    numeric += 1
                elif ch == "D":
                    with_domain = True
                elif ch == "k":
                    kernel = True
                elif ch == "m":
                    mm += 1
                elif ch == "v":
                    verbose += 1
                else:
                    return "", "lspci: invalid option -- '%s'\nUsage: lspci [<switches>]\n" % ch, 2
        else:
            return "", "lspci: Unknown option: %s\n" % a, 2
        i += 1
    out = []
    try:
        devs = [d for d in devices(state) if (dspec is None or _match_d(d, dspec)) and
                (sspec is None or _match_s(d, sspec))]
    except ValueError:
        return "", "lspci: -%s: Invalid %s\n" % ("d" if dspec else "s", "ID" if dspec else "slot number"), 2
    for d in devs:
        if mm:
            out.append(_mm_line(d, min(numeric, 2), with_domain))
            continue
        out.append(_line(d, min(numeric, 2), with_domain))
        if kernel or verbose:
            if d["vendor"] == "10de" or verbose:
                svendor = VENDORS.get(d["svendor"], "Device %s" % d["svendor"])
                sname = d.get("sname") or "Device"
                if numeric == 1:   # `lspci -nk`: `\tSubsystem: 10de:1796`
                    out.append("\tSubsystem: %s:%s" % (d["svendor"], d["sdevice"]))
                elif numeric == 2:
                    out.append("\tSubsystem: %s %s [%s:%s]" % (svendor, sname, d["svendor"], d["sdevice"]))
                else:
                    out.append("\tSubsystem: %s %s" % (svendor, d.get("sname") or "Device %s" % d["sdevice"]))
            if d["driver"]:
                out.append("\tKernel driver in use: %s" % d["driver"])
            if d["modules"]:
                out.append("\tKernel modules: %s" % ", ".join(d["modules"]))
            if verbose:
                out.append("")
    return "".join(line + "\n" for line in out), "", 0


def main(argv=None):
    state = st.load()
    text, err, rc = render(state, sys.argv[1:] if argv is None else argv)
    sys.stdout.write(text)
    sys.stderr.write(err)
    return rc


if __name__ == "__main__":
    sys.exit(main())
