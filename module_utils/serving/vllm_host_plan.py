# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The memory plans of a host's vLLM instances (library/vllm_memory_plan's host call): the engine arguments
that change what vLLM reserves, memory held by other processes, each instance planned (vllm_plan) against
its device with the others on it, and the lines the vllm role prints.

Pure functions, stdlib only, Python >= 3.9 (shipped to hosts as module_utils).
"""
import os

from ansible.module_utils.gpu.compute_mode import blocked_text, context_blocked, processes_by_gpu
from ansible.module_utils.serving.vllm_args import read as read_args
from ansible.module_utils.serving.vllm_gpus import _device_keys, _device_of, _with_mig_devices
from ansible.module_utils.serving.vllm_measured import measurement_key
from ansible.module_utils.serving.vllm_plan import plan, refuse_message


# ---------------------------------------------------------------- a host's instances

def engine_flags(extra_args):
    """The engine arguments in extra_args that change what vLLM reserves (read with vllm_args' table)."""
    flags = {}
    values = read_args(extra_args)
    for key in ("max_num_batched_tokens", "max_num_seqs", "block_size"):
        if values.get(key):
            flags[key] = values[key]
    if "enforce_eager" in values:
        flags["enforce_eager"] = True
    if "enable_expert_parallel" in values:
        flags["expert_parallel"] = True
    if values.get("runner") == "pooling" or values.get("task") in ("embed", "embedding", "classify", "score"):
        flags["pooling"] = True
    return flags


def other_processes(processes, cgroups, own_ids):
    """The GPU processes that are not this role's containers.

    processes: facts [{pid, gpu_index, used_mib}]; cgroups: {pid: text of /proc/PID/cgroup}
    (missing: a process that ended, counted as another's); own_ids: container ids."""
    return [proc for proc in processes or []
            if not any(cid and cid in (cgroups.get(proc.get("pid")) or "") for cid in own_ids or [])]


def held_by_others(others):
    """MiB held on each GPU index by the processes that are not this role's containers (other_processes)."""
    held = {}
    for proc in others:
        index = int(proc.get("gpu_index") or 0)
        held[index] = held.get(index, 0) + int(proc.get("used_mib") or 0)
    return held


def compute_mode_reasons(inst, by_index, others, sharing):
    """Refusal reasons from the compute mode of the instance's whole GPUs (a MIG device is not judged): a
    Prohibited GPU, an Exclusive_Process GPU another process holds or that other instances share."""
    if inst.get("mig_device"):
        return []
    on_gpu = processes_by_gpu(others)
    reasons = []
    for index in (int(i) for i in inst.get("gpu_indexes") or []):
        gpu = by_index.get(index)
        sharers = set(s["name"] for s in sharing if s["gpu_index"] == index)
        why = context_blocked(gpu, on_gpu.get(index, []), len(sharers)) if gpu else None
        if why:
            reasons.append({"code": "compute_mode", "message": blocked_text(why)})
    return reasons


def plan_host(instances, gpus, models_dir, held=None, measurements=None, others=None):
    """Plan every instance of a host: {plans: {name: plan}, lines: [...], refused: [names],
    message: the failure text or None}. others: the GPU processes that are not the instances' (other_processes),
    judged with each GPU's compute mode.

    instances: as the vllm role resolved them (name, image, model, gpu_indexes,
    gpu_memory_utilization, max_model_len, tensor_parallel_size, kv_cache_dtype,
    quantization, max_num_seqs, extra_args, non_torch_gib, activation_gib, sampler);
    gpus: facts (index, name, memory_total_mib, memory_reserved_mib)."""
    by_index = {int(g["index"]): g for g in gpus or []}
    held = held or {}
    measurements = measurements or {}
    instances = _with_mig_devices(instances, gpus)
    sharing = [{"name": inst["name"], "gpu_memory_utilization": inst["gpu_memory_utilization"], "gpu_index": i}
               for inst in instances for i in _device_keys(inst)]
    plans, lines, refused = {}, [], []
    for inst in instances:
        smallest = _device_of(inst, by_index)
        devices = _device_keys(inst)
        key = measurement_key(inst, smallest.get("name"))[0]
        flags = engine_flags(inst.get("extra_args"))
        result = plan(
            instances=[s for s in sharing if s["gpu_index"] in devices],
            gpu_index=devices[0],
            gpu_memory_mib=smallest["memory_total_mib"],
            gpu_reserved_mib=smallest.get("memory_reserved_mib"),
            gpu_name=smallest.get("name"),
            gpu_memory_utilization=inst["gpu_memory_utilization"],
            max_model_len=inst.get("max_model_len"),
            model_dir=os.path.join(models_dir, inst["model"]),
            quantization=inst.get("quantization"),
            kv_cache_dtype=inst.get("kv_cache_dtype") or "auto",
            tensor_parallel_size=inst.get("tensor_parallel_size") or len(inst["gpu_indexes"]),
            max_num_seqs=inst.get("max_num_seqs") or flags.get("max_num_seqs"),
            max_num_batched_tokens=flags.get("max_num_batched_tokens"),
            block_size=flags.get("block_size"),
            enforce_eager=flags.get("enforce_eager", False),
            expert_parallel=flags.get("expert_parallel", False),
            pooling=flags.get("pooling", False),
            non_torch_gib=inst.get("non_torch_gib"),
            activation_gib=inst.get("activation_gib"),
            image=inst.get("image"),
            vllm_version=inst.get("vllm_version"),
            sampler=inst.get("sampler") or "auto",
            # held: MiB per GPU index, or per MIG device ("GPU:device") where the caller knows it.
            held_mib=max(held.get(i if isinstance(i, str) else int(i), 0) for i in devices),
            measured=measurements.get(key),
        )
        # Tensor parallelism needs that many GPUs at least as large as this one (none across MIG devices).
        room = 1 if inst.get("mig_device") else sum(
            1 for g in by_index.values() if g["memory_total_mib"] >= smallest["memory_total_mib"])
        result["remedies"] = [r for r in result["remedies"] if r["tensor_parallel_size"] <= room]
        blocked = compute_mode_reasons(inst, by_index, others, sharing)
        if blocked:
            # No memory remedy helps a GPU the instance cannot open.
            result.update(reasons=blocked + result["reasons"], verdict="refuse", remedies=[])
        result["measurement_key"] = key
        plans[inst["name"]] = result
        lines.extend(instance_lines(inst, result))
        if result["verdict"] == "refuse":
            refused.append(inst["name"])
    message = None
    if refused:
        message = " ".join(refuse_message(plans[name], name) for name in refused) + " No container was started."
    return {"plans": plans, "lines": lines, "refused": refused, "message": message}


def instance_lines(inst, result):
    """The plan of one instance as the role prints it."""
    held = " (%d MiB held by others)" % result["held_mib"] if result["held_mib"] else ""
    engine = result["engine"]
    low, high = result["band"]["max_concurrency"]
    lines = [
        "vllm plan %s: %s - GPU %s %d MiB CUDA total x %s = budget %d MiB%s; weights %s GiB, activation %s, "
        "non-torch %s, CUDA graphs %s GiB (%s) -> KV %s GiB = %s tokens, %sx (band %.2f-%.2fx) at max_model_len %s"
        % (inst["name"], result["verdict"].upper(),
           ("%s (%s)" % (inst["mig_device"]["ref"], inst["mig_device"]["gpu_name"]) if inst.get("mig_device")
            else ",".join(str(i) for i in inst["gpu_indexes"])),
           result["cuda_total_mib"], result["gpu_memory_utilization"], result["budget_mib"], held,
           result["weights_gib"], result["activation_gib"], result["non_torch_gib"], result["cuda_graph_gib"],
           result["estimates"]["activation_gib"], result["kv_cache_gib"], "{:,}".format(result["kv_cache_tokens"]),
           result["max_concurrency"], low, high, "{:,}".format(result["max_model_len"])),
        "  vLLM %s (%s), rules %s" % (engine["vllm_version"] or "unknown", engine["version_source"], engine["rules"]),
    ]
    lines.extend("  reason: %s" % r["message"] for r in result["reasons"])
    if result["remedies"]:
        lines.append("  remedies (best first):")
    lines.extend("    %s: %s tokens, %sx (%s) - %s" % (r["name"], "{:,}".format(r["kv_cache_tokens"]),
                                                       r["max_concurrency"], r["verdict"], r["description"])
                 for r in result["remedies"])
    return lines
