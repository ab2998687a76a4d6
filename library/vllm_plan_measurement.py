#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ansible module: compare vLLM starts with their plans and record what they measured (thin shell
over module_utils.vllm_plan)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_plan_measurement
short_description: Compare vLLM starts with their memory plans and keep what they measured
description:
  - For every started instance, compares the startup log's KV tokens and maximum concurrency
    with the plan it was started with, and returns the warnings an operator should read (the
    log off the plan beyond O(tolerance), the log's own warnings, a C(warn) plan).
  - Records, per host, image, model, engine arguments and GPU model, what the start
    measured - the weights and the overheads that make the logged KV share exact, split as
    the log prints them where it does - in O(path). The next C(vllm_memory_plan) of the same
    image and arguments uses them ("measured on this host"); anything else falls back to the
    model.
  - A container this run did not (re)create keeps the plan it was deployed with (from
    O(record_path)), so a re-run changes nothing.
  - Gives what the serving record (C(ansible_local.gpuhost.vllm.instances)) keeps of each instance, by name
    (RV(record)) - its settings and GPUs, the plan it was started with, its image's CUDA verdict (O(image_cuda)),
    the startup log's figures and its warnings - for C(gpuhost_record) to write.
  - Written atomically with a backup; a malformed store is reported, never overwritten.
version_added: "0.1.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  path:
    description: The measurements file.
    type: path
    default: /var/lib/gpuhost/vllm-measured.json
  record_path:
    description: gpuhost's record (local facts), for the plans the running containers were deployed with.
    type: path
    default: /etc/ansible/facts.d/gpuhost.fact
  instances:
    description: The instances as the vllm role resolved them.
    type: list
    elements: dict
    required: true
  gpus:
    description: The host's GPU facts.
    type: list
    elements: dict
    required: true
  plans:
    description: This run's plans by instance name (C(vllm_memory_plan)'s C(plans)).
    type: dict
    required: true
  reports:
    description: The startup reports by instance name (C(vllm_startup_report)'s C(report)).
    type: dict
    required: true
  deployed:
    description: Names of the instances whose container this run created or recreated.
    type: list
    elements: str
    default: []
  tolerance:
    description: Allowed relative difference between the log's KV figures and the plan's.
    type: float
    default: 0.01
  image_cuda:
    description: Each image's CUDA verdict by image (C(cuda_image_check)'s verdict, image_cuda, driver_cuda), for RV(record).
    type: dict
    default: {}
notes:
  - Supports check mode and diff mode.
"""

EXAMPLES = r"""
- name: Compare the starts with their plans and record what they measured
  vllm_plan_measurement:
    instances: "{{ vllm_resolved }}"
    gpus: "{{ ansible_facts.nvidia.gpus }}"
    plans: "{{ vllm_plan_by_name }}"
    reports: "{{ vllm_report_by_name }}"
    deployed: "{{ vllm_deploy.results | selectattr('changed') | map(attribute='item.name') | list }}"
    image_cuda: "{{ vllm_image_cuda_by_image }}"
  register: vllm_measured

- name: Record the deployed instances in the local facts
  gpuhost_record:
    section: vllm
    data:
      instances: "{{ vllm_measured.record }}"
"""

RETURN = r"""
warnings_by_name:
  description: 'Per instance, the warnings for an operator (lines starting "vllm: WARNING").'
  returned: always
  type: dict
plans:
  description: Per instance, the plan it was started with (verdict, budget_mib, weights_gib, kv_cache_tokens, max_concurrency, band, estimates, vllm_rules).
  returned: always
  type: dict
entries:
  description: The measurements file's entries after this run, by settings key.
  returned: always
  type: dict
record:
  description:
    - Per instance, by name, what the serving record keeps - image, gpus (indexes), gpu_uuids, port,
      bind_address, url, model, served_model_name, max_model_len and quantization (this run's plan's),
      gpu_memory_utilization, tensor_parallel_size, kv_cache_dtype, ipc_mode, shm_size, plan (the plan it was
      started with, as RV(plans)), cuda (its image's verdict, or null), startup (vllm_version, weights_gib,
      kv_cache_gib, kv_cache_tokens, max_concurrency of its startup log) and warnings.
  returned: always
  type: dict
"""

import json

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.runs.atomic_file import read_text, write_atomic
from ansible.module_utils.runs.rollout import record_instances
from ansible.module_utils.serving.vllm_instances import record
from ansible.module_utils.serving.vllm_measured import after_starts, load_measurements
from ansible.module_utils.serving.vllm_plan_inputs import PlanError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/var/lib/gpuhost/vllm-measured.json"),
            record_path=dict(type="path", default="/etc/ansible/facts.d/gpuhost.fact"),
            instances=dict(type="list", elements="dict", required=True),
            gpus=dict(type="list", elements="dict", required=True),
            plans=dict(type="dict", required=True),
            reports=dict(type="dict", required=True),
            deployed=dict(type="list", elements="str", default=[]),
            tolerance=dict(type="float", default=0.01),
            image_cuda=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    params = module.params
    path = params["path"]
    before_text = read_text(path)
    try:
        entries = load_measurements(before_text)
        result = after_starts(params["instances"], params["plans"], params["reports"], set(params["deployed"]),
                              record_instances(read_text(params["record_path"])), params["gpus"], entries,
                              params["tolerance"])
    except PlanError as exc:
        module.fail_json(msg="vllm measurements: %s: %s" % (path, exc), changed=False)
    changed = result["entries"] != entries
    after_text = json.dumps({"entries": result["entries"]}, indent=2, sort_keys=True) + "\n"
    output = dict(changed=changed, warnings_by_name=result["warnings"], plans=result["plans"],
                  entries=result["entries"],
                  record=record(params["instances"], params["gpus"], params["plans"], result["plans"], params["reports"],
                                result["warnings"], params["image_cuda"]))
    if module._diff and changed:
        output["diff"] = dict(before=before_text or "", after=after_text, before_header=path, after_header=path)
    if changed and not module.check_mode:
        write_atomic(module, path, after_text, backup=True, mode=0o644)
    module.exit_json(**output)


if __name__ == "__main__":
    main()
