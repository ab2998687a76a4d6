#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Record what a layer converged to in the host's local facts (ansible_local.gpuhost)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpuhost_record
short_description: Record a layer's converged state in /etc/ansible/facts.d/gpuhost.fact
description:
  - The fact file is one JSON object with a section per layer (C(driver), C(toolkit), C(cdi), ...).
    This module replaces one section's keys with O(data), leaving the other sections as they are,
    and writes only when something changed (atomically, mode 0644).
  - Drift runs read it back as C(ansible_local.gpuhost) and compare it with the live host.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  section:
    description: The layer's section.
    type: str
    required: true
  data:
    description: What the layer converged to. Keys given replace the section's keys of the same name.
    type: dict
    default: {}
  remove:
    description:
      - "Entries to drop from the section's objects, by the object's key (C({instances: [qwen3-32b]}) drops
        C(instances.qwen3-32b)); a name the record does not hold is no change."
    type: dict
    default: {}
  path:
    description: The fact file.
    type: path
    default: /etc/ansible/facts.d/gpuhost.fact
notes:
  - Supports check mode and diff mode. A file that is not a JSON object fails the task and is left untouched.
"""

EXAMPLES = r"""
- name: Record the converged driver
  gpuhost_record:
    section: driver
    data: {version: "580.95.05", kernel_modules: open}

- name: Drop removed serving containers from the record
  gpuhost_record:
    section: vllm
    remove:
      instances: [qwen3-32b, qwen3-8b]
"""

RETURN = r"""
record:
  description: The whole fact file after the change.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.containers.daemon_json import DaemonJsonError, merge, parse, render
from ansible.module_utils.runs.atomic_file import read_text, write_atomic


def main():
    module = AnsibleModule(
        argument_spec=dict(
            section=dict(type="str", required=True),
            data=dict(type="dict", default={}),
            remove=dict(type="dict", default={}),
            path=dict(type="path", default="/etc/ansible/facts.d/gpuhost.fact"),
        ),
        supports_check_mode=True,
    )
    path, section = module.params["path"], module.params["section"]
    before_text = read_text(path)
    try:
        before = parse(before_text, path)
    except DaemonJsonError as exc:
        module.fail_json(msg="gpuhost record: %s; it was left untouched" % exc)
    current = before.get(section) if isinstance(before.get(section), dict) else {}
    after = dict(before)
    after[section] = merge(current, module.params["data"])
    for key, names in module.params["remove"].items():
        dropped = set(str(name) for name in names or [])
        if isinstance(after[section].get(key), dict):
            after[section][key] = dict((k, v) for k, v in after[section][key].items() if k not in dropped)
    if not after[section] and section not in before:  # nothing to record: no empty section
        del after[section]
    changed = after != before
    text = render(after) + "\n"
    result = dict(changed=changed, record=after)
    if module._diff:
        result["diff"] = dict(before=before_text or "", after=text if changed else (before_text or ""),
                              before_header=path, after_header=path)
    if changed and not module.check_mode:
        write_atomic(module, path, text, backup=False, mode=0o644)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
