#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_dcgm_diag
short_description: Run DCGM's GPU diagnostic at a level and fail a host whose GPU fails a test
description:
  - Runs C(dcgmi diag -r LEVEL -j) and reads its document and exit code (226 a test failed, 205 isolate the GPU, 242
    no data, 221 an empty group). Level 1 checks the software (seconds), 2 adds memory and PCIe (minutes), 3 and 4
    stress the GPUs (15 minutes and more).
  - A test that failed fails the module naming the GPU, the test and DCGM's message with its error id; a skipped
    test is listed as not proven, never as a pass. Where dcgmi could not run (the host engine down, no plugin for
    the driver's CUDA), it fails saying what dcgmi said.
  - The diagnostic changes nothing on the host; it runs the same in check mode.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  level:
    description: The diagnostic's level.
    type: int
    default: 1
    choices: [1, 2, 3, 4]
  fail_on_failure:
    description: Fail the module where a GPU fails a test or the diagnostic cannot run; false only reports.
    type: bool
    default: true
  timeout:
    description: Seconds the diagnostic may run.
    type: int
    default: 1800
"""

EXAMPLES = r"""
- name: Run DCGM's level 1 diagnostic
  nvidia_dcgm_diag:
    level: 1
  register: nvidia_dcgm_diag_result
"""

RETURN = r"""
status:
  description: pass, fail, isolate or error (dcgmi could not run).
  returned: always
  type: str
rc:
  description: dcgmi's exit code.
  returned: always
  type: int
summary:
  description: One line a person reads.
  returned: always
  type: str
failed:
  description: Per failed test its gpu, test, category and DCGM's warnings (error_id, text).
  returned: always
  type: list
  elements: dict
skipped:
  description: Per skipped test its gpu and test (not proven).
  returned: always
  type: list
  elements: dict
messages:
  description: Every failed and skipped test in DCGM's words.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpu.dcgm_diag import FAILED, run_diag, summary
from ansible.module_utils.host.runner import module_host_io


def main():
    module = AnsibleModule(argument_spec=dict(
        level=dict(type="int", default=1, choices=[1, 2, 3, 4]),
        fail_on_failure=dict(type="bool", default=True),
        timeout=dict(type="int", default=1800),
    ), supports_check_mode=True)
    level = module.params["level"]
    io = module_host_io(module)
    _argv, output, run = run_diag(io, level)
    if run is None:
        module.fail_json(msg="dcgm: dcgmi is not installed: DCGM 4's datacenter-gpu-manager-4-core "
                             "(site.yml --tags dcgm -e gpuhost_dcgm=true)", status="error", rc=None)
    rc = output[0]
    found = run["verdict"] or {}
    said = summary(run, level)
    messages = found.get("messages") or ([run["error"]] if run["error"] else [])
    result = dict(changed=False, status=run["status"], rc=rc, summary=said, failed=found.get("failed") or [],
                  skipped=found.get("skipped") or [], messages=messages)
    if run["status"] != "pass" and module.params["fail_on_failure"]:
        if run["status"] in FAILED:
            fix = ("take the GPU out of service (stop what runs on it) and run `dcgmi diag -r 3` on it; a failure that "
                   "stays after a GPU reset or a reboot is the hardware's: NVIDIA support, with `nvidia-bug-report.sh`")
        else:
            fix = "`systemctl status nvidia-dcgm` and `dcgmi diag -r %s` by hand say more (site.yml --tags dcgm)" % level
        module.fail_json(msg="health (DCGM): %s. Fix: %s" % (said, fix), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
