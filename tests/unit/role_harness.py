"""Run a role's or a playbook's own tasks through real ansible-playbook on localhost, one play per case, and
capture what they decided: the variables they set, the arguments they would give a module that changes
the host (a stub records them instead), where they failed.

The tests that prove Python equal to the Jinja it replaced (test_vllm_instances.py, test_rollout_plan.py,
test_persistence_choice.py) run the current task files here; tests/fixtures/jinja_before/ holds what the
same harness captured from the task files of commit 1c34c40, the last one with that Jinja (`python
tests/unit/role_harness.py [test module ...]` captures it again from git)."""
import json
import os
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "jinja_before")
BEFORE = "1c34c4068542e22ffe39db1153d137c037453021"

# A module that changes nothing and returns its arguments (Ansible has already dropped the omitted ones),
# and the facts it is given.
CAPTURE_MODULE = r'''#!/usr/bin/python
# WANT_JSON
import json, sys
with open(sys.argv[1]) as handle:
    args = json.load(handle)
args = dict((k, v) for k, v in args.items() if not k.startswith("_ansible"))
facts = args.pop("capture_facts", None)
print(json.dumps(dict(changed=False, args=args, ansible_facts=facts or {})))
'''

# systemctl unmask, on a unit directory: a unit masked by a link to /dev/null or an empty file is unmasked.
UNMASK_MODULE = r'''#!/usr/bin/python
# WANT_JSON
import json, os, sys
with open(sys.argv[1]) as handle:
    args = json.load(handle)
changed = False
if args.get("masked") is False:
    for directory in args["unit_dirs"]:
        path = os.path.join(directory, args["name"])
        if os.path.lexists(path):
            if os.path.realpath(path) == os.devnull or (os.path.isfile(path) and os.path.getsize(path) == 0):
                changed = True
                if not args.get("_ansible_check_mode"):
                    os.unlink(path)
            break
print(json.dumps(dict(changed=changed, name=args["name"])))
'''


def load_tasks(text):
    return yaml.safe_load(text) or []


def task_named(tasks, name):
    return next(t for t in tasks if t.get("name") == name)


def module_of(task):
    """The module key of a task (the one key that is not a task keyword)."""
    keywords = {"name", "vars", "loop", "loop_control", "register", "when", "failed_when", "changed_when", "no_log",
                "until", "retries", "delay", "tags", "check_mode", "delegate_to", "run_once", "become", "block",
                "rescue", "always", "notify", "listen", "environment", "args", "ignore_errors", "delegate_facts"}
    (key,) = [k for k in task if k not in keywords]
    return key


def replace_module(task, module, new_module):
    out = {}
    for key, value in task.items():
        out[new_module if key == module else key] = value
    return out


def run_cases(cases, tasks, capture, library, module_utils, vars_files=(), module_defaults=None, check=False,
              timeout=900):
    """Run `tasks` once per case, each case a host of its own (local connection) so that nothing one case sets
    is seen by another. cases: {name: {"vars": {...}, "facts": {...} or None, "files": {path in the case's directory: text or
    {"link": target}}}}; the case's variables win
    over vars_files (a role's defaults), as the role's caller's do; `case_dir` is a directory of the case's
    own. capture: {key: template} evaluated after the tasks (or after their failure). Returns {name: {key:
    value, "failed": None | {task, msg, items}}}."""
    with tempfile.TemporaryDirectory() as tmp:
        stubs = os.path.join(tmp, "stubs")
        os.makedirs(stubs)
        for name, text in (("capture_args.py", CAPTURE_MODULE), ("capture_unmask.py", UNMASK_MODULE)):
            with open(os.path.join(stubs, name), "w") as handle:
                handle.write(text)
        for name, case in cases.items():
            os.makedirs(os.path.join(tmp, "cases", name))
            for path, content in (case.get("files") or {}).items():
                path = os.path.join(tmp, "cases", name, path)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                if isinstance(content, dict):
                    os.symlink(content["link"], path)
                else:
                    with open(path, "w") as handle:
                        handle.write(content)
            with open(os.path.join(tmp, "cases", name, "vars.json"), "w") as handle:
                json.dump(dict(case.get("vars") or {}, capture_case_facts=case.get("facts")), handle)
        capture = dict(capture, failed="{{ capture_failed | default(none) }}")
        play = {
            "name": "cases", "hosts": "all", "gather_facts": False, "vars_files": list(vars_files),
            "vars": {"case_dir": os.path.join(tmp, "cases", "{{ inventory_hostname }}")},
            "module_defaults": module_defaults or {},
            "tasks": [
                {"name": "The case", "ansible.builtin.include_vars": {"file": "{{ case_dir }}/vars.json"}},
                {"name": "Facts", "capture_args": {"capture_facts": "{{ capture_case_facts }}"},
                 "when": "capture_case_facts is not none"},
                {"name": "The tasks", "block": tasks, "rescue": [
                    {"name": "Note the failure", "ansible.builtin.set_fact": {"capture_failed": {
                        "task": "{{ ansible_failed_task.name }}",
                        "msg": "{{ ansible_failed_result.msg | default('') }}",
                        "items": "{{ ansible_failed_result.results | default([]) | selectattr('failed', 'defined')"
                                 " | selectattr('failed') | map(attribute='item') | list }}"}}}]},
                {"name": "Write what the tasks left", "check_mode": False,
                 "ansible.builtin.copy": {"dest": "{{ case_dir }}/out.json", "content": "{{ capture_out | to_json }}"},
                 "vars": {"capture_out": capture}},
            ]}
        config = os.path.join(tmp, "ansible.cfg")
        with open(config, "w") as handle:
            handle.write("[defaults]\n")
        playbook = os.path.join(tmp, "play.yml")
        with open(playbook, "w") as handle:
            yaml.safe_dump([play], handle, sort_keys=False)
        env = dict(os.environ, ANSIBLE_LIBRARY="%s:%s" % (stubs, library), ANSIBLE_MODULE_UTILS=module_utils,
                   ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
                   ANSIBLE_RETRY_FILES_ENABLED="False", ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=config,
                   ANSIBLE_DEPRECATION_WARNINGS="False", ANSIBLE_FORKS="4", ANSIBLE_PIPELINING="True")
        argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", ",".join(cases) + ",",
                "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable, playbook]
        if check:
            argv.append("--check")
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, cwd=tmp)
        results = {}
        for name in cases:
            path = os.path.join(tmp, "cases", name, "out.json")
            if not os.path.exists(path):
                raise AssertionError("case %s wrote nothing:\n%s\n%s" % (name, proc.stdout[-6000:], proc.stderr[-3000:]))
            with open(path) as handle:
                results[name] = json.load(handle)
        return results


# ---------------------------------------------------------------- capture from the commit with the Jinja

def before_tree(dest):
    """The files of commit BEFORE that the captures need, under dest."""
    archive = subprocess.run(["git", "archive", BEFORE, "library", "module_utils", "roles", "playbooks", "site.yml"],
                             cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    return dest


def capture_all(only=None):
    """Capture every case of the tests (or of the test modules named in `only`) from commit BEFORE into
    tests/fixtures/jinja_before/."""
    sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.join(ROOT, "tests")]
    import conftest  # noqa: F401  (module_utils served as ansible.module_utils)
    import test_vllm_instances
    import test_rollout_plan
    import test_persistence_choice
    os.makedirs(FIXTURES, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tree = before_tree(tmp)
        for module in (test_vllm_instances, test_rollout_plan, test_persistence_choice):
            if only and module.__name__ not in only:
                continue
            for name, captured in module.capture_before(tree).items():
                with open(os.path.join(FIXTURES, name + ".json"), "w") as handle:
                    json.dump(captured, handle, indent=1, sort_keys=True)
                    handle.write("\n")


if __name__ == "__main__":
    capture_all(sys.argv[1:])
