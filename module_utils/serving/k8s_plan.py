# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Replicas of a Kubernetes manifest planned against one GPU (`gpuhost plan --manifest`).

Pure functions, stdlib only.  Time-slicing hands every GPU out R times and divides no memory
(docs/research/containerd-k3s.md §5), so every vLLM process that can land on one GPU must
fit there beside the others.  The rule is vllm_sharing's (check_instances, even_share):

    each process holds   budget = gpu_memory_utilization x CUDA total   (vLLM's own rule)
                       + what it holds beyond the budget (OUTSIDE_BUDGET_MIB)
    fits when            sum over the processes + memory already held <= CUDA total

CUDA total (nvidia-smi's Total less the driver's Reserved) is what the processes can get at
all.  seed 003 states the budget as 0.40 x 23,034 MiB = 9,214 MiB (nvidia-smi's Total); the
two differ by the 434 MiB the driver reserves on an L4 (gpu_memory catalogue).
"""
from ansible.module_utils.serving import vllm_overheads as vo
from ansible.module_utils.serving.k8s_manifest import SHARED_SUFFIX
from ansible.module_utils.serving.vllm_plan import MAX_UTILIZATION
from ansible.module_utils.serving.vllm_plan_inputs import PlanError, resolve_version
from ansible.module_utils.serving.vllm_sharing import OUTSIDE_BUDGET_MIB, budget_room, check_instances, even_share


def utilization_of(workload):
    """(gpu_memory_utilization, where it comes from): the args, else the default of the image's vLLM."""
    if workload["gpu_memory_utilization"] is not None:
        return workload["gpu_memory_utilization"], "args"
    version, text, _source = resolve_version(image=workload.get("image"))
    rules_name, rules = vo.generation(version)
    return rules["default_utilization"], "vLLM's default, rules %s (%s)" % (
        rules_name, "vLLM %s" % text if text else "image tag names no version: newest known")


def slices_per_gpu(workload, advertised=None, replicas_option=None):
    """(R, None) - how many pods the node hands one GPU to (1: whole GPUs) - or (None, reason)
    when the node does not advertise the resource the pods ask for (they stay Pending).
    PlanError when the pods ask for a shared GPU and nothing says how many ways it is shared.

    advertised: time_slicing() of the device plugin's config; replicas_option: R as given on the
    command line, for whichever of the two resource names the pods ask for."""
    resource = workload["gpu_resource"]
    if replicas_option is not None:
        return replicas_option, None
    if advertised is None:
        if resource.endswith(SHARED_SUFFIX):
            raise PlanError("%s/%s asks for %s: give the node's time-slicing (--time-slicing FILE or "
                            "--time-slicing-replicas N)" % (workload["namespace"], workload["name"], resource))
        return 1, None
    if resource in advertised:
        return advertised[resource], None
    who = "%s/%s asks for %s" % (workload["namespace"], workload["name"], resource)
    if resource + SHARED_SUFFIX in advertised:
        # seed 003: on a node that advertises gpu.shared, a pod asking nvidia.com/gpu does not schedule.
        return None, "%s, but the time-slicing config renames it %s%s (renameByDefault): the pods stay " \
                     "Pending" % (who, resource, SHARED_SUFFIX)
    if resource.endswith(SHARED_SUFFIX):
        return None, "%s, which the time-slicing config does not advertise (%s): the pods stay Pending" % (
            who, ", ".join(sorted(advertised)))
    return 1, None  # the config slices other resources only: whole GPUs


def _processes(workload, refs):
    """One entry per GPU reference the pods hold: each runs one vLLM rank (process)."""
    return [{"name": "%s-%d" % (workload["name"], i), "workload": workload["name"],
             "gpu_memory_utilization": workload["gpu_memory_utilization"], "gpu_index": 0} for i in range(refs)]


def gpu_groups(rows):
    """The sets of processes that can share one GPU: per time-sliced resource, the R largest
    budgets of every workload asking for it (the scheduler may pack them); a whole GPU holds one."""
    groups = []
    shared = {}
    for row in rows:
        if row["slices"] is None:
            continue
        if row["slices"] == 1:
            groups.append({"resource": row["gpu_resource"], "slices": 1, "workloads": [row["name"]],
                           "processes": _processes(row, 1)})
        else:
            key = (row["gpu_resource"], row["slices"])
            group = shared.setdefault(key, {"resource": key[0], "slices": key[1], "workloads": [],
                                            "processes": []})
            group["workloads"].append(row["name"])
            group["processes"].extend(_processes(row, row["replicas"] * row["gpu_count"]))
    for group in shared.values():
        offered = len(group["processes"])
        group["processes"] = sorted(group["processes"], key=lambda p: -p["gpu_memory_utilization"])[:group["slices"]]
        group["offered"] = offered
        groups.append(group)
    return groups


def _most_alike(util, cuda_total, held_mib, outside_mib):
    """How many processes of this utilisation fit one GPU."""
    return int((cuda_total - held_mib) // (util * cuda_total + outside_mib))


def check_group(group, cuda_total, held_mib, outside_mib):
    """The group's sum against the device, and the utilisation that makes it fit."""
    check = check_instances(group["processes"], cuda_total, held_mib, outside_mib)[0]
    count = len(group["processes"])
    # Capped as vllm_plan's own remedies are: the share nothing else on the GPU may need.
    largest = min(MAX_UTILIZATION, even_share(check))
    top = group["processes"][0]["gpu_memory_utilization"]
    processes = [dict(p, budget_mib=int(round(p["gpu_memory_utilization"] * cuda_total))) for p in group["processes"]]
    out = {
        "resource": group["resource"],
        "time_slicing_replicas": group["slices"] if group["slices"] > 1 else None,
        "workloads": group["workloads"],
        "replicas_on_one_gpu": count,
        "processes": processes,
        "budgets_mib": sum(p["budget_mib"] for p in processes),
        "outside_budget_mib": outside_mib * count,
        "held_mib": held_mib,
        "required_mib": check["required_mib"],
        "cuda_total_mib": cuda_total,
        "sum_utilization": check["sum_utilization"],
        "room": round(budget_room(check), 4),
        "fits": check["fits"],
        "largest_fitting_utilization": largest if largest > 0 else None,
    }
    if group["slices"] > 1:
        out["sharing"] = ("time-slicing hands each GPU to %d pods and divides no memory: %d of the %d GPU "
                          "references asked for can land on one GPU (the scheduler may pack them)"
                          % (group["slices"], count, group["offered"]))
    else:
        out["sharing"] = "a whole GPU per rank: one vLLM process on it"
    remedies = []
    if not check["fits"] and largest > 0:
        each = int(round(largest * cuda_total))
        remedies.append({"name": "lower_gpu_memory_utilization", "gpu_memory_utilization": largest,
                         "description": "--gpu-memory-utilization %.2f on each of the %s that can share one GPU: "
                                        "%d x (%s + %s) + %s = %s MiB <= %s MiB"
                                        % (largest, _replicas(count), count, _mib(each), _mib(outside_mib),
                                           _mib(held_mib), _mib(count * (each + outside_mib) + held_mib),
                                           _mib(cuda_total))})
    if not check["fits"] and group["slices"] > 1:
        most = _most_alike(top, cuda_total, held_mib, outside_mib)
        if most >= 1:
            remedies.append({"name": "fewer_replicas_per_gpu", "replicas_on_one_gpu": most,
                             "description": "at most %s of %.2f on one GPU: time-slicing replicas %d "
                                            "(or that many pods per GPU)" % (_replicas(most), top, most)})
    out["remedies"] = remedies
    return out


def plan_manifest(workloads, device, advertised=None, replicas_option=None, held_mib=0,
                  outside_budget_mib=OUTSIDE_BUDGET_MIB):
    """{verdict, reasons, device, workloads, gpus}: every set of replicas that can share one GPU
    checked against it.  device: gpu_memory.device_memory(); workloads: k8s_manifest.workloads()."""
    cuda_total = device["cuda_total_mib"]
    rows, reasons = [], []
    for workload in workloads:
        util, source = utilization_of(workload)
        slices, reason = slices_per_gpu(workload, advertised, replicas_option)
        if reason:
            reasons.append({"code": "resource_not_advertised", "message": reason})
        rows.append(dict(workload, slices=slices, gpu_memory_utilization=util, utilization_source=source,
                         budget_mib=int(round(util * cuda_total))))
    gpus = [check_group(g, cuda_total, held_mib, outside_budget_mib) for g in gpu_groups(rows)]
    for gpu in gpus:
        if not gpu["fits"]:
            reasons.append({"code": "replicas_overflow_gpu", "message": overflow_message(gpu, outside_budget_mib)})
    return {
        "verdict": "refuse" if reasons else "ok",
        "reasons": reasons,
        "device": device,
        "held_mib": held_mib,
        "outside_budget_mib_each": outside_budget_mib,
        "workloads": rows,
        "gpus": gpus,
    }


def overflow_message(gpu, outside_mib):
    held = " + %s MiB held" % _mib(gpu["held_mib"]) if gpu["held_mib"] else ""
    text = ("%s of %s on one GPU: budgets %s MiB (%.2f x %s MiB CUDA total) + %d x %s MiB outside the "
            "budgets%s = %s MiB > %s MiB" % (
                _replicas(gpu["replicas_on_one_gpu"]), ", ".join(gpu["workloads"]),
                " + ".join(_mib(p["budget_mib"]) for p in gpu["processes"]), gpu["sum_utilization"],
                _mib(gpu["cuda_total_mib"]), gpu["replicas_on_one_gpu"], _mib(outside_mib), held,
                _mib(gpu["required_mib"]), _mib(gpu["cuda_total_mib"])))
    if gpu["largest_fitting_utilization"]:
        text += "; the largest --gpu-memory-utilization that fits %s is %.2f" % (
            _replicas(gpu["replicas_on_one_gpu"]), gpu["largest_fitting_utilization"])
    return text


def _replicas(count):
    return "%d replica%s" % (count, "" if count == 1 else "s")


def _mib(value):
    return "{:,}".format(value)


def render_text(result, source=None):
    """Readable plan for the CLI."""
    dev = result["device"]
    lines = ["vLLM replicas per GPU: %s%s" % (result["verdict"].upper(), " - %s" % source if source else ""),
             "  GPU        %s%s MiB - %s MiB reserved (%s) = %s MiB CUDA total; %s MiB held by others; "
             "%s MiB per vLLM process outside its budget" % (
                 dev["card"] + " " if dev.get("card") else "", _mib(dev["total_mib"]), _mib(dev["reserved_mib"]),
                 dev["reserved_source"], _mib(dev["cuda_total_mib"]), _mib(result["held_mib"]),
                 _mib(result["outside_budget_mib_each"]))]
    for w in result["workloads"]:
        lines.append("  %s %s/%s: %s, %s, model %s, --gpu-memory-utilization %.2f (%s) = budget %s MiB, "
                     "--max-model-len %s, --max-num-seqs %s, TP %d, %s: %d" % (
                         w["kind"], w["namespace"], w["name"], _replicas(w["replicas"]),
                         w["image"], w["model"], w["gpu_memory_utilization"], w["utilization_source"],
                         _mib(w["budget_mib"]), w["max_model_len"] or "not given", w["max_num_seqs"] or "not given",
                         w["tensor_parallel_size"], w["gpu_resource"], w["gpu_count"]))
    for gpu in result["gpus"]:
        count = gpu["replicas_on_one_gpu"]
        lines.append("  one GPU (%s): %s" % (gpu["resource"], gpu["sharing"]))
        lines.append("    %d x budget = %s MiB (%.2f) + %s MiB outside the budgets + %s MiB held = %s MiB of %s MiB: %s"
                     % (count, _mib(gpu["budgets_mib"]), gpu["sum_utilization"], _mib(gpu["outside_budget_mib"]),
                        _mib(gpu["held_mib"]), _mib(gpu["required_mib"]), _mib(gpu["cuda_total_mib"]),
                        "fits" if gpu["fits"] else "OVERFLOW"))
        if gpu["largest_fitting_utilization"]:
            lines.append("    largest --gpu-memory-utilization that fits %s: %.2f" % (
                _replicas(count), gpu["largest_fitting_utilization"]))
        for rem in gpu["remedies"]:
            lines.append("    remedy %s: %s" % (rem["name"], rem["description"]))
    for reason in result["reasons"]:
        lines.append("  - %s" % reason["message"])
    return "\n".join(lines) + "\n"
