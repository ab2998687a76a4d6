# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout of a run over a fleet (README "Rolling out to a fleet"): the batch settings every host of the run
must share, and why one host's run disrupts it, which sends it through in batches.

Pure functions; library/gpuhost_rollout_settings.py and library/gpuhost_rollout.py are their modules.
site.yml's and drift.yml's first play checks the settings and keeps them for the batched plays (play keywords
such as serial see play and extra vars, not inventory variables); site.yml's plan play sorts each host.
"""
import json
import re

# (setting, the inventory variable, its default, the form it must have, what that form means)
SETTINGS = (
    ("disruption_batch", "gpuhost_disruption_batch", 1, r"^[1-9][0-9]*%?$",
     'a number of hosts (1, 2, ...) or a percentage ("10%")'),
    ("serial", "gpuhost_serial", "100%", r"^[1-9][0-9]*%?$", "a number of hosts or a percentage"),
    ("max_fail_percentage", "gpuhost_max_fail_percentage", 100, r"^[0-9]+(\.[0-9]+)?$", "a percentage from 0 to 100"),
)


class RolloutError(ValueError):
    """Batch settings the run cannot go by; the message says which and how to set them."""


def _text(value):
    return str(value)


def _unique(values):
    """Each value once, in order, text compared without case (as the settings' check has always compared them)."""
    seen, out = [], []
    for value in values:
        if value.lower() not in seen:
            seen.append(value.lower())
            out.append(value)
    return out


def batch_settings(values):
    """values: {setting: [the value of every host of the run (its default where a host sets none)]} ->
    {setting: the value (the first host's; the default for no host)}. RolloutError naming each setting that
    is malformed or not the same on every host (values are compared as text: 2 and "2" are the same)."""
    out, problems = {}, []
    for setting, variable, default, pattern, means in SETTINGS:
        given = list(values.get(setting) or []) or [default]
        texts = _unique([_text(value) for value in given])
        if len(texts) != 1 or not re.match(pattern, texts[0]):
            problems.append("%s must be %s, and the same for every host of the run; the hosts have %s."
                            % (variable, means, ", ".join(texts)))
        out[setting] = given[0]
    if problems:
        raise RolloutError("%s Set it once (group_vars/all or -e). Nothing was changed." % " ".join(problems))
    return out


def _recorded(record_text):
    """The `instances` of the vllm section of the host's record (ansible_local.gpuhost, its fact file's text) as
    written; None without a record, with a broken one or without the section."""
    try:
        record = json.loads(record_text) if record_text else {}
    except ValueError:
        return None
    vllm = record.get("vllm") if isinstance(record, dict) else None
    return vllm.get("instances") if isinstance(vllm, dict) else None


def record_instances(record_text):
    """The serving instances of the host's record by name, as the vllm role wrote them ({} where there are none)."""
    instances = _recorded(record_text)
    return instances if isinstance(instances, dict) else {}


def serving_instances(record_text):
    """The serving containers the host's record (ansible_local.gpuhost, its fact file's text) says it runs."""
    return [str(name) for name in _recorded(record_text) or []]


def driver_disruption(plan):
    """What the driver's run would do to the host, from nvidia_driver's predict.yml (its nvidia_driver_plan result,
    registered with failed_when false): '' when nothing or when the host has no NVIDIA GPU (the task skipped),
    the plan's disruption, or, for a plan that cannot be made yet (a fresh host whose sources the run adds, an
    operator's hold), that reason: the run will install a driver and reboot, so it counts as a disruption."""
    if not plan or plan.get("skipped"):
        return ""
    if "disruption" in plan:
        return _text(plan["disruption"])
    return "no driver plan yet: " + _text(plan.get("msg", "unknown"))


def host_plan(driver_disruption, serving, disruption_batch):
    """How one host goes through the rollout: {reasons, group (batched or parallel), message}.

    driver_disruption: what the driver's run would do to the host ('' when nothing: nvidia_driver's
    predict.yml); serving: the serving containers a run may restart; disruption_batch: the run's batch."""
    reasons = ([driver_disruption] if driver_disruption else []) + (
        ["serving containers " + ", ".join(serving)] if serving else [])
    return {
        "reasons": reasons,
        "group": "batched" if reasons else "parallel",
        "message": "rollout: %s (%s)" % ("in batches of %s" % disruption_batch if reasons else "in one pass",
                                         "; ".join(reasons) or "nothing disruptive"),
    }
