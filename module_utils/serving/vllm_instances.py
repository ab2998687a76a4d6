# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The vllm role's instances: each one as the user declared it -> its settings (the role's defaults filled
in, its GPUs as indexes, its URL), the errors that keep it from being served, and its container (command line,
environment, labels, the docker_container arguments); and what the serving record keeps of each after its start.

Pure functions over the instances and the GPU facts (ansible_facts.nvidia); library/vllm_instances.py and
library/vllm_plan_measurement.py are their modules. Values are kept as the user gave them (a port given as text
stays text, as docker and vLLM read it); where a number is needed it is read as the role's Jinja read it
(`as_int`, `as_float`: a text that is no number counts as 0).
"""
import os
import re

from ansible.module_utils.serving.vllm_args import command_line, names_flag
from ansible.module_utils.gpu.gpu_refs import gpu_named
from ansible.module_utils.serving.vllm_gpus import gpu_indexes

# What an instance does not give: these, then the role-wide settings (ipc_mode, shm_size).
INSTANCE_DEFAULTS = (
    ("max_model_len", None),
    ("gpu_memory_utilization", 0.9),
    ("max_num_seqs", None),
    ("quantization", None),
    ("kv_cache_dtype", "auto"),
)
LOOPBACK = ("127.0.0.1", "::1", "localhost")
NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
DIGEST = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
MIG_REF = re.compile(r"^([0-9]+:[0-9]+|MIG-.+)$")
# The role-wide settings an instance is resolved and run with (the role's variables vllm_<name>).
SETTINGS = {
    "models_dir": "/srv/models",
    "bind_address": "127.0.0.1",
    "expose_publicly": False,
    "ipc_mode": "host",
    "shm_size": "",
    "compile_cache_volume_prefix": "gpuhost-vllm-cache-",
    "compile_cache_path": "/root/.cache/vllm",
    "network_mode": "bridge",
    "model_argument": "positional",
    "hf_home": "/models/hf",
    "hf_offline": True,
}


class InstancesError(ValueError):
    """What keeps the instances from being served: .errors {instance name or '': [sentences]}."""

    def __init__(self, message, errors=None):
        ValueError.__init__(self, message)
        self.errors = errors or {}


def as_int(value):
    """A number as the role's Jinja `int` read it: text in base 10, else through float, else 0."""
    try:
        return int(value, 10) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return 0


def as_float(value):
    """A number as the role's Jinja `float` read it; 0.0 when it is none."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _unique(values):
    """The values once each, text compared without case (Jinja's `unique`, which the role's checks used)."""
    seen, out = [], []
    for value in values:
        key = value.lower() if isinstance(value, str) else value
        if key not in seen:
            seen.append(key)
            out.append(value)
    return out


def url_host(bind_address):
    """Where the role (and an operator on the host) reaches an API published on bind_address."""
    if bind_address in ("0.0.0.0", "", "*"):
        return "127.0.0.1"
    if bind_address == "::":
        return "[::1]"
    return "[%s]" % bind_address if ":" in bind_address else bind_address


def resolve(instance, gpus, settings):
    """One instance with the role's defaults filled in and what the later tasks need: gpu_ids (the `gpus`
    entries as text), gpu_indexes (the GPUs they are on), tensor_parallel_size (default: the number of
    gpus), bind_address, url, cache_volume, memory_total_mib (the smallest of its GPUs, 0 if none).
    Holds no secret."""
    settings = dict(SETTINGS, **settings)
    gpu_ids = [str(ref) for ref in instance.get("gpus") or []]
    indexes = gpu_indexes(gpu_ids, gpus)
    bind = instance.get("bind_address") or settings["bind_address"]
    model = instance.get("model")
    out = {"served_model_name": os.path.basename(model) if isinstance(model, str) else model}
    out.update(INSTANCE_DEFAULTS)
    out.update(ipc_mode=settings["ipc_mode"], shm_size=settings["shm_size"], extra_args=[], env={},
               non_torch_gib=None, activation_gib=None, vllm_version=None)
    out.update((key, value) for key, value in instance.items() if value is not None)
    memory = [g["memory_total_mib"] for g in gpus or [] if g["index"] in indexes]
    out.update(
        gpu_ids=gpu_ids,
        gpu_indexes=indexes,
        tensor_parallel_size=as_int(instance.get("tensor_parallel_size") or len(gpu_ids)),
        bind_address=bind,
        url="http://%s:%s" % (url_host(bind), instance.get("port")),
        cache_volume="%s%s" % (settings["compile_cache_volume_prefix"], instance.get("name")),
        memory_total_mib=min(memory) if memory else 0,
    )
    return out


def _gpus_text(gpus):
    mig = ["%s:%s" % (d.get("gpu_index", g["index"]), d["index"]) for g in gpus or [] for d in g.get("mig_devices") or []]
    return "this host has GPUs %s%s" % (", ".join(str(g["index"]) for g in gpus or []) or "none",
                                        "; MIG devices %s" % ", ".join(mig) if mig else "")


def _out_of_service_errors(ids, indexes, gpus):
    """An instance placed on a GPU drift took out of service this boot (the GPU facts' out_of_service)."""
    by_index = dict((g["index"], g) for g in gpus or [] if g.get("index") is not None)
    out = []
    for index in indexes:
        mark = (by_index.get(index) or {}).get("out_of_service")
        if mark:
            out.append("gpus %s: GPU %s (%s) is out of service since %s (%s): a host restart brings it back; until "
                       "then place the instance on another GPU"
                       % (", ".join(ids), index, mark.get("bus_id"), mark.get("since"), mark.get("reason")))
    return out


def _gpu_errors(inst, gpus):
    ids, indexes = inst["gpu_ids"], inst["gpu_indexes"]
    if not ids:
        return ["gpus is empty: name this host's GPU indexes or UUIDs, or one MIG device as GPU:device or its "
                "MIG UUID (%s)" % _gpus_text(gpus)]
    if len(indexes) == len(_unique(ids)):
        return _out_of_service_errors(ids, indexes, gpus)
    missing = [ref for ref in ids if gpu_named(ref, gpus) is None]
    if missing:
        return ["gpus %s: %s %s not on this host (%s)" % (", ".join(ids), ", ".join(missing),
                                                          "is" if len(missing) == 1 else "are", _gpus_text(gpus))]
    named = {}
    for ref in _unique(ids):
        named.setdefault(int(gpu_named(ref, gpus)["index"]), []).append(ref)
    twice = ["GPU %d (%s)" % (index, ", ".join(refs)) for index, refs in sorted(named.items()) if len(refs) > 1]
    return ["gpus %s name %s more than once: name each GPU once, and at most one MIG device (CUDA gives a process "
            "one MIG device)" % (", ".join(ids), "; ".join(twice))]


def instance_errors(inst, gpus, settings, declared=None):
    """Why one resolved instance cannot be served, each a sentence with its fix ([] when it can).
    declared: the instance as the user gave it, for the values the messages quote."""
    settings = dict(SETTINGS, **settings)
    declared = declared or inst
    out = []
    name = str(inst.get("name"))
    if not NAME.match(name):
        out.append("name %r: a container name, [a-zA-Z0-9] then [a-zA-Z0-9_.-]" % name)
    image = str(inst.get("image"))
    last = image.split("@", 1)[0].rsplit("/", 1)[-1].split(":")
    if not (DIGEST.match(image) or (len(last) == 2 and last[1] not in ("", "latest"))):
        out.append("image %s is not pinned: give it a tag other than latest (repo:tag) or a digest "
                   "(repo@sha256:<64 hex>), so that the same tag always means the same engine" % image)
    gpu_errors = _gpu_errors(inst, gpus)
    out.extend(gpu_errors)
    tp = as_int(inst.get("tensor_parallel_size"))
    if (tp < 1 or tp > len(inst["gpu_indexes"])) and not gpu_errors:
        out.append("tensor_parallel_size %s: from 1 to the number of its GPUs (%d)"
                   % (declared.get("tensor_parallel_size", tp), len(inst["gpu_indexes"])))
    if not 1 <= as_int(inst.get("port")) <= 65535:
        out.append("port %s: an API port from 1 to 65535" % inst.get("port"))
    if not 0 < as_float(inst.get("gpu_memory_utilization")) <= 1:
        out.append("gpu_memory_utilization %s: a share of the whole GPU, in (0, 1]" % inst.get("gpu_memory_utilization"))
    model = inst.get("model")
    if not isinstance(model, str) or model.startswith("/") or ".." in model.split("/") or not model:
        out.append("model %r: a directory relative to vllm_models_dir (%s), without '..'"
                   % (model, settings["models_dir"]))
    if inst.get("bind_address") not in LOOPBACK and not settings["expose_publicly"]:
        out.append("bind_address %s is not loopback: publishing the API beyond this host needs "
                   "vllm_expose_publicly: true (put TLS and auth in front), else bind 127.0.0.1" % inst.get("bind_address"))
    if names_flag(inst.get("extra_args"), "api_key"):
        out.append("--api-key is in extra_args: the API key goes in vllm_api_key (the container's VLLM_API_KEY), "
                   "never on its command line")
    out = ["instance %s: %s" % (name, text) for text in out]
    # With MIG on, CUDA enumerates only the MIG devices a process is given: a container handed the whole GPU
    # finds no CUDA device. One MIG device (GPU:device or its MIG UUID) is what such a GPU serves.
    mig_on = [g["index"] for g in gpus or [] if g.get("mig_mode") is True]
    whole = [i for i in inst["gpu_indexes"] if i in mig_on]
    if whole and not [ref for ref in inst["gpu_ids"] if MIG_REF.match(ref)]:
        devices = ["%s:%s" % (i, d["index"]) for g in gpus for i in whole if g["index"] == i
                   for d in g.get("mig_devices") or []]
        out.append("instance %s is given GPU %s whole, but MIG is enabled there: CUDA sees only MIG devices on such "
                   "a GPU, so vLLM would find no CUDA device - disable MIG on it (`nvidia-smi -i <index> -mig 0` with "
                   "no process on the GPU) or give the instance another GPU%s"
                   % (name, ", ".join(str(i) for i in whole),
                      ", or one MIG device (%s)" % ", ".join(devices) if devices else ""))
    return out


def host_errors(resolved):
    """Names and ports that more than one instance of the host has (names compared without case)."""
    out = []
    names = [inst.get("name") for inst in resolved]
    ports = [inst.get("port") for inst in resolved]
    if len(_unique(names)) != len(names):
        out.append("instance names %s must be unique on a host, whatever their case (one container each)" % names)
    if len(_unique(ports)) != len(ports):
        out.append("instance ports %s must be unique on a host" % ports)
    return out


def container(inst, settings):
    """The docker_container arguments of one resolved instance, but the secrets (the caller adds HF_TOKEN and
    VLLM_API_KEY to `env`; they never pass through here). shm_size and published_ports only where used."""
    settings = dict(SETTINGS, **settings)
    listen = inst["bind_address"] if settings["network_mode"] == "host" else "0.0.0.0"
    env = {"HF_HOME": settings["hf_home"]}
    if settings["hf_offline"]:
        env["HF_HUB_OFFLINE"] = "1"
    env.update((key, str(value)) for key, value in (inst.get("env") or {}).items())
    out = {
        "name": inst["name"],
        "image": inst["image"],
        "command": command_line(dict(inst, host=listen), "/models/%s" % inst["model"], settings["model_argument"])
        + list(inst.get("extra_args") or []),
        # As `docker run --gpus device=...` sends it (count 0 with IDs); omitted, docker compares it as changed.
        "device_requests": [{"driver": "nvidia", "count": 0, "device_ids": inst["gpu_ids"],
                             "capabilities": [["gpu"]]}],
        "ipc_mode": inst["ipc_mode"],
        "volumes": ["%s:/models:ro" % settings["models_dir"],
                    "%s:%s" % (inst["cache_volume"], settings["compile_cache_path"])],
        "env": env,
        "labels": {"gpuhost.layer": "vllm", "gpuhost.vllm.instance": inst["name"]},
    }
    if inst["ipc_mode"] != "host" and inst.get("shm_size"):
        out["shm_size"] = inst["shm_size"]
    if settings["network_mode"] == "bridge":
        out["published_ports"] = ["%s:%s:%s" % (inst["bind_address"], inst["port"], inst["port"])]
    return out


def shm_warning(inst):
    """The warning for an instance on docker's 64 MB /dev/shm, or None."""
    if inst.get("ipc_mode") == "host" or inst.get("shm_size") not in ("", None):
        return None
    return ("vllm: WARNING %s has ipc_mode %s and no shm_size: docker's 64 MB /dev/shm fails weight loading and "
            "tensor parallelism (\"unable to open shared memory object ... No space left on device (28)\")"
            % (inst["name"], inst["ipc_mode"]))


def instances(declared, gpu_facts, settings):
    """Every instance of a host: {instances: [resolved], containers: [docker_container arguments],
    shm_warnings (the lines for instances on docker's 64 MB /dev/shm)}.
    InstancesError naming each instance, the layer and the fix when the GPU layer is not usable or an
    instance cannot be served."""
    if gpu_facts.get("state") != "ok":
        raise InstancesError(
            "vllm: the GPU layer below is not usable (%s: %s) - converge the driver layer first (--tags driver)"
            % (gpu_facts.get("state"), gpu_facts.get("message")))
    gpus = gpu_facts.get("gpus") or []
    resolved = [resolve(inst, gpus, settings) for inst in declared or []]
    errors = {}
    for inst, given in zip(resolved, declared or []):
        found = instance_errors(inst, gpus, settings, given)
        if found:
            errors.setdefault(inst["name"], []).extend(found)
    found = host_errors(resolved)
    if found:
        errors[""] = found
    if errors:
        raise InstancesError("vllm: %s. Nothing was deployed." % "; ".join(
            text for texts in errors.values() for text in texts), errors)
    return {
        "instances": resolved,
        "containers": [container(inst, settings) for inst in resolved],
        "shm_warnings": [w for w in (shm_warning(inst) for inst in resolved) if w],
    }


# ---------------------------------------------------------------- the serving record

def record(resolved, gpus, plans, summaries, reports, warnings, image_cuda):
    """What the record (ansible_local.gpuhost.vllm.instances) keeps of each started instance, by name: its
    settings, its GPUs' UUIDs, the plan it was started with (summaries), its image's CUDA verdict, what its
    startup log measured, and its warnings.

    plans: this run's full plans by name (their max_model_len and quantization are what vLLM was given or
    read from the model); reports: the startup reports by name; image_cuda: {image: verdict} (cuda_image_check's
    verdict, image_cuda, driver_cuda)."""
    out = {}
    for inst in resolved:
        name = inst["name"]
        plan, report = plans[name], reports.get(name) or {}
        indexes = inst.get("gpu_indexes") or []
        out[name] = {
            "image": inst.get("image"), "gpus": indexes,
            "gpu_uuids": [g.get("uuid") for g in gpus or [] if g["index"] in indexes],
            "port": inst.get("port"), "bind_address": inst.get("bind_address"), "url": inst.get("url"),
            "model": inst.get("model"), "served_model_name": inst.get("served_model_name"),
            "max_model_len": plan.get("max_model_len"),
            "gpu_memory_utilization": as_float(inst.get("gpu_memory_utilization")),
            "tensor_parallel_size": as_int(inst.get("tensor_parallel_size")),
            "kv_cache_dtype": inst.get("kv_cache_dtype"), "quantization": plan.get("quantization"),
            "ipc_mode": inst.get("ipc_mode"), "shm_size": inst.get("shm_size"),
            "plan": summaries[name], "cuda": (image_cuda or {}).get(inst.get("image")),
            "startup": dict((key, report.get(key)) for key in ("vllm_version", "weights_gib", "kv_cache_gib",
                                                               "kv_cache_tokens", "max_concurrency")),
            "warnings": warnings[name],
        }
    return out
