# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What an NVLink fabric host needs beside the driver, and under which package names. Pure stdlib, no Ansible
imports, no host access.

    fabric_need(nvswitches, gpus, fabrics, machine, nvlink5_bridges)
        -> {need, reason, needed, fabric_manager, nvlsm, imex, services, nvswitches}
           need: fabric_manager | fabric_manager+nvlsm | imex | none
    fabric_packages(need, style, branch)  -> {pinned, unpinned, refusal}
    install_specs(need, style, version)   -> (apt specs at the driver's version, refusal)
    style_refusal(need, style)            why a package style cannot serve that need (or None)
    nvswitches(lspci_text)                the NVSwitch functions in `lspci -nn`

Facts (docs/research/hgx-fabric-manager.md, docs/research/fabric-manager-cuda-repo-b200-gb200.md; the fixtures'
READMEs name the captures):
- HGX A100/H100/H200: NVSwitches on the PCI bus, 10de:1af1 (gen2, class 0680) and 10de:22a3 (gen3); the fabric
  manager (nvidia-fabricmanager.service) at exactly the driver's version, and NSCQ.
- HGX B200/B300/B100 (fourth-generation NVSwitch, NVLink 5): the NVSwitches are not PCI functions of the host
  ("NVSwitches are not recognized as PCIe devices", FM User Guide); they are managed through a ConnectX-7 bridge
  whose VPD carries SW_MNG, and "require an additional NVLSM service". NVLSM is started by the fabric manager's
  own unit; no unit of its own. So the GPU (B200/B300/B100, gpu_arch) is the sign, or a SW_MNG bridge.
- GB200/GB300 NVL compute trays: no NVSwitch on the tray, the fabric manager is not used there (it fails); the
  IMEX service (nvidia-imex) at the driver's version instead. The GPU (GB200/GB300), or a Fabric block that
  names a clique (CliqueId and ClusterUUID not zero) with no NVSwitch on the bus.
"""
import re

from ansible.module_utils.gpu.gpu_arch import lookup as arch_lookup
from ansible.module_utils.gpu.host_parse import driver_branch, parse_lspci

NVSWITCH_PCI_IDS = {"10de:1af1": "NVSwitch gen2 (HGX A100)", "10de:22a3": "NVSwitch gen3 (HGX H100/H200)"}
FABRIC_MANAGER_SERVICE = "nvidia-fabricmanager"
IMEX_SERVICE = "nvidia-imex"
NEEDS = ("fabric_manager", "fabric_manager+nvlsm", "imex", "none")
# NVIDIA's CUDA repository names the fabric packages with the branch up to 575, without it from 580
# (nvidia-fabricmanager-570_570.172.08-1 / nvidia-fabricmanager_580.65.06-1 in the Debian 12 index).
LAST_SUFFIXED_FABRIC_BRANCH = 575
# HGX B200/B300/B100 also need these (FM User Guide: "the system needs to be installed with libibumad3 and
# infiniband-diags packages"); nvlsm has its own calendar version (2025.10.14-1): not the driver's.
NVLINK5_PACKAGES = ("nvlsm", "infiniband-diags", "libibumad3")
# What NVIDIA's start script refuses to start NVLink 5 without (CanvOS PR 700's journal and its script comments).
NVLINK5_PREREQUISITES = ("NVLink 5 also needs NVLSM (package nvlsm), infiniband-diags and libibumad3, and the ib_umad "
                         "module loaded (`modprobe ib_umad`; the start script says `Kernel module \"ib_umad\" has not "
                         "been loaded, fabric manager cannot be started` otherwise)")
_NO_FABRIC_STATES = ("N/A", "Not Supported")
_ZERO_UUID = re.compile(r"^[0-]+$")
_TRAY_NAME = re.compile(r"\bGB[23]00\b", re.IGNORECASE)
_NVLINK5_NAME = re.compile(r"\bB[123]00\b", re.IGNORECASE)


def nvswitches(lspci_text):
    """The NVSwitch functions of `lspci -nn` output (host_parse.parse_lspci's devices)."""
    return [d for d in parse_lspci(lspci_text or "") if d.get("pci_id") in NVSWITCH_PCI_IDS]


def _switches(devices):
    """(addresses, kinds) of the NVSwitches among PCI devices (dicts: host_parse.parse_lspci's) or addresses (str:
    nvidia_gpu_facts' `nvswitches`, already NVSwitches)."""
    addresses, kinds = [], set()
    for device in devices or ():
        if isinstance(device, dict):
            if device.get("pci_id") in NVSWITCH_PCI_IDS:
                addresses.append(device.get("pci_address"))
                kinds.add(NVSWITCH_PCI_IDS[device["pci_id"]])
        elif device:
            addresses.append(device)
            kinds.add("NVSwitch")
    return addresses, sorted(kinds)


def gpu_board(gpu, machine=None):
    """nvl_tray (GB200/GB300 compute tray), hgx_nvlink5 (HGX B200/B300/B100) or None, for one GPU: a dict with a
    name (nvidia-smi's `name`, lspci's `product`) and/or a PCI id (`pci_id`, `device_id`, `pci_device_id`).
    gpu_arch's row "B300 / GB300" shares its ids between both boards: the name decides, else the CPU (the trays'
    Grace is aarch64; HGX B300 boards sit in x86_64 hosts)."""
    name = gpu.get("name") or gpu.get("product") or ""
    family = (arch_lookup(gpu.get("pci_id") or gpu.get("device_id") or gpu.get("pci_device_id"), name)
              or {}).get("family")
    if _TRAY_NAME.search(name) or family == "GB200":
        return "nvl_tray"
    if _NVLINK5_NAME.search(name) or family == "B200 / B100":
        return "hgx_nvlink5"
    if family == "B300 / GB300":
        return "nvl_tray" if (machine or "").lower() in ("aarch64", "arm64") else "hgx_nvlink5"
    return None


def _describe(gpus):
    names = sorted(set(g.get("name") or g.get("product") or g.get("pci_id") or "GPU" for g in gpus))
    return "%d x %s" % (len(gpus), "/".join(names))


def _clique(fabrics):
    """The first Fabric block that names a multi-node NVLink clique: CliqueId and ClusterUUID set and not zero."""
    for fabric in fabrics or ():
        clique, cluster = fabric.get("clique_id") or "", fabric.get("cluster_uuid") or ""
        if clique.isdigit() and int(clique) and cluster not in ("", "N/A") and not _ZERO_UUID.match(cluster):
            return fabric
    return None


def _need(need, reason, switches=()):
    return {"need": need, "reason": reason, "nvswitches": list(switches),
            "needed": need in ("fabric_manager", "fabric_manager+nvlsm"),
            "fabric_manager": need in ("fabric_manager", "fabric_manager+nvlsm"),
            "nvlsm": need == "fabric_manager+nvlsm", "imex": need == "imex",
            "services": ([FABRIC_MANAGER_SERVICE] if need.startswith("fabric_manager")
                         else [IMEX_SERVICE] if need == "imex" else [])}


def fabric_need(nvswitch_devices=(), gpus=(), fabrics=(), machine=None, nvlink5_bridges=()):
    """What the host needs for its NVLink fabric, with the reason in words: a dict with
    need (fabric_manager | fabric_manager+nvlsm | imex | none), reason, needed (a fabric manager: the fabric
    layer's unit condition), fabric_manager, nvlsm, imex (bools), services (the units to run) and nvswitches.

    nvswitch_devices: PCI devices (host_parse.parse_lspci) or NVSwitch addresses (nvidia_gpu_facts' nvswitches);
    gpus: the GPUs (nvidia-smi's gpus, nvidia_gpu_facts' pci_devices or driver_request.gpu_summary);
    fabrics: each GPU's Fabric block (gpu_topology.parse_fabric[_xml]); machine: the CPU architecture
    (ansible_facts.architecture); nvlink5_bridges: InfiniBand devices whose VPD carries SW_MNG (NVIDIA's own test,
    /sys/class/infiniband/*/device/vpd; empty when the IB modules are not loaded, so never a negative)."""
    switches, kinds = _switches(nvswitch_devices)
    if switches:
        return _need("fabric_manager", "%d %s on the PCI bus: the fabric manager sets the NVSwitch fabric up"
                     % (len(switches), ", ".join(kinds)), switches)
    gpus = [g for g in gpus or () if isinstance(g, dict)]
    trays = [g for g in gpus if gpu_board(g, machine) == "nvl_tray"]
    if trays:
        return _need("imex", "%s: a GB200/GB300 NVL compute tray, whose NVSwitches are in the rack's switch trays: "
                     "no fabric manager here (it fails on a tray); the IMEX service at the driver's version shares "
                     "GPU memory across the NVLink domain" % _describe(trays))
    nvlink5 = [g for g in gpus if gpu_board(g, machine) == "hgx_nvlink5"]
    if nvlink5 or nvlink5_bridges:
        sign = ("%s, NVLink 5" % _describe(nvlink5) if nvlink5
                else "a ConnectX bridge with SW_MNG in its VPD (%s)" % ", ".join(list(nvlink5_bridges)[:4]))
        return _need("fabric_manager+nvlsm", "%s: an HGX B200/B300/B100 board, whose fourth-generation NVSwitches "
                     "are no PCI function of the host: the fabric manager with NVLSM (its unit starts both), "
                     "as NVIDIA's fabric manager guide says for NVLink 5" % sign)
    clique = _clique(fabrics)
    if clique:
        return _need("imex", "the GPUs' Fabric names NVLink clique %s of cluster %s and no NVSwitch is on the PCI "
                     "bus: a multi-node NVLink (GB200/GB300 NVL) compute tray; no fabric manager here, the IMEX "
                     "service at the driver's version" % (clique["clique_id"], clique["cluster_uuid"]))
    managed = [f for f in fabrics or () if (f.get("state") or "N/A") not in _NO_FABRIC_STATES]
    if managed:
        return _need("fabric_manager", "the GPUs report an NVSwitch fabric (Fabric State %s)" % managed[0]["state"])
    return _need("none", "no NVSwitch on the PCI bus, no NVLink 5 or GB200/GB300 GPU, and no GPU reports a fabric "
                 "(State N/A)")


def style_refusal(need, style):
    """Why a package style cannot serve a fabric need, naming the style that can; None when it can."""
    if need == "none" or style not in ("debian", "ubuntu"):
        return None
    what = {"fabric_manager": "the fabric manager (nvidia-fabricmanager, libnvidia-nscq)",
            "fabric_manager+nvlsm": "the fabric manager and NVLSM (nvidia-fabricmanager, libnvidia-nscq, nvlsm)",
            "imex": "the IMEX service (nvidia-imex)"}[need]
    if style == "debian":
        return ("Debian's archive does not carry %s. Fix: nvidia_driver_package_style: nvidia, i.e. NVIDIA's CUDA "
                "repository, for the driver and the fabric manager together" % what)
    if need == "fabric_manager+nvlsm":
        return ("Ubuntu's archive has the fabric manager but not NVLSM (package nvlsm), which NVLink 5 boards need "
                "beside it. Fix: nvidia_driver_package_style: nvidia, i.e. NVIDIA's CUDA repository, for the driver, "
                "the fabric manager and NVLSM together")
    return None


def fabric_packages(need, style, branch):
    """The packages of a fabric need in a package style (ubuntu: Ubuntu's archive; nvidia: NVIDIA's CUDA
    repository; debian: Debian's archive), for a driver branch: {pinned, unpinned, refusal}.

    pinned: installed at exactly the driver's version (apt name=version, the repository's revision) and held with
    it; unpinned: packages with versions of their own (nvlsm, the InfiniBand tools); refusal: why the style cannot
    serve this need, naming the style that can (None when it can)."""
    result = {"pinned": [], "unpinned": [], "refusal": None}
    if need not in NEEDS:
        raise ValueError("fabric need must be one of %s, got %r" % (", ".join(NEEDS), need))
    if need == "none":
        return result
    result["refusal"] = style_refusal(need, style)
    if result["refusal"]:
        return result
    if style not in ("ubuntu", "nvidia"):
        raise ValueError("package style must be ubuntu, debian or nvidia, got %r" % style)
    branch = int(branch)
    # Ubuntu's archive always names the branch; NVIDIA's repository up to 575 only.
    suffix = "-%d" % branch if style == "ubuntu" or branch <= LAST_SUFFIXED_FABRIC_BRANCH else ""
    if need == "imex":
        result["pinned"] = ["nvidia-imex" + suffix]
        return result
    result["pinned"] = ["nvidia-fabricmanager" + suffix, "libnvidia-nscq" + suffix]
    if need == "fabric_manager+nvlsm":
        result["unpinned"] = list(NVLINK5_PACKAGES)
    return result


def install_specs(need, style, version):
    """(apt specs, refusal) of a fabric need in a package style for a driver version: the pinned packages at exactly
    that version (`name=<version>-*`), the others by name; ([], refusal) where the style cannot serve the need."""
    names = fabric_packages(need, style, driver_branch(version))
    if names["refusal"]:
        return [], names["refusal"]
    return ["%s=%s-*" % (n, version) for n in names["pinned"]] + names["unpinned"], None
