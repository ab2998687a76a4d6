"""One gpuhost run per host (module_utils/runs/run_lock.py, library/gpuhost_run_lock.py,
library/gpuhost_run_identity.py, playbooks/tasks/run-lock.yml): run by real ansible-playbook on localhost."""
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from runs import run_lock as rl
from conftest import ROOT

PLAYBOOK_BIN = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
needs_ansible = pytest.mark.skipif(not os.path.exists(PLAYBOOK_BIN), reason="ansible not installed in this venv")

HOLDER = {"id": "20261204T081500Z-1a2b3c4d", "playbook": "drift.yml", "user": "root",
          "controller": {"hostname": "ctl01", "boot_id": "b-1", "pid": 4242, "start": 777},
          "acquired": 1000, "acquired_utc": "1970-01-01T00:16:40Z", "format": 1}


# --- pure decisions ---------------------------------------------------------------------------------

def test_lock_state():
    assert rl.lock_state(HOLDER, HOLDER["id"], 1010, 1000, 3600) == "ours"
    assert rl.lock_state(HOLDER, "other", 1010, 1000, 3600) == "busy"
    assert rl.lock_state(HOLDER, "other", 1000 + 3601, 1000, 3600) == "stale"
    assert rl.lock_state(HOLDER, "other", 1010, 1000, 3600, gone_runs=[HOLDER["id"]]) == "gone"
    # cut short by a crash mid-write: judged by the file's age
    assert rl.parse_lock("") is None and rl.parse_lock('{"id": ') is None and rl.parse_lock("[]") is None
    assert rl.lock_state(None, "other", 1010, 1000, 3600) == "busy"
    assert rl.lock_state(None, "other", 9000, 1000, 3600) == "stale"


def test_busy_message_names_the_holder_and_the_way_out():
    message = rl.busy_message(HOLDER, "/var/lib/gpuhost/run.lock", 600, 1035, 1000, 14400)
    for part in ("drift.yml", "root", "ctl01", "pid 4242", HOLDER["id"], "1970-01-01T00:16:40Z", "35 s ago",
                 "Waited 600 s", "gpuhost_run_lock_wait", "remove /var/lib/gpuhost/run.lock",
                 "gpuhost_run_lock_stale_after"):
        assert part in message, part


def test_lock_record_round_trip():
    run = {"id": "r1", "playbook": "site.yml", "user": "ops", "controller": {"hostname": "c"}, "extra": 1}
    record = rl.parse_lock(json.dumps(rl.lock_record(run, 86400)))
    assert record["id"] == "r1" and record["acquired"] == 86400 and record["acquired_utc"] == "1970-01-02T00:00:00Z"
    assert "extra" not in record


def test_playbook_process_is_the_nearest_run():
    # module 100 <- sh 90 <- worker 80 <- ansible-playbook 70 <- sh 60 (a command task of an outer run)
    # <- outer worker 50 <- outer ansible-playbook 40 <- bash 30
    playbook = ["/venv/bin/python3", "/venv/bin/ansible-playbook", "site.yml"]
    argv = {100: ["python3", "AnsiballZ_x.py"], 90: ["/bin/sh", "-c"], 80: playbook, 70: playbook,
            60: ["/bin/sh", "-c"], 50: playbook, 40: playbook, 30: ["bash"]}
    parent = {100: 90, 90: 80, 80: 70, 70: 60, 60: 50, 50: 40, 40: 30, 30: 1}
    assert rl.playbook_process(100, lambda p: argv.get(p, []), lambda p: parent.get(p, 0)) == 70
    # flock runs ansible-playbook as an argument: the run is ansible-playbook itself, not flock
    argv[70] = ["/usr/bin/ansible-playbook", "-i", "hosts", "drift.yml"]
    argv[60] = ["/usr/bin/flock", "--nonblock", "/run/lock/gpuhost-drift.lock", "/usr/bin/ansible-playbook"]
    assert rl.playbook_process(100, lambda p: argv.get(p, []), lambda p: parent.get(p, 0)) == 70
    assert rl.playbook_process(100, lambda p: [], lambda p: parent.get(p, 0)) is None


def test_parse_stat_with_spaces_in_the_name():
    text = "4242 (ansible-playbook x) S 4100 4242 4100 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 777 100 1 18446744073709551615"
    assert rl.parse_stat(text) == (4100, 777)


def test_run_gone_only_for_runs_this_control_node_can_judge():
    mine = {"hostname": "ctl01", "boot_id": "b-1"}
    holder = HOLDER["controller"]
    assert rl.run_gone(holder, mine, lambda pid: None) is True          # process ended
    assert rl.run_gone(holder, mine, lambda pid: 777) is False          # still running
    assert rl.run_gone(holder, mine, lambda pid: 999) is True           # pid reused by another process
    assert rl.run_gone(holder, dict(mine, boot_id="b-2"), lambda pid: 777) is True   # control node rebooted
    assert rl.run_gone(holder, dict(mine, hostname="ctl02"), lambda pid: None) is False  # another node's run
    assert rl.run_gone(dict(holder, pid=None), mine, lambda pid: None) is False
    assert rl.run_gone(None, mine, lambda pid: None) is False


# --- the task file with real ansible-playbook -----------------------------------------------------------

PLAY = """
- name: Hold the run lock for a while
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    gpuhost_run_playbook: test.yml
  tasks:
    - name: Take the lock
      ansible.builtin.import_tasks: {root}/playbooks/tasks/run-lock.yml
    - name: Work
      ansible.builtin.command: sleep {hold}
      changed_when: false
    - name: Release the lock
      ansible.builtin.import_tasks: {root}/playbooks/tasks/run-unlock.yml
"""


def start(tmp_path, name, hold, wait, extra=()):
    playbook = tmp_path / ("%s.yml" % name)
    playbook.write_text(PLAY.format(root=ROOT, hold=hold))
    env = dict(os.environ, ANSIBLE_LIBRARY=os.path.join(ROOT, "library"),
               ANSIBLE_MODULE_UTILS=os.path.join(ROOT, "module_utils"), ANSIBLE_LOCALHOST_WARNING="False",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="False", ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    args = [PLAYBOOK_BIN, "-i", "localhost,", str(playbook), "-e",
            json.dumps({"gpuhost_run_lock_path": str(tmp_path / "run.lock"), "gpuhost_run_lock_wait": wait,
                        "ansible_python_interpreter": sys.executable})]
    return subprocess.Popen(args + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=str(tmp_path))


def wait_for_lock(tmp_path, seconds=60):
    """Until the first run has taken the lock."""
    deadline = time.time() + seconds
    while not (tmp_path / "run.lock").exists() and time.time() < deadline:
        time.sleep(0.2)


def results(proc):
    out, err = proc.communicate(timeout=300)
    doc = json.loads(out)
    tasks = dict((t["task"]["name"], t["hosts"]["localhost"]) for t in doc["plays"][0]["tasks"])
    return proc.returncode, tasks, doc["stats"]["localhost"]


@needs_ansible
def test_a_second_run_waits_for_the_first_then_goes_on(tmp_path):
    first = start(tmp_path, "first", hold=6, wait=120)
    wait_for_lock(tmp_path)
    holder = json.loads((tmp_path / "run.lock").read_text())
    assert holder["playbook"] == "test.yml" and holder["controller"]["hostname"] == socket.gethostname()
    assert holder["controller"]["pid"] == first.pid  # the ansible-playbook process itself
    second = start(tmp_path, "second", hold=0, wait=120)
    rc1, tasks1, stats1 = results(first)
    rc2, tasks2, stats2 = results(second)
    assert rc1 == 0 and rc2 == 0
    assert tasks1["Take the host's run lock"]["acquired"] is True
    assert tasks2["Take the host's run lock"]["acquired"] is False
    assert tasks2["Take the host's run lock"]["holder"]["id"] == holder["id"]
    assert tasks2["Ask the control node whether the run holding the host is still there"]["gone"] == []
    assert tasks2["Wait for the other run to release the host"]["waited"] >= 1
    assert stats1["changed"] == 0 and stats2["changed"] == 0
    assert not (tmp_path / "run.lock").exists()


@needs_ansible
def test_a_run_that_waited_long_enough_fails_naming_the_holder(tmp_path):
    first = start(tmp_path, "first", hold=20, wait=60)
    wait_for_lock(tmp_path)
    second = start(tmp_path, "second", hold=0, wait=2)
    rc2, tasks2, _ = results(second)
    first.kill()
    first.communicate()
    assert rc2 != 0
    failed = tasks2["Wait for the other run to release the host"]
    assert failed["failed"] is True
    assert "another gpuhost run holds this host: test.yml by" in failed["msg"]
    assert "pid %d" % first.pid in failed["msg"] and "Waited 2 s (gpuhost_run_lock_wait)" in failed["msg"]
    assert "Work" not in tasks2


@needs_ansible
def test_the_lock_of_a_run_that_ended_is_taken_over(tmp_path):
    # a run of this control node that was killed before it released the lock
    first = start(tmp_path, "first", hold=60, wait=60)
    wait_for_lock(tmp_path)
    time.sleep(1)
    first.kill()
    first.communicate()
    dead = json.loads((tmp_path / "run.lock").read_text())
    rc, tasks, _ = results(start(tmp_path, "second", hold=0, wait=30))
    assert rc == 0
    assert tasks["Ask the control node whether the run holding the host is still there"]["gone"] == [dead["id"]]
    waited = tasks["Wait for the other run to release the host"]
    assert waited["taken_over"]["id"] == dead["id"] and waited["waited"] < 30
    assert any("taking over the run lock of test.yml" in w for w in waited.get("warnings", []))
    assert not (tmp_path / "run.lock").exists()
