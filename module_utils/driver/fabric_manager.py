# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVIDIA Fabric Manager on NVSwitch (HGX) hosts: whether a host needs it. Pure stdlib, no Ansible imports,
no host access.

    needs_fabric_manager(pci_devices, fabrics)   {needed, reason, nvswitches}
    nvswitches(lspci_text)                       the NVSwitch functions in `lspci -nn`

Facts (docs/research/hgx-fabric-manager.md and tests/fixtures/fabric/README.md name the sources):
- NVSwitch on the PCI bus: 10de:1af1 (gen2, HGX A100, class 0680, 6 per board) and 10de:22a3 (gen3,
  HGX H100/H200, 4 per board). HGX B200's switches are not NVIDIA PCI functions (managed through NVLSM),
  so the GPUs' Fabric State is the other sign: N/A where there is no NVSwitch fabric, else In Progress /
  Completed (gpu_topology.parse_fabric).
"""

from ansible.module_utils.gpu.host_parse import parse_lspci

NVSWITCH_PCI_IDS = {"10de:1af1": "NVSwitch gen2 (HGX A100)", "10de:22a3": "NVSwitch gen3 (HGX H100/H200)"}


def needs_fabric_manager(pci_devices, fabrics=()):
    """Whether the host has an NVSwitch fabric: an NVSwitch on the PCI bus (host_parse.parse_lspci's
    devices), or a GPU whose Fabric State is other than N/A (gpu_topology.parse_fabric[_xml])."""
    switches = [d for d in pci_devices or () if d.get("pci_id") in NVSWITCH_PCI_IDS]
    if switches:
        kinds = sorted({NVSWITCH_PCI_IDS[d["pci_id"]] for d in switches})
        return {"needed": True, "nvswitches": [d.get("pci_address") for d in switches],
                "reason": "%d %s on the PCI bus" % (len(switches), ", ".join(kinds))}
    managed = [f for f in fabrics or () if (f.get("state") or "N/A") != "N/A"]
    if managed:
        return {"needed": True, "nvswitches": [],
                "reason": "the GPUs report an NVSwitch fabric (Fabric State %s)" % managed[0]["state"]}
    return {"needed": False, "nvswitches": [],
            "reason": "no NVSwitch on the PCI bus and no GPU reports a fabric (State N/A)"}


def nvswitches(lspci_text):
    """The NVSwitch functions of `lspci -nn` output (host_parse.parse_lspci's devices)."""
    return [d for d in parse_lspci(lspci_text or "") if d.get("pci_id") in NVSWITCH_PCI_IDS]
