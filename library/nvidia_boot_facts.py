#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_boot_facts
short_description: Secure Boot, the nvidia module's source and the kernels a reboot could start
description:
  - Reads, without changing anything, whether Secure Boot enforces module signatures (C(mokutil --sb-state), else
    the SecureBoot EFI variable; kernel lockdown counts as enforcing), whether the key DKMS signs with is an
    enrolled MOK (C(mokutil --test-key)), which package provides the nvidia module (Canonical's signed prebuilt
    C(linux-modules-nvidia-*) or a DKMS build, from C(modinfo nvidia), C(modules.dep), C(dpkg-query -W)), whether it
    would load, and the installed kernels (C(/boot/vmlinuz-*)) with and without an nvidia module.
  - The kernel a reboot starts is the newest installed one (GRUB's default entry on Debian and Ubuntu). When it
    has no nvidia module (no signed package, no DKMS build, by C(modules.dep), C(dkms status), C(dpkg-query -W)),
    C(next_boot_problem) says so with the package or build it needs; the driver role refuses to reboot then.
  - Sets C(ansible_facts.nvidia_boot).
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  distribution:
    description:
      - The distribution (C(Ubuntu), C(Debian)); it decides the DKMS key's path and the fixes. Read from
        C(/etc/os-release) when not given.
    type: str
  branch:
    description: The driver branch, for the names in the fixes when the installed packages do not say it.
    type: int
  timeout:
    description: Seconds each command may take.
    type: int
    default: 30
notes:
  - Supports check mode; it never changes anything.
"""

EXAMPLES = r"""
- name: Read the boot facts
  nvidia_boot_facts:
    distribution: "{{ ansible_facts.distribution }}"

- name: Refuse a reboot into a kernel without an nvidia module
  ansible.builtin.assert:
    that: ansible_facts.nvidia_boot.next_boot_problem is none
    fail_msg: "{{ ansible_facts.nvidia_boot.next_boot_problem }}"
"""

RETURN = r"""
ansible_facts:
  description: C(nvidia_boot).
  returned: always
  type: dict
  contains:
    nvidia_boot:
      description:
        - C(secure_boot) (C(enabled), C(enforcing), C(shim_validation_disabled), C(setup_mode), C(efi), C(line),
          C(source)), C(lockdown) (C(none), C(integrity), C(confidentiality) or null), C(mok) (the DKMS key's
          C(enrolled), C(pending), C(key), C(line); null when not asked).
        - C(module) (C(kind) C(signed-prebuilt) or C(dkms) or null, C(package), C(filename), C(signer), C(evidence)).
        - C(loads) (true, false, null), C(reason), C(fix), C(console_required) (a MOK enrolment only the console can
          finish).
        - C(kernels) - C(running), C(installed), C(with_module), C(next_boot), C(next_boot_has_module), C(stranded)
          (each C(kver), C(newer), C(fix)).
        - C(next_boot_problem) - one sentence when the next boot would come up without the nvidia module, else null.
      returned: always
      type: dict
      sample:
        loads: true
        reason: "Secure Boot is off: the kernel loads unsigned modules"
        kernels: {running: 6.8.0-51-generic, next_boot: 6.8.0-52-generic, next_boot_has_module: false}
        next_boot_problem: >-
          the next boot starts kernel 6.8.0-52-generic (newer than the running 6.8.0-51-generic), which has no
          nvidia module: install linux-modules-nvidia-580-server-open-6.8.0-52-generic before booting it
"""

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.host.runner import module_host_io
from ansible.module_utils.driver.secure_boot import boot_facts, capture, next_boot_problem

ARGUMENT_SPEC = dict(
    distribution=dict(type="str"),
    branch=dict(type="int"),
    timeout=dict(type="int", default=30),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    io = module_host_io(module)
    facts = boot_facts(capture(io, module.params["distribution"]), module.params["branch"])
    facts["next_boot_problem"] = next_boot_problem(facts)
    module.exit_json(changed=False, ansible_facts={"nvidia_boot": facts})


if __name__ == "__main__":
    main()
