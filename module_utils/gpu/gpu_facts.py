# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The nvidia_gpu_facts pipeline: what to run on a host, and how its outputs become facts.

Pure stdlib, no Ansible imports. All host access goes through an injected `io` object (a HostIO of
host/runner.py), so the whole pipeline runs in unit tests and benchmarks on captured outputs.

    captures = capture(io, ...)          # runs commands / reads files (via io)
    facts = build_facts(captures, ...)   # pure: captured text -> ansible_facts.nvidia
    state, message = decide_state(...)   # pure: which of STATES the host is in
"""
import os

from ansible.module_utils.host.runner import TIMEOUT_RC
from ansible.module_utils.gpu.nvsmi_common import ParseError
from ansible.module_utils.gpu.nvsmi_csv import (
    COMPUTE_APPS_FIELDS, GPU_QUERY_FIELDS, GPU_QUERY_FIELDS_EXTENDED, parse_compute_apps_csv, parse_query_gpu_csv)
from ansible.module_utils.gpu.nvsmi_error import classify_error, parse_error
from ansible.module_utils.gpu.nvsmi_parse import merge_mig_listing, merge_processes, normalise
from ansible.module_utils.gpu.nvsmi_xml import parse_xml
from ansible.module_utils.gpu.host_parse import (
    HostParseError, driver_branch, nvidia_gpus, parse_lspci, parse_proc_version,
    pci_device_from_sysfs)
from ansible.module_utils.driver.fabric_manager import fabric_need, nvswitches
from ansible.module_utils.gpu.gpu_topology import fabric_verdict, parse_fabric_xml, parse_topo_matrix

DEFAULT_PROC_VERSION_PATH = "/proc/driver/nvidia/version"
SYSFS_PCI_DEVICES = "/sys/bus/pci/devices"

FACT_KEYS = (
    "state", "message", "driver_version_kernel", "driver_version_userspace", "driver_branch",
    "cuda_driver_version", "gpu_count", "gpus", "processes", "pci_devices", "pci_source",
    "kernel_modules", "nvidia_smi_path", "nvidia_smi_form", "nvswitches", "fabric", "topology", "warnings",
    # The GPUs drift took out of service this boot (an Xid that needs a restart, a failed reset): the module reads
    # them from drift's state (xid_policy.with_out_of_service), each GPU's own under gpus[].out_of_service.
    "out_of_service",
)


# ---------------------------------------------------------------------------------------------
# capture: what runs on the host


def _attempt(io, kind, argv, fields=None):
    rc, out, err = io.run(argv)
    return {"kind": kind, "argv": list(argv), "rc": rc, "stdout": out or "", "stderr": err or "",
            "fields": list(fields) if fields else None}


def _smi_attempts(io, smi):
    """XML first; CSV only when XML fails for a reason other than a known GPU-layer error."""
    attempts = [_attempt(io, "xml", [smi, "-q", "-x"])]
    first = attempts[0]
    if first["rc"] == 0 and "<nvidia_smi_log" in first["stdout"]:
        if "<mig_device>" in first["stdout"]:
            # -q -x names no MIG device by profile or UUID; -L does
            attempts.append(_attempt(io, "list", [smi, "-L"]))
        return attempts
    if first["rc"] == TIMEOUT_RC or classify_error(first["stdout"] + "\n" + first["stderr"]):
        return attempts
    for fields in (GPU_QUERY_FIELDS_EXTENDED, GPU_QUERY_FIELDS):
        gpu = _attempt(io, "csv_gpu", [smi, "--query-gpu=" + ",".join(fields),
                                       "--format=csv,noheader,nounits"], fields)
        attempts.append(gpu)
        if gpu["rc"] == 0:
            attempts.append(_attempt(io, "csv_apps", [smi, "--query-compute-apps=" + ",".join(COMPUTE_APPS_FIELDS),
                                                      "--format=csv,noheader,nounits"], COMPUTE_APPS_FIELDS))
            break
        if "not a valid field" not in (gpu["stdout"] + gpu["stderr"]).lower():
            break  # an older field list only helps when a field name was refused
    return attempts


def _sysfs_pci(io):
    names = io.listdir(SYSFS_PCI_DEVICES)
    if names is None:
        return None
    found = []
    for name in names:
        base = SYSFS_PCI_DEVICES + "/" + name + "/"
        vendor = io.read(base + "vendor")
        if vendor is None or vendor.strip().lower() != "0x10de":
            continue  # read only NVIDIA functions' other attributes
        found.append({"address": name, "vendor": vendor, "device": io.read(base + "device") or "",
                      "class": io.read(base + "class") or ""})
    return found


def capture(io, nvidia_smi_path=None, proc_version_path=DEFAULT_PROC_VERSION_PATH):
    """Run what the host has and return the raw captures (no interpretation)."""
    if nvidia_smi_path:
        smi = nvidia_smi_path if io.exists(nvidia_smi_path) else None
    else:
        smi = io.which("nvidia-smi")
    captures = {"nvidia_smi_path": smi, "nvidia_smi_requested": nvidia_smi_path, "smi": [],
                "lspci": None, "sysfs_pci": None, "proc_version": None,
                "proc_version_path": proc_version_path}
    if smi:
        captures["smi"] = _smi_attempts(io, smi)
        if captures["smi"][0]["rc"] == 0:
            captures["topo"] = _attempt(io, "topo", [smi, "topo", "-m"])
    lspci = io.which("lspci")
    if lspci:
        captures["lspci"] = _attempt(io, "lspci", [lspci, "-nn", "-D"])
    if not lspci or captures["lspci"]["rc"] != 0:
        captures["sysfs_pci"] = _sysfs_pci(io)
    captures["proc_version"] = io.read(proc_version_path)
    return captures


# ---------------------------------------------------------------------------------------------
# interpretation: pure


def _first_line(text, limit=200):
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


def smi_facts_from_attempts(attempts):
    """(normalised facts or None, failure text or None) from the nvidia-smi attempts."""
    failure = None
    xml = next((a for a in attempts if a["kind"] == "xml"), None)
    if xml is not None:
        if xml["rc"] == TIMEOUT_RC:
            return None, "nvidia-smi -q -x timed out (a hung GPU or driver)"
        if "<nvidia_smi_log" in xml["stdout"]:
            try:
                facts = normalise(parse_xml(xml["stdout"]))
            except ParseError as exc:
                failure = "nvidia-smi -q -x: %s" % exc
            else:
                listing = next((a for a in attempts if a["kind"] == "list" and a["rc"] == 0), None)
                if listing is not None:
                    try:
                        facts = merge_mig_listing(facts, listing["stdout"])
                    except ParseError as exc:
                        facts["warnings"].append("nvidia-smi -L: %s" % exc)
                return facts, None
        else:
            both = xml["stdout"] + "\n" + xml["stderr"]  # small: an error text, not a document
            if classify_error(both):
                return normalise(parse_error(both)), None
            failure = "nvidia-smi -q -x exited %s: %s" % (xml["rc"], _first_line(both) or "no output")
    gpu = next((a for a in attempts if a["kind"] == "csv_gpu" and a["rc"] == 0), None)
    if gpu is not None:
        try:
            facts = normalise(parse_query_gpu_csv(gpu["stdout"], gpu["fields"]))
        except ParseError as exc:
            return None, "%s; --query-gpu: %s" % (failure, exc)
        apps = next((a for a in attempts if a["kind"] == "csv_apps"), None)
        if apps is not None and apps["rc"] == 0:
            try:
                facts = merge_processes(facts, parse_compute_apps_csv(apps["stdout"], apps["fields"]))
            except ParseError as exc:
                facts["warnings"].append("--query-compute-apps: %s" % exc)
        facts["warnings"].append("XML query failed (%s); facts from the CSV fallback "
                                 "(no CUDA version in this form)" % failure)
        return facts, None
    for attempt in attempts:
        if attempt["kind"] == "csv_gpu" and classify_error(attempt["stdout"] + "\n" + attempt["stderr"]):
            return normalise(parse_error(attempt["stdout"] + "\n" + attempt["stderr"])), None
    return None, failure or "nvidia-smi produced no usable output"


def pci_gpus_from_captures(captures):
    """(NVIDIA GPU PCI functions, source 'lspci'|'sysfs'|None, warnings)."""
    warnings = []
    lspci = captures.get("lspci")
    if lspci is not None and lspci["rc"] == 0:
        try:
            return nvidia_gpus(parse_lspci(lspci["stdout"])), "lspci", warnings
        except HostParseError as exc:
            warnings.append("lspci: %s" % exc)
    sysfs = captures.get("sysfs_pci")
    if sysfs is not None:
        devices = [pci_device_from_sysfs(d["address"], d["vendor"], d["device"], d["class"]) for d in sysfs]
        return [d for d in devices if d and d["is_nvidia_gpu"]], "sysfs", warnings
    return [], None, warnings


def _describe(device):
    name = device.get("product") or device.get("description") or "NVIDIA GPU"
    return "%s (%s at %s)" % (name, device.get("pci_id"), device.get("pci_address"))


def _open_module_hint(pci_gpus, kernel):
    """Text naming GPUs that need the open kernel modules when the loaded one is not open."""
    needing = [d for d in pci_gpus if d.get("open_kernel_modules_required")]
    if not needing or (kernel and kernel.get("flavor") == "open"):
        return None
    branch = max([d.get("min_driver_branch") or 0 for d in needing] + [driver_branch(kernel and kernel.get("version")) or 0])
    loaded = "the loaded module is proprietary" if kernel else "no NVIDIA kernel module is loaded"
    return ("%s require%s the NVIDIA open kernel modules (driver branch >= %d, e.g. "
            "nvidia-driver-%d-server-open) and %s"
            % (", ".join(_describe(d) for d in needing), "s" if len(needing) == 1 else "",
               branch, branch, loaded))


def decide_state(smi_found, smi_facts, smi_failure, kernel, pci_gpus, pci_scanned):
    """Which of STATES the host is in, and a message saying why. Pure.

    smi_found: nvidia-smi exists; smi_facts: normalised facts from it (None when it gave no
    usable output); smi_failure: why not; kernel: parsed /proc/driver/nvidia/version or None;
    pci_gpus: NVIDIA GPU functions on the PCI bus; pci_scanned: whether the bus could be read.
    """
    names = ", ".join(_describe(d) for d in pci_gpus)
    if not smi_found:
        if kernel:
            return "no_driver", ("NVIDIA kernel module %s is loaded but nvidia-smi is not installed "
                                 "(driver userspace utilities missing)" % kernel["version"])
        if pci_gpus:
            return "no_driver", ("%d NVIDIA GPU(s) on the PCI bus but no nvidia-smi: no driver is "
                                 "installed: %s" % (len(pci_gpus), names))
        return "no_gpu", ("no NVIDIA GPU on the PCI bus and no nvidia-smi" if pci_scanned
                          else "no nvidia-smi, and the PCI bus could not be read (no lspci, no sysfs)")
    if smi_facts is None:
        return "error", smi_failure or "nvidia-smi produced no usable output"
    state = smi_facts.get("state")
    if state == "version_mismatch":
        userspace = smi_facts.get("driver_version")
        return "version_mismatch", (
            "NVML driver/library version mismatch: kernel module %s, userspace library %s; reboot "
            "or reload the nvidia kernel modules" % (kernel["version"] if kernel else "unknown",
                                                     userspace or "unknown"))
    if state == "driver_not_loaded":
        message = "nvidia-smi cannot communicate with the NVIDIA driver"
        message += ": the kernel module is not loaded" if not kernel else " although the module is loaded"
        hint = _open_module_hint(pci_gpus, kernel)
        return "driver_not_loaded", message + ("; " + hint if hint else "")
    if state in ("error", "no_driver", "no_gpu"):
        message = smi_facts.get("message") or "nvidia-smi reported an error"
        hint = _open_module_hint(pci_gpus, kernel)
        if "no devices" in message.lower() and not pci_gpus and pci_scanned:
            message += "; no NVIDIA GPU is visible on the PCI bus either (passthrough?)"
        return ("error" if state == "error" else state), message + ("; " + hint if hint else "")
    if not kernel and not smi_facts.get("gpus"):
        return "driver_not_loaded", "no %s: the NVIDIA kernel module is not loaded" % DEFAULT_PROC_VERSION_PATH
    if not smi_facts.get("gpus"):
        return "error", "nvidia-smi listed no GPUs"
    return "ok", "%d GPU(s) visible to nvidia-smi" % len(smi_facts["gpus"])


def _kernel_modules(kernel):
    if not kernel:
        return {"loaded": False, "flavor": None, "version": None, "arch": None, "nvrm_line": None}
    return {"loaded": True, "flavor": kernel["flavor"], "version": kernel["version"],
            "arch": kernel["arch"], "nvrm_line": kernel["nvrm_line"]}


def _consistency_warnings(facts, kernel, pci_gpus):
    warnings = []
    user = facts["driver_version_userspace"]
    if facts["state"] == "ok" and kernel and user and kernel["version"] != user:
        warnings.append("kernel module %s differs from userspace %s" % (kernel["version"], user))
    if facts["state"] == "ok" and pci_gpus and len(pci_gpus) > facts["gpu_count"]:
        warnings.append("%d NVIDIA GPU(s) on the PCI bus but %d visible to nvidia-smi"
                        % (len(pci_gpus), facts["gpu_count"]))
    branch = facts["driver_branch"]
    for gpu in facts["gpus"]:
        need = gpu.get("min_driver_branch")
        if branch and need and branch < need:
            warnings.append("GPU %s (%s) needs driver branch >= %d; %d is loaded"
                            % (gpu["index"], gpu["name"], need, branch))
    return warnings


def build_facts(captures, pid_exists=None):
    """Captured outputs -> ansible_facts.nvidia (keys FACT_KEYS). Pure apart from pid_exists."""
    warnings = []
    kernel = None
    if captures.get("proc_version"):
        try:
            kernel = parse_proc_version(captures["proc_version"])
        except HostParseError as exc:
            warnings.append("%s: %s" % (captures.get("proc_version_path"), exc))
    pci_gpus, pci_source, pci_warnings = pci_gpus_from_captures(captures)
    warnings.extend(pci_warnings)
    smi_found = bool(captures.get("nvidia_smi_path"))
    if captures.get("nvidia_smi_requested") and not smi_found:
        warnings.append("nvidia_smi_path %s does not exist" % captures["nvidia_smi_requested"])
    smi_facts, smi_failure = (smi_facts_from_attempts(captures.get("smi") or []) if smi_found
                              else (None, None))
    state, message = decide_state(smi_found, smi_facts, smi_failure, kernel, pci_gpus,
                                  pci_source is not None)
    smi = smi_facts or {}
    gpus = smi.get("gpus", []) if state == "ok" else []
    processes = [dict(p) for p in smi.get("processes", [])] if state == "ok" else []
    for proc in processes:
        alive = pid_exists(proc["pid"]) if (pid_exists and proc["pid"] is not None) else None
        proc["pid_exists"] = alive
        # A listed pid with no process on this host holds GPU memory nobody owns: a zombie
        # context (or a pid from another PID namespace, when run inside a container).
        proc["zombie"] = None if alive is None else not alive
    userspace = smi.get("driver_version")
    facts = {
        "state": state, "message": message,
        "driver_version_kernel": kernel["version"] if kernel else None,
        "driver_version_userspace": userspace,
        "driver_branch": driver_branch(kernel["version"] if kernel else userspace),
        "cuda_driver_version": smi.get("cuda_driver_version"),
        "gpu_count": len(gpus), "gpus": gpus, "processes": processes,
        "pci_devices": pci_gpus, "pci_source": pci_source,
        "kernel_modules": _kernel_modules(kernel),
        "nvidia_smi_path": captures.get("nvidia_smi_path"),
        "nvidia_smi_form": smi.get("form"),
        "warnings": warnings + list(smi.get("warnings", [])),
        # What the host's drift state says (nvidia_gpu_facts fills it in: xid_policy.with_out_of_service).
        "out_of_service": [],
    }
    facts.update(interconnect_facts(captures, state, gpus or pci_gpus, kernel["arch"] if kernel else None))
    facts["warnings"].extend(_consistency_warnings(facts, kernel, pci_gpus))
    return facts


def interconnect_facts(captures, state, gpus=(), machine=None):
    """{nvswitches, fabric, topology}: the NVSwitch functions on the PCI bus, each GPU's fabric and what the host
    needs for it (fabric_facts), and `nvidia-smi topo -m` (null where it did not answer).
    gpus: nvidia-smi's GPUs (else the PCI functions); machine: the driver's architecture (x86_64, aarch64)."""
    lspci = captures.get("lspci") or {}
    switches = nvswitches(lspci.get("stdout")) if lspci.get("rc") == 0 else []
    xml = next((a for a in captures.get("smi") or [] if a["kind"] == "xml" and a["rc"] == 0), None)
    try:
        fabrics = parse_fabric_xml(xml["stdout"]) if xml and state == "ok" else []
    except ParseError:
        fabrics = []
    topo = captures.get("topo") or {}
    try:
        topology = parse_topo_matrix(topo["stdout"]) if topo.get("rc") == 0 else None
    except ParseError:
        topology = None
    return {"nvswitches": [d.get("pci_address") for d in switches],
            "fabric": fabric_facts(fabrics, switches, gpus, machine), "topology": topology}


def fabric_facts(fabrics, switches, gpus=(), machine=None):
    """The host's NVLink fabric from each GPU's fabric (gpu_topology.parse_fabric[_xml]), the NVSwitch functions on
    the bus and the GPUs themselves (fabric_manager.fabric_need): {need (fabric_manager | fabric_manager+nvlsm |
    imex | none), needed (a fabric manager), reason, services, state, message, fix, gpus: [{pci_bus_id, state,
    status, clique_id, cluster_uuid, health_summary}]}."""
    needs = fabric_need(switches, gpus, fabrics, machine)
    verdict = fabric_verdict(fabrics)
    return {"need": needs["need"], "needed": needs["needed"], "reason": needs["reason"],
            "services": needs["services"], "state": verdict["state"], "message": verdict["message"],
            "fix": verdict["fix"],
            "gpus": [dict((k, f.get(k)) for k in ("pci_bus_id", "state", "status", "clique_id", "cluster_uuid",
                                                  "health_summary"))
                     for f in fabrics]}


def error_facts(message):
    """Facts with every key, for when the pipeline itself broke (a bug, not the GPU layer)."""
    facts = dict((key, None) for key in FACT_KEYS)
    facts.update({"state": "error", "message": message, "gpu_count": 0, "gpus": [], "processes": [],
                  "pci_devices": [], "kernel_modules": _kernel_modules(None), "nvswitches": [], "warnings": [],
                  "out_of_service": []})
    return facts


def proc_pid_exists(pid, exists=os.path.exists):
    """Whether /proc/<pid> exists on this host."""
    return bool(exists("/proc/%d" % int(pid)))


def gather(io, nvidia_smi_path=None, proc_version_path=DEFAULT_PROC_VERSION_PATH):
    """capture() + build_facts(): the module's whole job, given host access."""
    captures = capture(io, nvidia_smi_path, proc_version_path)
    return build_facts(captures, pid_exists=lambda pid: proc_pid_exists(pid, io.exists))
