#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ansible module: one gpuhost run per host (thin shell over module_utils.run_lock)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpuhost_run_lock
short_description: Take or release the host's gpuhost run lock, so that two runs never work on a host at once
description:
  - site.yml and drift.yml take the same lock on each host before they change anything and release it at
    the end. A run that finds it held waits up to O(wait) seconds, then fails naming the run that holds
    it (playbook, user, control node, ansible-playbook pid, since when) and how to clear it.
  - The lock is a file created with O_EXCL on the host, under C(/var/lib) so that a driver reboot in the
    middle of a run does not release it. It names the run (M(gpuhost_run_identity)).
  - A lock whose run is gone (O(gone_runs), judged by the control node that ran it) or that is older than
    O(stale_after) seconds is taken over, with a warning naming it.
  - C(changed) is always false - the lock lives only while the run does, so a run leaves the host as it
    found it (molecule's idempotence step holds).
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  path:
    description: The lock file on the host.
    type: path
    default: /var/lib/gpuhost/run.lock
  state:
    description: V(locked) takes the lock (waiting for another run), V(unlocked) releases this run's lock.
    type: str
    choices: [locked, unlocked]
    default: locked
  run:
    description: This run (M(gpuhost_run_identity)'s C(run)) - C(id), C(playbook), C(user), C(controller).
    type: dict
    required: true
  wait:
    description: Seconds to wait for another run's lock before failing.
    type: int
    default: 600
  poll:
    description: Seconds between looks at a held lock.
    type: int
    default: 5
  stale_after:
    description: A lock older than this many seconds is taken over (its run is assumed gone).
    type: int
    default: 14400
  gone_runs:
    description: Ids of runs the control node found ended; their locks are taken over at once.
    type: list
    elements: str
    default: []
  busy:
    description: V(fail) when the lock stays held after O(wait); V(report) returns C(acquired=false) and the holder.
    type: str
    choices: [fail, report]
    default: fail
notes:
  - Supports check mode - it waits for another run's lock the same way but writes nothing; a free lock
    counts as acquired.
"""

EXAMPLES = r"""
- name: Take the host's run lock
  gpuhost_run_lock:
    run: "{{ gpuhost_run }}"
    wait: 600

- name: Release it
  gpuhost_run_lock:
    run: "{{ gpuhost_run }}"
    state: unlocked
"""

RETURN = r"""
acquired:
  description: Whether this run holds the lock now (V(locked)) or held it (V(unlocked)).
  returned: always
  type: bool
holder:
  description: The lock record of the run that holds it (this run when acquired); null when free.
  returned: always
  type: dict
taken_over:
  description: The record of a gone or stale run whose lock was taken over; null otherwise.
  returned: always
  type: dict
waited:
  description: Seconds spent waiting for another run.
  returned: always
  type: int
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.runs.run_lock import busy_message, describe_holder, lock_record, lock_state, parse_lock


def read_lock(path):
    """(record or None, mtime) of the lock file, or (None, None) when there is none."""
    try:
        with open(path, "r", encoding="utf-8") as handle:
            text = handle.read()
        return parse_lock(text), os.stat(path).st_mtime
    except FileNotFoundError:
        return None, None


def create(path, record):
    """Create the lock file exclusively; False when another run has one."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return True


def take_over(path, expected_id, run_id):
    """Move a gone run's lock aside; put it back when another waiter replaced it meanwhile."""
    aside = "%s.%s" % (path, run_id)
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    record = read_lock(aside)[0]
    if (record or {}).get("id") == expected_id:
        os.unlink(aside)
        return
    try:  # a live lock moved by mistake: back where it was, unless yet another run has taken the place
        os.link(aside, path)
    except FileExistsError:
        pass
    os.unlink(aside)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/var/lib/gpuhost/run.lock"),
            state=dict(type="str", default="locked", choices=["locked", "unlocked"]),
            run=dict(type="dict", required=True),
            wait=dict(type="int", default=600),
            poll=dict(type="int", default=5),
            stale_after=dict(type="int", default=14400),
            gone_runs=dict(type="list", elements="str", default=[]),
            busy=dict(type="str", default="fail", choices=["fail", "report"]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path, run = p["path"], p["run"]
    if not run.get("id"):
        module.fail_json(msg="gpuhost_run_lock: run has no id. Fix: pass gpuhost_run_identity's run")
    if p["state"] == "unlocked":
        record, mtime = read_lock(path)
        ours = record is not None and record.get("id") == run["id"]
        if ours and not module.check_mode:
            os.unlink(path)
        elif record is not None and not ours:
            module.warn("the run lock %s is held by %s, not this run: left as it is"
                        % (path, describe_holder(record, time.time(), mtime)))
        module.exit_json(changed=False, acquired=ours, holder=None if ours else record, taken_over=None, waited=0)

    started = time.time()
    taken_over = None
    # exist_ok: two runs that start together may both make it.
    if not module.check_mode:
        os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
    while True:
        now = time.time()
        if not module.check_mode and create(path, lock_record(run, now)):
            module.exit_json(changed=False, acquired=True, holder=read_lock(path)[0], taken_over=taken_over,
                             waited=int(now - started))
        record, mtime = read_lock(path)
        if mtime is None:
            if module.check_mode:  # free: a check run may go on (it writes nothing to keep apart)
                module.exit_json(changed=False, acquired=True, holder=None, taken_over=None,
                                 waited=int(now - started))
            continue  # released between our look and our create: try again
        state = lock_state(record, run["id"], now, mtime, p["stale_after"], p["gone_runs"])
        if state == "ours":
            module.exit_json(changed=False, acquired=True, holder=record, taken_over=taken_over,
                             waited=int(now - started))
        if state in ("gone", "stale"):
            module.warn("taking over the run lock of %s: %s" % (
                describe_holder(record, now, mtime),
                "its ansible-playbook has ended" if state == "gone"
                else "older than %d s (gpuhost_run_lock_stale_after)" % p["stale_after"]))
            if module.check_mode:
                module.exit_json(changed=False, acquired=False, holder=record, taken_over=record,
                                 waited=int(now - started))
            taken_over = record
            take_over(path, (record or {}).get("id"), run["id"])
            continue
        if now - started >= p["wait"]:
            if p["busy"] == "report":
                module.exit_json(changed=False, acquired=False, holder=record, taken_over=None,
                                 waited=int(now - started))
            module.fail_json(msg="gpuhost_run_lock: %s" % busy_message(record, path, int(now - started), now, mtime,
                                                                       p["stale_after"]),
                             holder=record, acquired=False, waited=int(now - started))
        time.sleep(max(0.5, min(p["poll"], p["wait"] - (now - started))))


if __name__ == "__main__":
    main()
