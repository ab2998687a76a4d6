# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPUs an instance's `gpus` names (GPU indexes, GPU UUIDs, or one MIG device as `GPU:device` or
`MIG-<uuid>`), resolved against the GPU facts, and the device its memory plan is made against.

Pure functions, stdlib only, Python >= 3.9 (shipped to hosts as module_utils).
"""
from ansible.module_utils.gpu.gpu_refs import MIG_DEVICE_REF, gpu_named, is_mig_ref, parse_gpu_ref
from ansible.module_utils.gpu.nvsmi_parse import merge_mig_listing
from ansible.module_utils.serving.vllm_plan_inputs import PlanError


def gpu_indexes(gpu_ids, gpus):
    """The GPU indexes an instance's `gpus` name, each once; an entry this host lacks adds none, so the caller
    compares the counts (the vllm role's validation, which lists what the host has)."""
    return sorted(set(int(gpu["index"]) for gpu in (gpu_named(ref, gpus) for ref in gpu_ids or []) if gpu))


def resolve_gpus(gpu_ids, gpus, listing=None):
    """An instance's `gpus` (GPU indexes, GPU UUIDs, or one MIG device as `GPU:device` or `MIG-<uuid>`) against the
    GPU facts -> {gpu_indexes, mig_device}. PlanError with the reason for what cannot be served.

    gpus: facts (index, name, uuid, mig_mode, mig_devices [{index, memory_total_mib, profile, uuid, ...}]: the
    module's facts carry -L's profile names and UUIDs, -q / -q -x alone has neither);
    listing: `nvidia-smi -L` text, for facts without them.
    The MIG device index is the `Device N` of `nvidia-smi -L` (the -q MIG device index, and the toolkit's CDI name
    nvidia.com/gpu=GPU:N). mig_device: {gpu_index, index, ref, uuid, profile, memory_total_mib, gpu_name,
    visible_devices (NVIDIA_VISIBLE_DEVICES), cdi_device}."""
    if listing:
        gpus = merge_mig_listing({"gpus": gpus or []}, listing)["gpus"]
    by_index = dict((int(g["index"]), g) for g in gpus or [])
    listed = dict(((int(g["index"]), d["index"]), d) for g in gpus or [] for d in g.get("mig_devices") or []
                  if d.get("uuid"))
    ids = [str(i).strip() for i in gpu_ids or []]
    if not ids:
        raise PlanError("gpus is empty: name GPU indexes, GPU UUIDs or one MIG device (GPU:device or MIG-<uuid>)")
    migs = [i for i in ids if is_mig_ref(i)]
    if migs and len(ids) > 1:
        raise PlanError("gpus %s: a MIG device is served alone (CUDA gives a process one MIG device; no tensor "
                        "parallelism across MIG devices)" % ", ".join(ids))
    if migs:
        ref = migs[0]
        parsed = parse_gpu_ref(ref)
        if parsed["kind"] == "mig":
            key = (parsed["gpu"], parsed["device"])
        else:
            key = next((k for k, dev in listed.items() if dev["uuid"] == ref), None)
            if key is None:
                raise PlanError("MIG device %s is not on this host (nvidia-smi -L lists %s)"
                                % (ref, ", ".join(d["uuid"] for d in listed.values()) or "no MIG device"))
        gpu = by_index.get(key[0])
        if gpu is None:
            raise PlanError("MIG device %s: this host has no GPU %d" % (ref, key[0]))
        fact = next((d for d in gpu.get("mig_devices") or [] if d.get("index") == key[1]), None)
        if fact is None or not fact.get("memory_total_mib"):
            raise PlanError("MIG device %s: GPU %d has no MIG device %d (MIG devices: %s)"
                            % (ref, key[0], key[1], ", ".join("%d:%d" % (key[0], d["index"])
                                                              for d in gpu.get("mig_devices") or []) or "none"))
        seen = listed.get(key) or {}
        profile = seen.get("profile")
        return {"gpu_indexes": [key[0]], "mig_device": {
            "gpu_index": key[0], "index": key[1], "ref": "%d:%d" % key, "uuid": seen.get("uuid"), "profile": profile,
            "memory_total_mib": fact["memory_total_mib"],
            # without -L's profile name, the slice's size (stable whatever its device index)
            "gpu_name": "%s MIG %s" % (gpu.get("name"), profile or "%d MiB %s SMs" % (
                fact["memory_total_mib"], fact.get("multiprocessor_count") or "?")),
            "visible_devices": seen.get("uuid") or "%d:%d" % key,
            "cdi_device": "nvidia.com/gpu=%d:%d" % key}}
    indexes = []
    for ref in ids:
        gpu = gpu_named(ref, gpus)
        if gpu is None:
            raise PlanError("gpus %s: %s is not a GPU of this host (GPUs %s)"
                            % (", ".join(ids), ref, ", ".join(str(i) for i in sorted(by_index)) or "none"))
        if gpu.get("mig_mode") is True:
            raise PlanError("GPU %s is given whole, but MIG is enabled there: CUDA sees only MIG devices on such a "
                            "GPU, so vLLM would find no device. Give the instance one MIG device (%s) or turn MIG off "
                            "on GPU %s" % (gpu["index"], ", ".join("%s:%s" % (gpu["index"], d["index"])
                                                                   for d in gpu.get("mig_devices") or [])
                                           or "none exists yet: declare nvidia_mig_layout", gpu["index"]))
        indexes.append(int(gpu["index"]))
    return {"gpu_indexes": sorted(set(indexes)), "mig_device": None}


def _device_of(inst, by_index):
    """What an instance's plan is made against: its MIG device, else the smallest of its GPUs."""
    mig = inst.get("mig_device")
    if mig:
        # The MIG device's Total is what CUDA there can have; -q shows its Reserved as 0 MiB (corpus 003).
        return {"name": mig["gpu_name"], "memory_total_mib": mig["memory_total_mib"], "memory_reserved_mib": 0}
    return min((by_index[int(i)] for i in inst["gpu_indexes"]), key=lambda g: g["memory_total_mib"])


def _device_keys(inst):
    mig = inst.get("mig_device")
    return ["%d:%d" % (mig["gpu_index"], mig["index"])] if mig else list(inst["gpu_indexes"])


def _with_mig_devices(instances, gpus):
    """An instance whose gpu_ids name a MIG device (GPU:device) is planned against that device (resolve_gpus)."""
    return [dict(inst, mig_device=resolve_gpus(inst.get("gpu_ids"), gpus)["mig_device"])
            if not inst.get("mig_device") and any(MIG_DEVICE_REF.match(str(i)) for i in inst.get("gpu_ids") or [])
            else inst for inst in instances]
