#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpuhost_metrics
short_description: Write gpuhost's check of a host as Prometheus metrics for the node exporter's textfile collector
description:
  - Renders M(gpu_stack_check)'s result as Prometheus' text format and writes it atomically (one rename, so the
    collector never reads half a file) as C(path), readable by every user (the node exporter runs as its own).
  - "Metrics: C(gpuhost_host_ok), C(gpuhost_layer_ok{layer,required}), C(gpuhost_gpus),
    C(gpuhost_xid_events{xid,action}), C(gpuhost_xid_gpu{xid,pci}), C(gpuhost_gpu_out_of_service{gpu,bus_id}),
    C(gpuhost_dcgm_diag_ok{gpu,level}), for a drift run C(gpuhost_drift_findings{layer}), and per serving
    instance C(gpuhost_vllm_instance_up{vllm_instance}) and, from gpuhost's record, C(gpuhost_vllm_kv_cache_tokens{vllm_instance,source}),
    C(gpuhost_vllm_max_concurrency{vllm_instance,source}) (its headroom: requests of max_model_len tokens its KV cache holds)
    and C(gpuhost_vllm_max_model_len{vllm_instance})."
  - No timestamp is written (the node exporter exports the file's mtime as C(node_textfile_mtime_seconds)), so a
    run that finds the same state changes nothing. Check mode and C(--diff) say what would be written.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  result:
    description: M(gpu_stack_check)'s registered result.
    type: dict
    required: true
  path:
    description: The file to write, in the directory the node exporter's C(--collector.textfile.directory) names.
    type: path
    required: true
  record_path:
    description: gpuhost's record (local facts), for the serving instances' plan and startup figures; missing or
      unreadable, those are left out.
    type: path
    default: /etc/ansible/facts.d/gpuhost.fact
"""

EXAMPLES = r"""
- name: Write gpuhost's metrics for the node exporter
  gpuhost_metrics:
    result: "{{ gpu_validate_result }}"
    path: /var/lib/prometheus/node-exporter/gpuhost.prom
"""

RETURN = r"""
text:
  description: The metrics written.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.diagnosis.metrics import render
from ansible.module_utils.runs.atomic_file import read_text, write_atomic
from ansible.module_utils.runs.rollout import record_instances


def main():
    module = AnsibleModule(argument_spec=dict(
        result=dict(type="dict", required=True),
        path=dict(type="path", required=True),
        record_path=dict(type="path", default="/etc/ansible/facts.d/gpuhost.fact"),
    ), supports_check_mode=True)
    path = module.params["path"]
    if not path.endswith(".prom"):
        module.fail_json(msg="metrics: %s does not end in .prom, so the node exporter's textfile collector never "
                             "reads it" % path)
    text = render(module.params["result"], record_instances(read_text(module.params["record_path"])))
    before = read_text(path)
    changed = before != text
    if changed and not module.check_mode:
        # A metrics file is rewritten every time the state changes: no backup of the one before.
        write_atomic(module, path, text, backup=False, mode=0o644)
    diff = {"before": before or "", "after": text, "before_header": path, "after_header": path}
    module.exit_json(changed=changed, text=text, diff=diff)


if __name__ == "__main__":
    main()
