# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One gpuhost run per host: the lock record on the host and who holds it (pure functions).

The lock is a file on the host (created with O_EXCL) naming the run that holds it: its id, playbook,
user and the control node's ansible-playbook process (host name, boot id, pid, start time). A file lock
(flock) would not do: no process of the run lives on the host between tasks, and a driver reboot in the
middle of the run must not release it. A run that ended without releasing (killed, failed, ended the
host's play early) is found gone by the control node that ran it, or by the lock's age.
"""
import json
import time

LOCK_FORMAT = 1


def lock_record(run, now):
    """The lock file's content for `run` (gpuhost_run_identity's result) taken at `now` (epoch seconds)."""
    record = dict((k, run.get(k)) for k in ("id", "playbook", "user", "controller"))
    record.update(format=LOCK_FORMAT, acquired=int(now),
                  acquired_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)))
    return record


def parse_lock(text):
    """The lock record in `text`, or None when it is not one (empty or cut short by a crash mid-write)."""
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or not record.get("id"):
        return None
    return record


def lock_state(record, run_id, now, mtime, stale_after, gone_runs=()):
    """`ours`, `gone` (its run ended without releasing), `stale` (older than stale_after) or `busy`.

    An unreadable record counts by the file's mtime: a run that crashed while writing it is stale in time.
    """
    if record is not None and record.get("id") == run_id:
        return "ours"
    if record is not None and record.get("id") in gone_runs:
        return "gone"
    taken = record.get("acquired") if record is not None else None
    age = now - (taken if isinstance(taken, (int, float)) else mtime)
    return "stale" if age > stale_after else "busy"


def describe_holder(record, now, mtime):
    """One line naming the run that holds the lock, for a person deciding whether to wait."""
    if record is None:
        return "an unreadable lock written %d s ago" % max(0, now - mtime)
    controller = record.get("controller") or {}
    where = controller.get("hostname") or "an unknown control node"
    pid = " (ansible-playbook pid %s)" % controller["pid"] if controller.get("pid") else ""
    taken = record.get("acquired")
    age = " (%d s ago)" % max(0, now - taken) if isinstance(taken, (int, float)) else ""
    return "%s by %s on %s%s, run %s, since %s%s" % (
        record.get("playbook") or "a gpuhost run", record.get("user") or "an unknown user", where, pid,
        record["id"], record.get("acquired_utc") or "an unknown time", age)


def busy_message(record, path, waited, now, mtime, stale_after):
    return ("another gpuhost run holds this host: %s. Waited %d s (gpuhost_run_lock_wait). Fix: let that run "
            "finish and start this one again; if that run is gone (its ansible-playbook ended on another control "
            "node without releasing the lock), remove %s on the host - a lock older than %d s "
            "(gpuhost_run_lock_stale_after) is taken over by itself"
            % (describe_holder(record, now, mtime), waited, path, stale_after))


# --- The control node's side: which ansible-playbook process is this run, and is a holder's still alive ---

def _argv_is_playbook(argv):
    names = [a.rsplit("/", 1)[-1] for a in argv[:2]]
    return "ansible-playbook" in names


def playbook_process(pid, read_argv, read_parent):
    """The ansible-playbook process that runs `pid` (an ancestor, or itself), or None.

    Ansible's workers are forks of ansible-playbook with the same command line that live one task; the
    run is the outermost of the nearest chain of them. A playbook run from inside another (a molecule
    scenario's command task) is its own run. read_argv(pid) -> list of str ([] when gone),
    read_parent(pid) -> int.
    """
    found, seen = None, set()
    while pid and pid > 1 and pid not in seen:
        seen.add(pid)
        if _argv_is_playbook(read_argv(pid)):
            found = pid
        elif found:
            break
        pid = read_parent(pid)
    return found


def parse_stat(text):
    """(parent pid, start time in clock ticks since boot) from /proc/<pid>/stat."""
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[19])


def run_gone(holder_controller, mine, process_start):
    """Whether the run that wrote `holder_controller` has ended, as this control node (`mine`) can tell.

    Only a holder from this very control node can be judged: same host name and boot id, and its
    ansible-playbook process no longer there with the same start time (process_start(pid) -> int or None).
    Another boot of this control node means the holder is gone. Anything else: not known to be gone.
    """
    if not holder_controller or not mine or holder_controller.get("hostname") != mine.get("hostname"):
        return False
    if not holder_controller.get("boot_id") or holder_controller.get("boot_id") != mine.get("boot_id"):
        return bool(holder_controller.get("boot_id") and mine.get("boot_id"))
    pid = holder_controller.get("pid")
    if not pid:
        return False
    return process_start(pid) != holder_controller.get("start")
