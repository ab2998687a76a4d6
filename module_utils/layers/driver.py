# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Layer `driver`: the GPU on the PCI bus, the kernel module and its version, its signature under Secure Boot,
the next boot's module, the device nodes and NVML (userspace library against the kernel module)."""
import json
import re

from ansible.module_utils.diagnosis import error_catalogue as catalogue
from ansible.module_utils.gpu.host_parse import HostParseError, parse_proc_version
from ansible.module_utils.driver.driver_reload import STATE_PATH as DRIVER_UPGRADE_PATH
from ansible.module_utils.driver.secure_boot import module_signature_events, next_boot_problem
from ansible.module_utils.layers.generic import basics
from ansible.module_utils.layers.base import (
    DEFAULT_PROC_VERSION, MAX_EVIDENCE_LINES, _cmd, _grep, _kernel_log_unread, _lines, _out, evidence, guarded,
    result)

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


def check_driver_upgrade(text, loaded, path=DRIVER_UPGRADE_PATH):
    """The last driver change's state (nvidia_driver_reload's record): a reload that stopped half way leaves serving
    containers and NVIDIA services stopped, which this names until a run finishes it."""
    command = "cat %s" % path
    if not (text or "").strip():
        return result("driver_upgrade", "driver", "ok", "no driver change in progress", ev=evidence(command))
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    if not isinstance(record, dict):
        return result("driver_upgrade", "driver", "warn", "%s is not a JSON object" % path,
                      remedy="move it aside; the next driver change writes it again", ev=evidence(command, [text[:200]]))
    state, since = record.get("state"), record.get("since")
    change = "%s -> %s" % (record.get("from") or "none", record.get("to"))
    ev = evidence(command, ["state: %s since %s (%s, %s)" % (state, since, change, record.get("method"))])
    data = {"upgrade": record}
    if state == "verified" or (loaded and loaded == record.get("to")):
        return result("driver_upgrade", "driver", "ok", "driver change %s done (%s, %s)" % (
            change, "reloaded without a reboot" if state == "verified" else state, since), ev=ev, data=data)
    stopped = ", ".join((record.get("containers") or []) + (record.get("services") or []))
    return result("driver_upgrade", "driver", "warn", "driver change %s stopped at %s (since %s)%s%s" % (
        change, state, since, ": %s" % record["reason"] if record.get("reason") else "",
        "; stopped for it: %s" % stopped if stopped else ""),
        remedy="run site.yml --tags driver to finish it (it reloads the driver or reboots, and starts what it stopped)",
        ev=ev, data=data)


def _driver_upgrade(ctx):
    return guarded("driver_upgrade", "driver", check_driver_upgrade, ctx.get("driver_upgrade"),
                   ctx.facts.get("driver_version_kernel"))


def _pci(ctx):
    return guarded("pci", "driver", check_pci, ctx.facts, ctx.gpu.get("lspci"))


def stranded_kernel_leads(check, boot, driver_installed=True):
    """A module that is not loaded because the running kernel has none: that cause leads, with its remedy (the
    `modprobe nvidia` of the generic remedy fails there, and a reboot starts the same kernel without it). Without
    the driver's userspace there is no driver to build a module of: installing it stays the remedy."""
    if check["status"] != "fail" or check["data"].get("version") or not driver_installed:
        return check
    kernels = (boot or {}).get("kernels") or {}
    running = kernels.get("running")
    hit = next((k for k in kernels.get("stranded") or [] if k.get("kver") == running), None)
    if not running or not hit:
        return check
    return result("kernel_module", "driver", "fail", "%s: no nvidia module is installed for the running kernel %s"
                  % (check["summary"], running), remedy=hit["fix"], ev=check["evidence"],
                  data=dict(check["data"], running_kernel_without_module=running))


def _kernel_module(ctx):
    check = guarded("kernel_module", "driver", check_kernel_module, ctx.gpu.get("proc_version"), ctx.facts,
                    ctx.gpu.get("proc_version_path") or DEFAULT_PROC_VERSION)
    return stranded_kernel_leads(check, ctx.get("boot"), bool(ctx.facts.get("nvidia_smi_path")))


def _module_signature(ctx):
    check = guarded("module_signature", "driver", check_module_signature, ctx.get("kernel_log"),
                    ctx.opts["kernel_log_command_text"])
    if check["status"] == "warn" and ctx.check("xid")["status"] == "warn":
        # One unreadable kernel log is one warning (the xid check's), not two in two layers.
        check = result("module_signature", "driver", "skipped", "kernel log unreadable (see the xid check)",
                       ev=check["evidence"])
    return check


def _next_boot(ctx):
    return guarded("next_boot", "driver", check_next_boot, ctx.get("boot"))


def _device_nodes(ctx):
    nodes = guarded("device_nodes", "driver", check_device_nodes, ctx.get("nodes") or {}, ctx.facts,
                    ctx.get("proc_devices"), module_loaded=bool(ctx.check("kernel_module")["data"].get("version")))
    return uvm_decides(nodes, ctx.check("container_cuda"))


def _nvml(ctx):
    return guarded("nvml", "driver", check_nvml, ctx.facts, ctx.gpu)


CHECKS = {"driver_basics": basics("driver"), "pci": _pci, "kernel_module": _kernel_module,
          "module_signature": _module_signature, "next_boot": _next_boot, "driver_upgrade": _driver_upgrade,
          "device_nodes": _device_nodes, "nvml": _nvml}
