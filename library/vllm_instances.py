#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ansible module: the vllm role's instances resolved, checked and turned into containers (thin shell over
module_utils.serving.vllm_instances)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_instances
short_description: Resolve and check a host's vLLM instances and give each its container
description:
  - Fills in each instance's defaults (the role's settings given here), maps its C(gpus) (GPU indexes, GPU UUIDs,
    one MIG device as C(GPU:device) or its MIG UUID) to the GPUs they are on from the GPU facts (the lookup the
    memory plan uses), and adds what the later tasks need - its URL, its compile-cache volume, the memory of its
    smallest GPU.
  - Checks every instance - a container name; an image pinned to a tag other than latest or to a digest; GPUs
    this host has, each once; C(tensor_parallel_size) at most the number of its GPUs; a port; a
    C(gpu_memory_utilization) in (0, 1]; a model directory relative to O(models_dir); a loopback
    C(bind_address) unless O(expose_publicly); no C(--api-key) in C(extra_args); no GPU with MIG enabled given
    whole - and that names and ports are unique on the host. Fails naming each instance that cannot be served,
    the layer (vllm) and the fix; nothing is deployed then.
  - Gives each instance's container - the C(vllm serve) command line (the engine arguments written from one table,
    module_utils/serving/vllm_args.py, the one the Kubernetes manifest check reads them with), the environment,
    the GPU device request, volumes, labels - as the arguments of C(community.docker.docker_container). The
    secrets (C(HF_TOKEN), C(VLLM_API_KEY)) are never given to this module; the caller adds them to C(env).
  - Reads nothing on the host; changes nothing.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  instances:
    description: The instances as the user declared them (vllm_instances), each with C(name), C(image), C(gpus), C(port), C(model).
    type: list
    elements: dict
    required: true
  gpu_facts:
    description: The GPU facts (ansible_facts.nvidia) - C(state), C(message), C(gpus) with each MIG device's index and UUID.
    type: dict
    required: true
  models_dir:
    description: Host directory of the model directories, mounted read-only at /models (vllm_models_dir).
    type: str
    default: /srv/models
  bind_address:
    description: Where an instance without C(bind_address) is published (vllm_bind_address).
    type: str
    default: 127.0.0.1
  expose_publicly:
    description: Allow a C(bind_address) other than loopback (vllm_expose_publicly).
    type: bool
    default: false
  ipc_mode:
    description: IPC mode of an instance that gives none (vllm_ipc_mode).
    type: str
    default: host
  shm_size:
    description: /dev/shm size of an instance that gives none (vllm_shm_size); empty for docker's.
    type: str
    default: ""
  compile_cache_volume_prefix:
    description: The compile-cache volume of an instance is this prefix and its name (vllm_compile_cache_volume_prefix).
    type: str
    default: gpuhost-vllm-cache-
  compile_cache_path:
    description: Where that volume is mounted in the container (vllm_compile_cache_path).
    type: str
    default: /root/.cache/vllm
  network_mode:
    description: V(bridge) publishes the port on the instance's C(bind_address); V(host) has vLLM listen there (vllm_network_mode).
    type: str
    default: bridge
    choices: [bridge, host]
  model_argument:
    description: The model as C(vllm serve)'s positional argument or as C(--model) (vllm_model_argument).
    type: str
    default: positional
    choices: [positional, option]
  hf_home:
    description: HF_HOME inside the container (vllm_hf_home).
    type: str
    default: /models/hf
  hf_offline:
    description: Set HF_HUB_OFFLINE=1 (vllm_hf_offline).
    type: bool
    default: true
notes:
  - Supports check mode.
"""

EXAMPLES = r"""
- name: Resolve and check the instances against the host's GPUs
  vllm_instances:
    instances: "{{ vllm_instances }}"
    gpu_facts: "{{ ansible_facts.nvidia }}"
    models_dir: "{{ vllm_models_dir }}"
    network_mode: "{{ vllm_network_mode }}"
  register: vllm_checked

- name: Deploy the serving containers
  community.docker.docker_container:
    name: "{{ item.name }}"
    image: "{{ item.image }}"
    command: "{{ item.command }}"
    env: "{{ item.env }}"
    labels: "{{ item.labels }}"
  loop: "{{ vllm_checked.containers }}"
"""

RETURN = r"""
instances:
  description:
    - Per instance, in the order given - what the instance gives (null values dropped) over the defaults
      (served_model_name the model directory's name, max_model_len, gpu_memory_utilization 0.9, max_num_seqs,
      quantization, kv_cache_dtype auto, ipc_mode, shm_size, extra_args, env, non_torch_gib, activation_gib,
      vllm_version), then gpu_ids (the gpus entries as text), gpu_indexes (sorted, each once),
      tensor_parallel_size (default the number of gpus), bind_address, url, cache_volume and memory_total_mib
      (of its smallest GPU).
  returned: success
  type: list
  elements: dict
  sample: [{name: slice-a, gpu_ids: ["0:0"], gpu_indexes: [0], url: "http://127.0.0.1:18100"}]
containers:
  description:
    - Per instance, the arguments of community.docker.docker_container - name, image, command, device_requests,
      ipc_mode, shm_size (only where the instance does not share the host's IPC and gives a size),
      published_ports (bridge networking only), volumes, env (without the secrets) and labels.
  returned: success
  type: list
  elements: dict
shm_warnings:
  description: 'Lines for an operator: instances on docker''s 64 MB /dev/shm.'
  returned: success
  type: list
  elements: str
errors:
  description: On failure, the reasons by instance name ('' for the host's names and ports).
  returned: failure
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.serving.vllm_instances import SETTINGS, InstancesError, instances


def main():
    module = AnsibleModule(
        argument_spec=dict(
            instances=dict(type="list", elements="dict", required=True),
            gpu_facts=dict(type="dict", required=True),
            models_dir=dict(type="str", default="/srv/models"),
            bind_address=dict(type="str", default="127.0.0.1"),
            expose_publicly=dict(type="bool", default=False),
            ipc_mode=dict(type="str", default="host"),
            shm_size=dict(type="str", default=""),
            compile_cache_volume_prefix=dict(type="str", default="gpuhost-vllm-cache-"),
            compile_cache_path=dict(type="str", default="/root/.cache/vllm"),
            network_mode=dict(type="str", default="bridge", choices=["bridge", "host"]),
            model_argument=dict(type="str", default="positional", choices=["positional", "option"]),
            hf_home=dict(type="str", default="/models/hf"),
            hf_offline=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    settings = dict((key, module.params[key]) for key in SETTINGS)
    try:
        result = instances(module.params["instances"], module.params["gpu_facts"], settings)
    except InstancesError as exc:
        module.fail_json(msg=str(exc), errors=exc.errors, changed=False)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
