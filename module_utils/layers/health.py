# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Layer `health`: GPU memory held by processes that are gone, active throttle reasons, Xid errors since boot, and
compute modes that keep processes off a GPU."""
from ansible.module_utils.diagnosis import error_catalogue as catalogue
from ansible.module_utils.gpu.compute_mode import DEFAULT, context_blocked, mps_served, processes_by_gpu
from ansible.module_utils.gpu.xid_policy import decide, gpu_label, out_of_service, read_state, xid_events
from ansible.module_utils.layers.base import (
    MAX_EVIDENCE_LINES, _cmd, _grep, _kernel_log_unread, evidence, guarded, result)
from ansible.module_utils.layers.dcgm import dcgm_diag
from ansible.module_utils.layers.container import gpu_processes, inspected_containers, serving_by_gpu

# Idle GPUs always report gpu_idle; it is not throttling.
BENIGN_CLOCK_REASONS = ("gpu_idle",)


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


# The Xid table and line pattern live in the one error table (module_utils/diagnosis/error_catalogue.py).
XID_CATALOGUE = catalogue.XID_CATALOGUE
XID_ACTIONS = catalogue.XID_ACTIONS
_XID_SEVERITY = catalogue.XID_SEVERITY


def parse_xids(text):
    """Xid events from a kernel log (`dmesg`, `journalctl -k`): [{code, pci, pid, name, message, line}]."""
    return [dict((k, e[k]) for k in ("code", "pci", "pid", "name", "message", "line")) for e in xid_events(text)]


def describe_xid(code):
    entry = XID_CATALOGUE.get(code)
    if not entry:
        return {"code": code, "description": "not in gpuhost's table", "cause": "see NVIDIA's Xid catalogue",
                "action": catalogue.XID_UNKNOWN_ACTION}
    return {"code": code, "description": entry.description, "cause": entry.cause, "action": entry.action}


def check_xid(cap, command="dmesg", decision=None, marks=None, state_error=None):
    """Xid errors in the kernel log since boot, with what they mean. With decision (xid_policy.decide against the
    cursor drift keeps): only the Xids no drift run has dealt with yet count, each with what drift does about
    it (its plan), and every GPU marked out of service this boot (marks) fails the check until a restart."""
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
    if state_error:
        return result("xid", "health", "fail", state_error, remedy=state_error, ev=ev, data=data)
    if decision is not None:
        return _xid_pending(xids, decision, marks or {}, ev, data)
    if not events:
        return result("xid", "health", "ok", "no Xid errors in the kernel log since boot", ev=ev, data=data)
    worst = max(xids, key=lambda x: _XID_SEVERITY.index(x["action"]))
    summary = "Xid errors since boot: " + _xid_counts(xids)
    if worst["action"] == "IGNORE":
        return result("xid", "health", "ok", summary, ev=ev, data=data)
    return result("xid", "health", "fail", summary,
                  remedy="Xid %d (%s): %s" % (worst["code"], worst["cause"], XID_ACTIONS[worst["action"]]),
                  ev=ev, data=data)


def _xid_counts(xids):
    return "; ".join("Xid %d × %d on %s (%s)" % (x["code"], x["count"], ", ".join(x["gpus"]), x["description"])
                     for x in xids)


def _xid_pending(xids, decision, marks, ev, data):
    """The xid check against drift's cursor: the plans for the Xids not yet dealt with, the GPUs out of service."""
    plans = [p for p in decision["gpus"] if p["action"] != "IGNORE"]
    data = dict(data, plans=decision["gpus"], out_of_service=sorted(marks.values(), key=lambda m: m.get("bus_id")))
    lines = [p["say"] for p in plans] + [
        "%s is out of service since %s: %s" % (gpu_label(m.get("index"), m.get("bus_id")), m.get("since"), m.get("reason"))
        for m in data["out_of_service"]]
    if lines:
        remedy = []
        if plans:
            remedy.append("drift.yml does what each GPU's Xids call for (`ansible-playbook playbooks/drift.yml`)")
        if data["out_of_service"]:
            remedy.append("a GPU out of service comes back with a host restart (drift.yml restarts the host "
                          "where gpuhost_drift_allow_reboot is true); if it falls off again, contact NVIDIA support")
        return result("xid", "health", "fail", "; ".join(lines), remedy="; ".join(remedy), ev=ev, data=data)
    if not xids:
        return result("xid", "health", "ok", "no Xid errors in the kernel log since boot", ev=ev, data=data)
    return result("xid", "health", "ok", "Xid errors since boot, each dealt with or needing nothing: "
                  + _xid_counts(xids), ev=ev, data=data)


def check_compute_mode(facts, cgroups=None, serving_ids=()):
    """Each GPU's compute mode against its processes: a Prohibited GPU takes no CUDA process, an Exclusive_Process
    GPU one; a process other than a serving container holding such a GPU keeps every serving container off it.

    cgroups: {pid: /proc/PID/cgroup text} of the GPU processes (read only when a GPU is not in Default mode);
    serving_ids: the serving containers' ids."""
    command = "nvidia-smi --query-gpu=index,compute_mode,mig.mode.current --format=csv; cat /proc/PID/cgroup"
    gpus = facts.get("gpus") or []
    if facts.get("state") != "ok" or not gpus:
        return result("compute_mode", "health", "skipped", "nvidia-smi does not work (driver layer)",
                      ev=evidence(command))
    if all(g.get("compute_mode") is None for g in gpus):
        return result("compute_mode", "health", "skipped", "nvidia-smi reports no compute mode", ev=evidence(command))
    cgroups = cgroups or {}

    def serving(proc):
        text = cgroups.get(proc.get("pid")) or ""
        return any(cid in text for cid in serving_ids or ())

    on_gpu = processes_by_gpu(facts.get("processes"))
    lines, blocked, modes = [], [], {}
    for gpu in gpus:
        mode = gpu.get("compute_mode")
        modes[str(gpu.get("index"))] = mode
        holders = on_gpu.get(int(gpu["index"]), []) if gpu.get("index") is not None else []
        others = [p for p in holders if not serving(p)]
        lines.append("GPU %s: %s%s" % (gpu.get("index"), mode or "unknown", "".join(
            "; pid %s %s%s" % (p.get("pid"), p.get("name"), " (serving container)" if serving(p) else "")
            for p in holders)))
        why = context_blocked(gpu, others) if mode != DEFAULT else None
        if why:
            blocked.append(dict(why, gpu_index=gpu.get("index"), compute_mode=mode,
                                holders=[{"pid": p.get("pid"), "name": p.get("name")} for p in others]))
    ev = evidence(command, lines)
    data = {"modes": modes, "blocked": blocked}
    if blocked:
        return result("compute_mode", "health", "fail", "; ".join(b["reason"] for b in blocked),
                      remedy="; ".join("GPU %s: %s" % (b["gpu_index"], b["fix"]) for b in blocked), ev=ev, data=data)
    special = sorted(set(m for m in modes.values() if m not in (None, DEFAULT)))
    if special:
        mps = [str(g.get("index")) for g in gpus if mps_served(on_gpu.get(int(g["index"]), []))]
        return result("compute_mode", "health", "ok", "compute modes %s%s: no other process holds those GPUs"
                      % (", ".join("GPU %s %s" % (i, m) for i, m in sorted(modes.items()) if m not in (None, DEFAULT)),
                         " (MPS server on GPU %s)" % ", ".join(mps) if mps else ""), ev=ev, data=data)
    return result("compute_mode", "health", "ok", "every GPU in compute mode Default", ev=ev, data=data)


def _zombies(ctx):
    return guarded("zombies", "health", check_zombies, ctx.facts, ctx.gpu)


def _throttle(ctx):
    return guarded("throttle", "health", check_throttle, ctx.facts, ctx.gpu, ctx.opts["benign_clock_reasons"])


def xid_plans(captures, facts, opts):
    """(decide()'s plans against drift's cursor, this boot's out-of-service marks, the state file's error) from the
    captures (kernel_log, boot_id, xid_state, serving_inspect, gpu_process_cgroups, fabricmanager_active);
    (None, None, None) where the host has no boot id to key a cursor on."""
    boot_id = (captures.get("boot_id") or "").strip()
    if not boot_id:
        return None, None, None
    state, error = read_state(captures.get("xid_state"), opts["xid_state_path"])
    if error:
        return None, None, error
    containers = [c for c in inspected_containers(captures.get("serving_inspect"))
                  if (c.get("State") or {}).get("Running")]
    fabric = facts.get("fabric") or {}
    decision = decide((captures.get("kernel_log") or {}).get("stdout"), facts.get("gpus") or [],
                      state.get("cursor"), boot_id, serving_by_gpu(containers, facts.get("gpus") or []),
                      gpu_processes(facts, captures.get("gpu_process_cgroups"), containers),
                      opts["allow_reboot"], captures.get("fabricmanager_active") == "active", bool(fabric.get("needed")))
    return decision, out_of_service(state, boot_id), None


def _xid(ctx):
    cap = ctx.get("kernel_log")
    decision, marks, error = ctx.memo("xid_plans", lambda: xid_plans(ctx.captures, ctx.facts, ctx.opts)) \
        if cap and cap.get("rc") == 0 else (None, None, None)
    return guarded("xid", "health", check_xid, cap, ctx.opts["kernel_log_command_text"], decision, marks, error)


def _compute_mode(ctx):
    return guarded("compute_mode", "health", check_compute_mode, ctx.facts, ctx.get("gpu_process_cgroups"),
                   [c["Id"] for c in inspected_containers(ctx.get("serving_inspect")) if c.get("Id")])


CHECKS = {"zombies": _zombies, "throttle": _throttle, "xid": _xid, "compute_mode": _compute_mode,
          "dcgm_diag": dcgm_diag}
