"""The rollout's batch settings reach the batched plays from the inventory, as operators set them.

Play keywords (serial, max_fail_percentage) see play and extra vars but not inventory variables, so
site.yml's and drift.yml's first play checks every host's settings (gpuhost_rollout_settings) and keeps the
run's on localhost, where the batched plays read them. These tests load the real playbooks with Ansible's
own loader and cut the hosts into batches the way ansible-playbook does (PlaybookExecutor), with the rollout
groups filled as the plan plays' group_by would fill them and the settings kept as their check keeps them."""
import os
import textwrap

import pytest
from ansible import context
from ansible.executor.playbook_executor import PlaybookExecutor
from ansible.inventory.manager import InventoryManager
from ansible.module_utils.common.collections import ImmutableDict
from ansible.parsing.dataloader import DataLoader
from ansible.playbook import Playbook
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar
from ansible.vars.hostvars import HostVars
from ansible.vars.manager import VariableManager

from runs import rollout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOSTS = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
GROUPS = ["gpu_hosts", "gpuhost_rollout_batched", "gpuhost_rollout_parallel", "gpuhost_drift_repair"]


def batches(tmp_path, playbook, group_vars, extra_vars=None):
    """{play name: [[host, ...] per batch]} for the plays of `playbook` that have hosts."""
    inventory_file = tmp_path / "hosts.yml"
    children = "".join("    %s:\n      hosts: {%s}\n" % (g, ", ".join("%s: {}" % h for h in HOSTS)) for g in GROUPS)
    # The settings as group variables of `all`, as inventory/group_vars files give them.
    settings = "".join("    %s\n" % line for line in textwrap.dedent(group_vars).splitlines())
    inventory_file.write_text("all:\n  vars:\n%s  children:\n%s" % (settings, children))
    context.CLIARGS = ImmutableDict(connection="local", forks=5, start_at_task=None, syntax=False,
                                    listhosts=False, listtasks=False, listtags=False)
    init_plugin_loader()
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(inventory_file)])
    variables = VariableManager(loader=loader, inventory=inventory)
    variables._extra_vars = dict(extra_vars or {})
    # As the task queue manager does before each play: the `hostvars` the play keywords may read.
    hostvars = HostVars(inventory=inventory, variable_manager=variables, loader=loader)
    # As the first play's check keeps them (playbooks/tasks/rollout-settings.yml): every host's values.
    given = dict((setting, [hostvars[h].get(variable, default) for h in HOSTS])
                 for setting, variable, default, _pattern, _means in rollout.SETTINGS)
    variables.set_nonpersistent_facts("localhost", {"gpuhost_rollout_batches": rollout.batch_settings(given)})
    path = os.path.join(ROOT, playbook)
    executor = PlaybookExecutor(playbooks=[path], inventory=inventory, variable_manager=variables,
                                loader=loader, passwords={})
    found = {}
    for play in Playbook.load(path, variable_manager=variables, loader=loader).get_plays():
        play.post_validate(Templar(loader=loader, variables=variables.get_vars(play=play)))
        found.setdefault(play.get_name(), []).append(
            [[h.name for h in batch] for batch in executor._get_serialized_batches(play)])
    return found


@pytest.mark.parametrize("setting, expected", [
    ("gpuhost_disruption_batch: 2", [["gpu-a", "gpu-b"], ["gpu-c", "gpu-d"]]),
    ("gpuhost_disruption_batch: 50%", [["gpu-a", "gpu-b"], ["gpu-c", "gpu-d"]]),
    ("gpuhost_disruption_batch: 100%", [HOSTS]),
    ("gpuhost_unrelated: 1", [[h] for h in HOSTS]),
])
def test_site_batches_follow_the_inventory(tmp_path, setting, expected):
    plays = batches(tmp_path, "site.yml", setting)
    # site-layers.yml's play, imported once per rollout group: the parallel group first, then the batched.
    parallel, batched = plays["Provision GPU serving hosts"]
    assert parallel == [HOSTS]
    assert batched == expected


def test_site_one_pass_settings_follow_the_inventory(tmp_path):
    plays = batches(tmp_path, "site.yml", "gpuhost_serial: 3\ngpuhost_disruption_batch: 4\n")
    parallel, batched = plays["Provision GPU serving hosts"]
    assert parallel == [HOSTS[:3], HOSTS[3:]]
    assert batched == [HOSTS]


def test_extra_vars_win_over_the_inventory(tmp_path):
    plays = batches(tmp_path, "site.yml", "gpuhost_disruption_batch: 100%", {"gpuhost_disruption_batch": 1})
    assert plays["Provision GPU serving hosts"][1] == [[h] for h in HOSTS]


@pytest.mark.parametrize("setting, expected", [
    ("gpuhost_disruption_batch: 3", [HOSTS[:3], HOSTS[3:]]),
    ("gpuhost_unrelated: 1", [[h] for h in HOSTS]),
])
def test_drift_repair_batches_follow_the_inventory(tmp_path, setting, expected):
    plays = batches(tmp_path, "playbooks/drift.yml", setting)
    assert plays["Repair drift, batch after batch"] == [expected]


def run_settings_check(tmp_path, host_vars):
    """ansible-playbook over local hosts with the given per-host variables, running the settings check."""
    import json
    import subprocess
    import sys
    hosts = "".join("    %s: {ansible_connection: local, ansible_python_interpreter: %s%s}\n"
                    % (name, sys.executable, "".join(", %s: %s" % kv for kv in values.items()))
                    for name, values in host_vars.items())
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n" + hosts)
    (tmp_path / "play.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.import_tasks: %s/playbooks/tasks/rollout-settings.yml\n" % ROOT)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.json")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                           str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return proc.returncode, json.loads(proc.stdout)


def test_hosts_that_disagree_on_the_batch_are_refused_before_anything(tmp_path):
    rc, out = run_settings_check(tmp_path, {"gpu-a": {"gpuhost_disruption_batch": 1},
                                            "gpu-b": {"gpuhost_disruption_batch": 2}})
    assert rc != 0
    assert set(out["stats"]) == {"gpu-a", "gpu-b"}
    assert all(stats["failures"] for stats in out["stats"].values())
    messages = [result.get("msg", "") for task in out["plays"][0]["tasks"] for result in task["hosts"].values()]
    assert any("gpuhost_disruption_batch must be" in m and "the hosts have 1, 2." in m for m in messages)


@pytest.mark.parametrize("values", [{"gpuhost_disruption_batch": "0"}, {"gpuhost_serial": "all"},
                                    {"gpuhost_max_fail_percentage": "ten"}])
def test_a_malformed_setting_is_refused(tmp_path, values):
    rc, out = run_settings_check(tmp_path, {"gpu-a": values, "gpu-b": values})
    assert rc != 0
    assert all(stats["failures"] for stats in out["stats"].values())


def test_settings_every_host_shares_pass(tmp_path):
    values = {"gpuhost_disruption_batch": "25%", "gpuhost_serial": 10, "gpuhost_max_fail_percentage": 0}
    rc, out = run_settings_check(tmp_path, {"gpu-a": values, "gpu-b": values})
    assert rc == 0, out["stats"]
