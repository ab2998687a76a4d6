# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Layer `hardware`: each GPU on the bus (lost, broken by a hardware Xid, or healthy), and its MIG mode."""
import re

from ansible.module_utils.layers.base import _out, evidence, guarded, result
from ansible.module_utils.diagnosis.error_catalogue import XID_SEVERITY
from ansible.module_utils.gpu.xid_policy import bus_key
from ansible.module_utils.layers.health import XID_ACTIONS, XID_CATALOGUE, parse_xids, xid_plans

# Xids that mean the GPU itself is gone or broken: those whose immediate action in the error table is beyond the
# application (reset the GPU, restart the host, contact support); the others (application faults, corrected ECC)
# stay with the health layer's Xid check.
HARDWARE_XIDS = tuple(sorted(code for code, row in XID_CATALOGUE.items()
                             if row.action in ("RESET_GPU", "RESTART_BM", "CONTACT_SUPPORT")))
# "... for GPU0000:CB:00.0: Unknown Error" (older), "... for GPU1: 0000:34:00.0: Unknown Error" (610).
_LOST = re.compile(r"Unable to determine the device handle for GPU\s*(?:\d+:\s*)?"
                   r"([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?:\s*([^\n]*?)\.?\s*(?:\n|$)", re.I)


def check_hardware(facts, xid_events=(), smi_text=""):
    """Each GPU on the bus (index by PCI order, UUID where nvidia-smi still sees it, bus id): lost
    (Xid 79, 'GPU is lost'), broken (a hardware Xid: reset or reboot) or healthy, and MIG mode."""
    pci = sorted(facts.get("pci_devices") or [], key=lambda d: bus_key(d.get("pci_address")))
    smi = dict((bus_key(g.get("pci_bus_id")), g) for g in facts.get("gpus") or [] if g.get("pci_bus_id"))
    lost = dict((bus_key(m.group(1)), m.group(2)) for m in _LOST.finditer(smi_text or ""))
    xids = {}
    for event in xid_events or []:
        xids.setdefault(bus_key(event["pci"]), []).append(event["code"])
    buses = [bus_key(d.get("pci_address")) for d in pci] or sorted(smi)
    addresses = dict((bus_key(d.get("pci_address")), d.get("pci_address")) for d in pci)
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
            bad.append("%s: %s" % (label, "; ".join("Xid %d %s" % (c, XID_CATALOGUE[c].description) for c in hard)))
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
        # A lost GPU needs the host restarted; a faulty one the most severe action of its hardware Xids.
        actions = []
        for g in gpus:
            if g["state"] == "lost":
                actions.append("RESTART_BM")
            elif g["state"] == "faulty":
                actions.extend(XID_CATALOGUE[c].action for c in g["xids"] if c in HARDWARE_XIDS)
        worst = max(actions, key=XID_SEVERITY.index)
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


def pending_xid_events(decision, marks):
    """The Xid events a GPU is still judged by once drift keeps a cursor: those no run has dealt with yet (a GPU
    reset since is healthy again), and those of each GPU out of service this boot (marks)."""
    events = [x for plan in decision["gpus"] for x in plan["xids"]] + list(decision["unmapped"])
    for mark in (marks or {}).values():
        events.extend({"code": code, "pci": mark.get("bus_id") or "", "pid": None, "name": None, "message": "",
                       "line": ""} for code in mark.get("xids") or [])
    return events


def _hardware(ctx):
    smi_text = "\n".join(_out(a) for a in ctx.gpu.get("smi") or [])
    kernel_log = ctx.get("kernel_log")
    xid_events = parse_xids(kernel_log.get("stdout")) if kernel_log else []
    if kernel_log and kernel_log.get("rc") == 0:
        decision, marks, _error = ctx.memo("xid_plans", lambda: xid_plans(ctx.captures, ctx.facts, ctx.opts))
        if decision is not None:
            xid_events = pending_xid_events(decision, marks)
    return guarded("hardware", "hardware", check_hardware, ctx.facts, xid_events, smi_text)


CHECKS = {"hardware": _hardware}
