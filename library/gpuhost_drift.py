#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Compare a GPU host with its converged record and its live stack (read-only)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpuhost_drift
short_description: What drifted on a GPU host since gpuhost converged it
description:
  - Compares the host's record (C(ansible_local.gpuhost), written by the roles) and the live stack
    (the result of M(gpu_stack_check)) with the dpkg state of the recorded driver packages (still
    installed, still held, the installed version against the loaded module) and the recorded serving
    containers (still running).
  - Returns per layer C(ok) or C(drift) with findings, each marked C(auto) (a drift run repairs it through
    the roles' tasks and handlers), C(reboot) (only where reboots are allowed) or C(manual). Read-only.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  record:
    description:
      - The host's record, C(ansible_local.gpuhost).
      - When not given, the module reads it from O(record_path) itself, so a drift check needs no fact
        gathering.
    type: dict
  record_path:
    description: The record file the roles write (M(gpuhost_record)); read when O(record) is not given.
      A missing file is an empty record (a host gpuhost never converged).
    type: path
    default: /etc/ansible/facts.d/gpuhost.fact
  stack:
    description: The registered result of M(gpu_stack_check).
    type: dict
    required: true
  allow_reboot:
    description: Whether a pending reboot may be repaired (C(nvidia_driver_reboot=auto)).
    type: bool
    default: false
  docker_path:
    description: docker CLI used to inspect the serving containers; looked up on PATH when not given.
    type: path
notes:
  - Supports check mode; it never changes anything.
"""

EXAMPLES = r"""
- name: Live stack
  gpu_stack_check:
  register: stack

- name: Drift against the record
  gpuhost_drift:
    record: "{{ ansible_local.gpuhost | default({}) }}"
    stack: "{{ stack }}"
  register: drift

- name: The same, reading the record file on the host (no fact gathering)
  gpuhost_drift:
    stack: "{{ stack }}"
  register: drift
"""

RETURN = r"""
layers:
  description: Per layer that drift compares (the layer registry's, module_utils/layers/registry.py) C(state) and C(findings).
  returned: always
  type: dict
drifted:
  description: Whether anything drifted.
  returned: always
  type: bool
repairable:
  description: Codes of findings a drift run may repair.
  returned: always
  type: list
  elements: str
repair_roles:
  description:
    - The roles a drift run repairs the host with (playbooks/tasks/drift-repair.yml), in site.yml's order; those of
      the layers with a repairable finding, and no other.
  returned: always
  type: list
  elements: str
  sample: [nvidia_container_toolkit, nvidia_cdi]
manual:
  description: Findings that need an operator (or a reboot that is not allowed).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.runs.atomic_file import read_text
from ansible.module_utils.host.runner import ModuleHostIO
from ansible.module_utils.diagnosis.drift import (
    compare, dpkg_state, read_record, recorded_instances, recorded_packages, serving_state)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            record=dict(type="dict"),
            record_path=dict(type="path", default="/etc/ansible/facts.d/gpuhost.fact"),
            stack=dict(type="dict", required=True),
            allow_reboot=dict(type="bool", default=False),
            docker_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    record = module.params["record"]
    if record is None:
        try:
            record, error = read_record(read_text(module.params["record_path"]), module.params["record_path"])
        except (IOError, OSError) as exc:
            error = "gpuhost record: cannot read %s: %s" % (module.params["record_path"], exc)
        if error:
            module.fail_json(msg=error)
    docker = module.params["docker_path"] or module.get_bin_path("docker")
    io = ModuleHostIO(module)
    result = compare(record, module.params["stack"], dpkg_state(io, recorded_packages(record)),
                     serving_state(io, docker, recorded_instances(record)), module.params["allow_reboot"])
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
