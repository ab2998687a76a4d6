#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ansible module: who this gpuhost run is on the control node, and whether other runs have ended."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpuhost_run_identity
short_description: Name this gpuhost run (control node, ansible-playbook process) and judge whether other runs ended
description:
  - Runs on the control node (C(delegate_to) localhost, C(run_once)). Returns C(run) - a new id, the
    playbook, the user and the control node's ansible-playbook process (host name, boot id, pid, start time)
    - for M(gpuhost_run_lock) to write into the host's lock.
  - Given O(holders) (lock records found on hosts), returns in C(gone) the ids of those whose run started on
    this control node and whose ansible-playbook process is no longer there (or that ran before its last boot).
    Runs of other control nodes are never judged gone here.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  playbook:
    description: The playbook that runs (written into the lock, named to a run that has to wait).
    type: str
    required: true
  holders:
    description: Lock records (M(gpuhost_run_lock)'s C(holder)) to judge.
    type: list
    elements: dict
    default: []
notes:
  - Supports check mode; it reads /proc and changes nothing.
  - On a control node without /proc the process is unknown and no holder is judged gone.
"""

EXAMPLES = r"""
- name: Name this run
  gpuhost_run_identity:
    playbook: site.yml
  delegate_to: localhost
  run_once: true
  register: gpuhost_run_identity
"""

RETURN = r"""
run:
  description: C(id), C(playbook), C(user), C(controller) (C(hostname), C(boot_id), C(pid), C(start)).
  returned: always
  type: dict
gone:
  description: Ids of O(holders) whose run has ended.
  returned: always
  type: list
  elements: str
"""

import getpass
import os
import socket
import time
import uuid

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.runs.run_lock import parse_stat, playbook_process, run_gone


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def read_argv(pid):
    raw = _read("/proc/%d/cmdline" % pid)
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a] if raw else []


def stat_of(pid):
    raw = _read("/proc/%d/stat" % pid)
    return parse_stat(raw.decode("utf-8", "replace")) if raw else None


def read_parent(pid):
    stat = stat_of(pid)
    return stat[0] if stat else 0


def process_start(pid):
    stat = stat_of(pid)
    return stat[1] if stat else None


def controller():
    boot = _read("/proc/sys/kernel/random/boot_id")
    pid = playbook_process(os.getpid(), read_argv, read_parent)
    return {"hostname": socket.gethostname(), "boot_id": boot.decode().strip() if boot else None,
            "pid": pid, "start": process_start(pid) if pid else None}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            playbook=dict(type="str", required=True),
            holders=dict(type="list", elements="dict", default=[]),
        ),
        supports_check_mode=True,
    )
    mine = controller()
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    run = {"id": "%s-%s" % (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()), uuid.uuid4().hex[:8]),
           "playbook": module.params["playbook"], "user": user, "controller": mine}
    gone = [h["id"] for h in module.params["holders"]
            if h and h.get("id") and run_gone(h.get("controller"), mine, process_start)]
    module.exit_json(changed=False, run=run, gone=gone)


if __name__ == "__main__":
    main()
