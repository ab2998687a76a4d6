# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What drift does about the Xids in the kernel log, per GPU: the decision only (drift runs it).

Each new Xid (after the cursor) takes the immediate action of its row in the error table
(diagnosis/error_catalogue.XID_CATALOGUE, NVIDIA's vocabulary); a GPU takes the most severe of its new Xids':
  IGNORE           report only
  RESTART_APP      restart the serving containers on that GPU
  RESET_GPU        stop only the serving containers on that GPU and what holds it, `nvidia-smi -r -i N`, verify,
                   start them again; restart the host when the reset fails (only where the operator allows it)
  RESTART_BM, CONTACT_SUPPORT
                   mark the GPU out of service; restart the host only where the operator allows it
A reset is refused, with the words to say, where NVIDIA's limits forbid it: another tenant's process on the GPU
(named), MIG mode, an Ampere GPU on an NVSwitch board whose fabric manager is not running.

The cursor: {"boot_id", "gpus": {PCI bus: {"count", "line"}}}, per GPU because a GPU whose action is refused or
waits for the operator keeps its Xids pending while the others move on. "line" is the text of the last Xid line
consumed from "NVRM: Xid" on, "count" how many of that GPU's Xid lines this boot it covers. The text, not a
timestamp: `dmesg` prints seconds since boot, `dmesg -T` a wall clock it computes, `journalctl -k` its own
format with the host name, and the kernel's text after the prefix is the same in all of them. The count tells
apart the same text printed twice; where the count no longer fits (dmesg's ring buffer dropped the oldest lines,
or the journal kept more than dmesg) the last place of that text decides. Another boot id: a fresh cursor.

Pure functions, stdlib only (shipped to hosts as module_utils).
"""
import json
import re

from ansible.module_utils.diagnosis import error_catalogue as catalogue
from ansible.module_utils.gpu.gpu_arch import lookup

ACTIONS = catalogue.XID_SEVERITY
STATE_PATH = "/var/lib/gpuhost/xid-state.json"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
# Host programs that keep a GPU open and must stop for a reset (NVIDIA's reset notes: nvidia-persistenced,
# DCGM's nv-hostengine, dcgm-exporter); they are not tenants: drift stops and starts them around the reset.
RESET_HOLDERS = ("nvidia-persistenced", "nv-hostengine", "dcgm-exporter")
# Xid 154: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
_RECOVERY = re.compile(r"recovery action changed from \S+ \([^)]*\) to (0x[0-9a-fA-F]+|\d+)")


def bus_key(address):
    """'00000000:17:00.0', '0000:17:00', 'PCI:0000:17:00' -> '0000:17:00' (domain, bus, device: GB200 trays have
    several PCI domains, so the domain counts)."""
    parts = (address or "").lower().replace("pci:", "").split(":")
    if len(parts) < 2:
        return (address or "").lower()
    domain = "%04x" % int(parts[-3], 16) if len(parts) >= 3 and parts[-3] else "0000"
    return "%s:%s:%s" % (domain, parts[-2], parts[-1].split(".")[0])


def xid_events(text):
    """The Xid lines of a kernel log (`dmesg`, `journalctl -k`) in order: [{code, bus, pci (as printed), pid, name,
    message, key, line}]. key: the line from "NVRM: Xid" on, the same whichever tool read the log."""
    events = []
    for line in (text or "").splitlines():
        match = catalogue.XID.search(line)
        if not match:
            continue
        rest = match.group(3) or ""
        pid = re.match(r"^pid=('?<?[^,]*>?'?)(?:,\s*|$)", rest)
        if pid:
            rest = rest[pid.end():]
        name = re.match(r"^name=([^,]*)(?:,\s*|$)", rest)
        if name:
            rest = rest[name.end():]
        raw_pid = pid.group(1).strip("'") if pid else ""
        raw_name = name.group(1).strip() if name else ""
        events.append({"code": int(match.group(2)), "bus": bus_key(match.group(1)), "pci": match.group(1).lower(),
                       "pid": int(raw_pid) if raw_pid.isdigit() else None,
                       "name": raw_name if raw_name not in ("", "<unknown>") else None,
                       "message": rest.strip(), "key": line[match.start():].strip(), "line": line.strip()})
    return events


def xid_action(event):
    """(action, words) of one Xid event: its table row's action; Xid 154's from the action its message names. An
    Xid the table lacks is reported, never acted on: automation follows only what the sources say."""
    row = catalogue.XID_CATALOGUE.get(event["code"])
    if row is None:
        return "IGNORE", ("Xid %d is not in gpuhost's table (NVIDIA's catalogue: https://docs.nvidia.com/deploy/"
                          "xid-errors/): reported, no action taken" % event["code"])
    if event["code"] == 154:
        found = _RECOVERY.search(event["message"])
        if found:
            number = int(found.group(1), 16) if found.group(1).lower().startswith("0x") else int(found.group(1))
            action = catalogue.XID_RECOVERY_ACTIONS.get(number, row.action)
            return action, "Xid 154: the driver asks for recovery action %s (%s)" % (found.group(1), action)
    return row.action, "Xid %d %s (usually %s)" % (event["code"], row.description, row.cause)


def new_events(events, cursor, boot_id):
    """{bus: [events after that GPU's cursor]}, each GPU's Xid lines in log order."""
    by_bus = {}
    for event in events:
        by_bus.setdefault(event["bus"], []).append(event)
    seen = (cursor or {}).get("gpus") or {} if (cursor or {}).get("boot_id") == boot_id else {}
    fresh = {}
    for bus, mine in by_bus.items():
        mark = seen.get(bus) or {}
        count, key = int(mark.get("count") or 0), mark.get("line")
        if not key:
            start = 0
        elif 0 < count <= len(mine) and mine[count - 1]["key"] == key:
            start = count
        else:
            places = [i for i, e in enumerate(mine) if e["key"] == key]
            # Not there: the ring buffer dropped it, so everything left came after it.
            start = places[-1] + 1 if places else 0
        if mine[start:]:
            fresh[bus] = mine[start:]
    return fresh


def _name(proc):
    return (proc.get("name") or "").rsplit("/", 1)[-1]


def gpu_label(index, bus_id, name=None):
    """"GPU 1 (0000:31:00.0, NVIDIA L4)"; a GPU off the bus has no index any more (nvidia-smi no longer lists it), so
    its bus id names it."""
    if index is None:
        return "GPU %s%s" % (bus_id, " (%s)" % name if name else "")
    return "GPU %s (%s%s)" % (index, bus_id, ", %s" % name if name else "")


def _label(gpu):
    return gpu_label(gpu.get("index"), gpu.get("pci_bus_id"), gpu.get("name"))


def _reset_blocks(gpu, tenants, fabric_manager_needed, fabric_manager_running):
    """Why `nvidia-smi -r -i N` must not run on this GPU now: [{kind, reason}]."""
    label, index = _label(gpu), gpu.get("index")
    blocks = []
    if tenants:
        blocks.append({"kind": "tenant", "reason": "%s is used by %s, not a gpuhost serving container: a reset would "
                       "kill it, so gpuhost does not reset the GPU; stop it or move it, then run drift again"
                       % (label, ", ".join("pid %s (%s%s)" % (p.get("pid"), p.get("name") or "unknown",
                                                              ", cgroup %s" % p["cgroup"] if p.get("cgroup") else "")
                                           for p in tenants))})
    if gpu.get("mig_mode") is True:
        blocks.append({"kind": "mig", "reason": "%s has MIG mode on: a reset takes down every MIG device on it, not "
                       "only the serving containers' ones, and its GPU instances must be created again; gpuhost "
                       "does not reset a MIG GPU on its own: stop what runs on its MIG devices, `nvidia-smi -r -i "
                       "%s`, then site.yml --tags mig (or restart the host)" % (label, index)})
    arch = gpu.get("architecture") or (lookup(gpu.get("pci_device_id"), gpu.get("name")) or {}).get("architecture")
    if fabric_manager_needed and arch == "Ampere" and not fabric_manager_running:
        blocks.append({"kind": "fabric_manager", "reason": "%s is an Ampere GPU on an NVSwitch (HGX) board, which "
                       "NVIDIA resets only while the fabric manager runs, and nvidia-fabricmanager is not running: "
                       "start it (`systemctl start nvidia-fabricmanager`), then run drift again" % label})
    return blocks


def decide_gpu(gpu, events, containers, processes, allow_reboot, fabric_manager_needed=False,
               fabric_manager_running=None, containers_by_gpu=None):
    """One GPU's decision from its new Xid events (see decide)."""
    index = gpu.get("index")
    label = _label(gpu)
    xids, worst = [], "IGNORE"
    for event in events:
        action, words = xid_action(event)
        xids.append(dict(event, action=action, words=words))
        if ACTIONS.index(action) > ACTIONS.index(worst):
            worst = action
    containers = list(containers or [])
    ours = set(containers)
    holders = [p for p in processes or [] if _name(p) in RESET_HOLDERS]
    tenants = [p for p in processes or [] if p not in holders and not (p.get("serving") or p.get("container") in ours)]
    tenant_pids = set(p.get("pid") for p in tenants)
    spans = sorted(set(i for i, names in (containers_by_gpu or {}).items()
                       if i != index and ours & set(names or [])), key=str)
    plan = {"index": index, "bus_id": gpu.get("pci_bus_id"), "uuid": gpu.get("uuid"), "action": worst,
            "xids": xids, "containers": containers, "holders": holders, "tenants": tenants, "spans": spans,
            "blocked": [], "steps": [], "on_failure": None, "out_of_service": False, "reboot": False, "done": True}
    codes = ", ".join(str(c) for c in sorted(set(x["code"] for x in xids)))
    if worst == "IGNORE":
        plan["say"] = "%s: Xid %s: nothing to do (%s)" % (label, codes, catalogue.XID_ACTIONS["IGNORE"])
    elif worst == "RESTART_APP":
        theirs = [x for x in xids if x["action"] == "RESTART_APP" and x["pid"] in tenant_pids]
        if theirs and len(theirs) == len([x for x in xids if x["action"] == "RESTART_APP"]):
            # The faulting process is named and is another tenant's: restarting gpuhost's containers helps nobody.
            plan["action"] = "IGNORE"
            plan["say"] = "%s: Xid %s came from %s, another tenant's process: gpuhost's containers are left running" \
                % (label, codes, ", ".join("pid %s (%s)" % (x["pid"], x["name"] or "unknown") for x in theirs))
        elif not containers:
            plan["say"] = "%s: Xid %s: no gpuhost serving container on it, nothing to restart" % (label, codes)
        else:
            plan["steps"] = ["restart %s" % c for c in containers]
            plan["say"] = "%s: Xid %s: restart %s" % (label, codes, ", ".join(containers))
    elif worst == "RESET_GPU":
        plan["blocked"] = _reset_blocks(gpu, tenants, fabric_manager_needed, fabric_manager_running)
        if plan["blocked"]:
            plan["done"] = False
            plan["say"] = "%s: Xid %s needs a GPU reset, not done: %s" % (
                label, codes, "; ".join(b["reason"] for b in plan["blocked"]))
        else:
            plan["steps"] = (["stop %s" % c for c in containers] + ["stop %s" % _name(p) for p in holders]
                             + ["nvidia-smi -r -i %s" % index, "verify GPU %s (nvidia-smi -i %s)" % (index, index)]
                             + ["start %s" % _name(p) for p in holders] + ["start %s" % c for c in containers])
            plan["on_failure"] = "RESTART_BM" if allow_reboot else "out_of_service"
            plan["say"] = "%s: Xid %s: reset the GPU (%s)%s; if the reset fails: %s" % (
                label, codes, ", ".join(plan["steps"]),
                " (its containers also use GPU %s)" % ", ".join(str(s) for s in spans) if spans else "",
                "restart the host" if allow_reboot else "mark it out of service (host restarts are not allowed)")
    else:
        plan["out_of_service"] = True
        plan["reboot"] = bool(allow_reboot)
        # Out of service until a restart: its Xids stay pending so each drift run says it again.
        plan["done"] = bool(allow_reboot)
        plan["say"] = "%s: Xid %s: %s; out of service%s" % (
            label, codes, catalogue.XID_ACTIONS[worst],
            ", restarting the host" if allow_reboot else ": host restarts are not allowed, an operator restarts it")
    return plan


def decide(kernel_log_text, gpus, cursor, boot_id, serving_by_gpu=None, processes_by_gpu=None, allow_reboot=False,
           fabric_manager_running=None, fabric_manager_needed=False):
    """Per GPU, what drift does about the Xids logged since that GPU's cursor.

    kernel_log_text: this boot's kernel log (`journalctl -k -b` or `dmesg`); gpus: the GPU facts' gpus ({index,
    pci_bus_id, uuid, name, mig_mode, pci_device_id or architecture}); cursor: the one this returned last (None at
    first); boot_id: /proc/sys/kernel/random/boot_id; serving_by_gpu: {index: [serving container names]};
    processes_by_gpu: {index: [{pid, name, container (a serving container's name, or None), serving}]}, the GPU's
    compute processes (compute_mode.processes_by_gpu's shape); allow_reboot: the operator lets drift restart the
    host; fabric_manager_running / fabric_manager_needed: the fabric manager's unit is active / the host needs one
    (fabric_manager.fabric_need()["fabric_manager"]).

    Returns {"gpus": [plan per GPU with new Xids: index, bus_id, uuid, action, xids (each with its action and
    words), containers, holders, tenants, spans (other GPUs those containers use), blocked [{kind, reason}],
    steps, on_failure (RESTART_BM | out_of_service, for a reset), out_of_service, reboot, done, say],
    "unmapped": [Xid events whose PCI bus is no GPU of the facts], "reboot": any plan restarts the host,
    "cursor": the cursor to store once drift has carried the plans out, "consumed": {bus: the cursor mark of
    each GPU with new Xids, once they are all dealt with}}. A plan that is not done (refused, or
    waiting for an operator's restart) keeps its GPU's cursor where it was."""
    serving_by_gpu = serving_by_gpu or {}
    processes_by_gpu = processes_by_gpu or {}
    fresh_cursor = (cursor or {}).get("boot_id") != boot_id
    events = xid_events(kernel_log_text)
    fresh = new_events(events, cursor, boot_id)
    by_bus = dict((bus_key(g.get("pci_bus_id")), g) for g in gpus or [] if g.get("pci_bus_id"))
    marks = {} if fresh_cursor else dict((cursor or {}).get("gpus") or {})
    plans, unmapped = [], []
    for bus in sorted(fresh):
        gpu = by_bus.get(bus)
        if gpu is None and not _severe(fresh[bus]):
            unmapped.extend(fresh[bus])
            marks[bus] = _mark(events, bus)
            continue
        if gpu is None:
            # A GPU fallen off the bus (Xid 79) leaves nvidia-smi's list (nvidia-smi may not answer at all): it is
            # marked by its PCI address all the same.
            gpu = {"index": None, "pci_bus_id": fresh[bus][0]["pci"], "uuid": None}
        index = gpu.get("index")
        plan = decide_gpu(gpu, fresh[bus], _get(serving_by_gpu, index), _get(processes_by_gpu, index), allow_reboot,
                          fabric_manager_needed, fabric_manager_running, serving_by_gpu)
        plans.append(plan)
        if plan["done"]:
            marks[bus] = _mark(events, bus)
    return {"gpus": plans, "unmapped": unmapped, "reboot": any(p["reboot"] for p in plans),
            "cursor": {"boot_id": boot_id, "gpus": marks},
            "consumed": dict((bus, _mark(events, bus)) for bus in fresh)}


def _severe(events):
    """Whether any of these Xids takes a GPU out of service (RESTART_BM, CONTACT_SUPPORT)."""
    return any(ACTIONS.index(xid_action(e)[0]) >= ACTIONS.index("RESTART_BM") for e in events)


# ----- the state drift keeps per host (/var/lib/gpuhost/xid-state.json) -----------------------------------------
# {"cursor": decide's cursor, "out_of_service": {bus key: {index, bus_id, uuid, boot_id, since, xids, reason}}}:
# a mark holds for the boot it was made in (a restart is what brings such a GPU back); the cursor's boot id
# likewise makes a fresh cursor after a restart.

def read_state(text, path):
    """(state, None), {} where there is no state yet, or (None, what is wrong and the fix) where the file is not a
    JSON object (never overwritten blind: drift stops and says so)."""
    if not (text or "").strip():
        return {}, None
    try:
        state = json.loads(text)
    except ValueError as exc:
        return None, "%s is not JSON (%s): move it aside and run drift again (the Xids since boot are then read " \
                     "afresh)" % (path, exc)
    if not isinstance(state, dict):
        return None, "%s is not a JSON object: move it aside and run drift again" % path
    return state, None


def out_of_service(state, boot_id):
    """{bus key: mark} of the GPUs marked out of service during this boot."""
    return dict((bus, mark) for bus, mark in ((state or {}).get("out_of_service") or {}).items()
                if isinstance(mark, dict) and mark.get("boot_id") == boot_id)


def with_out_of_service(facts, state_text, boot_id, path=STATE_PATH):
    """The GPU facts with this boot's out-of-service marks: `out_of_service` (the marks, [] where none) and each
    marked GPU's `out_of_service` (its mark), so that nothing is placed on such a GPU. A state file that is not
    JSON marks nothing here (drift names it)."""
    state, _error = read_state(state_text, path)
    marks = out_of_service(state or {}, boot_id) if boot_id else {}
    facts = dict(facts, out_of_service=sorted(marks.values(), key=lambda m: m.get("bus_id") or ""))
    facts["gpus"] = [dict(g, out_of_service=marks[bus_key(g.get("pci_bus_id"))]) if bus_key(g.get("pci_bus_id")) in marks
                     else g for g in facts.get("gpus") or []]
    return facts


def next_state(state, decision, outcomes, boot_id, stamp):
    """The state to write after drift carried out decide()'s plans. outcomes: {bus key: {"ok": the plan was carried
    out, "out_of_service": the GPU is to be marked (a RESTART_BM/CONTACT_SUPPORT Xid, or a reset that failed
    where the host may not restart)}}. A GPU whose plan failed and is not marked keeps its old cursor (the next
    run tries again); a marked GPU's Xids are consumed (the mark says them on every run until a restart)."""
    old = (state or {}).get("cursor") or {}
    old_marks = (old.get("gpus") or {}) if old.get("boot_id") == boot_id else {}
    marks = dict(decision["cursor"]["gpus"])
    flagged = out_of_service(state, boot_id)
    for plan in decision["gpus"]:
        bus = bus_key(plan["bus_id"])
        outcome = outcomes.get(bus) or {}
        if outcome.get("out_of_service"):
            flagged[bus] = {"index": plan["index"], "bus_id": plan["bus_id"], "uuid": plan["uuid"], "boot_id": boot_id,
                            "since": stamp, "xids": sorted(set(x["code"] for x in plan["xids"])),
                            "reason": outcome.get("reason") or plan["say"]}
            marks[bus] = decision["consumed"][bus]
        elif not outcome.get("ok"):
            if bus in old_marks:
                marks[bus] = old_marks[bus]
            else:
                marks.pop(bus, None)
    return {"cursor": {"boot_id": boot_id, "gpus": marks}, "out_of_service": flagged}


def _get(by_index, index):
    """A per-GPU value keyed by int or str index (JSON turns keys into strings)."""
    found = by_index.get(index)
    return found if found is not None else by_index.get(str(index), by_index.get(_int(index)))


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _mark(events, bus):
    mine = [e for e in events if e["bus"] == bus]
    return {"count": len(mine), "line": mine[-1]["key"]}
