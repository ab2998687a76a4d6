#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ansible module: the rollout's batch settings, checked for every host of the run (thin shell over
module_utils.runs.rollout)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpuhost_rollout_settings
short_description: Check the rollout's batch settings of every host of a run and give the run's
description:
  - Takes each batch setting as every host of the run has it (C(gpuhost_disruption_batch),
    C(gpuhost_serial), C(gpuhost_max_fail_percentage); play keywords such as C(serial) read play and extra
    variables, not inventory variables, so the batched plays read what this module gives).
  - Fails, naming each setting, when a host's value is not of its form (a number of hosts or a percentage;
    a percentage from 0 to 100) or the hosts do not all have the same; nothing has been changed then.
  - Reads nothing on the host; changes nothing.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  disruption_batch:
    description:
      - C(gpuhost_disruption_batch) of every host of the run (its default 1 where a host sets none) - the hosts
        whose run disrupts go through this many at a time. No host - V(1).
    type: list
    elements: raw
    default: []
  serial:
    description: C(gpuhost_serial) of every host of the run (default C(100%)) - the hosts whose run disrupts nothing go this many at a time.
    type: list
    elements: raw
    default: []
  max_fail_percentage:
    description: C(gpuhost_max_fail_percentage) of every host of the run (default 100), for those hosts.
    type: list
    elements: raw
    default: []
notes:
  - Supports check mode.
"""

EXAMPLES = r"""
- name: Check the rollout's batch settings
  gpuhost_rollout_settings:
    disruption_batch: >-
      {{ ansible_play_hosts_all | map('extract', hostvars) | map(attribute='gpuhost_disruption_batch', default=1) }}
  register: gpuhost_rollout_settings
"""

RETURN = r"""
settings:
  description: The run's settings, as the hosts give them - disruption_batch, serial, max_fail_percentage.
  returned: success
  type: dict
  sample: {disruption_batch: 2, serial: 100%, max_fail_percentage: 100}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.runs.rollout import RolloutError, batch_settings


def main():
    module = AnsibleModule(
        argument_spec=dict(
            disruption_batch=dict(type="list", elements="raw", default=[]),
            serial=dict(type="list", elements="raw", default=[]),
            max_fail_percentage=dict(type="list", elements="raw", default=[]),
        ),
        supports_check_mode=True,
    )
    try:
        settings = batch_settings(module.params)
    except RolloutError as exc:
        module.fail_json(msg=str(exc), changed=False)
    module.exit_json(changed=False, settings=settings)


if __name__ == "__main__":
    main()
