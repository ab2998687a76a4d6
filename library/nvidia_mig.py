#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_mig
short_description: Bring NVIDIA GPUs to a declared MIG layout (MIG mode and GPU instances), idempotently
description:
  - Reads each declared GPU's MIG mode and processes (C(nvidia-smi -q -x)) and, where MIG mode is on, its
    profiles, placements, GPU and compute instances (C(nvidia-smi mig -lgip/-lgipp/-lgi/-lci)).
  - Refuses, before any change, a GPU that does not exist or has no MIG, a profile the GPU does not offer or a
    layout that exceeds its slices or placements (the message lists the profiles the GPU offers), and a GPU that
    would change while GPU processes run on it (unless I(allow_disruption)).
  - Then turns MIG mode on (a GPU reset where the mode stays pending, if I(reset)), destroys the GPU instances
    that are not declared and creates the missing ones with their compute instance (C(-cgi ... -C)). A GPU
    already as declared is not touched. V(disabled) destroys a GPU's instances and turns MIG mode off.
  - C(nvidia-smi mig -lgip) cannot be read while MIG mode is off, so a GPU whose mode this run turns on is
    validated right after; a layout it cannot hold turns the mode off again before the refusal.
  - The logic is module_utils/gpu/mig_apply.py, which the boot unit's script (role nvidia_mig) runs too.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  layout:
    description:
      - GPU index (as C(nvidia-smi -L) numbers them) to a list of MIG profile names, one per GPU instance
        (V(3g.40gb)), or V(disabled). GPUs not named are left alone. An empty list means MIG on, no instance.
    type: dict
    required: true
  allow_disruption:
    description: Change a GPU even while GPU processes run on it (their MIG devices go away).
    type: bool
    default: false
  reset:
    description: Reset a GPU whose MIG mode stays pending (C(nvidia-smi -r -i N)); off, the run stops there.
    type: bool
    default: true
  clients:
    description:
      - systemd units of driver clients that keep every GPU open (DCGM's host engine, its exporter, NVSM). Those
        active are stopped, in this order, around a MIG mode change and started again afterwards, whatever
        happened, as NVIDIA's mig-parted does. Instance changes alone stop nothing.
    type: list
    elements: str
    default: [dcgm-exporter.service, nvsm.service, nvidia-dcgm.service]
notes:
  - Supports check mode (the commands that would run are returned; a GPU with MIG off is validated only once its
    mode is on) and diff mode (one line per declared GPU).
"""

EXAMPLES = r"""
- name: Two 3g.40gb instances on GPU 0, MIG off on GPU 1
  nvidia_mig:
    layout:
      "0": [3g.40gb, 3g.40gb]
      "1": disabled
"""

RETURN = r"""
gpus:
  description: One entry per declared GPU (gpu, uuid, name, want, mode_before, before, changed, commands, validated).
  returned: always
  type: list
  elements: dict
commands:
  description: The nvidia-smi commands run (would be run, in check mode).
  returned: always
  type: list
  elements: str
before:
  description: "GPU index to its MIG state before the run (V(MIG enabled: 3g.40gb, 3g.40gb), V(MIG disabled))."
  returned: always
  type: dict
after:
  description: The same after the run (as it would be, in check mode).
  returned: always
  type: dict
clients_stopped:
  description: The units of I(clients) stopped for a MIG mode change and started again (none in check mode).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.gpu.mig_apply import CLIENTS, MigError, apply, diff_text
from ansible.module_utils.host.runner import ModuleHostIO


def main():
    module = AnsibleModule(argument_spec=dict(layout=dict(type="dict", required=True),
                                              allow_disruption=dict(type="bool", default=False),
                                              reset=dict(type="bool", default=True),
                                              clients=dict(type="list", elements="str", default=list(CLIENTS))),
                           supports_check_mode=True)

    try:
        result = apply(module.params["layout"], ModuleHostIO(module).run, check_mode=module.check_mode,
                       allow_disruption=module.params["allow_disruption"], reset=module.params["reset"],
                       clients=module.params["clients"])
    except MigError as exc:
        module.fail_json(msg=exc.msg, changed=exc.changed, **exc.details)
    result["before"] = dict((str(k), v) for k, v in result["before"].items())
    result["after"] = dict((str(k), v) for k, v in result["after"].items())
    result["diff"] = diff_text(result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
