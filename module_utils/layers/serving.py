# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Layer `serving`: every serving container the host's record lists (ansible_local.gpuhost.vllm.instances), and
every container with the vllm role's label, is running. A stopped one stays stopped: its restart policy
(unless-stopped) brings back a container that exited by itself, never one that was stopped, so a host whose
driver reboot stopped its containers serves nothing until something starts them, while every layer below works.
"""
from ansible.module_utils.layers.base import evidence, result
from ansible.module_utils.layers.container import SERVING_LABEL, inspected_containers
from ansible.module_utils.runs.rollout import serving_instances

REMEDY = ("start it: `docker start %s` (site.yml --tags vllm starts every instance of the inventory); if it "
          "stops again, its startup log says why (`docker logs %s`, or gpuhost vllm-log)")


def recorded_instances(record_text):
    """The serving containers gpuhost's record says it deployed, sorted; none without a record or with a broken one
    (the record's own check reads it)."""
    return sorted(serving_instances(record_text))


def _plural(names):
    return "s" if len(names) > 1 else ""


def _state_line(container):
    state = container.get("State") or {}
    policy = ((container.get("HostConfig") or {}).get("RestartPolicy") or {}).get("Name") or "no"
    status = state.get("Status") or "unknown"
    if status == "running":
        return "%s: running since %s" % ((container.get("Name") or "").lstrip("/"), state.get("StartedAt"))
    return "%s: %s (exit code %s at %s; restart policy %s)" % (
        (container.get("Name") or "").lstrip("/"), status, state.get("ExitCode"), state.get("FinishedAt"), policy)


def check_serving_running(inspected, recorded, labelled):
    """inspected: `docker inspect` of the labelled containers (a capture, None when there are none); recorded: the
    record's instance names; labelled: the names `docker ps -a --filter label=gpuhost.layer=vllm` lists."""
    by_name = dict(((c.get("Name") or "").lstrip("/"), c) for c in inspected_containers(inspected))
    names = sorted(set(recorded) | set(labelled) | set(by_name))
    command = "docker ps -a --filter label=%s; docker inspect NAME ..." % SERVING_LABEL
    if not names:
        return result("serving_running", "serving", "ok", "no serving container on this host",
                      ev=evidence(command))
    missing = [n for n in recorded if n not in by_name and n not in labelled]
    stopped = [n for n in names if n in by_name and (by_name[n].get("State") or {}).get("Status") != "running"]
    lines = [_state_line(by_name[n]) for n in names if n in by_name] + [
        "%s: in gpuhost's record, no such container" % n for n in missing]
    data = {"running": [n for n in names if n in by_name and n not in stopped], "stopped": stopped,
            "missing": missing}
    if stopped or missing:
        parts = []
        if stopped:
            parts.append("serving container%s %s not running" % (_plural(stopped), ", ".join(stopped)))
        if missing:
            parts.append("recorded instance%s %s %s no container"
                         % (_plural(missing), ", ".join(missing), "have" if len(missing) > 1 else "has"))
        remedy = (REMEDY % (" ".join(stopped), stopped[0]) if stopped else
                  "deploy it again: site.yml --tags vllm (or drop it from the record with vllm_absent)")
        return result("serving_running", "serving", "fail", "; ".join(parts), remedy=remedy,
                      ev=evidence(command, lines), data=dict(data, names=stopped + missing))
    return result("serving_running", "serving", "ok", "%d serving container(s) running" % len(data["running"]),
                  ev=evidence(command, lines), data=data)


def _serving_running(ctx):
    if ctx.engine != "docker" or ctx.check("docker")["status"] != "ok":
        return result("serving_running", "serving", "skipped", "%s is not running" % ctx.engine
                      if ctx.engine == "docker" else "serving containers run on docker",
                      ev=evidence("docker ps -a --filter label=" + SERVING_LABEL))
    return check_serving_running(ctx.get("serving_inspect"), recorded_instances(ctx.get("record")),
                                 ctx.get("serving_names") or [])


CHECKS = {"serving_running": _serving_running}
