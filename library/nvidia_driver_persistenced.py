#!/usr/bin/python
# -*- coding: utf-8 -*-
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
  - Reports whether the unit is static (no C([Install]) section: it cannot be enabled and needs a wants link).
  - The caller reloads systemd and restarts the daemon when this reports a change.
version_added: "1.0.0"
author: gpuhost
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
    description: V(present) writes the drop-in where the unit needs it; V(absent) removes it.
    type: str
    default: present
    choices: [present, absent]
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
masked:
  description: The unit is masked (a link to /dev/null).
  returned: always
  type: bool
dropin_content:
  description: The drop-in wanted ('' when none is needed).
  returned: when found
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible.module_utils.atomic_file import read_text, write_atomic
    from ansible.module_utils.persistenced_unit import analyse
except ImportError:
    from atomic_file import read_text, write_atomic
    from persistenced_unit import analyse


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", default="nvidia-persistenced.service"),
            unit_dirs=dict(type="list", elements="path",
                           default=["/etc/systemd/system", "/run/systemd/system", "/lib/systemd/system",
                                    "/usr/lib/systemd/system"]),
            dropin=dict(type="path",
                        default="/etc/systemd/system/nvidia-persistenced.service.d/gpuhost-persistence-mode.conf"),
            state=dict(type="str", default="present", choices=["present", "absent"]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    unit_path = next((os.path.join(d, p["unit"]) for d in p["unit_dirs"]
                      if os.path.lexists(os.path.join(d, p["unit"]))), None)
    masked = bool(unit_path) and os.path.realpath(unit_path) == "/dev/null"
    result = dict(changed=False, found=bool(unit_path) and not masked, masked=masked)
    wanted = ""
    if result["found"]:
        info = analyse(read_text(unit_path) or "")
        result.update(unit_path=unit_path, exec_start=info["exec_start"],
                      no_persistence_mode=info["no_persistence_mode"], static=info["static"],
                      stop_when_unneeded=info["stop_when_unneeded"], dropin_content=info["dropin"])
        wanted = info["dropin"] if p["state"] == "present" else ""
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
