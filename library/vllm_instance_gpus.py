#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: the GPU indexes each vLLM instance names (thin shell over module_utils.vllm_plan)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_instance_gpus
short_description: The GPUs each vLLM instance names, as GPU indexes
description:
  - Maps each instance's C(gpus) (GPU indexes, GPU UUIDs, one MIG device as C(GPU:device) or its MIG UUID) to
    the indexes of the GPUs they are on, from the GPU facts. An entry this host does not have adds no index, so
    the vllm role's validation compares the counts and names what the host has. The memory plan
    (C(vllm_memory_plan)) resolves the same entries with the same function and refuses what cannot be served.
  - Reads nothing on the host; changes nothing.
version_added: "1.0.0"
author: gpuhost
options:
  instances:
    description: The instances, each with C(name) and C(gpus) (vllm_instances).
    type: list
    elements: dict
    required: true
  gpus:
    description: The GPU facts (ansible_facts.nvidia.gpus), with each MIG device's UUID and GPU index.
    type: list
    elements: dict
    required: true
notes:
  - Supports check mode.
"""

EXAMPLES = r"""
- name: Find each instance's GPUs
  vllm_instance_gpus:
    instances: "{{ vllm_instances }}"
    gpus: "{{ ansible_facts.nvidia.gpus }}"
  register: vllm_instance_gpus
"""

RETURN = r"""
instances:
  description: Per instance, in the order given - name, gpu_ids (the entries as strings), gpu_indexes (sorted, each once).
  returned: success
  type: list
  elements: dict
  sample: [{name: slice-a, gpu_ids: ["0:0"], gpu_indexes: [0]}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.serving.vllm_plan import gpu_indexes


def main():
    module = AnsibleModule(
        argument_spec=dict(
            instances=dict(type="list", elements="dict", required=True),
            gpus=dict(type="list", elements="dict", required=True),
        ),
        supports_check_mode=True,
    )
    out = []
    for inst in module.params["instances"]:
        ids = [str(ref) for ref in inst.get("gpus") or []]
        out.append({"name": inst.get("name"), "gpu_ids": ids, "gpu_indexes": gpu_indexes(ids, module.params["gpus"])})
    module.exit_json(changed=False, instances=out)


if __name__ == "__main__":
    main()
