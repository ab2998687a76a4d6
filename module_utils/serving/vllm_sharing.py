# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Several vLLM instances on one GPU: time-slicing does not divide memory, so their budgets, what each
process holds beyond its budget and what is already held must fit the device.  One rule for the memory
plan (vllm_plan) and `gpuhost plan --manifest` (k8s_plan).

Pure functions, stdlib only, Python >= 3.9 (shipped to hosts as module_utils).
"""
import math

from ansible.module_utils.gpu.gpu_refs import MIG_DEVICE_REF
from ansible.module_utils.serving.vllm_plan_inputs import PlanError, _utilization

# What one vLLM process holds beyond its budget (CUDA context and allocations made before vLLM's
# memory snapshot): seed 003's EngineCore held 9,184 MiB at 0.40 of an L4's 22,600 MiB CUDA total
# (budget 9,040), 144 MiB more; at 0.20 it held 4,648 MiB for 4,520 (128).  The larger is kept.
OUTSIDE_BUDGET_MIB = 144


# ---------------------------------------------------------------- several instances

def check_instances(instances, gpu_memory_mib, held_mib=0, per_instance_mib=0):
    """Several vLLM instances on one GPU: time-slicing does not divide memory,
    so their budgets plus what is already held must fit the device.

    instances: [{name, gpu_memory_utilization, gpu_index}].  per_instance_mib: what each
    process holds beyond its budget (plan() and `gpuhost plan --manifest` pass OUTSIDE_BUDGET_MIB).  Returns
    one entry per GPU index: {gpu_index, names, sum_utilization, required_mib, held_mib,
    per_instance_mib, total_mib, fits}.
    """
    by_gpu = {}
    for i, inst in enumerate(instances or []):
        if not isinstance(inst, dict):
            raise PlanError("instances[%d] is not a mapping" % i)
        util = _utilization(inst.get("gpu_memory_utilization"), "instances[%d].gpu_memory_utilization" % i)
        name = str(inst.get("name") or "instance-%d" % i)
        index = inst.get("gpu_index", 0)
        if not (isinstance(index, str) and MIG_DEVICE_REF.match(index)):   # a MIG device "GPU:device" is its own device
            try:
                index = int(index)
            except (TypeError, ValueError):
                raise PlanError("instances[%d].gpu_index is not an integer: %r" % (i, index))
        by_gpu.setdefault(index, []).append((name, util))
    out = []
    for index in sorted(by_gpu, key=lambda k: (isinstance(k, str), k)):
        members = by_gpu[index]
        total_util = sum(member[1] for member in members)
        required = total_util * gpu_memory_mib + held_mib + per_instance_mib * len(members)
        out.append({
            "gpu_index": index,
            "names": [member[0] for member in members],
            "sum_utilization": round(total_util, 4),
            "required_mib": int(round(required)),
            "held_mib": held_mib,
            "per_instance_mib": per_instance_mib,
            "total_mib": gpu_memory_mib,
            # A hair of tolerance so budgets that fill the room exactly are not refused for a float.
            "fits": required <= gpu_memory_mib * (1 + 1e-9),
        })
    return out


def budget_room(check):
    """The share of the GPU left for budgets: what is neither held nor outside the budgets."""
    outside = check["held_mib"] + check.get("per_instance_mib", 0) * len(check["names"])
    return 1.0 - outside / float(check["total_mib"])


def even_share(check):
    """The largest --gpu-memory-utilization each instance of a check may have, all alike,
    floored to two decimals (the epsilon keeps 0.29 x 100 = 28.999... at 0.29)."""
    return math.floor(budget_room(check) / len(check["names"]) * 100 + 1e-9) / 100.0


def instances_reasons(checks):
    reasons = []
    for check in checks:
        if check["fits"]:
            continue
        held = (" + %d MiB held" % check["held_mib"]) if check["held_mib"] else ""
        if check.get("per_instance_mib"):
            held += " + %d x %d MiB outside the budgets" % (len(check["names"]), check["per_instance_mib"])
        reasons.append({
            "code": "instances_overflow",
            "message": ("GPU %s: %d instances (%s) budget %.2f x %d MiB%s = %d MiB > %d MiB; "
                        "time-slicing does not divide memory, so their gpu_memory_utilization "
                        "must sum to <= %.2f"
                        % (check["gpu_index"], len(check["names"]), ", ".join(check["names"]),
                           check["sum_utilization"], check["total_mib"], held,
                           check["required_mib"], check["total_mib"], budget_room(check))),
        })
    return reasons
