# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the nvidia_driver role is asked for, and every refusal that needs no host query: the request's values,
the GPUs (architecture, the branches that drive them: floor and ceiling, open kernel modules), the kernel module
flavour, the fabric services (fabric manager, NVLSM, IMEX). DriverChoiceError, which every decision of the
driver's plan raises, is here.

Pure stdlib, no Ansible imports; the GPUs come in as the PCI devices of nvidia_gpu_facts.

    gpus = gpu_summary(pci_devices)                 # architecture facts per GPU
    pre = precheck(request, gpus)                   # refusals that need no host query
"""
import re

from ansible.module_utils.driver.fabric_manager import fabric_need, style_refusal
from ansible.module_utils.gpu.gpu_arch import lookup as arch_lookup
from ansible.module_utils.gpu.host_parse import driver_branch


class DriverChoiceError(ValueError):
    """The request cannot be served on this host; the message names the GPU, the branch and the fix."""


# nvidia: NVIDIA's CUDA repository (module_utils/driver/cuda_repo.py names its packages; request["cuda_repo_family"]
# debian|ubuntu says which naming the host's repository uses).
STYLES = ("ubuntu", "debian", "nvidia")
FLAVORS = ("server", "desktop")
KERNEL_MODULES = ("auto", "open", "proprietary")
FABRIC_MANAGER_MODES = ("auto", "always", "never")
_BRANCH = re.compile(r"^\d{3,4}$")
# A kernel flavour as Ubuntu's linux-image-<flavour> metapackages name them (generic, generic-hwe-24.04, aws-64k).
_KERNEL_FLAVOUR = re.compile(r"^[a-z][a-z0-9.+-]*$")
_DRIVER_VERSION = re.compile(r"^\d{3,4}(?:\.\d+){1,3}$")


# ---------------------------------------------------------------------------------------------
# GPUs


def gpu_summary(pci_devices):
    """nvidia_gpu_facts pci_devices -> [{name, pci_id, pci_address, architecture, min_branch, max_branch,
    open_required, open_supported, known}] (architecture facts from module_utils/gpu_arch)."""
    gpus = []
    for dev in pci_devices or []:
        if not isinstance(dev, dict) or (dev.get("is_nvidia_gpu") is False):
            continue
        arch = arch_lookup(dev.get("device_id") or dev.get("pci_id"), dev.get("product")) or {}
        gpus.append({
            "name": dev.get("product") or dev.get("description") or "NVIDIA GPU %s" % dev.get("pci_id"),
            "pci_id": dev.get("pci_id"),
            "pci_address": dev.get("pci_address"),
            "architecture": arch.get("architecture") or dev.get("architecture"),
            "min_branch": arch.get("min_driver_branch") or dev.get("min_driver_branch"),
            "max_branch": arch.get("max_driver_branch"),
            "open_required": bool(arch.get("open_kernel_modules_required")
                                  or dev.get("open_kernel_modules_required")),
            "open_supported": arch.get("open_kernel_modules_supported", True) if arch else True,
            "known": bool(arch),
        })
    return gpus


def describe(gpu):
    """'RTX PRO 6000 Blackwell Server Edition (10de:2bb5 at 0000:17:00.0)'."""
    return "%s (%s at %s)" % (gpu["name"], gpu.get("pci_id"), gpu.get("pci_address"))


def min_branch(gpus):
    needs = [g["min_branch"] for g in gpus if g.get("min_branch")]
    return max(needs) if needs else None


def max_branch(gpus):
    """The newest branch every GPU is still driven by (580 for Maxwell/Pascal/Volta), None when no GPU has a last."""
    lasts = [g["max_branch"] for g in gpus if g.get("max_branch")]
    return min(lasts) if lasts else None


# ---------------------------------------------------------------------------------------------
# The request


def validate_request(request):
    """Refuse malformed values (argument_specs does this in the role; the module repeats it)."""
    if request.get("style") not in STYLES:
        raise DriverChoiceError("package style must be one of %s, got %r" % (", ".join(STYLES), request.get("style")))
    if request.get("flavor") not in FLAVORS:
        raise DriverChoiceError("nvidia_driver_flavor must be server or desktop, got %r" % request.get("flavor"))
    if request.get("kernel_modules") not in KERNEL_MODULES:
        raise DriverChoiceError("nvidia_driver_kernel_modules must be auto, open or proprietary, got %r"
                                % request.get("kernel_modules"))
    if (request.get("fabric_manager") or "auto") not in FABRIC_MANAGER_MODES:
        raise DriverChoiceError("nvidia_driver_fabric_manager must be auto, always or never, got %r"
                                % request.get("fabric_manager"))
    flavour = request.get("kernel_flavour") or "auto"
    if flavour != "auto" and not _KERNEL_FLAVOUR.match(flavour):
        raise DriverChoiceError("nvidia_driver_kernel_flavour must be auto or an Ubuntu kernel flavour such as generic, "
                                "generic-hwe-24.04 or aws; got %r" % flavour)
    branch = str(request.get("branch") or "auto")
    if branch != "auto" and not _BRANCH.match(branch):
        raise DriverChoiceError("nvidia_driver_branch must be a branch number such as 580, or auto; got %r" % branch)
    version = request.get("version") or ""
    if version and not (_DRIVER_VERSION.match(version) or driver_branch(version)):
        raise DriverChoiceError("nvidia_driver_version must be a driver version such as 580.95.05, got %r" % version)
    if branch != "auto" and version and driver_branch(version) != int(branch):
        raise DriverChoiceError("nvidia_driver_version %s is not in nvidia_driver_branch %s; set one of them to match"
                                % (version, branch))


def requested_branch(request):
    """(branch, source) from the request alone: explicit branch, else the version's; else (None, None)."""
    branch = str(request.get("branch") or "auto")
    if branch != "auto":
        return int(branch), "nvidia_driver_branch"
    if request.get("version"):
        return driver_branch(request["version"]), "nvidia_driver_version"
    return None, None


def resolve_kernel_modules(requested, gpus):
    """(open|proprietary, reason). auto: open when a GPU requires the open modules (gpu_arch).

    Refuses proprietary modules for a GPU that requires the open ones (it would show "No devices
    were found"), the open modules for a GPU without a GSP (Maxwell, Pascal, Volta), and a mix of both.
    """
    need_open = [g for g in gpus if g["open_required"]]
    no_open = [g for g in gpus if not g["open_supported"]]
    if need_open and no_open:
        raise DriverChoiceError(
            "no single kernel module flavour drives every GPU of this host: %s require%s the open modules and %s "
            "cannot use them; split these GPUs over hosts" % (
                ", ".join(describe(g) for g in need_open), "s" if len(need_open) == 1 else "",
                ", ".join(describe(g) for g in no_open)))
    if requested == "proprietary" and need_open:
        raise DriverChoiceError(
            "%s require%s the NVIDIA open kernel modules (%s); proprietary modules were asked for "
            "(nvidia_driver_kernel_modules: proprietary) and would find no device. Fix: set "
            "nvidia_driver_kernel_modules: auto (or open)" % (
                ", ".join(describe(g) for g in need_open), "s" if len(need_open) == 1 else "",
                "/".join(sorted({g["architecture"] or "this architecture" for g in need_open}))))
    if requested == "open" and no_open:
        raise DriverChoiceError(
            "%s cannot use the NVIDIA open kernel modules (no GSP: %s); open modules were asked for. Fix: set "
            "nvidia_driver_kernel_modules: auto (or proprietary)" % (
                ", ".join(describe(g) for g in no_open),
                "/".join(sorted({g["architecture"] or "unknown" for g in no_open}))))
    if requested in ("open", "proprietary"):
        return requested, "nvidia_driver_kernel_modules: %s" % requested
    if need_open:
        return "open", "%s require%s the open kernel modules" % (
            ", ".join(describe(g) for g in need_open), "s" if len(need_open) == 1 else "")
    return "proprietary", "no GPU of this host requires the open kernel modules"


def check_branch(branch, gpus, source):
    """Refuse a branch below a GPU's minimum, or above the last branch that drives it (gpu_arch min/max_driver_branch)."""
    if branch is None:
        return
    retired = [g for g in gpus if g.get("max_branch") and branch > g["max_branch"]]
    if retired:
        last = min(g["max_branch"] for g in retired)
        raise DriverChoiceError(
            "%s %s driven by branch %d at most (NVIDIA: the %d series is the last to support %s); branch %d (from %s) "
            "would find no GPU there. Fix: set nvidia_driver_branch: %d (or auto, which stays at or below it)" % (
                ", ".join(describe(g) for g in retired), "is" if len(retired) == 1 else "are", last, last,
                "/".join(sorted(set(g["architecture"] or "these GPUs" for g in retired))), branch, source, last))
    low = [g for g in gpus if g.get("min_branch") and branch < g["min_branch"]]
    if low:
        need = max(g["min_branch"] for g in low)
        raise DriverChoiceError(
            "%s need%s driver branch >= %d; branch %d (from %s) is too old for %s. Fix: set "
            "nvidia_driver_branch: auto or a branch >= %d" % (
                ", ".join(describe(g) for g in low), "s" if len(low) == 1 else "", need, branch, source,
                "it" if len(low) == 1 else "them", need))


def fabric_choice(request, gpus):
    """What the driver comes with on an NVLink fabric host: {fabric_manager (bool: the fabric manager's packages and
    unit), fabric_need (fabric_manager | fabric_manager+nvlsm | imex | none), fabric_services (the units to run),
    fabric_manager_reason}. Without the service at exactly the driver's version every CUDA program fails with 802
    while nvidia-smi looks healthy (fabric manager), or GPU memory is not shared across the NVLink domain (IMEX).

    request["nvswitches"]: the NVSwitch PCI addresses (nvidia_gpu_facts); request["machine"]: the CPU architecture;
    request["fabric"]: nvidia_gpu_facts' fabric (its gpus: each GPU's Fabric block); request["fabric_manager"]:
    auto | always | never (never: none of these packages). Refuses a style that does not carry what the host
    needs, naming the one that does (fabric_manager.fabric_packages)."""
    mode = request.get("fabric_manager") or "auto"
    need = fabric_need(request.get("nvswitches") or [], gpus, (request.get("fabric") or {}).get("gpus") or [],
                       request.get("machine"))
    none = {"fabric_manager": False, "fabric_need": need["need"], "fabric_services": []}
    if mode == "never":
        return dict(none, fabric_manager_reason="nvidia_driver_fabric_manager: never%s" % (
            " (%s: %s; %s)" % (need["need"], need["reason"], "CUDA fails with 802 until a fabric manager at the "
                               "driver's version runs" if need["fabric_manager"] else "no IMEX service")
            if need["need"] != "none" else ""))
    if mode == "always" and not need["fabric_manager"]:
        raise DriverChoiceError(
            "nvidia_driver_fabric_manager is always, but this host has no NVSwitch fabric of its own (%s): the "
            "fabric manager exits there with NV_WARN_NOTHING_TO_DO and its service fails. Fix: "
            "nvidia_driver_fabric_manager: auto" % need["reason"])
    if need["need"] == "none":
        return dict(none, fabric_manager_reason=need["reason"])
    refusal = style_refusal(need["need"], request["style"])
    if refusal:
        raise DriverChoiceError(
            "%s. %s, or nvidia_driver_fabric_manager: never to install the driver alone (CUDA then fails with 802 "
            "until a matching %s runs)" % (need["reason"], refusal,
                                           "IMEX service" if need["imex"] else "fabric manager"))
    return {"fabric_manager": need["fabric_manager"], "fabric_need": need["need"],
            "fabric_services": need["services"], "fabric_manager_reason": need["reason"]}


def precheck(request, gpus):
    """Every refusal that needs no host query: run before anything on the host changes."""
    validate_request(request)
    modules, reason = resolve_kernel_modules(request["kernel_modules"], gpus)
    branch, source = requested_branch(request)
    check_branch(branch, gpus, source)
    return dict({"kernel_modules": modules, "kernel_modules_reason": reason, "branch": branch,
                 "branch_source": source, "min_branch": min_branch(gpus), "max_branch": max_branch(gpus)},
                **fabric_choice(request, gpus))
