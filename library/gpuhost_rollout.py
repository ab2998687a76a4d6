#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ansible module: why one host's run disrupts it, and so its rollout group (thin shell over
module_utils.runs.rollout)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpuhost_rollout
short_description: Say whether a host's run disrupts it, and so how it goes through the rollout
description:
  - A host's run disrupts it when its driver changes or it reboots (O(driver_plan), the driver's
    prediction), or when it serves containers that the run may restart (the serving containers its record,
    O(record_path), holds). Such a host goes through in batches (RV(group) C(batched)), every other host in one
    pass (C(parallel)).
  - Reads the record; changes nothing.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  driver_plan:
    description:
      - The driver's prediction for this host, the M(nvidia_driver_plan) result that nvidia_driver's predict.yml
        registers as C(nvidia_driver_predicted_plan). Its C(disruption) counts; nothing when the task skipped (no
        NVIDIA GPU); a plan that failed (a fresh host whose driver sources the run adds) counts as a disruption,
        with its reason.
    type: dict
  disruption_batch:
    description: The run's batch (gpuhost_rollout_settings' C(disruption_batch)), for the message.
    type: raw
    default: 1
  record_path:
    description: gpuhost's record, the host's local facts (ansible_local.gpuhost).
    type: path
    default: /etc/ansible/facts.d/gpuhost.fact
notes:
  - Supports check mode.
"""

EXAMPLES = r"""
- name: Note whether this host's run disrupts it
  gpuhost_rollout:
    driver_plan: "{{ nvidia_driver_predicted_plan }}"
    disruption_batch: "{{ gpuhost_rollout_settings.settings.disruption_batch }}"
  register: gpuhost_rollout

- name: Sort the host into its rollout group
  ansible.builtin.group_by:
    key: "gpuhost_rollout_{{ gpuhost_rollout.group }}"
"""

RETURN = r"""
reasons:
  description: Why the host's run disrupts it (empty when it does not).
  returned: always
  type: list
  elements: str
group:
  description: V(batched) when there is a reason, else V(parallel).
  returned: always
  type: str
message:
  description: The line that says how the host goes through the rollout and why.
  returned: always
  type: str
  sample: "rollout: in batches of 1 (serving containers qwen3-32b-fp8)"
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.runs.atomic_file import read_text
from ansible.module_utils.runs.rollout import driver_disruption, host_plan, serving_instances


def main():
    module = AnsibleModule(
        argument_spec=dict(
            driver_plan=dict(type="dict"),
            disruption_batch=dict(type="raw", default=1),
            record_path=dict(type="path", default="/etc/ansible/facts.d/gpuhost.fact"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    module.exit_json(changed=False, **host_plan(driver_disruption(params["driver_plan"]), serving_instances(
        read_text(params["record_path"])), params["disruption_batch"]))


if __name__ == "__main__":
    main()
