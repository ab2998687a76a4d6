#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ansible module: vLLM memory plan before a start (thin shell over module_utils serving/vllm_plan and vllm_host_plan)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_memory_plan
short_description: Plan vLLM instances' GPU memory before starting them
description:
  - Computes what vLLM will compute at start, before any container starts. The budget is
    C(gpu_memory_utilization) x the total CUDA reports (nvidia-smi's Total minus the
    driver's Reserved); the KV share is the budget minus the weights, the activation
    peak of vLLM's profiling run, non-torch memory and (vLLM 0.20+) the estimated
    CUDA-graph memory; then KV tokens and the maximum concurrency at C(max_model_len),
    counted as that vLLM version counts them.
  - The overheads are modelled per vLLM engine generation from the model's shapes
    (hidden and MLP sizes, MoE layout, vocabulary, vision tower), the batch defaults of
    that version on that GPU, and its sampler; the version comes from the image tag or
    O(vllm_version). Figures this host measured at an earlier start of the same image,
    model and arguments (O(measured_path), written by C(vllm_plan_measurement)) win over
    the model; given figures win over both.
  - Every plan carries a band (the model's leave-one-out error on real startup logs, per
    configuration family, wider where a family has few logs). Verdict C(refuse) only when even the optimistic end of the band holds less than one
    full-length request, when the KV share cannot be positive, when the budget is more
    than the free memory, or when several instances on one GPU ask for more than the
    device; C(warn) inside the band around 1x and below 4x; C(ok) from 4x.
  - Returns remedies ranked by effect, each with the figures it would give.
  - Two ways to call it. One plan from O(gpu_memory_mib) or O(gpu_name) and a model; or
    every instance of a host from O(host_instances) and O(gpus) (the vllm role), which
    also counts memory held by processes that are not O(own_container_ids) (their
    C(/proc/PID/cgroup)) and returns the text the role prints.
  - Reads only C(config.json), the safetensors headers (never the tensor data),
    C(model.safetensors.index.json), C(/proc/PID/cgroup) and O(measured_path); never
    changes anything.
version_added: "0.1.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  gpu_memory_mib:
    description: Total memory of one GPU in MiB as nvidia-smi prints it (C(memory.total)).
    type: int
  gpu_reserved_mib:
    description:
      - Memory the driver reserves (nvidia-smi -q, FB Memory Usage, Reserved). Default - the
        catalogue's figure for O(gpu_name), else 500 MiB; the band then widens.
    type: int
  gpu_name:
    description: GPU product name (nvidia-smi) or a catalogue key (L4, A100-80GB, H100-SXM, H200 ...).
    type: str
  gpu_memory_utilization:
    description: vLLM C(--gpu-memory-utilization), a share of the whole device. Default that version's (0.90, 0.92 from 0.20).
    type: float
  max_model_len:
    description: vLLM C(--max-model-len). Defaults to the model's C(max_position_embeddings).
    type: int
  model_dir:
    description:
      - Model directory on the managed host (C(config.json) plus safetensors shards or
        their index). Multimodal configs (C(text_config), LLaVA's library defaults),
        sliding-window/full hybrids, MoE and MLA are understood.
      - Either this or O(weights_gib) with O(kv_bytes_per_token).
    type: path
  weights_gib:
    description: Weight GiB of the whole model (divided by O(tensor_parallel_size)); overrides O(model_dir).
    type: float
  kv_bytes_per_token:
    description: KV bytes per token of the whole model at 16-bit; overrides O(model_dir).
    type: int
  non_torch_gib:
    description: Non-torch memory per GPU, when measured; default the model's estimate.
    type: float
  activation_gib:
    description: Activation peak of the profiling run per GPU, when measured; default the model's estimate.
    type: float
  cuda_graph_gib:
    description: CUDA-graph memory vLLM subtracts (0.20+), when measured; default the model's estimate.
    type: float
  kv_cache_dtype:
    description: vLLM C(--kv-cache-dtype); C(auto) is the model dtype, C(fp8*) is one byte.
    type: str
    default: auto
  quantization:
    description: vLLM C(--quantization) when quantising on the fly (e.g. C(fp8)); otherwise read from config.json.
    type: str
  tensor_parallel_size:
    description: vLLM C(--tensor-parallel-size).
    type: int
    default: 1
  max_num_seqs:
    description: vLLM C(--max-num-seqs); default that version's for this GPU.
    type: int
  max_num_batched_tokens:
    description: vLLM C(--max-num-batched-tokens); default that version's for this GPU.
    type: int
  vllm_version:
    description: vLLM version whose rules to use (e.g. C(0.11.0)); default from O(image), else the newest known.
    type: str
  image:
    description: Serving image; its tag names the vLLM version (C(vllm/vllm-openai:v0.11.0)).
    type: str
  enforce_eager:
    description: vLLM C(--enforce-eager) (no CUDA graphs).
    type: bool
    default: false
  sampler:
    description:
      - Top-k/top-p path of the install, which sizes the sampler in the profiling run.
      - C(auto) derives it - FlashInfer in the official C(vllm/vllm-openai) image and in wheels from
        0.11.1, the PyTorch-native sort before that (vLLM logs "FlashInfer is not available").
      - C(flashinfer) or C(native) for an image built another way.
    type: str
    choices: [auto, flashinfer, native]
    default: auto
  held_mib:
    description: Memory already held on the GPU by other processes (MiB).
    type: int
    default: 0
  gpu_index:
    description: GPU this instance runs on (matched against O(instances)).
    type: int
    default: 0
  instances:
    description:
      - All vLLM instances of the host, this one included. Time-slicing does not divide
        memory, so per GPU the utilisations x total + O(held_mib) must fit the device.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Instance name, used in messages.
        type: str
        required: true
      gpu_memory_utilization:
        description: Its C(--gpu-memory-utilization).
        type: float
        required: true
      gpu_index:
        description: GPU it runs on.
        type: int
        default: 0
  host_instances:
    description:
      - Every instance of the host as the vllm role resolved it (name, image, model,
        gpu_indexes, gpu_memory_utilization, max_model_len, tensor_parallel_size,
        kv_cache_dtype, quantization, max_num_seqs, extra_args, non_torch_gib,
        activation_gib). Plans them all; needs O(gpus) and O(models_dir).
    type: list
    elements: dict
  gpus:
    description: The host's GPU facts (index, name, memory_total_mib, memory_reserved_mib).
    type: list
    elements: dict
  processes:
    description:
      - The host's GPU processes (facts - pid, gpu_index, name, used_mib); memory they hold counts unless theirs.
      - With the GPU facts' C(compute_mode), another process on an Exclusive_Process GPU refuses the instances placed
        there (no second process may create a CUDA context on it), as does a Prohibited GPU or an
        Exclusive_Process GPU that several instances share.
    type: list
    elements: dict
    default: []
  own_container_ids:
    description: Ids of the serving containers this role manages (their processes are not "held by others").
    type: list
    elements: str
    default: []
  models_dir:
    description: Host directory holding the instances' model directories.
    type: path
  topology:
    description:
      - C(nvidia-smi topo -m) as nvidia_gpu_facts reports it (C(ansible_facts.nvidia.topology)), with O(host_instances).
      - A tensor-parallel instance whose GPUs cross PCIe or the SMP interconnect while NVLink-joined GPUs of the same
        number are free (no other instance uses them) gets a warning naming them (C(placement)).
    type: dict
  measured_path:
    description: Measurements of earlier starts on this host (JSON); a missing file is none.
    type: path
    default: /var/lib/gpuhost/vllm-measured.json
  fail_on_refuse:
    description: Fail the task (naming the numbers and the remedies) when a verdict is C(refuse).
    type: bool
    default: false
notes:
  - Supports check mode; the module is read-only and always returns C(changed=false).
"""

EXAMPLES = r"""
- name: Plan the KV cache before starting vLLM
  vllm_memory_plan:
    gpu_memory_mib: "{{ ansible_facts.nvidia.gpus[0].memory_total_mib }}"
    gpu_reserved_mib: "{{ ansible_facts.nvidia.gpus[0].memory_reserved_mib }}"
    gpu_name: "{{ ansible_facts.nvidia.gpus[0].name }}"
    gpu_memory_utilization: 0.90
    max_model_len: 32768
    model_dir: /models/Qwen2.5-14B-Instruct
    image: vllm/vllm-openai:v0.11.0
  register: vllm_plan

- name: Plan every instance of the host, and stop on a refusal
  vllm_memory_plan:
    host_instances: "{{ vllm_resolved }}"
    gpus: "{{ ansible_facts.nvidia.gpus }}"
    processes: "{{ ansible_facts.nvidia.processes }}"
    models_dir: /srv/models
    fail_on_refuse: true
"""

RETURN = r"""
changed:
  description: Always false.
  returned: always
  type: bool
placement:
  description:
    - With O(host_instances) and O(topology), each instance placed across a slow link while NVLink-joined GPUs are
      free - C(name), C(gpus), C(slowest_link), C(better) (GPU indexes), C(message); also given as warnings.
  returned: when host_instances is given
  type: list
  elements: dict
plan:
  description: The memory plan (single-instance call).
  returned: when O(host_instances) is not given
  type: dict
  contains:
    verdict:
      description: "ok, warn or refuse."
      type: str
      sample: warn
    reasons:
      description: "List of {code, message}; codes free_memory_below_budget, kv_share_not_positive,
        concurrency_below_1, concurrency_near_1, concurrency_below_4, instances_overflow."
      type: list
      elements: dict
    budget_mib:
      description: "round(cuda_total_mib x gpu_memory_utilization)."
      type: int
      sample: 9040
    budget_gib:
      description: "Budget in GiB."
      type: float
    gpu_memory_mib:
      description: "nvidia-smi's Total."
      type: int
    gpu_reserved_mib:
      description: "The driver's reservation used."
      type: int
    gpu_reserved_source:
      description: "facts, catalogue <card> (driver ...), or default."
      type: str
    cuda_total_mib:
      description: "Total minus reserved - what the utilisation applies to."
      type: int
    gpu_memory_utilization:
      description: "As given (or that version's default)."
      type: float
    held_mib:
      description: "As given."
      type: int
    free_mib:
      description: "cuda_total_mib - held_mib."
      type: int
    tensor_parallel_size:
      description: "As given."
      type: int
    weights_gib:
      description: "Weights per GPU."
      type: float
    weights_source:
      description: "safetensors_headers, index_total_size, given or measured on this host."
      type: str
    activation_gib:
      description: "Activation peak of the profiling run per GPU."
      type: float
    non_torch_gib:
      description: "Non-torch memory per GPU."
      type: float
    cuda_graph_gib:
      description: "CUDA-graph memory subtracted before the KV cache (0.20+)."
      type: float
    estimates:
      description: "Per figure: model, given, measured on this host, or rough (no config.json)."
      type: dict
    overhead_parts:
      description: "The model's parts: forward_gib, sampler_gib, sampler_path, encoder_gib, cuda_graphs."
      type: dict
    engine:
      description: "vllm_version, version_source, rules (the generation used), max_num_batched_tokens,
        max_num_seqs, sampler (the top-k/top-p path: v0, flashinfer, sort or triton)."
      type: dict
    kv_cache_gib:
      description: "KV share per GPU (negative when nothing is left)."
      type: float
    kv_bytes_per_token:
      description: "KV bytes per token per GPU."
      type: int
    kv_cache_tokens:
      description: "KV tokens as that vLLM logs them."
      type: int
    max_concurrency:
      description: "Full-length requests the KV cache holds at once."
      type: float
    band:
      description: "share, family (its leave-one-out error's configuration family), gib, source, kv_cache_tokens
        [low, high], max_concurrency [low, high]."
      type: dict
    instances:
      description: "Per GPU: {gpu_index, names, sum_utilization, required_mib, held_mib, total_mib, fits}."
      type: list
      elements: dict
    remedies:
      description: >-
        Best first; each {name, description, change, weights_gib, kv_cache_gib, kv_bytes_per_token,
        kv_cache_tokens, max_model_len, max_concurrency, gpu_memory_utilization,
        tensor_parallel_size, verdict}. Names share_gpu_evenly, quantize_weights_fp8,
        quantize_weights_int4, kv_cache_fp8, tensor_parallel, lower_max_model_len,
        raise_gpu_memory_utilization, lower_gpu_memory_utilization. Empty when the verdict is ok.
      type: list
      elements: dict
plans:
  description: The plan of every instance, by name (host call).
  returned: when O(host_instances) is given
  type: dict
lines:
  description: The plans as text, the lines the role prints (host call).
  returned: when O(host_instances) is given
  type: list
  elements: str
refused:
  description: Names of the instances whose plan refuses (host call).
  returned: when O(host_instances) is given
  type: list
  elements: str
held_mib:
  description: MiB held on each GPU index by processes that are not this role's containers (host call).
  returned: when O(host_instances) is given
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.serving.vllm_host_plan import held_by_others, other_processes, plan_host
from ansible.module_utils.serving.vllm_measured import load_measurements
from ansible.module_utils.serving.vllm_plan import plan, refuse_message
from ansible.module_utils.serving.vllm_plan_inputs import PlanError
from ansible.module_utils.gpu.gpu_topology import placement_warnings

SINGLE = ("gpu_memory_mib", "gpu_reserved_mib", "gpu_name", "gpu_memory_utilization", "max_model_len",
          "model_dir", "weights_gib", "kv_bytes_per_token", "non_torch_gib", "activation_gib", "cuda_graph_gib",
          "kv_cache_dtype", "quantization", "tensor_parallel_size", "max_num_seqs", "max_num_batched_tokens",
          "vllm_version", "image", "enforce_eager", "sampler", "held_mib", "gpu_index", "instances")

ARGUMENT_SPEC = dict(
    gpu_memory_mib=dict(type="int"),
    gpu_reserved_mib=dict(type="int"),
    gpu_name=dict(type="str"),
    gpu_memory_utilization=dict(type="float"),
    max_model_len=dict(type="int"),
    model_dir=dict(type="path"),
    weights_gib=dict(type="float"),
    kv_bytes_per_token=dict(type="int", no_log=False),
    non_torch_gib=dict(type="float"),
    activation_gib=dict(type="float"),
    cuda_graph_gib=dict(type="float"),
    kv_cache_dtype=dict(type="str", default="auto"),
    quantization=dict(type="str"),
    tensor_parallel_size=dict(type="int", default=1),
    max_num_seqs=dict(type="int"),
    max_num_batched_tokens=dict(type="int", no_log=False),
    vllm_version=dict(type="str"),
    image=dict(type="str"),
    enforce_eager=dict(type="bool", default=False),
    sampler=dict(type="str", default="auto", choices=["auto", "flashinfer", "native"]),
    held_mib=dict(type="int", default=0),
    gpu_index=dict(type="int", default=0),
    instances=dict(type="list", elements="dict", default=[], options=dict(
        name=dict(type="str", required=True),
        gpu_memory_utilization=dict(type="float", required=True),
        gpu_index=dict(type="int", default=0),
    )),
    host_instances=dict(type="list", elements="dict"),
    gpus=dict(type="list", elements="dict"),
    processes=dict(type="list", elements="dict", default=[]),
    own_container_ids=dict(type="list", elements="str", default=[]),
    models_dir=dict(type="path"),
    topology=dict(type="dict"),
    measured_path=dict(type="path", default="/var/lib/gpuhost/vllm-measured.json"),
    fail_on_refuse=dict(type="bool", default=False),
)


def read_file(path):
    try:
        with open(path, "r", encoding="utf-8") as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def run(params, read=read_file):
    """(result dict, failure message or None) for module params."""
    if params.get("host_instances") is not None:
        if not params.get("gpus") or not params.get("models_dir"):
            raise PlanError("host_instances needs gpus (the GPU facts) and models_dir")
        cgroups = {p.get("pid"): read("/proc/%s/cgroup" % p.get("pid")) for p in params["processes"]}
        others = other_processes(params["processes"], cgroups, params["own_container_ids"])
        held = held_by_others(others)
        measurements = load_measurements(read(params["measured_path"]))
        result = plan_host(params["host_instances"], params["gpus"], params["models_dir"], held, measurements,
                           others=others)
        result["held_mib"] = held
        result["placement"] = placement_warnings(params["topology"], params["host_instances"]) \
            if params.get("topology") else []
        failure = result["message"] if params["fail_on_refuse"] and result["refused"] else None
        return result, failure
    inputs = {key: params.get(key) for key in SINGLE}
    result = {"plan": plan(**inputs)}
    if params["fail_on_refuse"] and result["plan"]["verdict"] == "refuse":
        return result, refuse_message(result["plan"])
    return result, None


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_one_of=[("model_dir", "weights_gib", "host_instances")],
        mutually_exclusive=[("host_instances", "model_dir"), ("host_instances", "weights_gib")],
        supports_check_mode=True,
    )
    try:
        result, failure = run(module.params)
    except PlanError as exc:
        module.fail_json(msg="vllm memory plan: %s" % exc, changed=False)
    for placed in result.get("placement") or []:
        module.warn(placed["message"])
    if failure:
        module.fail_json(msg=failure, changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
