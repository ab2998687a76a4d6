# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Carry out one GPU's Xid plan (xid_policy.decide_gpu) on the host: restart its serving containers, or reset it
with only its own containers and the GPU's holders stopped, or say it must leave service.

Everything runs through the host's io (host/runner.py): docker's CLI, systemctl, nvidia-smi. health(url) -> bool
is the caller's /health probe (a serving container's OpenAI server), so the steps stay testable without a host.
"""
from ansible.module_utils.gpu.dcgm_diag import FAILED, run_diag, summary
from ansible.module_utils.gpu.nvsmi_reset import parse_reset
from ansible.module_utils.gpu.xid_policy import bus_key
from ansible.module_utils.host.runner import command_line, step_record
from ansible.module_utils.layers.base import DEFAULT_CUDA_PROBE_COMMAND
from ansible.module_utils.layers.container import check_cuda_probe, check_run_argv

# The units that run the programs that hold a GPU open and block its reset (xid_policy.RESET_HOLDERS, one unit
# each: the unit tests hold the two together): stopped
# before a reset when active, started again after it whatever the reset's outcome.
HOLDER_UNITS = {"nvidia-persistenced": "nvidia-persistenced.service", "nv-hostengine": "nvidia-dcgm.service",
                "dcgm-exporter": "dcgm-exporter.service"}


def _step(steps, what, result):
    steps.append(step_record(what, result))
    return result[0] == 0


def _wait_healthy(steps, containers, urls, health):
    """Each restarted container whose record has a URL answers /health (health() waits as long as it should)."""
    ok = True
    for name in containers:
        url = (urls or {}).get(name)
        if not url:
            continue
        answered = bool(health(url))
        steps.append({"step": "GET %s/health (%s)" % (url, name), "rc": 0 if answered else 1,
                      "output": "200" if answered else "no answer"})
        ok = ok and answered
    return ok


def cuda_probe(io, steps, docker, index, probe):
    """NVIDIA's vectorAdd on the reset GPU alone (the stack check's CUDA probe, `--gpus device=N`; the image is never
    pulled): the check's result, or None where no probe image is set (probe: {"image", "command"})."""
    if not (probe and probe.get("image") and docker):
        return None
    command = list(probe.get("command") or DEFAULT_CUDA_PROBE_COMMAND)
    flag = "--gpus device=%s" % index
    argv = check_run_argv(docker) + flag.split() + [probe["image"]] + command
    rc, out, err = io.run(argv)
    steps.append(step_record(command_line(argv), (rc, out, err)))
    return check_cuda_probe({"argv": argv, "rc": rc, "stdout": out or "", "stderr": err or ""}, probe["image"], command,
                            gpus=flag)


def dcgm_check(io, steps, index, units):
    """DCGM's level 1 diagnostic on the reset GPU alone (`dcgmi diag -r 1 -j -i N`) where its host engine ran before
    the reset (stopped for it, started again): dcgm_diag.read_run's result, or None where DCGM does not run here."""
    if HOLDER_UNITS["nv-hostengine"] not in units:
        return None
    argv, output, found = run_diag(io, 1, index)
    if argv:
        steps.append(step_record(command_line(argv), output))
    return found


def active_holder_units(io, systemctl):
    """The holder units running now (systemctl is-active), in HOLDER_UNITS' order."""
    if not systemctl:
        return []
    return [unit for unit in HOLDER_UNITS.values()
            if (io.run([systemctl, "is-active", unit])[1] or "").strip() == "active"]


def carry_out(io, plan, docker, smi, systemctl, urls=None, health=None, probe=None):
    """Do what the plan says. Returns {"ok": the plan was carried out, "out_of_service": the GPU is to be marked,
    "reboot": the host is to restart (the operator allows it), "reason": why not ok, "warning": a restarted
    container that does not answer /health or a CUDA probe that could not run, "steps": [{step, rc, output}], "reset":
    parse_reset's reading of nvidia-smi -r, "cuda_probe": the CUDA probe on the reset GPU (None where not run), "dcgm":
    DCGM's level 1 on it where DCGM runs ({status, summary}; None where not run)}.
    probe: the CUDA probe image and command run on a GPU after its reset ({"image", "command"}; None: not run)."""
    action = plan["action"]
    steps = []
    outcome = {"ok": True, "out_of_service": False, "reboot": False, "reason": None, "warning": None, "steps": steps,
               "reset": None, "cuda_probe": None, "dcgm": None}
    if plan.get("blocked"):
        return dict(outcome, ok=False, reason="; ".join(b["reason"] for b in plan["blocked"]))
    if action == "IGNORE":
        return outcome
    if action == "RESTART_APP":
        if plan["containers"] and not docker:
            return dict(outcome, ok=False, reason="no docker CLI to restart %s" % ", ".join(plan["containers"]))
        for name in plan["containers"]:
            # docker restart: the container's own stop timeout (its grace period), then its start.
            if not _step(steps, "docker restart %s" % name, io.run([docker, "restart", name])):
                outcome.update(ok=False, reason="docker restart %s failed" % name)
        if outcome["ok"] and health and not _wait_healthy(steps, plan["containers"], urls, health):
            # Restarted as the catalogue says: the serving layer's check names a container that stays down.
            outcome["warning"] = "a restarted container does not answer /health"
        return outcome
    if action == "RESET_GPU":
        return _reset(io, plan, docker, smi, systemctl, urls, health, outcome, probe)
    # RESTART_BM, CONTACT_SUPPORT: out of service; the host restarts where the operator allows it.
    return dict(outcome, out_of_service=True, reboot=bool(plan.get("reboot")), reason=plan["say"])


def _warn(outcome, text):
    outcome["warning"] = "; ".join(w for w in (outcome["warning"], text) if w)


def _reset(io, plan, docker, smi, systemctl, urls, health, outcome, probe=None):
    steps = outcome["steps"]
    index = plan["index"]
    stopped = []
    for name in plan["containers"]:
        if docker and _step(steps, "docker stop %s" % name, io.run([docker, "stop", name])):
            stopped.append(name)
    units = active_holder_units(io, systemctl)
    held = []
    for unit in units:
        if _step(steps, "systemctl stop %s" % unit, io.run([systemctl, "stop", unit])):
            held.append(unit)
    missing = [c for c in plan["containers"] if c not in stopped] + [u for u in units if u not in held]
    reset_ok = False
    if missing:
        outcome["reason"] = "could not stop %s, so GPU %s was not reset" % (", ".join(missing), index)
    else:
        rc, out, err = io.run([smi, "-r", "-i", str(index)])
        _step(steps, "nvidia-smi -r -i %s" % index, (rc, out, err))
        reading = outcome["reset"] = parse_reset("%s\n%s" % (out or "", err or ""))
        reset_ok = rc == 0 and any(bus_key(b) == bus_key(plan["bus_id"]) for b in reading["reset"])
        if not reset_ok:
            said = ((out or "") + "\n" + (err or "")).strip().splitlines()
            why = "; ".join("%s: %s" % (n["bus"], n["reason"]) for n in reading["not_reset"]) \
                or (said[-1] if said else "exit %s" % rc)
            outcome["reason"] = "nvidia-smi -r -i %s did not reset GPU %s (%s)" % (index, index, why)
        elif not _step(steps, "nvidia-smi -q -i %s" % index, io.run([smi, "-q", "-i", str(index)])):
            reset_ok = False
            outcome["reason"] = "GPU %s does not answer nvidia-smi after its reset" % index
    # Whatever the reset did: the holders and the containers go back as they were.
    for unit in held:
        _step(steps, "systemctl start %s" % unit, io.run([systemctl, "start", unit]))
    if reset_ok:
        # nvidia-smi answering is NVML; CUDA initialising and running a kernel on it is what serving needs.
        probed = outcome["cuda_probe"] = cuda_probe(io, steps, docker, index, probe)
        if probed and probed["status"] == "fail":
            reset_ok = False
            outcome["reason"] = "GPU %s was reset but %s" % (index, probed["summary"])
        elif probed and probed["status"] != "ok":
            _warn(outcome, "GPU %s was reset; %s" % (index, probed["summary"]))
    if reset_ok:
        diag = dcgm_check(io, steps, index, held)
        if diag:
            outcome["dcgm"] = {"status": diag["status"], "summary": summary(diag, 1)}
            if diag["status"] in FAILED:
                reset_ok = False
                outcome["reason"] = "GPU %s was reset but %s" % (index, outcome["dcgm"]["summary"])
            elif diag["status"] != "pass":
                _warn(outcome, "GPU %s was reset; %s" % (index, outcome["dcgm"]["summary"]))
    for name in stopped:
        _step(steps, "docker start %s" % name, io.run([docker, "start", name]))
    if reset_ok and health and not _wait_healthy(steps, stopped, urls, health):
        _warn(outcome, "GPU %s was reset but a container on it does not answer /health" % index)
    outcome["ok"] = reset_ok
    if not reset_ok:
        # A GPU whose reset failed is not trusted: out of service, and a host restart where it is allowed.
        outcome["out_of_service"] = True
        outcome["reboot"] = plan.get("on_failure") == "RESTART_BM"
    return outcome
