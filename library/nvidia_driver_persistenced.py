#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Make the packaged nvidia-persistenced unit run with persistence mode on (a drop-in where needed)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_driver_persistenced
short_description: Drop-in that makes the packaged nvidia-persistenced unit keep persistence mode on
description:
  - Reads the packaged unit of nvidia-persistenced. Ubuntu's (C(nvidia-compute-utils-<branch>)) starts the
    daemon with C(--no-persistence-mode) and C(StopWhenUnneeded=true), so it runs with persistence mode off;
    for such a unit this module writes a drop-in that starts it without that flag and keeps it running.
    A unit that needs no fix gets no drop-in (and a drop-in of ours is removed).
  - Reports whether the unit is static (it has no C([Install]) section, so it cannot be enabled and needs a
    wants link).
  - A masked unit (a link to C(/dev/null), or an empty file, in the first unit directory that has it) is the
    operator's. The module reports it in RV(masked) and changes nothing, whatever O(state); the drop-in,
    ours or not, is left as it is. The caller decides what a masked unit means (role nvidia_persistence
    stops the run).
  - Says how persistence mode is to be kept on (RV(use)) - the daemon wherever it is installed, or will be once the
    caller unmasks it (O(unmask)), unless O(method) asks for C(nvidia-smi -pm 1).
  - The caller reloads systemd and restarts the daemon when this reports a change.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  unit:
    description: Name of the unit.
    type: str
    default: nvidia-persistenced.service
  unit_dirs:
    description: Where the unit file is looked for, in systemd's order (the first found is the packaged one).
    type: list
    elements: path
    default: [/etc/systemd/system, /run/systemd/system, /lib/systemd/system, /usr/lib/systemd/system]
  dropin:
    description: The drop-in file this module owns.
    type: path
    default: /etc/systemd/system/nvidia-persistenced.service.d/gpuhost-persistence-mode.conf
  state:
    description:
      - V(present) writes the drop-in where the unit needs it; V(absent) removes it.
      - Default V(absent) when O(method) is V(nvidia-smi) (no daemon to fix), else V(present).
    type: str
    choices: [present, absent]
  method:
    description:
      - How persistence mode is kept on (role nvidia_persistence's nvidia_persistence_method) - V(auto) the daemon
        where its unit is installed, else C(nvidia-smi -pm 1); V(daemon); V(nvidia-smi).
    type: str
    default: auto
    choices: [auto, daemon, nvidia-smi]
  unmask:
    description: The caller unmasks a masked unit (nvidia_persistence_unmask), so the daemon is used there.
    type: bool
    default: false
notes:
  - Supports check mode and diff mode.
"""

EXAMPLES = r"""
- name: Persistence mode on through the packaged unit
  nvidia_driver_persistenced:
  register: persistenced

- name: Restart the daemon with the drop-in
  ansible.builtin.systemd_service:
    name: nvidia-persistenced
    state: restarted
    daemon_reload: true
  when: persistenced is changed
"""

RETURN = r"""
found:
  description: Whether the unit file exists.
  returned: always
  type: bool
unit_path:
  description: The unit file read.
  returned: when found
  type: str
exec_start:
  description: The packaged ExecStart command lines.
  returned: when found
  type: list
  elements: str
no_persistence_mode:
  description: Whether the packaged unit passes --no-persistence-mode.
  returned: when found
  type: bool
static:
  description: The unit has no [Install] section (it cannot be enabled).
  returned: when found
  type: bool
stop_when_unneeded:
  description: Whether the packaged unit sets StopWhenUnneeded=true.
  returned: when found
  type: bool
masked:
  description: The unit is masked (a link to /dev/null, or an empty file); nothing was changed.
  returned: always
  type: bool
mask_path:
  description: The file that masks the unit.
  returned: when masked
  type: str
dropin_content:
  description: The drop-in wanted ('' when none is needed).
  returned: when found
  type: str
use:
  description: V(daemon) (nvidia-persistenced) or V(nvidia-smi) (C(nvidia-smi -pm 1)), from O(method), the unit and O(unmask).
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.runs.atomic_file import read_text, write_atomic
from ansible.module_utils.driver.persistenced_unit import METHODS, analyse, choose, dropin_state


def unit_file(unit, unit_dirs):
    """(path, masked): the file systemd loads for the unit - the first of unit_dirs that has it - and whether it
    masks the unit (systemd reads a link to /dev/null and an empty file as masked). (None, False) when none."""
    for directory in unit_dirs:
        path = os.path.join(directory, unit)
        if os.path.lexists(path):
            return path, os.path.realpath(path) == os.devnull or (os.path.isfile(path) and os.path.getsize(path) == 0)
    return None, False


def plan(unit, unit_dirs, state):
    """(result, wanted): what the module reports and the drop-in it wants ('' for none), or None when the
    drop-in must be left as it is: a masked unit is the operator's, and reading it as "needs no drop-in"
    would delete ours."""
    unit_path, masked = unit_file(unit, unit_dirs)
    result = dict(changed=False, found=bool(unit_path) and not masked, masked=masked)
    if masked:
        result["mask_path"] = unit_path
        return result, None
    if not unit_path:
        return result, ""
    info = analyse(read_text(unit_path) or "")
    result.update(unit_path=unit_path, exec_start=info["exec_start"], no_persistence_mode=info["no_persistence_mode"],
                  static=info["static"], stop_when_unneeded=info["stop_when_unneeded"], dropin_content=info["dropin"])
    return result, info["dropin"] if state == "present" else ""


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", default="nvidia-persistenced.service"),
            unit_dirs=dict(type="list", elements="path",
                           default=["/etc/systemd/system", "/run/systemd/system", "/lib/systemd/system",
                                    "/usr/lib/systemd/system"]),
            dropin=dict(type="path",
                        default="/etc/systemd/system/nvidia-persistenced.service.d/gpuhost-persistence-mode.conf"),
            state=dict(type="str", choices=["present", "absent"]),
            method=dict(type="str", default="auto", choices=list(METHODS)),
            unmask=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    result, wanted = plan(p["unit"], p["unit_dirs"], dropin_state(p["method"], p["state"]))
    result["use"] = choose(p["method"], result["found"], result["masked"], p["unmask"])
    if wanted is None:  # masked: nothing of ours is written or removed
        module.exit_json(**result)
    current = read_text(p["dropin"])
    if (current or "") != wanted:
        result["changed"] = True
        if module._diff:
            result["diff"] = dict(before=current or "", after=wanted, before_header=p["dropin"],
                                  after_header=p["dropin"])
        if not module.check_mode:
            if wanted:
                write_atomic(module, p["dropin"], wanted, backup=False, mode=0o644)
            elif current is not None:
                os.unlink(p["dropin"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
