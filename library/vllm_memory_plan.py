#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: vLLM memory plan before a start (thin shell over module_utils.vllm_plan)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_memory_plan
short_description: Plan a vLLM instance's GPU memory before starting it
description:
  - Computes what vLLM will compute at start, before the container is started -
    budget = GPU memory x C(gpu_memory_utilization); KV share = budget - weights -
    non-torch memory - activation peak; KV tokens (whole 16-token blocks) and the
    maximum concurrency at C(max_model_len).
  - Verdict C(refuse) below 1.0x concurrency (it would start, then fail on the first
    full-length request), when the KV share is not positive, when the budget is more
    than the free memory, or when several instances on one GPU ask for more than the
    device; C(warn) from 1.0x to 4.0x (little or no batching); C(ok) from 4.0x.
  - Returns remedies ranked by effect, each with the figures it would give.
  - Reads only C(config.json), the safetensors headers (never the tensor data) and
    C(model.safetensors.index.json) of O(model_dir); never changes anything.
  - Does not fail on C(refuse) unless O(fail_on_refuse) is set; the role decides.
version_added: "0.1.0"
author: gpuhost
options:
  gpu_memory_mib:
    description: Total memory of one GPU in MiB (nvidia-smi C(memory.total), from facts).
    type: int
    required: true
  gpu_memory_utilization:
    description: vLLM C(--gpu-memory-utilization), a share of the whole device.
    type: float
    default: 0.9
  max_model_len:
    description: vLLM C(--max-model-len). Defaults to the model's C(max_position_embeddings).
    type: int
  model_dir:
    description:
      - Model directory on the managed host (C(config.json) plus safetensors shards or
        their index). Multimodal configs (C(text_config)), sliding-window/full hybrids
        (C(layer_types), C(sliding_window_pattern)) and MLA (C(kv_lora_rank)) are understood.
      - Either this or O(weights_gib) with O(kv_bytes_per_token).
    type: path
  weights_gib:
    description: Weight GiB of the whole model (divided by O(tensor_parallel_size)); overrides O(model_dir).
    type: float
  kv_bytes_per_token:
    description: KV bytes per token of the whole model at 16-bit; overrides O(model_dir).
    type: int
  non_torch_gib:
    description: Non-torch memory per GPU (CUDA context, NCCL/cuBLAS workspaces). Default 1.0.
    type: float
  activation_gib:
    description: Activation peak of the profiling forward per GPU. Default max(1.0, 0.08 x weights per GPU).
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
  max_num_batched_tokens:
    description: Scheduler step size; only used for the window of sliding-window layers.
    type: int
    default: 2048
  fail_on_refuse:
    description: Fail the task (naming the numbers and the top remedy) when the verdict is C(refuse).
    type: bool
    default: false
notes:
  - Supports check mode; the module is read-only and always returns C(changed=false).
"""

EXAMPLES = r"""
- name: Plan the KV cache before starting vLLM
  vllm_memory_plan:
    gpu_memory_mib: "{{ gpuhost_gpus[0].memory_total_mib }}"
    gpu_memory_utilization: 0.90
    max_model_len: 32768
    model_dir: /models/Qwen2.5-14B-Instruct
  register: vllm_plan

- name: Stop here when one full-length request would not fit
  ansible.builtin.assert:
    that: vllm_plan.plan.verdict != 'refuse'
    fail_msg: "{{ vllm_plan.plan.reasons | map(attribute='message') | join('; ') }}"

- name: Four instances on one L4 must share its memory
  vllm_memory_plan:
    gpu_memory_mib: 23034
    gpu_memory_utilization: 0.23
    max_model_len: 4096
    weights_gib: 2.0
    kv_bytes_per_token: 36864
    instances: "{{ vllm_instances }}"
    fail_on_refuse: true
"""

RETURN = r"""
changed:
  description: Always false.
  returned: always
  type: bool
plan:
  description: The memory plan.
  returned: success
  type: dict
  contains:
    verdict: {description: ok, warn or refuse., type: str, sample: warn}
    reasons: {description: "List of {code, message}; codes free_memory_below_budget, kv_share_not_positive, concurrency_below_1, concurrency_below_4, instances_overflow.", type: list}
    budget_mib: {description: round(gpu_memory_mib x gpu_memory_utilization)., type: int, sample: 9214}
    budget_gib: {description: Budget in GiB., type: float}
    gpu_memory_mib: {description: As given., type: int}
    gpu_memory_gib: {description: gpu_memory_mib / 1024., type: float}
    gpu_memory_utilization: {description: As given., type: float}
    held_mib: {description: As given., type: int}
    free_mib: {description: gpu_memory_mib - held_mib., type: int}
    tensor_parallel_size: {description: As given., type: int}
    weights_gib: {description: Weights per GPU., type: float}
    weights_total_gib: {description: Weights of the whole model., type: float}
    weights_source: {description: safetensors_headers, index_total_size or given., type: str}
    non_torch_gib: {description: Used figure., type: float}
    activation_gib: {description: Used figure., type: float}
    estimates: {description: "{non_torch_gib, activation_gib}: given or default.", type: dict}
    kv_cache_gib: {description: KV share per GPU (negative when nothing is left)., type: float}
    kv_cache_dtype: {description: As given., type: str}
    kv_bytes_per_token: {description: KV bytes per token per GPU., type: int}
    kv_cache_tokens: {description: KV share / bytes per token, floored to whole blocks., type: int}
    block_size: {description: KV block size in tokens., type: int}
    max_model_len: {description: Used max_model_len., type: int}
    max_concurrency: {description: Full-length requests the KV cache holds at once., type: float}
    quantization: {description: Weight quantisation method or null., type: str}
    model: {description: Architecture read from config.json (absent for explicit figures)., type: dict}
    instances: {description: "Per GPU: {gpu_index, names, sum_utilization, required_mib, held_mib, total_mib, fits}.", type: list}
    remedies:
      description: >-
        Best first; each {name, description, change, weights_gib, kv_cache_gib, kv_bytes_per_token,
        kv_cache_tokens, max_model_len, max_concurrency, gpu_memory_utilization,
        tensor_parallel_size, verdict}. Names share_gpu_evenly, quantize_weights_fp8,
        quantize_weights_int4, kv_cache_fp8, tensor_parallel, lower_max_model_len,
        raise_gpu_memory_utilization, lower_gpu_memory_utilization. Empty when the verdict is ok.
      type: list
"""

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible.module_utils.vllm_plan import PlanError, plan, refuse_message
except ImportError:  # unit tests import the module file directly
    from vllm_plan import PlanError, plan, refuse_message

ARGUMENT_SPEC = dict(
    gpu_memory_mib=dict(type="int", required=True),
    gpu_memory_utilization=dict(type="float", default=0.9),
    max_model_len=dict(type="int"),
    model_dir=dict(type="path"),
    weights_gib=dict(type="float"),
    kv_bytes_per_token=dict(type="int"),
    non_torch_gib=dict(type="float"),
    activation_gib=dict(type="float"),
    kv_cache_dtype=dict(type="str", default="auto"),
    quantization=dict(type="str"),
    tensor_parallel_size=dict(type="int", default=1),
    held_mib=dict(type="int", default=0),
    gpu_index=dict(type="int", default=0),
    instances=dict(type="list", elements="dict", default=[], options=dict(
        name=dict(type="str", required=True),
        gpu_memory_utilization=dict(type="float", required=True),
        gpu_index=dict(type="int", default=0),
    )),
    max_num_batched_tokens=dict(type="int", default=2048),
    fail_on_refuse=dict(type="bool", default=False),
)


def run(params):
    """(result dict, failure message or None) for module params."""
    inputs = dict(params)
    fail_on_refuse = inputs.pop("fail_on_refuse")
    result = plan(**inputs)
    if fail_on_refuse and result["verdict"] == "refuse":
        return result, refuse_message(result)
    return result, None


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_one_of=[("model_dir", "weights_gib")],
        supports_check_mode=True,
    )
    try:
        result, failure = run(module.params)
    except PlanError as exc:
        module.fail_json(msg="vllm memory plan: %s" % exc, changed=False)
    if failure:
        module.fail_json(msg=failure, plan=result, changed=False)
    module.exit_json(changed=False, plan=result)


if __name__ == "__main__":
    main()
