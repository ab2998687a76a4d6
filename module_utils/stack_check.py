# -*- coding: utf-8 -*-
"""Layered diagnosis of a GPU serving host: which layer broke, the evidence, and the fix.

Pure stdlib, no Ansible imports. The module `gpu_stack_check` captures what the host says
(commands and files, through an injected `io` object, read-only) with capture(); evaluate()
turns the captures into checks, layers and the first failing layer. Every check_* function is
pure: captured text in, one check result out, so each is unit-tested on real outputs.

A check result is a dict:
    name, layer, status (ok|warn|fail|skipped), summary, remedy (None when nothing to do),
    evidence {command, rc, lines} (the command run and the output lines that decided), data.

Layers, bottom up (domain.md §1, §2: the diagnosis order nvidia-smi → docker info → docker run):
    driver          GPU on the PCI bus, kernel module, device nodes, NVML / version match
    fabric          on NVSwitch (HGX) hosts: the fabric manager installed at the driver's version, running,
                    and every GPU's fabric set up (State Completed, Status Success)
    persistence     persistence mode
    docker          the docker daemon is up
    toolkit         NVIDIA Container Toolkit packages and nvidia-ctk
    runtime_config  the nvidia runtime registered with docker
    cdi             the CDI spec: present, parseable, fresh, not shadowed, a version the engine reads,
                    devices listed
    container       image/container: a container sees the GPUs (--gpus, and CDI where supported)
    health          zombie GPU memory, throttling, Xid errors
"""
import json
import os
import re
import shlex
import stat as stat_mod

try:
    from ansible.module_utils import error_catalogue as catalogue
    from ansible.module_utils.gpu_facts import build_facts, capture as capture_gpu
    from ansible.module_utils.host_parse import HostParseError, parse_proc_version
    from ansible.module_utils.nvsmi_parse import ParseError, classify_error, clean_text, parse_list
    from ansible.module_utils.cdi_spec import (
        CDI_DIRS, FEATURE_NO_ADDITIONAL_GIDS, CdiSpecError, engine_first_reading, engine_reads, parse_cdi_list,
        read_spec, shadowing, staleness, too_new_for, too_new_message)
    from ansible.module_utils.daemon_json import DaemonJsonError, engine_accepts_bom, parse as parse_daemon_json
    from ansible.module_utils.secure_boot import (boot_facts, capture as capture_boot, module_signature_events,
                                                  next_boot_problem)
    from ansible.module_utils.containerd_config import runtime_binaries
    from ansible.module_utils.dev_char import missing as dev_char_missing, wanted_links as dev_char_links
    from ansible.module_utils import gpus_path as gpus_path_mod
    from ansible.module_utils.secure_boot import installed_packages
    from ansible.module_utils.driver_choice import upstream_version
    from ansible.module_utils.mig_apply import DISABLED as MIG_DISABLED, LayoutError, instance_names, normalise_layout
    from ansible.module_utils.mig_parse import parse_lgi
except ImportError:  # unit tests put module_utils/ on sys.path
    import error_catalogue as catalogue
    from gpu_facts import build_facts, capture as capture_gpu
    from host_parse import HostParseError, parse_proc_version
    from nvsmi_parse import ParseError, classify_error, clean_text, parse_list
    from cdi_spec import (CDI_DIRS, FEATURE_NO_ADDITIONAL_GIDS, CdiSpecError, engine_first_reading, engine_reads,
                          parse_cdi_list, read_spec, shadowing, staleness, too_new_for, too_new_message)
    from daemon_json import DaemonJsonError, engine_accepts_bom, parse as parse_daemon_json
    from secure_boot import boot_facts, capture as capture_boot, module_signature_events, next_boot_problem
    from containerd_config import runtime_binaries
    from dev_char import missing as dev_char_missing, wanted_links as dev_char_links
    import gpus_path as gpus_path_mod
    from secure_boot import installed_packages
    from driver_choice import upstream_version
    from mig_apply import DISABLED as MIG_DISABLED, LayoutError, instance_names, normalise_layout
    from mig_parse import parse_lgi

LAYERS = ("hardware", "driver", "fabric", "persistence", "docker", "toolkit", "runtime_config", "cdi", "container",
          "health")
LAYER_TITLES = {
    "hardware": "hardware (each GPU on the bus)",
    "driver": "driver", "fabric": "NVSwitch fabric", "persistence": "persistence mode", "docker": "docker engine",
    "toolkit": "toolkit packages", "runtime_config": "toolkit configuration", "cdi": "CDI spec",
    "container": "image/container", "health": "GPU health",
}
DEFAULT_REQUIRED_LAYERS = tuple(l for l in LAYERS if l != "health")
STATUSES = ("ok", "warn", "fail", "skipped")

DEFAULT_CHECK_IMAGE = "nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04"
# NVIDIA's CUDA sample image (the vectorAdd the GPU Operator's validator also runs): nvidia-smi needs no
# CUDA, so only a CUDA program proves that CUDA initialises in a container (nvidia-uvm, the driver's CUDA).
DEFAULT_CUDA_PROBE_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
DEFAULT_CUDA_PROBE_COMMAND = ("/cuda-samples/vectorAdd",)
DEFAULT_TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base",
                            "libnvidia-container-tools", "libnvidia-container1")
DEFAULT_CDI_SPEC = "/etc/cdi/nvidia.yaml"
DEFAULT_DOCKER_CONFIG = "/etc/docker/daemon.json"
DEFAULT_PROC_VERSION = "/proc/driver/nvidia/version"
REFRESH_ENV_FILE = "/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"
# Idle GPUs always report gpu_idle; it is not throttling.
BENIGN_CLOCK_REASONS = ("gpu_idle",)
TIMEOUT_RC = 124
MAX_EVIDENCE_LINES = 20
MAX_LINE = 300

NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255

REMEDY_INSTALL_DRIVER = ("install the driver: site.yml --tags driver (role nvidia_driver), "
                         "then reboot")
REMEDY_LOAD_MODULE = ("load the module: `modprobe nvidia` (or reboot); if it refuses, "
                      "`dmesg | grep -i nvrm` says why (no module built for this kernel, Secure Boot)")
REMEDY_RELOAD = ("reboot, or stop every GPU process and reload the modules: "
                 "`systemctl stop nvidia-persistenced; rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia; "
                 "modprobe nvidia; systemctl start nvidia-persistenced`")
REMEDY_NODES = ("create them: `nvidia-ctk system create-device-nodes --control-devices "
                "--load-kernel-modules` (or `nvidia-modprobe -u -c=0`), or reboot")
REMEDY_PERSISTENCE = ("`systemctl enable --now nvidia-persistenced` (role nvidia_persistence, "
                      "site.yml --tags persistence); `nvidia-smi -pm 1` does not survive a reboot")
REMEDY_INSTALL_DOCKER = "install docker: site.yml --tags docker (role docker)"
REMEDY_START_DOCKER = ("start it: `systemctl enable --now docker`; `journalctl -u docker -b` "
                       "says why it stopped")
REMEDY_CONFIGURE = "run `nvidia-ctk runtime configure --runtime=docker` and restart docker"
REMEDY_INSTALL_TOOLKIT = ("install the NVIDIA Container Toolkit: site.yml --tags toolkit "
                          "(role nvidia_container_toolkit)")

# The engine whose containers the host serves: docker (site.yml's docker layer) or containerd (a
# Kubernetes node's own, seed 003). On a containerd node the layer `docker` is the engine layer and the
# container checks go through `ctr run` with the nvidia runtime as runc binary, which is what a
# RuntimeClass `nvidia` pod gets.
ENGINES = ("docker", "containerd")
DEFAULT_RUNTIME_BINARY = "/usr/bin/nvidia-container-runtime"
DEFAULT_CONTAINERD_NAMESPACE = "default"
ENGINE_WORDS = {
    "docker": {
        "configure": REMEDY_CONFIGURE, "restart": "restart docker",
        "load": "`docker load -i <tarball>`", "gpus": "--gpus all", "run": "docker run --rm",
    },
    "containerd": {
        "configure": "run `nvidia-ctk runtime configure --runtime=containerd` (site.yml --tags toolkit with "
                     "nvidia_container_toolkit_runtimes: [containerd]) and restart containerd",
        "restart": "restart containerd",
        "load": "`ctr images import <tarball>`", "gpus": "nvidia-runtime", "run": "ctr run --rm",
    },
}
ENGINE_TITLES = {"containerd": {"docker": "containerd engine", "runtime_config": "toolkit configuration (containerd)"}}


# ---------------------------------------------------------------------------------------------
# results


def _clip(line):
    line = line.rstrip("\r\n")
    return line if len(line) <= MAX_LINE else line[:MAX_LINE - 3] + "..."


def evidence(command=None, lines=(), rc=None):
    """The command that was run (a string) and the output lines that decided."""
    if isinstance(command, (list, tuple)):
        command = " ".join(shlex.quote(str(part)) for part in command)
    kept = [_clip(l) for l in lines if l is not None and str(l).strip()][:MAX_EVIDENCE_LINES]
    return {"command": command, "rc": rc, "lines": kept}


def result(name, layer, status, summary, remedy=None, ev=None, data=None):
    if status not in STATUSES:
        raise ValueError("bad status %r" % status)
    if layer not in LAYERS:
        raise ValueError("bad layer %r" % layer)
    return {"name": name, "layer": layer, "status": status, "summary": summary,
            "remedy": remedy if status in ("warn", "fail") else None,
            "evidence": ev or evidence(), "data": data or {}}


def _lines(text):
    return [l for l in clean_text(text or "").split("\n") if l.strip()]


def _grep(text, pattern, flags=re.I):
    regex = re.compile(pattern, flags)
    return [l.strip() for l in _lines(text) if regex.search(l)]


def _out(cap):
    """stdout + stderr of a captured command."""
    if not cap:
        return ""
    return (cap.get("stdout") or "") + "\n" + (cap.get("stderr") or "")


def _cmd(cap):
    return cap.get("argv") if cap else None


# ---------------------------------------------------------------------------------------------
# driver layer


def check_pci(facts, lspci_capture=None):
    """An NVIDIA GPU on the PCI bus (lspci, vendor 10de; sysfs when lspci is absent)."""
    devices = facts.get("pci_devices") or []
    source = facts.get("pci_source")
    if source == "lspci":
        ev = evidence(_cmd(lspci_capture), _grep((lspci_capture or {}).get("stdout"), r"\[10de:"),
                      (lspci_capture or {}).get("rc"))
    elif source == "sysfs":
        ev = evidence("cat /sys/bus/pci/devices/*/{vendor,device,class}",
                      ["%s %s" % (d.get("pci_address"), d.get("pci_id")) for d in devices])
    else:
        ev = evidence("lspci -nn -D", ["no lspci and no /sys/bus/pci/devices"])
    data = {"gpus": [{"pci_address": d.get("pci_address"), "pci_id": d.get("pci_id"),
                      "product": d.get("product"), "architecture": d.get("architecture")}
                     for d in devices]}
    if devices:
        names = sorted(set(d.get("product") or d.get("pci_id") or "NVIDIA GPU" for d in devices))
        return result("pci", "driver", "ok", "%d NVIDIA GPU(s) on the PCI bus: %s"
                      % (len(devices), ", ".join(names)), ev=ev, data=data)
    if source is None:
        if facts.get("gpu_count"):
            return result("pci", "driver", "skipped", "the PCI bus could not be read (no lspci, no sysfs); "
                          "nvidia-smi lists %d GPU(s)" % facts["gpu_count"], ev=ev, data=data)
        return result("pci", "driver", "warn", "the PCI bus could not be read (no lspci, no sysfs)",
                      remedy="install pciutils (`apt-get install pciutils`) so that the GPUs can be seen",
                      ev=ev, data=data)
    return result("pci", "driver", "fail", "no NVIDIA GPU on the PCI bus",
                  remedy="check the hardware: a VM needs the GPU passed through; `lspci -nn -d 10de:` "
                         "must list it before any driver can work", ev=ev, data=data)


# Xids that mean the GPU itself is gone or broken (NVIDIA's catalogue: reset or reboot, RMA if it recurs);
# the others (application faults, corrected ECC) stay with the health layer's Xid check.
HARDWARE_XIDS = (48, 61, 62, 64, 74, 79, 95, 119, 120)
# "... for GPU0000:CB:00.0: Unknown Error" (older), "... for GPU1: 0000:34:00.0: Unknown Error" (610).
_LOST = re.compile(r"Unable to determine the device handle for GPU\s*(?:\d+:\s*)?"
                   r"([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?:\s*([^\n]*?)\.?\s*(?:\n|$)", re.I)


def _bus(address):
    """'00000000:2B:00.0', '0000:2b:00', '2b:00.0' -> '2b:00' (bus:device) for matching."""
    parts = (address or "").lower().split(":")
    return ":".join(p.split(".")[0] for p in parts[-2:]) if len(parts) >= 2 else (address or "").lower()


def check_hardware(facts, xid_events=(), smi_text=""):
    """Each GPU on the bus (index by PCI order, UUID where nvidia-smi still sees it, bus id): lost
    (Xid 79, 'GPU is lost'), broken (a hardware Xid: reset or reboot) or healthy, and MIG mode."""
    pci = sorted(facts.get("pci_devices") or [], key=lambda d: _bus(d.get("pci_address")))
    smi = dict((_bus(g.get("pci_bus_id")), g) for g in facts.get("gpus") or [] if g.get("pci_bus_id"))
    lost = dict((_bus(m.group(1)), m.group(2)) for m in _LOST.finditer(smi_text or ""))
    xids = {}
    for event in xid_events or []:
        xids.setdefault(_bus(event["pci"]), []).append(event["code"])
    buses = [_bus(d.get("pci_address")) for d in pci] or sorted(smi)
    addresses = dict((_bus(d.get("pci_address")), d.get("pci_address")) for d in pci)
    for bus in sorted(set(lost) | set(xids)):
        if bus not in buses:
            buses.append(bus)
    gpus, bad, warned = [], [], []
    for index, bus in enumerate(buses):
        fact = smi.get(bus) or {}
        codes = sorted(set(xids.get(bus, [])))
        hard = [c for c in codes if c in HARDWARE_XIDS]
        entry = {"index": fact.get("index", index), "bus_id": fact.get("pci_bus_id") or addresses.get(bus) or bus,
                 "uuid": fact.get("uuid"), "name": fact.get("name"), "xids": codes, "mig_mode": fact.get("mig_mode")}
        label = "GPU %s (%s%s)" % (entry["index"], entry["bus_id"], ", %s" % entry["uuid"] if entry["uuid"] else "")
        if bus in lost or 79 in codes:
            entry["state"] = "lost"
            bad.append("%s fell off the bus (%s)" % (label, "Xid 79" if 79 in codes else lost[bus] or "GPU is lost"))
        elif hard:
            entry["state"] = "faulty"
            bad.append("%s: %s" % (label, "; ".join("Xid %d %s" % (c, XID_CATALOGUE[c][0]) for c in hard)))
        elif fact.get("mig_mode") is True:
            entry["state"] = "mig"
            warned.append("%s has MIG mode on: a container given the whole GPU gets no usable device; give "
                          "instances MIG devices (nvidia.com/gpu=%s:<n>) or turn MIG off (`nvidia-smi -i %s -mig 0`)"
                          % (label, entry["index"], entry["index"]))
        else:
            entry["state"] = "healthy"
        gpus.append(entry)
    healthy = ["GPU %s" % g["index"] for g in gpus if g["state"] in ("healthy", "mig")]
    data = {"gpus": gpus}
    lines = [m.group(0).strip() for m in _LOST.finditer(smi_text or "")] + \
        ["%s %s: %s%s" % (g["index"], g["bus_id"], g["state"], " (Xid %s)" % ", ".join(map(str, g["xids"]))
                          if g["xids"] else "") for g in gpus]
    ev = evidence("lspci; nvidia-smi; kernel log Xids", lines)
    tail = "; healthy: %s" % ", ".join(healthy) if healthy else ""
    if bad:
        worst = "REBOOT" if any(g["state"] == "lost" for g in gpus) else "RESET_GPU"
        return result("hardware", "hardware", "fail", "; ".join(bad) + tail,
                      remedy="%s: %s" % (", ".join("GPU %s" % g["index"] for g in gpus
                                                   if g["state"] in ("lost", "faulty")), XID_ACTIONS[worst]),
                      ev=ev, data=data)
    if not gpus:
        return result("hardware", "hardware", "skipped", "no NVIDIA GPU seen (driver layer)", ev=ev, data=data)
    if warned:
        return result("hardware", "hardware", "warn", "; ".join(warned), remedy=warned[0].split(": ", 1)[-1],
                      ev=ev, data=data)
    return result("hardware", "hardware", "ok", "%d GPU(s) healthy: no lost GPU and no hardware Xid since boot (%s)"
                  % (len(gpus), ", ".join("GPU %s %s" % (g["index"], g["bus_id"]) for g in gpus)), ev=ev, data=data)


def check_kernel_module(proc_version_text, facts, path=DEFAULT_PROC_VERSION):
    """The kernel module is loaded, and which version/flavour (/proc/driver/nvidia/version)."""
    lines = _grep(proc_version_text, r"^\s*NVRM version:")
    ev = evidence("cat %s" % path, lines or (["%s: no such file" % path] if proc_version_text is None
                                            else _lines(proc_version_text)[:3]))
    kernel = None
    if proc_version_text:
        try:
            kernel = parse_proc_version(proc_version_text)
        except HostParseError:
            kernel = None
    if not kernel:
        if proc_version_text is not None:
            return result("kernel_module", "driver", "fail", "%s does not name an NVIDIA kernel module" % path,
                          remedy=REMEDY_RELOAD, ev=ev)
        if facts.get("state") == "no_gpu":
            return result("kernel_module", "driver", "skipped", "no NVIDIA GPU, no module expected", ev=ev)
        installed = bool(facts.get("nvidia_smi_path"))
        summary = "the NVIDIA kernel module is not loaded (no %s)" % path
        if not installed:
            summary += " and no driver userspace (nvidia-smi) is installed"
        return result("kernel_module", "driver", "fail", summary,
                      remedy=REMEDY_LOAD_MODULE if installed else REMEDY_INSTALL_DRIVER, ev=ev)
    data = {"version": kernel["version"], "flavor": kernel["flavor"], "arch": kernel["arch"]}
    needing = [d for d in facts.get("pci_devices") or [] if d.get("open_kernel_modules_required")]
    if needing and kernel["flavor"] != "open":
        return result("kernel_module", "driver", "fail",
                      "the loaded module %s is proprietary, but %s need the open kernel modules"
                      % (kernel["version"], ", ".join(sorted(set(d.get("product") or d.get("pci_id")
                                                               for d in needing)))),
                      remedy="install the -open driver flavour (nvidia_driver_flavor: open, "
                             "site.yml --tags driver) and reboot", ev=ev, data=data)
    return result("kernel_module", "driver", "ok", "NVIDIA %s kernel module %s loaded"
                  % ("open" if kernel["flavor"] == "open" else "proprietary", kernel["version"]),
                  ev=ev, data=data)


def uvm_major(proc_devices_text):
    """Major number of nvidia-uvm from /proc/devices ('511 nvidia-uvm'), or None."""
    for line in _lines(proc_devices_text):
        match = re.match(r"^\s*(\d+)\s+nvidia-uvm\s*$", line)
        if match:
            return int(match.group(1))
    return None


def _node_line(path, node):
    if node is None:
        return "%s: no such file" % path
    if node.get("kind") != "char":
        return "%s: %s, not a character device" % (path, node.get("kind"))
    return "crw %d, %d %s" % (node["major"], node["minor"], path)


def nodes_remedy(paths):
    """The command that creates these nodes: nvidia-ctk makes only the control nodes (nvidiactl, nvidia-uvm,
    nvidia-modeset); a GPU's /dev/nvidiaN comes from nvidia-modprobe -c=N (or a reboot)."""
    gpu_minors = sorted(int(p[len("/dev/nvidia"):]) for p in paths if re.match(r"^/dev/nvidia\d+$", p))
    parts = []
    if gpu_minors:
        parts.append("`%s`" % "; ".join("nvidia-modprobe -c=%d" % m for m in gpu_minors))
    if any(not re.match(r"^/dev/nvidia\d+$", p) for p in paths):
        parts.append(REMEDY_NODES[len("create them: "):].rsplit(", or reboot", 1)[0])
    return "create them: %s, or reboot" % " and ".join(parts)


def check_device_nodes(nodes, facts, proc_devices_text=None, module_loaded=True):
    """/dev/nvidia0..N (c 195 N), /dev/nvidiactl (c 195 255), /dev/nvidia-uvm (+ -tools).

    nodes: {path: None | {"kind": "char"|"block"|"file"|..., "major": int, "minor": int}} for the
    paths that were looked at (every /dev/nvidia* plus the expected ones).
    """
    if not module_loaded:
        return result("device_nodes", "driver", "skipped", "no kernel module loaded: no device nodes expected",
                      ev=evidence("stat /dev/nvidia*", [_node_line(p, nodes[p]) for p in sorted(nodes)]))
    minors = [g.get("minor_number") for g in facts.get("gpus") or []]
    if not minors or any(m is None for m in minors):
        count = facts.get("gpu_count") or len(facts.get("pci_devices") or [])
        minors = list(range(count))
    uvm = uvm_major(proc_devices_text)
    expected = [("/dev/nvidia%d" % m, NVIDIA_MAJOR, m, True) for m in sorted(minors)]
    # nvidia-uvm loads on the first CUDA use (nvidia-modprobe; `--gpus` containers load it), so its
    # nodes may be missing on a healthy host that ran nothing yet: a warning (CDI containers need it).
    expected += [("/dev/nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR, True),
                 ("/dev/nvidia-uvm", uvm, 0, False), ("/dev/nvidia-uvm-tools", uvm, 1, False)]
    missing, wrong, optional_missing = [], [], []
    for path, major, minor, required in expected:
        node = nodes.get(path)
        if node is None:
            (missing if required else optional_missing).append(path)
        elif node.get("kind") != "char" or (major is not None and node.get("major") != major) \
                or node.get("minor") != minor:
            wrong.append("%s is %s, expected c %s %d" % (
                path, ("c %d %d" % (node["major"], node["minor"])) if node.get("kind") == "char"
                else node.get("kind"), major if major is not None else "<nvidia-uvm>", minor))
    looked = sorted(set(list(nodes) + [e[0] for e in expected]))
    ev = evidence("stat /dev/nvidia*" + ("; grep nvidia-uvm /proc/devices" if proc_devices_text else ""),
                  [_node_line(p, nodes.get(p)) for p in looked]
                  + (["%d nvidia-uvm (/proc/devices)" % uvm] if uvm is not None else []))
    data = {"missing": missing + optional_missing, "wrong": wrong, "uvm_major": uvm}
    if missing or wrong:
        parts = []
        if missing:
            parts.append("missing %s" % ", ".join(missing))
        if wrong:
            parts.append("; ".join(wrong))
        remedy = nodes_remedy(missing + [w.split()[0] for w in wrong])
        if wrong:
            remedy = "remove the wrong node(s) (`rm %s`) and %s" % (" ".join(w.split()[0] for w in wrong), remedy)
        return result("device_nodes", "driver", "fail", "device nodes: " + "; ".join(parts),
                      remedy=remedy, ev=ev, data=data)
    if optional_missing:
        return result("device_nodes", "driver", "warn", "GPU and control nodes present; missing %s (made on the "
                      "first CUDA use; CDI containers need /dev/nvidia-uvm)" % ", ".join(optional_missing),
                      remedy=nodes_remedy(optional_missing), ev=ev, data=data)
    return result("device_nodes", "driver", "ok", "%d GPU node(s), nvidiactl and nvidia-uvm present"
                  % len(minors), ev=ev, data=data)


def _smi_evidence(captures):
    attempts = captures.get("smi") or []
    if not attempts:
        return evidence("nvidia-smi -q -x", ["nvidia-smi: not found"])
    first = attempts[0]
    if first["rc"] == 0 and "<nvidia_smi_log" in first["stdout"]:
        lines = _grep(first["stdout"], r"<(driver_version|cuda_version|attached_gpus)>")
        return evidence(first["argv"], lines, first["rc"])
    return evidence(first["argv"], _lines(_out(first))[:6], first["rc"])


def check_nvml(facts, captures):
    """nvidia-smi (NVML) works and the userspace library matches the kernel module."""
    ev = _smi_evidence(captures)
    state, message = facts.get("state"), facts.get("message") or ""
    data = {"state": state, "kernel": facts.get("driver_version_kernel"),
            "userspace": facts.get("driver_version_userspace"), "gpu_count": facts.get("gpu_count")}
    if state == "ok":
        warnings = [w for w in facts.get("warnings") or [] if "differs from userspace" in w
                    or "visible to nvidia-smi" in w or "needs driver branch" in w]
        summary = "NVML works: %d GPU(s), driver %s" % (facts.get("gpu_count") or 0,
                                                         facts.get("driver_version_userspace"))
        if warnings:
            return result("nvml", "driver", "warn", summary + "; " + "; ".join(warnings),
                          remedy=REMEDY_RELOAD if any("differs" in w for w in warnings)
                          else "compare `lspci -nn -d 10de:` with `nvidia-smi -L`", ev=ev, data=data)
        return result("nvml", "driver", "ok", summary, ev=ev, data=data)
    if state == "no_gpu":
        return result("nvml", "driver", "skipped", "no NVIDIA GPU and no nvidia-smi", ev=ev, data=data)
    if state == "version_mismatch":
        return result("nvml", "driver", "fail",
                      "NVML driver/library version mismatch: kernel module %s, userspace library %s "
                      "(driver upgraded without a reboot)" % (data["kernel"] or "unknown",
                                                              data["userspace"] or "unknown"),
                      remedy=REMEDY_RELOAD, ev=ev, data=data)
    if state == "driver_not_loaded":
        return result("nvml", "driver", "fail", message, remedy=REMEDY_LOAD_MODULE, ev=ev, data=data)
    if state == "no_driver":
        return result("nvml", "driver", "fail", message, remedy=REMEDY_INSTALL_DRIVER, ev=ev, data=data)
    remedy = REMEDY_RELOAD
    if "gpu is lost" in message.lower() or "lost a gpu" in message.lower():
        remedy = ("a GPU fell off the bus (Xid 79): drain the host and reboot it; check PCIe seating, power and "
                  "thermals (`dmesg | grep -i xid`); RMA if it recurs")
    elif "open kernel modules" in message:
        remedy = "install the -open driver flavour (site.yml --tags driver) and reboot"
    elif "timed out" in message:
        remedy = "a hung GPU or driver: read `dmesg | grep -i xid`, then reset the GPU or reboot"
    return result("nvml", "driver", "fail", message or "nvidia-smi failed", remedy=remedy, ev=ev, data=data)


def check_persistence(facts, captures, persistenced_active=None, persistenced_enabled=None):
    """Persistence mode on every GPU (without it the driver unloads when the GPU is idle)."""
    attempts = captures.get("smi") or []
    xml = attempts[0]["stdout"] if attempts and attempts[0]["rc"] == 0 else ""
    lines = _grep(xml, r"<persistence_mode>")
    if persistenced_active is not None:
        lines.append("systemctl is-active nvidia-persistenced: %s" % persistenced_active)
    if persistenced_enabled is not None:
        lines.append("systemctl is-enabled nvidia-persistenced: %s" % persistenced_enabled)
    ev = evidence(attempts[0]["argv"] if attempts else "nvidia-smi -q -x", lines,
                  attempts[0]["rc"] if attempts else None)
    gpus = facts.get("gpus") or []
    if facts.get("state") != "ok" or not gpus:
        return result("persistence", "persistence", "skipped", "nvidia-smi does not work (driver layer)", ev=ev)
    off = [g for g in gpus if g.get("persistence_mode") is False]
    unknown = [g for g in gpus if g.get("persistence_mode") is None]
    data = {"off": [g.get("index") for g in off], "daemon": persistenced_active, "unit": persistenced_enabled}
    masked = persistenced_enabled in ("masked", "masked-runtime")
    unmask = ("the unit is masked, so it cannot be started: `systemctl unmask nvidia-persistenced && systemctl "
              "enable --now nvidia-persistenced` (site.yml -e nvidia_persistence_unmask=true does it; gpuhost "
              "never masks it, so ask who did)")
    if off and masked:
        return result("persistence", "persistence", "fail", "persistence mode is off on GPU %s: nvidia-persistenced "
                      "is masked" % ", ".join(str(g.get("index")) for g in off), remedy=unmask, ev=ev, data=data)
    if masked:
        return result("persistence", "persistence", "warn", "persistence mode is on now, but nvidia-persistenced is "
                      "masked: the next reboot or driver reload turns it off", remedy=unmask, ev=ev, data=data)
    if off:
        return result("persistence", "persistence", "fail", "persistence mode is off on GPU %s%s"
                      % (", ".join(str(g.get("index")) for g in off),
                         " (nvidia-persistenced is %s)" % persistenced_active if persistenced_active else ""),
                      remedy=REMEDY_PERSISTENCE, ev=ev, data=data)
    if unknown and len(unknown) == len(gpus):
        return result("persistence", "persistence", "skipped", "nvidia-smi does not report persistence mode "
                      "(not a Linux driver?)", ev=ev, data=data)
    return result("persistence", "persistence", "ok", "persistence mode on for %d GPU(s)" % len(gpus),
                  ev=ev, data=data)


# ---------------------------------------------------------------------------------------------
# docker, toolkit, runtime configuration


def parse_docker_info(cap):
    """`docker info --format '{{json .}}'` -> (info dict or None, error text or None)."""
    if cap is None:
        return None, "docker: not found"
    text = (cap.get("stdout") or "").strip()
    info = None
    for candidate in (text, text.splitlines()[-1] if text else ""):
        try:
            info = json.loads(candidate)
            break
        except ValueError:
            continue
    errors = []
    if isinstance(info, dict):
        errors = [e for e in info.get("ServerErrors") or [] if e]
        if not info.get("ServerVersion") and not errors:
            errors = ["docker info returned no ServerVersion"]
    if cap.get("rc") == TIMEOUT_RC:
        return None, "docker info timed out (the daemon does not answer)"
    if cap.get("rc") != 0 or not isinstance(info, dict) or errors:
        err = errors + _grep(cap.get("stderr"), r"\S")
        return None, (err[0] if err else "docker info exited %s" % cap.get("rc"))
    return info, None


def docker_major(version):
    match = re.match(r"^\s*(\d+)\.", version or "")
    return int(match.group(1)) if match else None


def cdi_enabled(info, daemon_config):
    """Whether the engine resolves CDI device names: Docker 25+ with features.cdi (default on 28+)."""
    if not info:
        return False
    major = docker_major(info.get("ServerVersion"))
    if major is None or major < 25:
        return False
    if info.get("CDISpecDirs"):
        return True
    feature = ((daemon_config or {}).get("features") or {}).get("cdi")
    if feature is None:
        return major >= 28
    return bool(feature)


def _engine_config_verdict(daemon_json_text, validate_cap, dockerd_version, docker_config):
    """Why dockerd refuses its config, or None: `dockerd --validate` where the engine has it (23+),
    with where the error is as a person counts it; else this module's own reading of the file as
    that engine reads it (a BOM before 23)."""
    engine = None
    if validate_cap is not None:
        output = " ".join(_lines(_out(validate_cap)))
        if validate_cap.get("rc") == 0:
            return None
        if "unknown flag" not in output and output:
            engine = output
    own = None
    if daemon_json_text is not None:
        try:
            parse_daemon_json(daemon_json_text, docker_config,
                              accepts_bom=engine_accepts_bom(dockerd_version) is not False)
        except DaemonJsonError as exc:
            own = str(exc)
    if engine and own:
        return "%s (%s)" % (engine, own.split(": ", 1)[-1])
    return engine or own


def check_docker(cap, docker_path=None, daemon_json_text=None, validate_cap=None, dockerd_version=None,
                 runtime_bin_found=None, docker_config=DEFAULT_DOCKER_CONFIG):
    """The docker daemon answers (`docker info`); when it does not, the engine's own verdict on its
    config; when it does, a default runtime whose binary is gone (every container fails)."""
    if not docker_path:
        return result("docker", "docker", "fail", "docker is not installed",
                      remedy=REMEDY_INSTALL_DOCKER, ev=evidence("command -v docker", ["docker: not found"]))
    info, error = parse_docker_info(cap)
    if info is None:
        lines = _grep(_out(cap), r"cannot connect|is the docker daemon running|error|denied") or _lines(_out(cap))[:4]
        refused = _engine_config_verdict(daemon_json_text, validate_cap, dockerd_version, docker_config)
        if refused:
            line = re.search(r"line (\d+)", refused)
            where = " at line %s" % line.group(1) if line else ""
            ev = evidence("%s; dockerd --validate --config-file %s" % (_cmd(cap), docker_config),
                          lines + [refused], cap.get("rc"))
            return result("docker", "docker", "fail", "the docker daemon cannot start: it refuses %s: %s"
                          % (docker_config, refused),
                          remedy="fix %s%s by hand (gpuhost never rewrites a file it cannot read), then "
                                 "`systemctl restart docker`" % (docker_config, where), ev=ev,
                          data={"config_error": refused})
        remedy = REMEDY_START_DOCKER
        if "permission denied" in (error or "").lower():
            remedy = "run the check as root (become: true) or as a member of the docker group"
        return result("docker", "docker", "fail", "the docker daemon is not running: %s" % error,
                      remedy=remedy, ev=evidence(_cmd(cap), lines, cap.get("rc")))
    runtimes = info.get("Runtimes") or {}
    default = info.get("DefaultRuntime")
    ev = evidence(_cmd(cap), ["ServerVersion: %s" % info.get("ServerVersion"),
                              "Runtimes: %s" % " ".join(sorted(runtimes)), "DefaultRuntime: %s" % default],
                  cap.get("rc"))
    data = {"version": info.get("ServerVersion"), "runtimes": sorted(runtimes), "default_runtime": default}
    if default == "nvidia" and runtime_bin_found is False:
        runtime = runtimes.get("nvidia") if isinstance(runtimes.get("nvidia"), dict) else {}
        return result("docker", "docker", "fail",
                      "docker's default runtime is nvidia, whose binary %s is gone: every container on this host "
                      "fails to start, GPU or not" % (runtime.get("path") or "nvidia-container-runtime"),
                      remedy="reinstall the NVIDIA Container Toolkit (site.yml --tags toolkit), or take "
                             "default-runtime out of %s and `systemctl restart docker`" % docker_config,
                      ev=ev, data=data)
    return result("docker", "docker", "ok", "docker %s running (%s)" % (info.get("ServerVersion"),
                                                                        info.get("Driver") or "no storage driver"),
                  ev=ev, data=data)


def parse_dpkg_query(stdout):
    """`dpkg-query -W -f '${Package}\\t${db:Status-Abbrev}\\t${Version}\\n' P...` -> {pkg: version or None}.

    A package whose status is not 'ii' (removed, config files only, half-installed) counts as absent.
    """
    found = {}
    for line in (stdout or "").splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or not parts[0].strip():
            continue
        name = parts[0].strip().split(":")[0]
        found[name] = parts[2].strip() if parts[1].strip() == "ii" else None
    return found


def parse_ctk_version(text):
    """`nvidia-ctk --version` -> '1.18.0' ('NVIDIA Container Toolkit CLI version 1.18.0')."""
    match = re.search(r"version\s+v?(\d+\.\d+\.\d+\S*)", clean_text(text or ""), re.I)
    return match.group(1) if match else None


def check_toolkit(dpkg_cap, ctk_cap, ctk_path, hook_path, packages=DEFAULT_TOOLKIT_PACKAGES):
    """Toolkit packages installed (pinned together), nvidia-ctk and the runtime hook present."""
    lines, problems, versions = [], [], {}
    if dpkg_cap is not None:
        versions = parse_dpkg_query(dpkg_cap.get("stdout"))
        lines += [l for l in _lines(dpkg_cap.get("stdout"))]
        lines += _grep(dpkg_cap.get("stderr"), r"no packages found")
        absent = [p for p in packages if not versions.get(p)]
        if absent:
            problems.append("not installed: %s" % ", ".join(absent))
    ctk_version = parse_ctk_version(_out(ctk_cap)) if ctk_cap else None
    if ctk_path:
        lines += _grep(_out(ctk_cap), r"version")[:1] or ["%s --version: %s" % (ctk_path, _lines(_out(ctk_cap))[:1])]
    else:
        lines.append("nvidia-ctk: not found")
        problems.append("nvidia-ctk not found")
    if not hook_path:
        lines.append("nvidia-container-runtime-hook: not found")
        problems.append("nvidia-container-runtime-hook not found (docker --gpus needs it)")
    command = [c for c in (" ".join(dpkg_cap["argv"][:2]) + " ..." if dpkg_cap else None,
                           "nvidia-ctk --version") if c]
    ev = evidence("; ".join(command), lines, dpkg_cap.get("rc") if dpkg_cap else None)
    installed = dict((p, v) for p, v in versions.items() if v)
    data = {"packages": installed, "nvidia_ctk_version": ctk_version}
    if problems:
        return result("toolkit", "toolkit", "fail", "NVIDIA Container Toolkit: " + "; ".join(problems),
                      remedy=REMEDY_INSTALL_TOOLKIT, ev=ev, data=data)
    distinct = sorted(set(v for p, v in installed.items() if p in packages))
    if len(distinct) > 1:
        return result("toolkit", "toolkit", "warn", "toolkit packages at different versions: %s"
                      % ", ".join("%s %s" % (p, installed[p]) for p in packages if p in installed),
                      remedy="pin them together (nvidia_container_toolkit_version, site.yml --tags toolkit)",
                      ev=ev, data=data)
    return result("toolkit", "toolkit", "ok", "NVIDIA Container Toolkit %s (nvidia-ctk %s)"
                  % (distinct[0] if distinct else "installed", ctk_version or "unknown"), ev=ev, data=data)


def check_runtime(docker_cap, daemon_json_text, runtime_bin_found=None,
                  docker_config=DEFAULT_DOCKER_CONFIG):
    """The nvidia runtime is registered with the running docker (`docker info` Runtimes)."""
    info, error = parse_docker_info(docker_cap)
    config, config_error = {}, None
    try:
        config = parse_daemon_json(daemon_json_text, docker_config,
                                   accepts_bom=engine_accepts_bom((info or {}).get("ServerVersion")) is not False)
    except DaemonJsonError as exc:
        config_error = str(exc)
    configured = isinstance(config.get("runtimes"), dict) and "nvidia" in config["runtimes"]
    conf_lines = []
    if daemon_json_text is None:
        conf_lines.append("%s: no such file" % docker_config)
    elif config_error:
        conf_lines.append(config_error)
    else:
        conf_lines.append("%s runtimes: %s" % (docker_config, " ".join(sorted(config.get("runtimes") or {}))
                                               or "(none)"))
    if info is None:
        why = "docker is not installed" if docker_cap is None else "docker is not running (%s)" % error
        return result("runtime", "runtime_config", "skipped", why,
                      ev=evidence("cat %s" % docker_config, conf_lines), data={"configured": configured})
    runtimes = info.get("Runtimes") or {}
    lines = ["Runtimes: %s" % " ".join(sorted(runtimes)), "DefaultRuntime: %s" % info.get("DefaultRuntime")]
    ev = evidence("docker info --format '{{json .}}'; cat %s" % docker_config, lines + conf_lines,
                  docker_cap.get("rc"))
    data = {"configured": configured, "registered": "nvidia" in runtimes,
            "default_runtime": info.get("DefaultRuntime"), "cdi_enabled": cdi_enabled(info, config)}
    if config_error:
        return result("runtime", "runtime_config", "fail", config_error,
                      remedy="fix the JSON by hand (docker refuses to start with it), then %s" % REMEDY_CONFIGURE,
                      ev=ev, data=data)
    if "nvidia" not in runtimes:
        if configured:
            return result("runtime", "runtime_config", "fail",
                          "nvidia runtime is in %s but not registered with the running docker" % docker_config,
                          remedy="restart docker (`systemctl restart docker`)", ev=ev, data=data)
        return result("runtime", "runtime_config", "fail", "nvidia runtime not registered with docker",
                      remedy=REMEDY_CONFIGURE, ev=ev, data=data)
    path = (runtimes.get("nvidia") or {}).get("path") if isinstance(runtimes.get("nvidia"), dict) else None
    if runtime_bin_found is False:
        return result("runtime", "runtime_config", "fail", "nvidia runtime registered, but its binary %s is missing"
                      % (path or "nvidia-container-runtime"), remedy=REMEDY_INSTALL_TOOLKIT, ev=ev, data=data)
    return result("runtime", "runtime_config", "ok", "nvidia runtime registered with docker (%s)%s"
                  % (path or "nvidia-container-runtime",
                     "; CDI enabled" if data["cdi_enabled"] else ""), ev=ev, data=data)


# ---------------------------------------------------------------------------------------------
# serving containers keep their GPUs (/dev/char links, systemd reloads)

SERVING_LABEL = "gpuhost.layer=vllm"
_LOST_DEVICES = next(e for e in catalogue.ENTRIES if e["kind"] == "daemon_reload_lost_devices")
REMEDY_DEV_CHAR = ("site.yml --tags toolkit (the links and NVIDIA's udev rule that makes them at every driver load), "
                   "or `nvidia-ctk system create-dev-char-symlinks --create-all`")


def _char_numbers(nodes):
    """{path: (major, minor)} of the character devices among captured nodes ({path: {kind, major, minor}})."""
    return dict((path, (n["major"], n["minor"])) for path, n in (nodes or {}).items() if n and n.get("kind") == "char")


def check_dev_char(nodes, links):
    """Every NVIDIA device node has its /dev/char/MAJOR:MINOR link: without it a systemd daemon-reload takes
    the node from running containers whose cgroup systemd manages. nodes: {path: {kind, major, minor}};
    links: {link path: readlink text / None / False}."""
    wanted = dev_char_links(_char_numbers(nodes))
    command = "ls -l /dev/char"
    if not wanted:
        return result("dev_char", "runtime_config", "ok", "no NVIDIA device node to link", ev=evidence(command))
    absent = dev_char_missing(wanted, links or {})
    lines = ["%s -> %s" % (link, (links or {}).get(link) or "(absent)") for link in sorted(wanted)]
    data = {"links": wanted, "missing": absent}
    if absent:
        return result("dev_char", "runtime_config", "warn",
                      "%d of %d NVIDIA device nodes have no /dev/char link (%s): a systemd daemon-reload would take "
                      "them from running GPU containers" % (len(absent), len(wanted), ", ".join(absent)),
                      remedy=REMEDY_DEV_CHAR, ev=evidence(command, lines), data=data)
    return result("dev_char", "runtime_config", "ok", "every NVIDIA device node has its /dev/char link (%d)"
                  % len(wanted), ev=evidence(command, lines), data=data)


def check_serving_gpus(listing, execs, dev_char_check=None):
    """`nvidia-smi -L` inside every running serving container (docker exec, read-only) lists GPUs. A container
    whose NVML says "Unknown Error" lost its device access (a systemd reload without /dev/char links)."""
    command = "docker ps --filter label=%s --filter status=running; docker exec NAME nvidia-smi -L" % SERVING_LABEL
    if listing is None:
        return result("serving_gpus", "container", "skipped", "docker is not running (docker layer)",
                      ev=evidence(command))
    if listing.get("rc") != 0:
        return result("serving_gpus", "container", "warn", "could not list the serving containers: %s"
                      % " ".join(_lines(_out(listing))[:1]), remedy="read the evidence",
                      ev=evidence(_cmd(listing), _lines(_out(listing))[:3], listing.get("rc")))
    if not execs:
        return result("serving_gpus", "container", "ok", "no serving container running (label %s)" % SERVING_LABEL,
                      ev=evidence(_cmd(listing)))
    lost, broken, fine, lines = [], [], [], []
    for name in sorted(execs):
        cap = execs[name]
        out_lines = _lines(_out(cap))
        seen = _container_uuids(cap.get("stdout")) if cap.get("rc") == 0 else []
        if seen:
            fine.append(name)
            lines.append("%s: %d GPU(s)" % (name, len(seen)))
            continue
        said = [l.strip() for l in out_lines if catalogue.matches(_LOST_DEVICES, l)]
        line = said[0] if said else (out_lines[-1].strip() if out_lines else "exit %s" % cap.get("rc"))
        (lost if said else broken).append((name, line))
        lines.append("%s: %s" % (name, line))
    data = {"ok": fine, "lost": [n for n, _l in lost], "failed": [n for n, _l in broken]}
    ev = evidence(command, lines)
    if lost:
        names = ", ".join(n for n, _l in lost)
        links_absent = bool(dev_char_check and dev_char_check.get("data", {}).get("missing"))
        cause = ("systemd reload without /dev/char links" if links_absent or dev_char_check is None else
                 "a systemd reload, or another cgroup update, took its devices; the /dev/char links are there now")
        data["cause"] = cause
        return result("serving_gpus", "container", "fail",
                      "container %s lost its GPU devices (%s): nvidia-smi inside says %s" % (names, cause, lost[0][1]),
                      remedy="recreate %s (`docker restart %s`, or site.yml --tags vllm); create the links so that the "
                             "next reload does not take them again: %s" % (names, lost[0][0], REMEDY_DEV_CHAR),
                      ev=ev, data=data)
    if broken:
        return result("serving_gpus", "container", "fail", "nvidia-smi fails inside serving container %s: %s"
                      % (", ".join(n for n, _l in broken), broken[0][1]),
                      remedy="read the evidence; `docker logs %s`" % broken[0][0], ev=ev, data=data)
    return result("serving_gpus", "container", "ok", "every serving container lists its GPUs (%s)" % ", ".join(fine),
                  ev=ev, data=data)



def check_gpus_path(info_cap, cdi_hook_path, runtime_hook_path, env_cap=None, gpus_cap=None, cdi_spec_check=None):
    """Which way `--gpus` reached the GPUs: docker's legacy hook or CDI (module_utils/gpus_path). Docker 29.2+
    tries CDI first where nvidia-cdi-hook is installed, so a stale spec then breaks --gpus too, and a spec
    that does not resolve sends it back to the hook. env_cap: `docker run --gpus all --entrypoint env`
    (the process environment, where the path shows); gpus_cap: the --gpus container check's run."""
    command = ("docker info; command -v %s %s; docker run --rm --gpus all --entrypoint env IMAGE"
               % (gpus_path_mod.CDI_HOOK, gpus_path_mod.RUNTIME_HOOK))
    info, _error = parse_docker_info(info_cap)
    if info is None:
        return result("gpus_path", "container", "skipped", "docker is not running (docker layer)", ev=evidence(command))
    env = _lines(env_cap.get("stdout")) if env_cap and env_cap.get("rc") == 0 else None
    failed_text = _out(gpus_cap) if gpus_cap and gpus_cap.get("rc") not in (0, None) else None
    hooks = dict(cdi_hook_on_path=bool(cdi_hook_path), runtime_hook_on_path=bool(runtime_hook_path))
    found = gpus_path_mod.gpus_path(info, env=env, error_text=failed_text, **hooks)
    predicted = gpus_path_mod.predict(info, **hooks)
    visible = gpus_path_mod.visible_devices(env)
    lines = ["docker %s, CDI spec dirs: %s" % (info.get("ServerVersion"), ", ".join(info.get("CDISpecDirs") or [])
                                               or "none (CDI off)"),
             "%s: %s" % (gpus_path_mod.CDI_HOOK, cdi_hook_path or "not on PATH"),
             "%s: %s" % (gpus_path_mod.RUNTIME_HOOK, runtime_hook_path or "not on PATH")]
    if env is not None:
        lines.append("in the container: %s=%s" % (gpus_path_mod.VISIBLE, visible if visible is not None else "(unset)"))
    elif failed_text:
        lines += _lines(failed_text)[-2:]
    data = {"path": found["path"], "reason": found["reason"], "predicted": predicted["path"],
            "engine_version": info.get("ServerVersion"), "cdi_hook": cdi_hook_path, "runtime_hook": runtime_hook_path,
            "visible_devices": visible}
    ev = evidence(_cmd(env_cap) if env is not None else command, lines)
    line = gpus_path_mod.report_line(found)
    if env is not None and found["path"] == "legacy" and predicted["path"] == "cdi":
        return result("gpus_path", "container", "warn", "docker %s fell back from CDI to the hook for --gpus: %s"
                      % (info.get("ServerVersion"), found["reason"]),
                      remedy="make the spec resolve: `nvidia-ctk cdi list` must list nvidia.com/gpu=all (role nvidia_cdi, "
                             "site.yml --tags cdi); `journalctl -u docker` says why the injection failed",
                      ev=ev, data=data)
    if found["path"] == "cdi" and cdi_spec_check and cdi_spec_check.get("status") == "fail":
        return result("gpus_path", "container", "warn", "--gpus goes through CDI, so the CDI spec's fault breaks --gpus "
                      "containers too (%s)" % cdi_spec_check.get("summary"), remedy=cdi_spec_check.get("remedy"),
                      ev=ev, data=data)
    if found["path"] == "unknown" and (failed_text or (gpus_cap is None and predicted["path"] == "unknown")):
        return result("gpus_path", "container", "warn", line,
                      remedy="install the NVIDIA Container Toolkit (site.yml --tags toolkit) and restart docker: "
                             "dockerd looks for %s and %s on its PATH when it starts"
                             % (gpus_path_mod.CDI_HOOK, gpus_path_mod.RUNTIME_HOOK), ev=ev, data=data)
    return result("gpus_path", "container", "ok", line, ev=ev, data=data)

# ---------------------------------------------------------------------------------------------
# containerd (a Kubernetes node's engine)


def choose_engine(requested, docker_path, ctr_path):
    """The engine to check: the one asked for, else docker where its CLI is installed, else containerd
    where ctr is, else docker (whose absence the docker layer then reports)."""
    if requested in ENGINES:
        return requested
    if docker_path:
        return "docker"
    return "containerd" if ctr_path else "docker"


def parse_ctr_version(text):
    """`ctr version` -> {"client": version or None, "server": version or None}: the server part is missing
    (and ctr says why) when containerd does not answer."""
    found, section = {"client": None, "server": None}, None
    for line in (text or "").splitlines():
        head = line.strip().rstrip(":").lower()
        if head in found and line.rstrip().endswith(":"):
            section = head
            continue
        match = re.match(r"^\s+Version:\s*(\S+)", line)
        if match and section and found[section] is None:
            found[section] = match.group(1)
    return found


def normalize_image_ref(image):
    """An image name as containerd stores it: docker's short names get docker.io/ (and library/ for
    one-part names), as `ctr images import` of a docker-save tarball names them."""
    name = (image or "").strip()
    first = name.split("/", 1)[0]
    if "/" in name and ("." in first or ":" in first or first == "localhost"):
        return name
    return "docker.io/%s%s" % ("" if "/" in name else "library/", name)


def check_containerd(cap, ctr_path):
    """containerd answers (`ctr version` shows a server)."""
    if not ctr_path:
        return result("containerd", "docker", "fail", "containerd is not installed (no ctr)",
                      remedy="install containerd (the node's Kubernetes distribution, or Debian's containerd)",
                      ev=evidence("command -v ctr", ["ctr: not found"]))
    versions = parse_ctr_version(_out(cap))
    data = {"version": versions["server"], "client_version": versions["client"]}
    lines = _lines(_out(cap))
    if not versions["server"]:
        why = _grep(_out(cap), r"failed to dial|connection|denied|error") or lines[-1:] or \
            ["ctr version exited %s" % cap.get("rc")]
        return result("containerd", "docker", "fail", "containerd is not running: %s" % why[0].strip(),
                      remedy="start it: `systemctl enable --now containerd`; `journalctl -u containerd -b` says why "
                             "it stopped (a config.toml it cannot parse names the line)",
                      ev=evidence(_cmd(cap), why, cap.get("rc")), data=data)
    return result("containerd", "docker", "ok", "containerd %s running" % versions["server"],
                  ev=evidence(_cmd(cap), [l for l in lines if "Version:" in l], cap.get("rc")), data=data)


def check_containerd_runtime(dump_cap, runtime_bin_found=None):
    """The nvidia runtime is in the config containerd runs with (`containerd config dump`: config.toml
    and its imports merged), with the binary it names present."""
    words = ENGINE_WORDS["containerd"]
    if dump_cap is None:
        return result("runtime", "runtime_config", "skipped", "containerd is not installed",
                      ev=evidence("containerd config dump"))
    if dump_cap.get("rc") != 0:
        lines = _lines(_out(dump_cap))[:3]
        return result("runtime", "runtime_config", "fail", "containerd cannot read its config: %s"
                      % (lines[0] if lines else "exit status %s" % dump_cap.get("rc")),
                      remedy="fix /etc/containerd/config.toml (or the drop-in it imports) by hand at the place the "
                             "message names, then %s" % words["restart"],
                      ev=evidence(_cmd(dump_cap), lines, dump_cap.get("rc")))
    binaries = runtime_binaries(dump_cap.get("stdout"))
    nvidia = dict((name, path) for name, path in binaries.items() if name.startswith("nvidia"))
    lines = ["runtimes: %s" % (" ".join(sorted(binaries)) or "(none)")] + \
        ["%s BinaryName = %s" % (name, path) for name, path in sorted(nvidia.items())]
    ev = evidence(_cmd(dump_cap), lines, dump_cap.get("rc"))
    data = {"registered": "nvidia" in binaries, "runtimes": sorted(binaries), "binary": binaries.get("nvidia")}
    if "nvidia" not in binaries:
        return result("runtime", "runtime_config", "fail", "nvidia runtime not in containerd's config",
                      remedy=words["configure"], ev=ev, data=data)
    if runtime_bin_found is False:
        return result("runtime", "runtime_config", "fail", "nvidia runtime registered, but its binary %s is missing"
                      % (binaries["nvidia"] or DEFAULT_RUNTIME_BINARY), remedy=REMEDY_INSTALL_TOOLKIT, ev=ev,
                      data=data)
    return result("runtime", "runtime_config", "ok", "nvidia runtime registered with containerd (%s)"
                  % (binaries["nvidia"] or "runc, no BinaryName"), ev=ev, data=data)


# ---------------------------------------------------------------------------------------------
# CDI


def _gpu_device_count(devices):
    """Whole-GPU entries of a spec ('0', '1', ...; not 'all', UUIDs or MIG 'N:M')."""
    return len([d for d in devices if re.match(r"^\d+$", str(d))])


def check_cdi_spec(spec_texts, loaded_version, gpu_count=None, managed=DEFAULT_CDI_SPEC,
                   refresh_env_text=None, mig_refs=None):
    """The managed spec: present, a CDI spec, fresh for the loaded driver, not shadowed, all GPUs, and every live MIG
    device (mig_refs: 'GPU:device' of each, as `nvidia-ctk cdi generate` names them) once MIG layouts change.

    spec_texts: {path: text} for every spec file in the CDI directories (/etc/cdi, /var/run/cdi).
    """
    lines, summaries = [], {}
    for path in sorted(spec_texts):
        try:
            summaries[path] = read_spec(spec_texts[path])
            s = summaries[path]
            lines.append("%s: kind %s, %d device(s), driver %s" % (path, s["kind"], len(s["devices"]),
                                                                    ", ".join(s["driver_versions"]) or "unknown"))
        except CdiSpecError as exc:
            lines.append("%s: %s" % (path, exc))
    if loaded_version:
        lines.append("loaded driver: %s" % loaded_version)
    ev = evidence("ls %s; read each spec" % " ".join(d + "/" for d in CDI_DIRS), lines)
    regen = "`nvidia-ctk cdi generate --output=%s` (role nvidia_cdi: site.yml --tags cdi)" % managed
    data = {"path": managed, "specs": sorted(spec_texts), "devices": [], "driver_versions": [],
            "shadowed_by": []}
    if managed not in spec_texts:
        others = [p for p, s in summaries.items() if s.get("kind") == "nvidia.com/gpu"]
        extra = ""
        if others:
            extra = "; only %s%s" % (", ".join(others), " (wiped at reboot)"
                                     if any(p.startswith("/var/run/") or p.startswith("/run/") for p in others)
                                     else "")
        return result("cdi_spec", "cdi", "fail", "no CDI spec at %s%s" % (managed, extra),
                      remedy="generate it: " + regen, ev=ev, data=data)
    if managed not in summaries:
        return result("cdi_spec", "cdi", "fail", "%s is not a CDI spec" % managed,
                      remedy="regenerate it: " + regen, ev=ev, data=data)
    spec = summaries[managed]
    data.update(devices=spec["devices"], driver_versions=spec["driver_versions"])
    stale = staleness(spec, loaded_version)
    if stale:
        return result("cdi_spec", "cdi", "fail", "%s is stale: %s" % (managed, "; ".join(stale)),
                      remedy="regenerate it for the loaded driver: " + regen, ev=ev, data=data)
    shadows = shadowing(summaries, managed)
    data["shadowed_by"] = shadows
    if shadows:
        stale_shadows = [p for p in shadows if staleness(summaries[p], loaded_version)]
        return result("cdi_spec", "cdi", "fail",
                      "%s defines the same devices as %s and wins over it%s" % (
                          ", ".join(shadows), managed, " (and is stale)" if stale_shadows else ""),
                      remedy="remove %s and point nvidia-cdi-refresh at %s "
                             "(NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=%s in %s; role nvidia_cdi does both)"
                             % (" ".join(shadows), managed, managed, REFRESH_ENV_FILE),
                      ev=ev, data=data)
    count = _gpu_device_count(spec["devices"])
    if gpu_count and count < gpu_count:
        return result("cdi_spec", "cdi", "fail", "%s lists %d GPU(s), nvidia-smi lists %d"
                      % (managed, count, gpu_count), remedy="regenerate it: " + regen, ev=ev, data=data)
    missing = [ref for ref in mig_refs or [] if ref not in spec["devices"]]
    if missing:
        data["mig_missing"] = missing
        return result("cdi_spec", "cdi", "fail", "%s lists no device for MIG device %s (the MIG layout changed after "
                      "it was generated: nvidia.com/gpu=%s is unresolvable)" % (managed, ", ".join(missing), missing[0]),
                      remedy="regenerate it: " + regen, ev=ev, data=data)
    return result("cdi_spec", "cdi", "ok", "%s fresh for driver %s, %d GPU(s), not shadowed"
                  % (managed, ", ".join(spec["driver_versions"]) or loaded_version or "unknown", count),
                  ev=ev, data=data)


def check_cdi_spec_version(spec_texts, engine_versions, managed=DEFAULT_CDI_SPEC):
    """Every CDI spec's cdiVersion against what the installed engines read (cdi_spec.engine_reads).

    spec_texts: {path: text} as for check_cdi_spec; engine_versions: {engine: version} of the engines
    whose version is known ("docker": "26.1.5+dfsg1"). A spec above what an engine reads is a failure
    "spec version too new for <engine> <version>": the engine's CDI library refuses it (for nvidia
    specs with `json: unknown field "additionalGids"`), and its containers get no CDI device.
    """
    versions, lines = {}, []
    for path in sorted(spec_texts):
        try:
            versions[path] = read_spec(spec_texts[path])["cdi_version"]
        except CdiSpecError:
            continue
        lines.append("%s: cdiVersion %s" % (path, versions[path]))
    engines = dict((e, v) for e, v in (engine_versions or {}).items() if v)
    for engine in sorted(engines):
        reads = engine_reads(engine, engines[engine])
        lines.append("%s %s: reads CDI specs up to %s" % (engine, engines[engine], reads or "none (no CDI support)"))
    ev = evidence("read cdiVersion of each spec in %s; the engine's version" % " ".join(d + "/" for d in CDI_DIRS),
                  lines)
    data = {"spec_versions": versions, "engines": dict((e, {"version": v, "reads": engine_reads(e, v)})
                                                       for e, v in engines.items()), "too_new": []}
    if not versions:
        return result("cdi_spec_version", "cdi", "skipped", "no CDI spec to read (cdi_spec check)", ev=ev, data=data)
    if not any(engine_reads(e, v) for e, v in engines.items()):
        return result("cdi_spec_version", "cdi", "skipped", "no engine whose CDI spec versions are known (%s)"
                      % (", ".join("%s %s" % (e, v) for e, v in sorted(engines.items())) or "no engine version"),
                      ev=ev, data=data)
    order = sorted(versions, key=lambda p: (p != managed, p))
    found = [(path, hit) for path in order for hit in too_new_for(versions[path], engines)]
    data["too_new"] = [too_new_message(e, v, r, versions[path], path) for path, (e, v, r) in found]
    if found:
        path, (engine, version, _reads) = found[0]
        first = engine_first_reading(engine, versions[path])
        more = " (and %d more)" % (len(found) - 1) if len(found) > 1 else ""
        return result("cdi_spec_version", "cdi", "fail", data["too_new"][0] + more,
                      remedy="regenerate it for %s %s: `nvidia-ctk cdi generate --feature-flag %s --output=%s` "
                             "(role nvidia_cdi does with nvidia_cdi_engine_compat: auto; site.yml --tags cdi)%s"
                             % (engine, version, FEATURE_NO_ADDITIONAL_GIDS, path,
                                ", or upgrade %s to %s or later" % (engine, first) if first else ""),
                      ev=ev, data=data)
    return result("cdi_spec_version", "cdi", "ok", "%s cdiVersion %s, readable by %s"
                  % (order[0], versions[order[0]], ", ".join("%s %s" % (e, v) for e, v in sorted(engines.items())
                                                             if engine_reads(e, v))), ev=ev, data=data)


def spec_version_decides(cdi_spec, spec_version):
    """A spec that is fresh and not shadowed but too new for the engine fails the cdi_spec check with the
    version finding (one check, so the report keeps its checks); otherwise cdi_spec stands."""
    if cdi_spec["status"] != "ok" or spec_version["status"] != "fail":
        return cdi_spec
    return dict(cdi_spec, status="fail", summary=spec_version["summary"], remedy=spec_version["remedy"],
                evidence=spec_version["evidence"], data=dict(cdi_spec["data"], **spec_version["data"]))


def check_cdi_list(cap, ctk_path):
    """`nvidia-ctk cdi list` resolves nvidia.com/gpu devices (it reads /etc/cdi and /var/run/cdi)."""
    if not ctk_path:
        return result("cdi_list", "cdi", "skipped", "nvidia-ctk not found (toolkit layer)",
                      ev=evidence("nvidia-ctk cdi list", ["nvidia-ctk: not found"]))
    devices = parse_cdi_list(cap.get("stdout")) if cap and cap.get("rc") == 0 else []
    ev = evidence(_cmd(cap), (_lines(cap.get("stdout")) + _grep(cap.get("stderr"), r"found|error|level=")),
                  cap.get("rc"))
    data = {"devices": devices}
    if "nvidia.com/gpu=all" in devices:
        return result("cdi_list", "cdi", "ok", "nvidia-ctk cdi list: %d device name(s)" % len(devices),
                      ev=ev, data=data)
    return result("cdi_list", "cdi", "fail", "`nvidia-ctk cdi list` shows no nvidia.com/gpu=all device",
                  remedy="generate the spec: `nvidia-ctk cdi generate --output=%s`" % DEFAULT_CDI_SPEC,
                  ev=ev, data=data)


# ---------------------------------------------------------------------------------------------
# container


def _first_in_scope(cap, scope):
    """(kind, decisive line) of the first entry of the error table's `scope` that a line of the output
    matches, in the table's order; None when none does."""
    lines = _lines(_out(cap))
    for kind, entry in catalogue.in_scope(scope):
        for line in lines:
            if catalogue.matches(entry, line):
                return kind, line.strip()
    return None


def classify_container(cap):
    """Why a `docker run ... nvidia-smi -L` failed: (kind, decisive line)."""
    found = _first_in_scope(cap, "container")
    if found:
        return found
    lines = _lines(_out(cap))
    return "other", (lines[-1].strip() if lines else "exit status %s, no output" % cap.get("rc"))


def _container_uuids(stdout):
    try:
        return [g["uuid"] for g in parse_list(stdout)["gpus"] if g.get("uuid")]
    except ParseError:
        return []


def check_container(cap, host_uuids, image, mode="gpus", name=None, engine="docker"):
    """A --rm container started with --gpus all (or --device nvidia.com/gpu=all; on containerd, `ctr run`
    through the nvidia runtime) lists the host's GPUs."""
    words = ENGINE_WORDS[engine]
    name = name or ("container_gpus" if mode == "gpus" else "container_cdi")
    flag = words["gpus"] if mode == "gpus" else "--device nvidia.com/gpu=all"
    if cap is None:
        return result(name, "container", "skipped", "not run", ev=evidence("%s %s %s nvidia-smi -L"
                                                                           % (words["run"], flag, image)))
    seen = _container_uuids(cap.get("stdout")) if cap.get("rc") == 0 else []
    data = {"image": image, "mode": mode, "uuids": seen, "host_uuids": list(host_uuids or [])}
    if cap.get("rc") == 0 and seen:
        lines = _lines(cap.get("stdout"))
        missing = [u for u in host_uuids or [] if u not in seen]
        ev = evidence(_cmd(cap), lines, cap.get("rc"))
        if missing:
            return result(name, "container", "fail", "a %s container sees %d of the host's %d GPUs (missing %s)"
                          % (flag, len(host_uuids) - len(missing), len(host_uuids), ", ".join(missing)),
                          remedy="regenerate the CDI spec and re-run `nvidia-ctk runtime configure "
                                 "--runtime=%s`, %s" % (engine, words["restart"]), ev=ev, data=data)
        return result(name, "container", "ok", "a %s container lists %d GPU(s)" % (flag, len(seen)),
                      ev=ev, data=data)
    kind, line = classify_container(cap) if cap.get("rc") != 0 else ("no_gpus", "nvidia-smi -L listed no GPU")
    if cap.get("rc") == TIMEOUT_RC:
        kind, line = "timeout", "%s timed out" % words["run"].rsplit(" ", 1)[0]
    ev = evidence(_cmd(cap), [line] + [l for l in _lines(_out(cap)) if l.strip() != line][:5], cap.get("rc"))
    data["cause"] = kind
    configure_again = "re-run `nvidia-ctk runtime configure --runtime=%s`, %s" % (engine, words["restart"])
    table = {
        "image_absent": ("warn", "the check image %s is not on the host (the check does not pull)" % image,
                         "load it (%s, gpu_validate_check_image_archive) or pull it, "
                         "or set check_image to an image that is present" % words["load"]),
        "runtime_unknown": ("fail", "%s does not know the nvidia runtime" % engine, words["configure"]),
        "no_gpu_driver": ("fail", "%s cannot start GPU containers (no nvidia-container-runtime-hook)" % engine,
                          REMEDY_INSTALL_TOOLKIT + ", then " + words["restart"]),
        "cdi_unresolvable": ("fail", "docker cannot resolve the CDI device nvidia.com/gpu=all",
                             "regenerate the spec: `nvidia-ctk cdi generate --output=%s`" % DEFAULT_CDI_SPEC),
        "driver": ("fail", "the toolkit cannot use the driver", "fix the driver layer first (nvidia-smi on the host)"),
        "no_nvidia_smi": ("fail", "the image %s has no usable nvidia-smi: the toolkit injects the host's only "
                                  "with the utility capability (NVIDIA_DRIVER_CAPABILITIES), and it needs glibc "
                                  "in the image" % image,
                          "use an image that keeps NVIDIA_DRIVER_CAPABILITIES with utility (e.g. %s) or run with "
                          "`-e NVIDIA_DRIVER_CAPABILITIES=compute,utility`" % DEFAULT_CHECK_IMAGE),
        "mount": ("fail", "the container could not mount the driver files",
                  "regenerate the CDI spec for the loaded driver and " + configure_again),
        "timeout": ("fail", "the container did not finish", "a hung GPU: read `dmesg | grep -i xid`"),
        "no_gpus": ("fail", "the container lists no GPU", configure_again + ", regenerate the CDI spec"),
        "other": ("fail", "the container failed", "read the evidence; if the driver was just updated, "
                  + configure_again),
    }
    status, summary, remedy = table[kind]
    if mode == "cdi" and kind == "mount":
        summary = "the CDI container could not mount what the spec names (stale spec?)"
    return result(name, "container", status, "%s: %s" % (flag, summary), remedy=remedy, ev=ev, data=data)


def check_cuda_probe(cap, image, command=DEFAULT_CUDA_PROBE_COMMAND, skipped=None, engine="docker"):
    """NVIDIA's vectorAdd sample in a --gpus all container (on containerd, `ctr run` through the nvidia
    runtime): CUDA initialises, allocates and runs a kernel."""
    words = ENGINE_WORDS[engine]
    cmd = "%s %s %s %s" % (words["run"], words["gpus"], image, " ".join(command))
    if cap is None:
        return result("container_cuda", "container", "skipped", skipped or "not run", ev=evidence(cmd))
    lines = _lines(_out(cap))
    if cap.get("rc") == 0 and any(l.strip() == "Test PASSED" for l in lines):
        return result("container_cuda", "container", "ok", "CUDA initialises in a %s container (vectorAdd: "
                      "Test PASSED)" % words["gpus"], ev=evidence(_cmd(cap), lines, cap.get("rc")),
                      data={"image": image})
    found = _first_in_scope(cap, "cuda")  # its errors go to stderr, its banner to stdout
    if found is None:
        container = classify_container(cap)
        if container[0] == "image_absent":
            return result("container_cuda", "container", "warn",
                          "the CUDA probe image %s is not on the host (the check does not pull): CUDA "
                          "initialisation in containers is not proven" % image,
                          remedy="pull it (site.yml does: gpu_validate_cuda_probe_image), load it "
                                 "(%s, gpu_validate_cuda_probe_image_archive), or set gpu_validate_cuda_probe_image: "
                                 "''" % words["load"],
                          ev=evidence(_cmd(cap), [container[1]], cap.get("rc")),
                          data={"image": image, "cause": "image_absent"})
        found = ("timeout", "%s timed out" % words["run"].rsplit(" ", 1)[0]) if cap.get("rc") == TIMEOUT_RC \
            else ("other", container[1])
    kind, line = found
    entry = next((e for k, e in catalogue.in_scope("cuda") if k == kind), None)
    summary = "CUDA fails in a %s container: %s" % (words["gpus"], entry["meaning"] if entry else line)
    remedy = entry["fix"] if entry else "read the evidence"
    ev = evidence(_cmd(cap), [line] + [l for l in lines if l.strip() != line][:5], cap.get("rc"))
    return result("container_cuda", "container", "fail", summary, remedy=remedy, ev=ev,
                  data={"image": image, "cause": kind, "line": line})


def mig_decides(cuda_probe, hardware):
    """CUDA busy or without a device in a whole-GPU container while GPUs have MIG mode on: MIG is the cause
    (such a container gets no MIG device), said with the GPUs and both ways out."""
    if cuda_probe["status"] != "fail" or cuda_probe["data"].get("cause") not in ("busy", "no_device"):
        return cuda_probe
    mig = [g for g in hardware["data"].get("gpus") or [] if g.get("mig_mode") is True]
    if not mig:
        return cuda_probe
    names = ", ".join("GPU %s" % g["index"] for g in mig)
    return dict(cuda_probe, summary="CUDA fails in a --gpus all container: %s %s MIG mode on and the container "
                                    "gets no MIG device (vectorAdd: %s)"
                                    % (names, "has" if len(mig) == 1 else "have", cuda_probe["data"].get("line")),
                remedy="give containers MIG devices (`--device nvidia.com/gpu=%s:0`, MIG layouts) or turn MIG off: "
                       "`nvidia-smi -i %s -mig 0` (a GPU in use keeps the change pending until it is idle and reset, "
                       "or a reboot)" % (mig[0]["index"], ",".join(str(g["index"]) for g in mig)),
                data=dict(cuda_probe["data"], mig_gpus=[g["index"] for g in mig]))


def check_mig_layout(declared, facts, lgi_cap=None):
    """The MIG layout the nvidia_mig role declared (its host record, or the `mig_layout` option) against the GPUs:
    MIG mode per GPU from the facts, the GPU instances from `nvidia-smi mig -lgi`. A layout lost at a reboot (the
    boot unit did not run, or failed) or changed by hand fails here."""
    command = "nvidia-smi mig -lgi"
    try:
        wanted = normalise_layout(declared)
    except LayoutError as exc:
        return result("mig_layout", "persistence", "warn", "the declared MIG layout cannot be read: %s" % exc.msg,
                      remedy="fix nvidia_mig_layout", ev=evidence(command))
    if not wanted:
        # Nothing declared, nothing to drift from (as the fabric check passes a host without NVSwitch).
        return result("mig_layout", "persistence", "ok", "no MIG layout declared (nvidia_mig_layout): nothing to compare",
                      ev=evidence(command))
    gpus = dict((g.get("index"), g) for g in facts.get("gpus") or [])
    if facts.get("state") != "ok" or not gpus:
        return result("mig_layout", "persistence", "skipped", "nvidia-smi does not work (driver layer)",
                      ev=evidence(command))
    rows = []
    if lgi_cap is not None and lgi_cap.get("rc") == 0:
        rows = parse_lgi(lgi_cap.get("stdout") or "")
    live, differ, lines = {}, [], []
    for index in sorted(wanted):
        want = wanted[index]
        gpu = gpus.get(index)
        if gpu is None:
            live[index] = None
            differ.append(index)
            lines.append("GPU %d: not on this host" % index)
            continue
        names = instance_names([r for r in rows if r["gpu"] == index])
        live[index] = names if gpu.get("mig_mode") is True else MIG_DISABLED
        have = "MIG disabled" if live[index] == MIG_DISABLED else "MIG enabled: %s" % (", ".join(names) or "no instance")
        lines.append("GPU %d: %s (declared: %s)" % (index, have, "MIG disabled" if want == MIG_DISABLED
                                                     else ", ".join(want) or "no instance"))
        if want == MIG_DISABLED:
            same = gpu.get("mig_mode") is not True
        else:
            same = gpu.get("mig_mode") is True and sorted(names) == sorted(want)
        if not same:
            differ.append(index)
    data = {"declared": dict((str(k), v) for k, v in wanted.items()),
            "live": dict((str(k), v) for k, v in live.items()), "differ": differ}
    ev = evidence(_cmd(lgi_cap) if lgi_cap else command, lines, lgi_cap.get("rc") if lgi_cap else None)
    if differ:
        first = differ[0]
        lost = live.get(first) in (MIG_DISABLED, []) and wanted[first] not in (MIG_DISABLED, [])
        return result("mig_layout", "persistence", "fail",
                      "MIG layout differs from the declared one on GPU %s: %s%s"
                      % (", ".join(str(i) for i in differ), lines[sorted(wanted).index(first)],
                         " - lost at a reboot or GPU reset?" if lost else ""),
                      remedy="apply it again: `systemctl restart gpuhost-mig` (see `journalctl -u gpuhost-mig`) or "
                             "site.yml --tags mig; stop the serving containers on the GPU first",
                      ev=ev, data=data)
    return result("mig_layout", "persistence", "ok", "MIG layout as declared on GPU %s"
                  % ", ".join(str(i) for i in sorted(wanted)), ev=ev, data=data)


def _requested_gpus(container, by_index, by_uuid):
    """The GPU facts a container's `docker inspect` device requests give it whole: `--gpus all` (Count -1, or
    "all") every GPU, a GPU index or UUID that GPU; a MIG device (`GPU:device`, `MIG-<uuid>`) no GPU whole."""
    out = []
    for req in (container.get("HostConfig") or {}).get("DeviceRequests") or []:
        if "gpu" not in [c for group in req.get("Capabilities") or [] for c in group or []]:
            continue
        ids = [str(i).strip() for i in req.get("DeviceIDs") or []]
        if req.get("Count") == -1 or "all" in ids:
            out.extend(by_index.values())
            continue
        for ref in ids:
            gpu = by_index.get(int(ref)) if ref.isdigit() else by_uuid.get(ref)
            if gpu is not None:
                out.append(gpu)
    return out


def mig_whole_decides(serving_check, execs, facts, inspected=None):
    """A serving container given a MIG-enabled GPU whole: CUDA there finds no device, so vLLM cannot start or serve
    (it exits and docker restarts it). Seen in a running container's `nvidia-smi -L` (the GPU, no MIG device under
    it) or in any serving container's device requests (`docker inspect`: a GPU index or UUID, or all). Decides the
    serving check: the cause of a container that fails or restarts there."""
    gpus = [g for g in facts.get("gpus") or [] if g.get("index") is not None]
    mig = dict((g.get("uuid"), g) for g in gpus if g.get("mig_mode") is True and g.get("uuid"))
    if not mig or serving_check.get("status") == "skipped":
        return serving_check
    whole = []
    for name in sorted(execs or {}):
        cap = execs[name]
        if cap.get("rc") != 0:
            continue
        try:
            listed = parse_list(cap.get("stdout") or "")
        except ParseError:
            continue
        for gpu in listed["gpus"]:
            if gpu.get("uuid") in mig and not gpu.get("mig_devices"):
                whole.append((name, mig[gpu["uuid"]].get("index")))
    if inspected and inspected.get("rc") == 0:
        try:
            containers = json.loads(inspected.get("stdout") or "[]")
        except ValueError:
            containers = []
        by_index = dict((int(g["index"]), g) for g in gpus)
        by_uuid = dict((g.get("uuid"), g) for g in gpus if g.get("uuid"))
        for container in containers if isinstance(containers, list) else []:
            name = (container.get("Name") or "").lstrip("/")
            for gpu in _requested_gpus(container, by_index, by_uuid):
                if gpu.get("uuid") in mig and (name, gpu.get("index")) not in whole:
                    whole.append((name, gpu.get("index")))
    if not whole:
        return serving_check
    whole.sort(key=lambda item: (item[0], item[1]))
    name, index = whole[0]
    data = dict(serving_check.get("data") or {}, mig_whole=[{"container": n, "gpu": i} for n, i in whole])
    names = sorted(set(n for n, _i in whole))
    summary = ("serving container %s is given GPU %s whole, but MIG is enabled there: CUDA in it sees no device (a "
               "MIG-enabled GPU offers only its MIG devices)" % (", ".join(names), index))
    broken = set((serving_check.get("data") or {}).get("lost") or []) | set((serving_check.get("data") or {}).get("failed") or [])
    if serving_check.get("status") == "fail" and not broken <= set(names):
        # another container's own failure stays the finding; the MIG one is added to it
        return dict(serving_check, summary="%s; also %s" % (serving_check.get("summary"), summary), data=data)
    return dict(serving_check, status="fail",
                summary=summary,
                remedy="give the instance a MIG device (vllm_instances gpus: '%s:0' or its MIG-<uuid>, `nvidia-smi -L`) "
                       "or turn MIG off on GPU %s (nvidia_mig_layout: {'%s': disabled})" % (index, index, index),
                data=data)


def uvm_decides(device_nodes, cuda_probe):
    """CUDA's unknown error in the container while /dev/nvidia-uvm is missing on the host: the missing node
    is the cause, a failure of the driver layer (not the warning a host that ran no CUDA yet gets)."""
    if cuda_probe["status"] != "fail" or cuda_probe["data"].get("cause") != "unknown_error":
        return device_nodes
    missing = [p for p in device_nodes["data"].get("missing") or [] if p.startswith("/dev/nvidia-uvm")]
    if device_nodes["status"] != "warn" or not missing:
        return device_nodes
    return result("device_nodes", "driver", "fail",
                  "missing %s: every CUDA program in a container fails (vectorAdd: %s)"
                  % (", ".join(missing), cuda_probe["data"].get("line")),
                  remedy="load nvidia-uvm and make its nodes: `nvidia-ctk system create-device-nodes --control-devices "
                         "--load-kernel-modules` (or `nvidia-modprobe -u -c=0` where nvidia-modprobe is installed); "
                         "if it will not load, read `journalctl -k -b | grep -i nvidia`",
                  ev=evidence(device_nodes["evidence"]["command"],
                              device_nodes["evidence"]["lines"] + [cuda_probe["data"].get("line")]),
                  data=dict(device_nodes["data"], cuda_probe=cuda_probe["data"].get("line")))


# ---------------------------------------------------------------------------------------------
# health


def check_zombies(facts, captures):
    """GPU memory held by pids that do not exist on this host (nvidia_gpu_facts' zombie flag)."""
    procs = facts.get("processes") or []
    zombies = [p for p in procs if p.get("zombie")]
    attempts = captures.get("smi") or []
    cmd = attempts[0]["argv"] if attempts else "nvidia-smi -q -x"
    if facts.get("state") != "ok":
        return result("zombies", "health", "skipped", "nvidia-smi does not work (driver layer)", ev=evidence(cmd))
    lines = ["pid %s %s on GPU %s: %s MiB, %s" % (p.get("pid"), p.get("name"), p.get("gpu_index"), p.get("used_mib"),
                                                 "no such process on the host (/proc/%s)" % p.get("pid")
                                                 if p.get("zombie") else "alive")
             for p in procs]
    ev = evidence("%s; test -d /proc/<pid>" % (cmd if isinstance(cmd, str) else " ".join(cmd)), lines)
    data = {"zombies": [{"pid": p.get("pid"), "name": p.get("name"), "gpu_index": p.get("gpu_index"),
                         "used_mib": p.get("used_mib")} for p in zombies]}
    if zombies:
        mib = sum(p.get("used_mib") or 0 for p in zombies)
        gpus = sorted(set(str(p.get("gpu_index")) for p in zombies))
        return result("zombies", "health", "fail", "%d MiB on GPU %s held by %d pid(s) that no longer exist: %s"
                      % (mib, ", ".join(gpus), len(zombies), ", ".join(str(p.get("pid")) for p in zombies)),
                      remedy="find the holder with `fuser -v /dev/nvidia*` and stop it; if nothing holds it, reset "
                             "the GPU (`nvidia-smi -r -i %s`, no process on it) or reboot" % gpus[0],
                      ev=ev, data=data)
    return result("zombies", "health", "ok", "%d GPU process(es), none stale" % len(procs), ev=ev, data=data)


THROTTLE_ADVICE = {
    "hw_thermal_slowdown": "the GPU is too hot: check cooling, fans and airflow (`nvidia-smi -q -d TEMPERATURE`)",
    "sw_thermal_slowdown": "the GPU is too hot: check cooling, fans and airflow (`nvidia-smi -q -d TEMPERATURE`)",
    "hw_power_brake_slowdown": "an external power brake is asserted: check the power supply and the chassis",
    "hw_slowdown": "hardware slowdown (thermal or power brake): check cooling and power delivery",
    "sw_power_cap": "the power limit is reached: expected under full load; idle, check the limit "
                    "(`nvidia-smi -q -d POWER`)",
    "applications_clocks_setting": "clocks are held by an applications clock setting (`nvidia-smi -rac` resets it)",
    "sync_boost": "clocks are held down to match another GPU in a sync-boost group",
    "display_clocks_setting": "clocks are held by a display clock setting",
}


def check_throttle(facts, captures, benign=BENIGN_CLOCK_REASONS):
    """Active clocks event (throttle) reasons other than gpu_idle."""
    attempts = captures.get("smi") or []
    xml = attempts[0]["stdout"] if attempts and attempts[0]["rc"] == 0 else ""
    cmd = attempts[0]["argv"] if attempts else "nvidia-smi -q -x"
    gpus = facts.get("gpus") or []
    if facts.get("state") != "ok" or not gpus:
        return result("throttle", "health", "skipped", "nvidia-smi does not work (driver layer)", ev=evidence(cmd))
    active = {}
    for gpu in gpus:
        reasons = [r for r in gpu.get("clocks_event_reasons_active") or [] if r not in benign]
        if reasons:
            active[gpu.get("index")] = reasons
    lines = [l for l in _grep(xml, r"<clocks_(?:event|throttle)_reason_\w+>\s*Active\s*<")
             if not any("_%s>" % b in l for b in benign)]
    ev = evidence(cmd, lines or ["GPU %s: %s" % (i, ", ".join(r)) for i, r in sorted(active.items())],
                  attempts[0]["rc"] if attempts else None)
    data = {"active": dict((str(k), v) for k, v in active.items())}
    if active:
        reasons = sorted(set(r for rs in active.values() for r in rs))
        return result("throttle", "health", "fail", "clocks held down: %s" % "; ".join(
            "GPU %s %s" % (i, ", ".join(r)) for i, r in sorted(active.items())),
            remedy="; ".join(THROTTLE_ADVICE.get(r, r) for r in reasons), ev=ev, data=data)
    unknown = all(g.get("clocks_event_reasons_active") is None for g in gpus)
    if unknown:
        return result("throttle", "health", "skipped", "nvidia-smi reports no clocks event reasons", ev=ev, data=data)
    return result("throttle", "health", "ok", "no throttling (gpu_idle aside)", ev=ev, data=data)


# The Xid table and line pattern live in the one error table (module_utils/error_catalogue.py).
XID_CATALOGUE = catalogue.XID_CATALOGUE
XID_ACTIONS = catalogue.XID_ACTIONS
_XID_SEVERITY = catalogue.XID_SEVERITY
_XID = catalogue.XID


def parse_xids(text):
    """Xid events from a kernel log (`dmesg`, `journalctl -k`): [{code, pci, pid, name, message, line}]."""
    events = []
    for line in _lines(text):
        match = _XID.search(line)
        if not match:
            continue
        rest = match.group(3) or ""
        pid = re.match(r"^pid=('?<?[^,]*>?'?)(?:,\s*|$)", rest)
        pid_value = None
        if pid:
            rest = rest[pid.end():]
            raw = pid.group(1).strip("'")
            pid_value = int(raw) if raw.isdigit() else None
        name = re.match(r"^name=([^,]*)(?:,\s*|$)", rest)
        name_value = None
        if name:
            rest = rest[name.end():]
            name_value = None if name.group(1).strip() in ("<unknown>", "") else name.group(1).strip()
        events.append({"code": int(match.group(2)), "pci": match.group(1).lower(), "pid": pid_value,
                       "name": name_value, "message": rest.strip(), "line": line.strip()})
    return events


def describe_xid(code):
    entry = XID_CATALOGUE.get(code)
    if not entry:
        return {"code": code, "description": "not in gpuhost's table", "cause": "see NVIDIA's Xid catalogue",
                "action": "RESET_GPU"}
    return {"code": code, "description": entry[0], "cause": entry[1], "action": entry[2]}


def _kernel_log_unread(cap, name, layer, command):
    """The result of a kernel-log check whose log was not read (skipped) or could not be (warn); None
    when the log is there to read."""
    if cap is None:
        return result(name, layer, "skipped", "kernel log not read", ev=evidence(command))
    if cap.get("rc") != 0:
        lines = _lines(_out(cap))[:3]
        return result(name, layer, "warn", "could not read the kernel log: %s"
                      % (lines[0] if lines else "exit status %s" % cap.get("rc")),
                      remedy="run the check as root, or set kernel_log_command (e.g. `journalctl -k -b --no-pager`)",
                      ev=evidence(_cmd(cap), lines, cap.get("rc")))
    return None


def check_xid(cap, command="dmesg"):
    """Xid errors in the kernel log since boot, with what they mean."""
    unread = _kernel_log_unread(cap, "xid", "health", command)
    if unread:
        return unread
    events = parse_xids(cap.get("stdout"))
    fallback = ["%s failed (%s): read the journal instead" % (command, cap["fallback_from"])] \
        if cap.get("fallback_from") else []
    ev = evidence(_cmd(cap), fallback + [e["line"] for e in events][-MAX_EVIDENCE_LINES:], cap.get("rc"))
    by_code = {}
    for event in events:
        by_code.setdefault(event["code"], []).append(event)
    xids = []
    for code in sorted(by_code):
        info = describe_xid(code)
        info.update(count=len(by_code[code]), gpus=sorted(set(e["pci"] for e in by_code[code])))
        xids.append(info)
    data = {"xids": xids}
    if not events:
        return result("xid", "health", "ok", "no Xid errors in the kernel log since boot", ev=ev, data=data)
    worst = max(xids, key=lambda x: _XID_SEVERITY.index(x["action"]))
    summary = "Xid errors since boot: " + "; ".join(
        "Xid %d × %d on %s (%s)" % (x["code"], x["count"], ", ".join(x["gpus"]), x["description"]) for x in xids)
    if worst["action"] == "IGNORE":
        return result("xid", "health", "ok", summary, ev=ev, data=data)
    return result("xid", "health", "fail", summary,
                  remedy="Xid %d (%s): %s" % (worst["code"], worst["cause"], XID_ACTIONS[worst["action"]]),
                  ev=ev, data=data)


def check_module_signature(cap, command="dmesg"):
    """Whether the kernel refused a module's signature (Secure Boot, lockdown, module.sig_enforce), read
    from the kernel log with the error catalogue's "kernel" rows; the fix is the row's."""
    unread = _kernel_log_unread(cap, "module_signature", "driver", command)
    if unread:
        return unread
    events = module_signature_events(cap.get("stdout"))
    data = {"rejected": [e["kind"] for e in events["rejected"]],
            "unsigned_loaded": sorted(set(e["module"] for e in events["unsigned_loaded"]))}
    if events["rejected"]:
        first = events["rejected"][0]
        entry = next(e for e in catalogue.ENTRIES if e["kind"] == first["kind"])
        return result("module_signature", "driver", "fail",
                      "module rejected by Secure Boot: %s" % entry["meaning"], remedy=entry["fix"],
                      ev=evidence(_cmd(cap), [e["line"] for e in events["rejected"]][-MAX_EVIDENCE_LINES:],
                                  cap.get("rc")), data=data)
    if events["unsigned_loaded"]:
        return result("module_signature", "driver", "ok",
                      "%s loaded without a valid signature: the kernel does not enforce module signatures (Secure "
                      "Boot off or shim validation disabled); turning Secure Boot on would reject it"
                      % ", ".join(data["unsigned_loaded"]),
                      ev=evidence(_cmd(cap), [e["line"] for e in events["unsigned_loaded"]], cap.get("rc")),
                      data=data)
    return result("module_signature", "driver", "ok", "no module signature rejection in the kernel log",
                  ev=evidence(_cmd(cap), [], cap.get("rc")), data=data)


# ---------------------------------------------------------------------------------------------
# the whole diagnosis


FABRIC_MANAGER_SERVICE = "nvidia-fabricmanager"
_FM_PACKAGE = re.compile(r"^nvidia-fabricmanager(?:-(?P<branch>\d{3}))?$")


def check_fabric(fabric, nvswitch_addresses, packages_text, fm_active, loaded_version):
    """On an NVSwitch (HGX) host CUDA starts only once the fabric manager, at exactly the driver's version, has
    set the fabric up; nvidia-smi looks healthy without it while every CUDA program fails with 802.
    fabric, nvswitch_addresses: the GPU facts' `fabric` (gpu_facts.fabric_facts) and `nvswitches`;
    packages_text: `dpkg-query -W` of the host; fm_active: `systemctl is-active nvidia-fabricmanager`;
    loaded_version: the loaded module's version."""
    command = ("nvidia-smi -q -x (fabric); lspci -nn (NVSwitch); dpkg-query -W 'nvidia-fabricmanager*'; "
               "systemctl is-active %s" % FABRIC_MANAGER_SERVICE)
    fabric = fabric or {}
    gpus = fabric.get("gpus") or []
    fm = dict((name, upstream_version(version)) for name, version in installed_packages(packages_text).items()
              if _FM_PACKAGE.match(name))
    lines = ["%s: State %s, Status %s" % (f["pci_bus_id"] or "GPU %d" % i, f["state"], f["status"])
             for i, f in enumerate(gpus)][:8]
    lines += ["NVSwitch %s" % a for a in (nvswitch_addresses or [])[:4]]
    lines += ["%s %s installed" % (n, v) for n, v in sorted(fm.items())]
    lines.append("%s: %s" % (FABRIC_MANAGER_SERVICE, fm_active or "unknown"))
    state = fabric.get("state") or "unknown"
    data = {"needed": bool(fabric.get("needed")), "reason": fabric.get("reason"), "state": state,
            "nvswitches": list(nvswitch_addresses or []), "fabric_manager": fm, "active": fm_active,
            "driver_version": loaded_version}
    ev = evidence(command, lines)
    if not fabric.get("needed"):
        if state == "unknown":
            return result("fabric", "fabric", "skipped", "no NVSwitch on the PCI bus and no fabric state from "
                          "nvidia-smi (%s)" % (fabric.get("message") or "no GPU facts"), ev=ev, data=data)
        return result("fabric", "fabric", "ok", "no NVSwitch fabric: %s" % fabric.get("reason"), ev=ev, data=data)
    branch = (loaded_version or "").split(".")[0] or "<branch>"
    install = ("install the fabric manager at the driver's version: `apt-get install nvidia-fabricmanager-%s=%s-*` "
               "(Ubuntu's archive; NVIDIA's CUDA repository names it nvidia-fabricmanager from 580 on), hold it "
               "with the driver, then `systemctl enable --now %s`" % (branch, loaded_version or "<driver version>",
                                                                     FABRIC_MANAGER_SERVICE))
    if not fm:
        return result("fabric", "fabric", "fail", "%s, but no nvidia-fabricmanager package is installed: every CUDA "
                      "program fails with 802 (system not yet initialized)" % fabric.get("reason"), remedy=install,
                      ev=ev, data=data)
    wrong = sorted(n for n, v in fm.items() if loaded_version and v != loaded_version)
    if wrong:
        return result("fabric", "fabric", "fail", "fabric manager %s, driver %s: the fabric manager refuses to start "
                      "on another driver version" % (fm[wrong[0]], loaded_version), remedy=install.replace(
                          "install the fabric manager", "install the fabric manager again"), ev=ev, data=data)
    if fm_active != "active":
        return result("fabric", "fabric", "fail", "%s is not running (%s): the fabric is not set up"
                      % (FABRIC_MANAGER_SERVICE, fm_active or "unknown"),
                      remedy="`systemctl enable --now %s` (after a driver reload: restart it); "
                             "`journalctl -u %s` says why it stopped" % (FABRIC_MANAGER_SERVICE, FABRIC_MANAGER_SERVICE),
                      ev=ev, data=data)
    if state in ("not_ready", "failed"):
        return result("fabric", "fabric", "fail", fabric.get("message"), remedy=fabric.get("fix"), ev=ev, data=data)
    if state == "unhealthy":
        return result("fabric", "fabric", "warn", fabric.get("message"), remedy=fabric.get("fix"), ev=ev, data=data)
    if state == "unknown":
        return result("fabric", "fabric", "warn", "%s runs at the driver's version, but nvidia-smi shows no fabric "
                      "state" % FABRIC_MANAGER_SERVICE, remedy="read `nvidia-smi -q` (Fabric) on a driver that "
                      "prints it", ev=ev, data=data)
    return result("fabric", "fabric", "ok", "%s %s running; %s" % (FABRIC_MANAGER_SERVICE, loaded_version,
                                                                   fabric.get("message")), ev=ev, data=data)


def check_next_boot(boot):
    """The kernel a reboot starts has an nvidia module that will load (boot: secure_boot.boot_facts()). A newer
    kernel installed without a signed module package or a DKMS build comes up without the driver."""
    command = "ls /boot; grep nvidia /lib/modules/KVER/modules.dep; mokutil --sb-state; modinfo nvidia"
    if not boot:
        return result("next_boot", "driver", "skipped", "boot facts not read", ev=evidence(command))
    kernels = boot.get("kernels") or {}
    state = boot.get("secure_boot") or {}
    module = boot.get("module") or {}
    signatures = {True: "enforced", False: "not enforced", None: "unknown"}[state.get("enforcing")]
    lines = ["module signatures: %s%s" % (signatures, " (%s)" % state["line"] if state.get("line") else ""),
             "module: %s%s" % (module.get("kind") or "unknown",
                               " (%s)" % module["evidence"] if module.get("evidence") else "")]
    with_module = set(kernels.get("with_module") or ())
    for kver in kernels.get("installed") or []:
        lines.append("kernel %s%s: %s" % (kver, " (running)" if kver == kernels.get("running") else "",
                                           "nvidia module" if kver in with_module else "no nvidia module"))
    data = {"running": kernels.get("running"), "next_boot": kernels.get("next_boot"),
            "stranded": kernels.get("stranded") or [], "module_kind": module.get("kind"),
            "secure_boot_enforcing": state.get("enforcing"), "loads": boot.get("loads")}
    ev = evidence(command, lines)
    problem = next_boot_problem(boot)
    if problem:
        hit = next((k for k in data["stranded"] if k["kver"] == kernels.get("next_boot")), {})
        return result("next_boot", "driver", "warn", problem, remedy=hit.get("fix") or "install the nvidia module "
                      "for that kernel before rebooting", ev=ev, data=data)
    if boot.get("loads") is False:
        return result("next_boot", "driver", "warn", "the nvidia module would not load at the next boot: %s"
                      % boot.get("reason"), remedy=boot.get("fix"), ev=ev, data=data)
    if not kernels.get("next_boot"):
        return result("next_boot", "driver", "skipped", "no installed kernel could be read", ev=ev, data=data)
    return result("next_boot", "driver", "ok", "the next boot (kernel %s) has its nvidia module (%s); module "
                  "signatures %s" % (kernels["next_boot"], module.get("kind") or "source unknown", signatures),
                  ev=ev, data=data)

def summarise(checks, required_layers=DEFAULT_REQUIRED_LAYERS, titles=None):
    """Layers, first failing required layer and the message. Fails in layers that are not required
    are reported as warn (the check keeps `required: false`). titles: the engine's titles of layers,
    over LAYER_TITLES."""
    titles = dict(LAYER_TITLES, **(titles or {}))
    required = set(required_layers)
    out_checks = []
    for check in checks:
        check = dict(check)
        check["required"] = check["layer"] in required
        if check["status"] == "fail" and not check["required"]:
            check["status"] = "warn"
            check["summary"] = check["summary"] + " (layer not required: reported as warn)"
        out_checks.append(check)
    layers = {}
    for layer in LAYERS:
        mine = [c for c in out_checks if c["layer"] == layer]
        statuses = [c["status"] for c in mine]
        if "fail" in statuses:
            status = "fail"
        elif "warn" in statuses:
            status = "warn"
        elif statuses and all(s == "skipped" for s in statuses):
            status = "skipped"
        elif statuses:
            status = "ok"
        else:
            status = "skipped"
        first = next((c for c in mine if c["status"] == status and status in ("fail", "warn")), None)
        layers[layer] = {"status": status, "required": layer in required, "title": titles[layer],
                         "checks": [c["name"] for c in mine],
                         "summary": first["summary"] if first else
                         "; ".join(c["summary"] for c in mine if c["status"] == "ok")[:400],
                         "remedy": first["remedy"] if first else None}
    failed_layer = next((l for l in LAYERS if layers[l]["status"] == "fail"), None)
    if failed_layer:
        first = next(c for c in out_checks if c["layer"] == failed_layer and c["status"] == "fail")
        message = "%s: %s — %s" % (titles[failed_layer], first["summary"], first["remedy"])
        remedy = first["remedy"]
    else:
        warned = [l for l in LAYERS if layers[l]["status"] == "warn"]
        remedy = None
        if warned:
            message = "every required layer works; warnings: %s" % "; ".join(
                "%s: %s" % (titles[l], layers[l]["summary"]) for l in warned)
        else:
            message = "every layer works"
    counts = dict((s, len([c for c in out_checks if c["status"] == s])) for s in STATUSES)
    return {"ok": failed_layer is None, "failed_layer": failed_layer, "message": message, "remedy": remedy,
            "layers": layers, "checks": out_checks, "counts": counts, "required_layers": [l for l in LAYERS
                                                                                      if l in required]}


def guarded(name, layer, fn, *args, **kwargs):
    """fn(*args) or, when it raises (a bug here, not the host), a warning saying so: one broken check
    never hides the others or fails the task."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - reported as the check's result
        return result(name, layer, "warn", "gpu_stack_check internal error in check %s: %s: %s"
                      % (name, type(exc).__name__, exc), remedy="report this as a gpuhost bug, with the evidence",
                      ev=evidence("(internal)"))


def evaluate(captures, options=None):
    """Captures (see capture()) -> the diagnosis. Pure apart from the pid_exists callable in captures."""
    opts = dict(DEFAULT_OPTIONS, **(options or {}))
    gpu_caps = captures["gpu"]
    facts = captures.get("facts") or build_facts(gpu_caps, pid_exists=captures.get("pid_exists"))
    image = opts["check_image"]
    engine = captures.get("engine") or "docker"
    words = ENGINE_WORDS[engine]
    kernel_check = guarded("kernel_module", "driver", check_kernel_module, gpu_caps.get("proc_version"), facts,
                           gpu_caps.get("proc_version_path") or DEFAULT_PROC_VERSION)
    if engine == "containerd":
        docker_check = guarded("containerd", "docker", check_containerd, captures.get("ctr_version"),
                               captures.get("ctr_path"))
        runtime_check = guarded("runtime", "runtime_config", check_containerd_runtime,
                                captures.get("containerd_config_dump"), captures.get("runtime_bin_found"))
    else:
        docker_check = guarded("docker", "docker", check_docker, captures.get("docker_info"),
                               captures.get("docker_path"), captures.get("daemon_json"),
                               captures.get("dockerd_validate"), captures.get("dockerd_version"),
                               captures.get("runtime_bin_found"), opts["docker_config"])
        runtime_check = guarded("runtime", "runtime_config", check_runtime, captures.get("docker_info"),
                                captures.get("daemon_json"), captures.get("runtime_bin_found"), opts["docker_config"])
    toolkit_check = guarded("toolkit", "toolkit", check_toolkit, captures.get("dpkg"), captures.get("ctk_version"),
                            captures.get("ctk_path"), captures.get("hook_path"), opts["toolkit_packages"])
    cdi_list_check = guarded("cdi_list", "cdi", check_cdi_list, captures.get("cdi_list"), captures.get("ctk_path"))
    host_uuids = [g.get("uuid") for g in facts.get("gpus") or [] if g.get("uuid")]
    gpus_cmd = evidence("%s %s %s nvidia-smi -L" % (words["run"], words["gpus"], image))
    if not opts["container_check"]:
        container_gpus = result("container_gpus", "container", "skipped",
                                "container check disabled (container_check)", ev=gpus_cmd)
    elif docker_check["status"] != "ok":
        container_gpus = result("container_gpus", "container", "skipped", "%s is not running (%s layer)"
                                % (engine, "docker" if engine == "docker" else "engine"), ev=gpus_cmd)
    else:
        container_gpus = guarded("container_gpus", "container", check_container, captures.get("container_gpus"),
                                 host_uuids, image, "gpus", engine=engine)
    if captures.get("container_cdi") is not None:
        container_cdi = guarded("container_cdi", "container", check_container, captures["container_cdi"],
                                host_uuids, image, "cdi")
    else:
        container_cdi = result("container_cdi", "container", "skipped", captures.get("container_cdi_skipped")
                               or "not run", ev=evidence("%s --device nvidia.com/gpu=all %s nvidia-smi -L"
                                                         % (words["run"], image)))
    probe_image = opts["cuda_probe_image"]
    probe_cmd = "%s %s %s" % (words["run"], words["gpus"], probe_image or "<cuda_probe_image>")
    if not probe_image:
        cuda_probe = result("container_cuda", "container", "skipped", "CUDA probe disabled (cuda_probe_image: '')",
                            ev=evidence(probe_cmd))
    elif container_gpus["status"] != "ok":
        cuda_probe = result("container_cuda", "container", "skipped", "the %s container check did not pass"
                            % words["gpus"], ev=evidence("%s %s" % (probe_cmd, " ".join(opts["cuda_probe_command"]))))
    else:
        cuda_probe = guarded("container_cuda", "container", check_cuda_probe, captures.get("container_cuda"),
                             probe_image, opts["cuda_probe_command"], engine=engine)
    cdi_spec_check = spec_version_decides(
        guarded("cdi_spec", "cdi", check_cdi_spec, captures.get("cdi_specs") or {},
                facts.get("driver_version_kernel"), facts.get("gpu_count"), opts["cdi_spec_path"],
                mig_refs=["%s:%s" % (g.get("index"), d.get("index")) for g in facts.get("gpus") or []
                          if g.get("mig_mode") is True for d in g.get("mig_devices") or []]),
        guarded("cdi_spec_version", "cdi", check_cdi_spec_version, captures.get("cdi_specs") or {},
                {engine: docker_check["data"].get("version")}, opts["cdi_spec_path"]))
    if engine == "docker" and docker_check["status"] == "ok":
        gpus_path_check = guarded("gpus_path", "container", check_gpus_path, captures.get("docker_info"),
                                  captures.get("cdi_hook_path"), captures.get("hook_path"),
                                  captures.get("container_env"), captures.get("container_gpus"), cdi_spec_check)
    else:
        gpus_path_check = result("gpus_path", "container", "skipped", "%s is not running" % engine
                                 if docker_check["status"] != "ok" else "`ctr run` goes through the nvidia runtime, "
                                 "not docker's --gpus", ev=evidence("docker info; docker run --rm --gpus all "
                                                                    "--entrypoint env IMAGE"))
    dev_char_check = guarded("dev_char", "runtime_config", check_dev_char, captures.get("nodes"),
                             captures.get("dev_char_links"))
    if engine == "docker" and docker_check["status"] == "ok":
        serving_check = guarded("serving_gpus", "container", check_serving_gpus, captures.get("serving"),
                                captures.get("serving_exec") or {}, dev_char_check)
        serving_check = mig_whole_decides(serving_check, captures.get("serving_exec") or {}, facts,
                                          captures.get("serving_inspect"))
    else:
        serving_check = result("serving_gpus", "container", "skipped", "%s is not running" % engine
                               if docker_check["status"] != "ok" else "serving containers run on docker",
                               ev=evidence("docker exec NAME nvidia-smi -L"))
    xid_check = guarded("xid", "health", check_xid, captures.get("kernel_log"), opts["kernel_log_command_text"])
    signature_check = guarded("module_signature", "driver", check_module_signature, captures.get("kernel_log"),
                              opts["kernel_log_command_text"])
    if signature_check["status"] == "warn" and xid_check["status"] == "warn":
        # One unreadable kernel log is one warning (the xid check's), not two in two layers.
        signature_check = result("module_signature", "driver", "skipped", "kernel log unreadable (see the xid check)",
                                 ev=signature_check["evidence"])
    next_boot_check = guarded("next_boot", "driver", check_next_boot, captures.get("boot"))
    fabric_check = guarded("fabric", "fabric", check_fabric, facts.get("fabric"), facts.get("nvswitches"),
                           (captures.get("boot_caps") or {}).get("packages"), captures.get("fabricmanager_active"),
                           facts.get("driver_version_kernel"))
    smi_attempts = gpu_caps.get("smi") or []
    smi_text = "\n".join(_out(a) for a in smi_attempts)
    xid_events = parse_xids((captures.get("kernel_log") or {}).get("stdout")) if captures.get("kernel_log") else []
    hardware_check = guarded("hardware", "hardware", check_hardware, facts, xid_events, smi_text)
    cuda_probe = mig_decides(cuda_probe, hardware_check)
    checks = [
        hardware_check,
        guarded("pci", "driver", check_pci, facts, gpu_caps.get("lspci")),
        kernel_check,
        signature_check,
        next_boot_check,
        uvm_decides(guarded("device_nodes", "driver", check_device_nodes, captures.get("nodes") or {}, facts,
                            captures.get("proc_devices"), module_loaded=bool(kernel_check["data"].get("version"))),
                    cuda_probe),
        guarded("nvml", "driver", check_nvml, facts, gpu_caps),
        fabric_check,
        guarded("persistence", "persistence", check_persistence, facts, gpu_caps, captures.get("persistenced_active"),
                captures.get("persistenced_enabled")),
        guarded("mig_layout", "persistence", check_mig_layout, opts["mig_layout"], facts, captures.get("mig_lgi")),
        docker_check,
        toolkit_check,
        runtime_check,
        dev_char_check,
        cdi_spec_check,
        cdi_list_check,
        container_gpus,
        gpus_path_check,
        container_cdi,
        cuda_probe,
        serving_check,
        guarded("zombies", "health", check_zombies, facts, gpu_caps),
        guarded("throttle", "health", check_throttle, facts, gpu_caps, opts["benign_clock_reasons"]),
        xid_check,
    ]
    out = summarise(checks, opts["required_layers"], ENGINE_TITLES.get(engine))
    out.update({
        "container_engine": engine,
        "engine_version": docker_check["data"].get("version"),
        "hardware": next((c["data"].get("gpus", []) for c in checks if c["name"] == "hardware"), []),
        "driver_version": facts.get("driver_version_kernel") or facts.get("driver_version_userspace"),
        "gpu_count": facts.get("gpu_count"), "gpu_state": facts.get("state"),
        "gpus": [{"index": g.get("index"), "name": g.get("name"), "uuid": g.get("uuid")}
                 for g in facts.get("gpus") or []],
        "docker_version": docker_check["data"].get("version") if engine == "docker" else None,
        "toolkit_version": toolkit_check["data"].get("nvidia_ctk_version"),
        "cdi_devices": cdi_list_check["data"].get("devices", []),
        "gpus_path": dict((k, gpus_path_check["data"].get(k)) for k in ("path", "reason", "predicted"))
        if gpus_path_check["status"] != "skipped" else None,
        "xids": xid_check["data"].get("xids", []),
    })
    return out


DEFAULT_OPTIONS = {
    "required_layers": DEFAULT_REQUIRED_LAYERS,
    "check_image": DEFAULT_CHECK_IMAGE,
    "cuda_probe_image": DEFAULT_CUDA_PROBE_IMAGE,
    "cuda_probe_command": DEFAULT_CUDA_PROBE_COMMAND,
    "container_check": True,
    "cdi_container_check": "auto",
    "kernel_log_command": ["dmesg"],
    "kernel_log_command_text": "dmesg",
    "cdi_spec_path": DEFAULT_CDI_SPEC,
    "toolkit_packages": DEFAULT_TOOLKIT_PACKAGES,
    "docker_config": DEFAULT_DOCKER_CONFIG,
    "benign_clock_reasons": BENIGN_CLOCK_REASONS,
    "nvidia_smi_path": None,
    "proc_version_path": DEFAULT_PROC_VERSION,
    "container_engine": "auto",
    "containerd_namespace": DEFAULT_CONTAINERD_NAMESPACE,
    "mig_layout": None,
}


def kernel_log_argv(value):
    """kernel_log_command as an argv list (a string is split like a shell would, without a shell)."""
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return shlex.split(str(value or "dmesg"))


# ---------------------------------------------------------------------------------------------
# capture: what runs on the host (all of it read-only; the container check is a --rm container)


def _run(io, argv):
    rc, out, err = io.run(argv)
    return {"argv": list(argv), "rc": rc, "stdout": out or "", "stderr": err or ""}


def _node(io, path):
    st = io.stat(path)
    if st is None:
        return None
    mode = st.st_mode
    if stat_mod.S_ISCHR(mode):
        kind = "char"
    elif stat_mod.S_ISBLK(mode):
        kind = "block"
    elif stat_mod.S_ISDIR(mode):
        kind = "directory"
    else:
        kind = "file"
    return {"kind": kind, "major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev)}


def _spec_files(io):
    found = {}
    for directory in CDI_DIRS:
        for name in io.listdir(directory) or []:
            if name.endswith((".yaml", ".yml", ".json")):
                path = directory.rstrip("/") + "/" + name
                text = io.read(path)
                if text is not None:
                    found[path] = text
    return found


def capture(io, options=None):
    """Run what the host has (read-only) and return the raw captures for evaluate()."""
    opts = dict(DEFAULT_OPTIONS, **(options or {}))
    caps = {}
    gpu = capture_gpu(io, opts["nvidia_smi_path"], opts["proc_version_path"])
    caps["gpu"] = gpu
    caps["pid_exists"] = lambda pid: io.exists("/proc/%d" % int(pid))
    facts = build_facts(gpu, pid_exists=caps["pid_exists"])
    caps["facts"] = facts
    nodes = {}
    for name in io.listdir("/dev") or []:
        if name.startswith("nvidia"):
            nodes["/dev/" + name] = _node(io, "/dev/" + name)
    for gpu_fact in facts.get("gpus") or []:
        if gpu_fact.get("minor_number") is not None:
            path = "/dev/nvidia%d" % gpu_fact["minor_number"]
            nodes.setdefault(path, _node(io, path))
    for path in ("/dev/nvidiactl", "/dev/nvidia-uvm"):
        nodes.setdefault(path, _node(io, path))
    caps["nodes"] = dict((p, n) for p, n in nodes.items() if n is not None)
    for name in io.listdir("/dev/nvidia-caps") or []:
        node = _node(io, "/dev/nvidia-caps/" + name)
        if node is not None:
            caps["nodes"]["/dev/nvidia-caps/" + name] = node
    readlink = getattr(io, "readlink", None)
    caps["dev_char_links"] = dict(
        (link, readlink(link) if readlink else None)
        for link in dev_char_links(_char_numbers(caps["nodes"])))
    caps["proc_devices"] = io.read("/proc/devices")
    if opts["mig_layout"] or any(g.get("mig_mode") is True for g in facts.get("gpus") or []):
        caps["mig_lgi"] = _run(io, [facts.get("nvidia_smi_path") or opts["nvidia_smi_path"] or "nvidia-smi", "mig",
                                    "-lgi"])
    caps["boot_caps"] = capture_boot(io)
    caps["boot"] = boot_facts(caps["boot_caps"])
    systemctl = io.which("systemctl")
    if systemctl:
        rc, out, _err = io.run([systemctl, "is-active", "nvidia-persistenced"])
        caps["persistenced_active"] = (out or "").strip() or None
        rc, out, _err = io.run([systemctl, "is-enabled", "nvidia-persistenced"])
        caps["persistenced_enabled"] = (out or "").strip() or None
        rc, out, _err = io.run([systemctl, "is-active", FABRIC_MANAGER_SERVICE])
        caps["fabricmanager_active"] = (out or "").strip() or None
    docker = io.which("docker")
    ctr = io.which("ctr")
    caps["engine"] = choose_engine(opts["container_engine"], docker, ctr)
    if caps["engine"] == "containerd":
        return _capture_containerd(io, opts, caps, ctr)
    caps["docker_path"] = docker
    if docker:
        caps["docker_info"] = _run(io, [docker, "info", "--format", "{{json .}}"])
    caps["daemon_json"] = io.read(opts["docker_config"])
    dockerd = io.which("dockerd")
    if docker and dockerd and parse_docker_info(caps.get("docker_info"))[0] is None:
        # The daemon is down: ask the engine itself what it makes of its config (read-only, 23+).
        caps["dockerd_validate"] = _run(io, [dockerd, "--validate", "--config-file", opts["docker_config"]])
        caps["dockerd_version"] = " ".join(_lines(_out(_run(io, [dockerd, "--version"]))))
    _capture_toolkit(io, opts, caps)
    info, _error = parse_docker_info(caps.get("docker_info")) if docker else (None, None)
    if info and "nvidia" in (info.get("Runtimes") or {}):
        runtime = info["Runtimes"]["nvidia"]
        path = runtime.get("path") if isinstance(runtime, dict) else None
        if path:
            caps["runtime_bin_found"] = bool(io.exists(path) if path.startswith("/") else io.which(path))
    if info:
        # Read-only: `nvidia-smi -L` in each running serving container, as it is.
        caps["serving"] = _run(io, [docker, "ps", "--filter", "label=" + SERVING_LABEL, "--filter", "status=running",
                                    "--format", "{{.Names}}"])
        if caps["serving"]["rc"] == 0:
            caps["serving_exec"] = dict((name, _run(io, [docker, "exec", name, "nvidia-smi", "-L"]))
                                        for name in _lines(caps["serving"]["stdout"]) if name.strip())
        # Every serving container, running or not: the device requests of one that exits and restarts.
        every = _run(io, [docker, "ps", "-a", "--filter", "label=" + SERVING_LABEL, "--format", "{{.Names}}"])
        names = [n.strip() for n in _lines(every["stdout"])] if every["rc"] == 0 else []
        if names:
            caps["serving_inspect"] = _run(io, [docker, "inspect"] + names)
    if info and opts["container_check"]:
        # --pull never: a missing image is reported, never fetched (Docker 20.10+).
        base = [docker, "run", "--rm", "--pull", "never", "--network", "none"]
        caps["container_gpus"] = _run(io, base + ["--gpus", "all", opts["check_image"], "nvidia-smi", "-L"])
        if caps["container_gpus"].get("rc") == 0:
            # The process environment shows which path --gpus took (NVIDIA_VISIBLE_DEVICES: void for CDI).
            caps["container_env"] = _run(io, base + ["--gpus", "all", "--entrypoint", "env", opts["check_image"]])
        if opts["cuda_probe_image"] and caps["container_gpus"].get("rc") == 0:
            caps["container_cuda"] = _run(io, base + ["--gpus", "all", opts["cuda_probe_image"]]
                                          + list(opts["cuda_probe_command"]))
        try:
            config = parse_daemon_json(caps.get("daemon_json"))
        except DaemonJsonError:
            config = {}
        mode = opts["cdi_container_check"]
        if mode == "always" or (mode == "auto" and cdi_enabled(info, config)):
            caps["container_cdi"] = _run(io, base + ["--device", "nvidia.com/gpu=all", opts["check_image"],
                                                     "nvidia-smi", "-L"])
        else:
            caps["container_cdi_skipped"] = (
                "CDI check disabled (cdi_container_check: never)" if mode == "never" else
                "docker %s does not resolve CDI devices (needs 25+ with features.cdi)" % info.get("ServerVersion"))
    elif not opts["container_check"]:
        caps["container_cdi_skipped"] = "container check disabled (container_check)"
    else:
        caps["container_cdi_skipped"] = "docker is not running (docker layer)"
    _capture_kernel_log(io, opts, caps)
    return caps


def _capture_toolkit(io, opts, caps):
    """The toolkit's packages and tools, the CDI specs and what nvidia-ctk lists (every engine)."""
    dpkg_query = io.which("dpkg-query")
    if dpkg_query:
        caps["dpkg"] = _run(io, [dpkg_query, "-W", "-f", "${Package}\t${db:Status-Abbrev}\t${Version}\n"]
                            + list(opts["toolkit_packages"]))
    ctk = io.which("nvidia-ctk")
    caps["ctk_path"] = ctk
    caps["hook_path"] = io.which("nvidia-container-runtime-hook")
    caps["cdi_hook_path"] = io.which("nvidia-cdi-hook")
    if ctk:
        caps["ctk_version"] = _run(io, [ctk, "--version"])
        caps["cdi_list"] = _run(io, [ctk, "cdi", "list"])
    caps["cdi_specs"] = _spec_files(io)


def _capture_containerd(io, opts, caps, ctr):
    """containerd's side: the server version, the merged config, and `ctr run --rm` through the nvidia
    runtime's binary (what a RuntimeClass nvidia pod runs), in its own network namespace, pulling nothing."""
    caps["ctr_path"] = ctr
    if ctr:
        caps["ctr_version"] = _run(io, [ctr, "version"])
    containerd = io.which("containerd")
    if containerd:
        caps["containerd_config_dump"] = _run(io, [containerd, "config", "dump"])
    _capture_toolkit(io, opts, caps)
    dump = caps.get("containerd_config_dump") or {}
    binaries = runtime_binaries(dump.get("stdout")) if dump.get("rc") == 0 else {}
    binary = binaries.get("nvidia") or DEFAULT_RUNTIME_BINARY
    if "nvidia" in binaries:
        caps["runtime_bin_found"] = bool(io.exists(binary) if binary.startswith("/") else io.which(binary))
    answering = ctr and parse_ctr_version(_out(caps.get("ctr_version")))["server"]
    if answering and opts["container_check"]:
        base = [ctr, "-n", opts["containerd_namespace"], "run", "--rm", "--runc-binary", binary,
                "--env", "NVIDIA_VISIBLE_DEVICES=all"]
        caps["container_gpus"] = _run(io, base + [normalize_image_ref(opts["check_image"]),
                                                  "gpuhost-stack-check-%d" % os.getpid(), "nvidia-smi", "-L"])
        if opts["cuda_probe_image"] and caps["container_gpus"].get("rc") == 0:
            caps["container_cuda"] = _run(io, base + [normalize_image_ref(opts["cuda_probe_image"]),
                                                      "gpuhost-stack-probe-%d" % os.getpid()]
                                          + list(opts["cuda_probe_command"]))
    # ctr resolves CDI names only from containerd 2.0 (`ctr run --device`); pods get them through the
    # CRI (enable_cdi) and the device plugin, which this check does not stand in for.
    caps["container_cdi_skipped"] = "no CDI container through ctr (containerd's CDI is the CRI's, for pods)"
    _capture_kernel_log(io, opts, caps)
    return caps


def _capture_kernel_log(io, opts, caps):
    """The kernel log since boot (dmesg, else the journal where dmesg is restricted)."""
    argv = kernel_log_argv(opts["kernel_log_command"])
    exe = argv[0] if argv[0].startswith("/") else io.which(argv[0])
    if exe:
        caps["kernel_log"] = _run(io, [exe] + argv[1:])
    else:
        caps["kernel_log"] = {"argv": argv, "rc": 127, "stdout": "", "stderr": "%s: not found" % argv[0]}
    journalctl = io.which("journalctl")
    if caps["kernel_log"]["rc"] != 0 and os.path.basename(argv[0]) == "dmesg" and journalctl:
        # kernel.dmesg_restrict=1: "dmesg: read kernel buffer failed: Operation not permitted". The
        # journal keeps the kernel's messages of this boot too.
        journal = _run(io, [journalctl, "-k", "-b", "--no-pager", "-q"])
        if journal["rc"] == 0:
            journal["fallback_from"] = " ".join(_lines(_out(caps["kernel_log"]))[:1])
            caps["kernel_log"] = journal
