#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Enable apt components (non-free, non-free-firmware) in the host's existing Debian sources."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_driver_sources
short_description: Enable apt components in the host's existing Debian sources, keeping the rest
description:
  - Debian ships the NVIDIA driver in C(non-free) and its GSP firmware in C(non-free-firmware); a default
    install only enables C(main). This module adds O(components) to every source entry that already has
    O(anchor) (C(main)), in the deb822 file O(path) (Debian's C(debian.sources)) or, when that does not
    exist, in the one-line O(legacy_path).
  - Comments, other fields, other entries and their order are kept byte for byte; the file is written
    atomically and only when something changes.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
extends_documentation_fragment:
  - gpuhost_backup
options:
  path:
    description: deb822 sources file.
    type: path
    default: /etc/apt/sources.list.d/debian.sources
  legacy_path:
    description: One-line sources file, edited only when O(path) does not exist.
    type: path
    default: /etc/apt/sources.list
  components:
    description: Components to enable.
    type: list
    elements: str
    default: [contrib, non-free, non-free-firmware]
  anchor:
    description: Only entries that already carry this component are changed.
    type: str
    default: main
  backup:
    description: Keep a timestamped copy of the file before changing it.
    type: bool
    default: false
notes:
  - Supports check mode and diff mode. A file that cannot be parsed fails the task and is left untouched.
"""

EXAMPLES = r"""
- name: Enable non-free for the NVIDIA driver
  nvidia_driver_sources:
    components: [non-free, non-free-firmware]
  register: sources

- name: Refresh the package index
  ansible.builtin.apt:
    update_cache: true
  when: sources is changed
"""

RETURN = r"""
path:
  description: The file that was read (and written when changed).
  returned: success
  type: str
changes:
  description: One line per changed entry (URIs, suites, components before and after).
  returned: success
  type: list
  elements: str
backup_file:
  description: The backup, when one was made.
  returned: changed and backup
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.runs.atomic_file import read_text, write_atomic
from ansible.module_utils.driver.driver_sources import SourcesError, components_of, enable_deb822, enable_one_line


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/etc/apt/sources.list.d/debian.sources"),
            legacy_path=dict(type="path", default="/etc/apt/sources.list"),
            components=dict(type="list", elements="str", default=["contrib", "non-free", "non-free-firmware"]),
            anchor=dict(type="str", default="main"),
            backup=dict(type="bool", default=False),
            backup_dir=dict(type="path", default="/var/backups/gpuhost"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    deb822 = os.path.exists(p["path"])
    path = p["path"] if deb822 else p["legacy_path"]
    before = read_text(path)
    if before is None:
        module.fail_json(msg="nvidia_driver: neither %s nor %s exists: no Debian sources to enable %s in"
                         % (p["path"], p["legacy_path"], " ".join(p["components"])))
    try:
        after, changes = (enable_deb822 if deb822 else enable_one_line)(before, p["components"], p["anchor"])
    except SourcesError as exc:
        module.fail_json(msg="nvidia_driver: %s: %s; it was left untouched" % (path, exc))
    if p["anchor"] and not any(p["anchor"] in entry for entry in components_of(before, deb822)):
        module.warn("%s has no entry with the %s component; nothing was enabled" % (path, p["anchor"]))
    result = dict(changed=bool(changes), path=path, changes=changes)
    if module._diff:
        result["diff"] = dict(before=before, after=after, before_header=path, after_header=path)
    if changes and not module.check_mode:
        backup = write_atomic(module, path, after, backup=p["backup"], mode=0o644, backup_dir=p["backup_dir"])
        if backup:
            result["backup_file"] = backup
    module.exit_json(**result)


if __name__ == "__main__":
    main()
