"""site.yml's rollout plan - why a host's run disrupts it, so that it goes through in batches - is made in Python
(gpuhost_rollout, module_utils/runs/rollout.py), where the plan play made it in Jinja until commit 1c34c40.

The proof of "nothing changed": role_harness runs the plan play's own tasks (the batch settings' check, then
the disruption, the line it prints and the rollout group) through ansible-playbook on hosts whose driver run
disrupts or not and whose record holds serving containers or not, under each batch setting, and compares the
line and the group with what the same harness captured from the Jinja of 1c34c40
(tests/fixtures/jinja_before/rollout_plan.json). The batch settings themselves: test_rollout_batches.py."""
import json
import os

import pytest

from conftest import run_ansible_module

import role_harness

DRIVER = "driver 580.95.05 -> 580.105.08 (nvidia-driver-580-open), reboot"
RECORDS = {
    "none": None,
    "driver_only": {"driver": {"version": "580.95.05", "kernel_modules": "open"}},
    "no_instances": {"vllm": {"instances": {}}},
    # molecule/vllm's record: its converge's five instances, in the file's order (gpuhost_record sorts the keys)
    "serving": {"driver": {"version": "580.95.05"}, "vllm": {"instances": dict(
        (name, {"image": "local/vllm-standin:0.25.1", "port": port}) for name, port in (
            ("qwen25-3b-awq-0", 18001), ("qwen25-3b-awq-1", 18002), ("qwen25-3b-awq-2", 18003),
            ("qwen25-3b-awq-3", 18004), ("qwen3-32b-fp8", 18000)))}},
    "vllm_section_without_instances": {"vllm": {}},
}
BATCHES = {"default": {}, "two": {"gpuhost_disruption_batch": 2}, "percent": {"gpuhost_disruption_batch": "10%"}}


def rollout_inputs():
    """{batch setting: {case: {disruption, record}}} - each batch setting one run (every host of a run must
    have the same)."""
    out = {}
    for batch, settings in BATCHES.items():
        out[batch] = {}
        for record, content in RECORDS.items():
            for disruption in ("", DRIVER, "no driver plan yet: the driver sources are added by this run"):
                name = "%s_%s_%s" % (batch, record, "driver" if disruption == DRIVER else "plan" if disruption else "none")
                out[batch][name] = {"settings": settings, "disruption": disruption, "record": content}
    return out


def _plan_tasks(tree):
    """The plan play's tasks from the rollout settings to the rollout group, without the lock, the fast path and
    the driver's prediction (whose outcome each case gives as nvidia_driver_predicted_plan)."""
    with open(os.path.join(tree, "playbooks", "tasks", "rollout-settings.yml"), encoding="utf-8") as handle:
        settings = role_harness.load_tasks(handle.read())
    with open(os.path.join(tree, "playbooks", "site.yml"), encoding="utf-8") as handle:
        plan = role_harness.load_tasks(handle.read())[0]["tasks"]
    first = next(i for i, t in enumerate(plan) if t["name"] == "Predict whether the driver changes or the host reboots")
    tasks = [t for t in plan[first + 1:] if "ansible.builtin.include_role" not in t
             and "ansible.builtin.import_tasks" not in t]
    role_harness.task_named(tasks, "Say how this host goes through the rollout")["register"] = "capture_say"
    return settings + tasks


def predicted_plan(disruption):
    """The driver prediction's registered result that gives the case's disruption, as predict.yml registers it: the
    plan module's disruption (empty: nothing), or a plan that failed (a fresh host's sources: its msg)."""
    prefix = "no driver plan yet: "
    if disruption.startswith(prefix):
        return {"failed": True, "changed": False, "msg": disruption[len(prefix):]}
    return {"changed": False, "disruption": disruption}


def run_rollout(tree, inputs, record_in_file):
    """record_in_file: the record as the host's fact file (read by the module), else as ansible_local (the facts
    the play gathered, as the Jinja read it)."""
    tasks = _plan_tasks(tree)
    cases = {}
    for name, case in inputs.items():
        variables = dict(case["settings"], nvidia_driver_predicted_plan=predicted_plan(case["disruption"]))
        files = {}
        if case["record"] is not None:
            if record_in_file:
                files["gpuhost.fact"] = json.dumps(case["record"])
            else:
                variables["ansible_local"] = {"gpuhost": case["record"]}
        cases[name] = {"vars": variables, "files": files, "facts": None}
    return role_harness.run_cases(
        cases, tasks, {"message": "{{ capture_say.msg }}", "group": "{{ group_names }}"},
        os.path.join(tree, "library"), os.path.join(tree, "module_utils"),
        module_defaults={"gpuhost_rollout": {"record_path": "{{ case_dir }}/gpuhost.fact"}} if record_in_file else None)


def capture_before(tree):
    out = {}
    for inputs in rollout_inputs().values():
        for name, result in run_rollout(tree, inputs, record_in_file=False).items():
            out[name] = {"inputs": inputs[name], "outputs": result}
    return {"rollout_plan": out}


# ---------------------------------------------------------------- the plan play now, against the Jinja of 1c34c40

def _before():
    with open(os.path.join(role_harness.FIXTURES, "rollout_plan.json"), encoding="utf-8") as handle:
        return json.load(handle)


def test_each_host_goes_through_the_rollout_as_the_jinja_sent_it():
    before = _before()
    assert len(before) == len(BATCHES) * len(RECORDS) * 3
    by_batch = {}
    for name, case in before.items():
        by_batch.setdefault(name.split("_", 1)[0], {})[name] = case["inputs"]
    for inputs in by_batch.values():
        now = run_rollout(role_harness.ROOT, inputs, record_in_file=True)
        for name in inputs:
            assert now[name] == before[name]["outputs"], name
    groups = [case["outputs"]["group"] for case in before.values()]
    assert ["gpuhost_rollout_batched"] in groups and ["gpuhost_rollout_parallel"] in groups


# ---------------------------------------------------------------- the pure functions and the modules

from ansible.module_utils.runs import rollout  # noqa: E402


def test_a_host_plan_names_every_reason():
    plan = rollout.host_plan(DRIVER, ["a", "b"], "25%")
    assert plan == {"reasons": [DRIVER, "serving containers a, b"], "group": "batched",
                    "message": "rollout: in batches of 25%% (%s; serving containers a, b)" % DRIVER}
    assert rollout.host_plan("", [], 1) == {"reasons": [], "group": "parallel",
                                            "message": "rollout: in one pass (nothing disruptive)"}


@pytest.mark.parametrize("plan, disruption", [
    # no NVIDIA GPU: predict.yml's plan task skipped (as Ansible registers a skipped task)
    ({"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}, ""),
    (None, ""),
    ({"changed": False, "disruption": ""}, ""),
    ({"changed": False, "disruption": DRIVER}, DRIVER),
    ({"changed": False, "failed": True, "msg": "nvidia_driver: no package of branch 580 in the sources"},
     "no driver plan yet: nvidia_driver: no package of branch 580 in the sources"),
    ({"changed": False, "failed": True}, "no driver plan yet: unknown"),
])
def test_the_driver_prediction_becomes_the_hosts_disruption(plan, disruption):
    assert rollout.driver_disruption(plan) == disruption


@pytest.mark.parametrize("text, names", [
    (None, []), ("", []), ("not json", []), ("[]", []), ('{"vllm": null}', []), ('{"vllm": {"instances": null}}', []),
    ('{"vllm": {"instances": {"a": {}, "b": {}}}}', ["a", "b"]),
    # an older record's list of names
    ('{"vllm": {"instances": ["a"]}}', ["a"]),
])
def test_the_serving_containers_are_the_records(text, names):
    assert rollout.serving_instances(text) == names


@pytest.mark.parametrize("values, settings", [
    ({}, {"disruption_batch": 1, "serial": "100%", "max_fail_percentage": 100}),
    ({"disruption_batch": [2, "2"], "serial": ["10%", "10%"], "max_fail_percentage": [0, 0]},
     {"disruption_batch": 2, "serial": "10%", "max_fail_percentage": 0}),
    ({"max_fail_percentage": ["12.5"]}, {"disruption_batch": 1, "serial": "100%", "max_fail_percentage": "12.5"}),
])
def test_batch_settings_every_host_shares(values, settings):
    assert rollout.batch_settings(values) == settings


@pytest.mark.parametrize("values, words", [
    ({"disruption_batch": [1, 2]}, "gpuhost_disruption_batch must be a number of hosts (1, 2, ...) or a percentage "
                                   '("10%"), and the same for every host of the run; the hosts have 1, 2.'),
    ({"disruption_batch": [0]}, "the hosts have 0."),
    ({"serial": ["all"]}, "gpuhost_serial must be a number of hosts or a percentage"),
    ({"max_fail_percentage": ["ten"]}, "gpuhost_max_fail_percentage must be a percentage from 0 to 100"),
    ({"disruption_batch": [None]}, "the hosts have None."),
])
def test_batch_settings_refused_say_which_and_how(values, words):
    with pytest.raises(rollout.RolloutError) as err:
        rollout.batch_settings(values)
    assert words in str(err.value) and str(err.value).endswith("Set it once (group_vars/all or -e). Nothing was changed.")


def test_the_modules_through_ansible(tmp_path):
    record = tmp_path / "gpuhost.fact"
    record.write_text(json.dumps(RECORDS["serving"]))
    result = run_ansible_module("gpuhost_rollout", {"driver_plan": {"changed": False, "disruption": ""},
                                                    "disruption_batch": "10%", "record_path": str(record)})
    assert result["group"] == "batched" and not result["changed"]
    assert result["message"].startswith("rollout: in batches of 10% (serving containers qwen25-3b-awq-0, ")
    result = run_ansible_module("gpuhost_rollout", {"driver_plan": {"failed": True, "msg": "no sources yet"},
                                                    "record_path": str(tmp_path / "none.fact")})
    assert result["reasons"] == ["no driver plan yet: no sources yet"] and result["group"] == "batched"
    result = run_ansible_module("gpuhost_rollout", {"driver_plan": {"changed": False, "disruption": DRIVER},
                                                    "record_path": str(tmp_path / "none.fact")})
    assert result["reasons"] == [DRIVER] and result["group"] == "batched"
    result = run_ansible_module("gpuhost_rollout_settings", {"disruption_batch": [1, 2]})
    assert result["failed"] and "the hosts have 1, 2." in result["msg"]
    result = run_ansible_module("gpuhost_rollout_settings", {"serial": ["50%"]})
    assert result["settings"] == {"disruption_batch": 1, "serial": "50%", "max_fail_percentage": 100}
