#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_xid_recovery
short_description: Act on each GPU's new Xid errors as NVIDIA's Xid catalogue says, one GPU at a time
description:
  - Reads the Xid lines of this boot's kernel log after drift's cursor (per GPU, in O(state_path)) and gives each
    GPU with new Xids the immediate action of the most severe of them, from gpuhost's one error table
    (NVIDIA's catalogue's resolution buckets, as NVIDIA/NVSentinel's xiderrorsmapping.csv copies them).
  - C(IGNORE) reports only. C(RESTART_APP) restarts the serving containers (label C(gpuhost.layer=vllm)) on that
    GPU and waits for their /health. C(RESET_GPU) stops only that GPU's serving containers (their stop timeout)
    and the programs that hold every GPU open (nvidia-persistenced, nv-hostengine, dcgm-exporter, where their
    units run), runs C(nvidia-smi -r -i N), checks the GPU answers C(nvidia-smi -q -i N) and, where
    O(cuda_probe_image) is set, that CUDA runs a kernel on it (NVIDIA's vectorAdd in a C(--gpus device=N) container,
    never pulled) and, where DCGM's host engine ran, that DCGM's level 1 diagnostic passes on it (C(dcgmi diag -r 1
    -j -i N)), then starts them all again; a reset that fails marks the GPU out of service, and asks for a host
    restart where O(allow_reboot).
    C(RESTART_BM) (Xid 79, fallen off the bus) and C(CONTACT_SUPPORT) mark the GPU out of service for this boot,
    and ask for a host restart only where O(allow_reboot).
  - A reset is refused, naming why, on a GPU another tenant's process uses (named), on a GPU in MIG mode, and on
    an Ampere GPU of an NVSwitch board whose fabric manager is not running; the GPU's Xids then stay pending.
  - Each GPU's cursor moves past the Xids its plan dealt with, so an old Xid is never acted on twice; another
    boot starts a fresh cursor and clears the out-of-service marks.
  - In check mode it returns the plans and changes nothing.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  kernel_log_command:
    description: The command that prints this boot's kernel log (C(dmesg), or C(journalctl -k -b --no-pager)).
    type: raw
    default: dmesg
  state_path:
    description: Drift's Xid cursor and out-of-service marks (JSON), written atomically with a backup.
    type: path
    default: /var/lib/gpuhost/xid-state.json
  record_path:
    description: gpuhost's record, for each serving container's URL (its /health after a restart).
    type: path
    default: /etc/ansible/facts.d/gpuhost.fact
  allow_reboot:
    description: The operator lets drift restart the host (a GPU off the bus, a reset that failed).
    type: bool
    default: false
  health_timeout:
    description: Seconds a restarted serving container gets to answer /health.
    type: int
    default: 300
  cuda_probe_image:
    description:
      - The CUDA probe image run on a GPU after its reset (gpu_stack_check's, NVIDIA's vectorAdd sample). A probe that
        fails means the reset did not bring the GPU back; an image not on the host is a warning (it is never pulled).
        Empty, no probe.
    type: str
    default: ""
  cuda_probe_command:
    description: The command run in the CUDA probe image.
    type: list
    elements: str
    default: [/cuda-samples/vectorAdd]
  nvidia_smi_path:
    description: nvidia-smi to run (default, found on PATH).
    type: path
  timeout:
    description: Seconds each command may run.
    type: int
    default: 120
"""

EXAMPLES = r"""
- name: Act on the Xids since the last drift run
  nvidia_xid_recovery:
    allow_reboot: "{{ gpuhost_drift_allow_reboot | bool }}"
  register: gpu_recovery_result
"""

RETURN = r"""
gpus:
  description:
    - Per GPU with new Xids, its plan (index, bus_id, uuid, action, xids with each one's action and words, containers,
      holders, tenants, blocked, steps, say) and what was done (outcome, with ok, out_of_service, reboot, reason,
      warning, steps each with its rc and output, the reset's reading, the CUDA probe's result and DCGM's level 1
      after a reset).
  returned: always
  type: list
  elements: dict
out_of_service:
  description: The GPUs out of service this boot, after this run (index, bus_id, uuid, since, xids, reason).
  returned: always
  type: list
  elements: dict
reboot:
  description: A GPU needs a host restart and the operator allows it (the role restarts the host).
  returned: always
  type: bool
messages:
  description: What was decided and done, one line per GPU.
  returned: always
  type: list
  elements: str
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.diagnosis.drift import read_record
from ansible.module_utils.gpu.xid_policy import bus_key, next_state, out_of_service, read_state
from ansible.module_utils.gpu.xid_recovery import carry_out
from ansible.module_utils.host.runner import ModuleHostIO
from ansible.module_utils.layers.base import DEFAULT_CUDA_PROBE_COMMAND
from ansible.module_utils.layers.health import xid_plans
from ansible.module_utils.layers.stack import capture_xid, kernel_log_argv
from ansible.module_utils.runs.atomic_file import read_text, write_atomic
from ansible.module_utils.runs.converged import health_code


def _urls(record_text, path):
    """{container name: URL} of the record's serving instances (none where the record is not JSON: the health
    check then waits for nothing it cannot name)."""
    vllm = (read_record(record_text, path)[0] or {}).get("vllm")
    instances = vllm.get("instances") if isinstance(vllm, dict) else None
    if not isinstance(instances, dict):
        return {}
    return dict((name, inst.get("url")) for name, inst in instances.items() if isinstance(inst, dict) and inst.get("url"))


def _health_probe(timeout):
    def healthy(url):
        deadline = time.time() + timeout
        while health_code(url, 10) != 200:
            # Not answering yet: a refused or reset connection while the server starts.
            if time.time() >= deadline:
                return False
            time.sleep(1)
        return True
    return healthy


def main():
    module = AnsibleModule(argument_spec=dict(
        kernel_log_command=dict(type="raw", default="dmesg"),
        state_path=dict(type="path", default="/var/lib/gpuhost/xid-state.json"),
        record_path=dict(type="path", default="/etc/ansible/facts.d/gpuhost.fact"),
        allow_reboot=dict(type="bool", default=False),
        health_timeout=dict(type="int", default=300),
        cuda_probe_image=dict(type="str", default=""),
        cuda_probe_command=dict(type="list", elements="str", default=list(DEFAULT_CUDA_PROBE_COMMAND)),
        nvidia_smi_path=dict(type="path"),
        timeout=dict(type="int", default=120),
    ), supports_check_mode=True)
    params = module.params
    argv = kernel_log_argv(params["kernel_log_command"])
    if not argv:
        module.fail_json(msg="health layer (nvidia_xid_recovery): kernel_log_command is empty")
    opts = {"kernel_log_command": argv, "kernel_log_command_text": " ".join(argv), "xid_state_path": params["state_path"],
            "allow_reboot": params["allow_reboot"], "nvidia_smi_path": params["nvidia_smi_path"]}
    io = ModuleHostIO(module, timeout=params["timeout"])
    caps = capture_xid(io, opts)
    if (caps.get("kernel_log") or {}).get("rc") != 0:
        module.fail_json(msg="health layer (nvidia_xid_recovery): %s could not read the kernel log (%s): run drift "
                             "as root, or set the kernel log command (gpu_recovery_kernel_log_command)"
                             % (" ".join(argv), (caps["kernel_log"].get("stderr") or "").strip()))
    decision, _marks, error = xid_plans(caps, caps["facts"], dict(opts, xid_state_path=params["state_path"]))
    if error:
        module.fail_json(msg="health layer (nvidia_xid_recovery): %s" % error)
    if decision is None:
        module.fail_json(msg="health layer (nvidia_xid_recovery): no boot id (/proc/sys/kernel/random/boot_id) "
                             "to key the Xid cursor on")
    old_text = caps.get("xid_state") or ""
    state = read_state(old_text, params["state_path"])[0]
    boot_id = decision["cursor"]["boot_id"]
    smi = caps["facts"].get("nvidia_smi_path") or params["nvidia_smi_path"] or io.which("nvidia-smi") or "nvidia-smi"
    urls = _urls(read_text(params["record_path"]), params["record_path"])
    outcomes = {}
    for plan in decision["gpus"]:
        if module.check_mode:
            outcome = {"ok": not plan["blocked"], "out_of_service": plan["action"] in ("RESTART_BM", "CONTACT_SUPPORT"),
                       "reboot": plan["reboot"], "reason": None, "warning": None, "steps": [], "reset": None,
                       "cuda_probe": None, "predicted": True}
        else:
            outcome = carry_out(io, plan, caps.get("docker_path"), smi, io.which("systemctl"), urls,
                                _health_probe(params["health_timeout"]),
                                {"image": params["cuda_probe_image"], "command": params["cuda_probe_command"]})
        outcomes[bus_key(plan["bus_id"])] = outcome
        plan["outcome"] = outcome
    new = next_state(state, decision, outcomes, boot_id, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    new_text = json.dumps(new, indent=2, sort_keys=True) + "\n"
    changed_state = new != state and (bool(state) or bool(new["cursor"]["gpus"] or new["out_of_service"]))
    # Under --check nothing ran: a plan that would restart, reset or mark counts as the change it would be.
    changed = changed_state or any(p["outcome"]["steps"] or (module.check_mode and p["action"] != "IGNORE"
                                                             and not p["blocked"]) for p in decision["gpus"])
    diff = {"before": old_text, "after": new_text, "before_header": params["state_path"],
            "after_header": params["state_path"]}
    if changed_state and not module.check_mode:
        write_atomic(module, params["state_path"], new_text, mode=0o644)
    marks = out_of_service(new, boot_id)
    module.exit_json(changed=changed, gpus=decision["gpus"], unmapped=decision["unmapped"],
                     out_of_service=sorted(marks.values(), key=lambda m: m.get("bus_id") or ""),
                     reboot=any(o["reboot"] for o in outcomes.values()) and params["allow_reboot"],
                     messages=[p["say"] + ("" if p["outcome"]["ok"] or not p["outcome"]["reason"]
                                           else " — not done: %s" % p["outcome"]["reason"]) for p in decision["gpus"]],
                     diff=diff if changed_state else {})


if __name__ == "__main__":
    main()
