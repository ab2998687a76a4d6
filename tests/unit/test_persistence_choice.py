"""Role nvidia_persistence's choice between nvidia-persistenced and `nvidia-smi -pm 1` is made in Python
(nvidia_driver_persistenced's `use`, module_utils/driver/persistenced_unit.choose), where gpus.yml made it in
Jinja until commit 1c34c40.

The proof of "nothing changed": role_harness runs the role's own gpus.yml, from the unit's reading to the end,
through ansible-playbook on every unit a host may have (Ubuntu's static unit that passes --no-persistence-mode,
Debian's, none, masked by a link or by an empty file, with or without a packaged unit under the mask) under each
method, with nvidia_persistence_unmask off and on, in a run and in --check, the real nvidia_driver_persistenced
reading unit directories of the case and a stub of `systemctl unmask`; what the tasks chose, where they stopped
and what the reading changed are compared with what the same harness captured from the Jinja of 1c34c40
(tests/fixtures/jinja_before/persistence_choice.json)."""
import itertools
import json
import os

import pytest

from conftest import FIXTURES, run_ansible_module

import role_harness
from ansible.module_utils.driver import persistenced_unit as pu

SERVICE = "nvidia-persistenced.service"
DROPIN = "etc/nvidia-persistenced.service.d/gpuhost-persistence-mode.conf"
OURS = "# Managed by gpuhost (role nvidia_persistence).\n[Service]\nExecStart=\nExecStart=/usr/bin/nvidia-persistenced\n"


def _unit(name):
    with open(os.path.join(FIXTURES, "host", "nvidia-persistenced.service_%s.txt" % name), encoding="utf-8") as handle:
        return handle.read()


def units():
    """{state: files in the case directory (etc/ over lib/, as /etc/systemd/system over /lib/systemd/system)}."""
    ubuntu, debian = _unit("ubuntu-nvidia-compute-utils"), _unit("debian")
    return {
        "ubuntu": {"lib/" + SERVICE: ubuntu},
        "ubuntu_with_our_dropin": {"lib/" + SERVICE: ubuntu, DROPIN: OURS},
        "debian": {"lib/" + SERVICE: debian},
        "debian_with_our_dropin": {"lib/" + SERVICE: debian, DROPIN: OURS},
        "none": {},
        "none_with_our_dropin": {DROPIN: OURS},
        "masked_link": {"etc/" + SERVICE: {"link": os.devnull}, "lib/" + SERVICE: ubuntu},
        "masked_link_nothing_under": {"etc/" + SERVICE: {"link": os.devnull}},
        "masked_empty": {"etc/" + SERVICE: "", "lib/" + SERVICE: debian, DROPIN: OURS},
    }


def persistence_inputs():
    out = {}
    for (state, files), method, unmask in itertools.product(sorted(units().items()), ["auto", "daemon", "nvidia-smi"],
                                                            [False, True]):
        out["%s_%s_%s" % (state, method.replace("-", "_"), "unmask" if unmask else "keep")] = {
            "files": files, "vars": {"nvidia_persistence_method": method, "nvidia_persistence_unmask": unmask}}
    return out


def _tasks(tree):
    """gpus.yml from the unit's reading to its end; the unmask through a stub of systemctl on the case's units."""
    with open(os.path.join(tree, "roles", "nvidia_persistence", "tasks", "gpus.yml"), encoding="utf-8") as handle:
        tasks = role_harness.load_tasks(handle.read())
    first = next(i for i, t in enumerate(tasks) if "nvidia_driver_persistenced" in t)
    out = []
    for task in tasks[first:]:
        if "ansible.builtin.systemd_service" in task:
            task = role_harness.replace_module(task, "ansible.builtin.systemd_service", "capture_unmask")
        out.append(task)
    return out


def run_persistence(tree, inputs, check):
    defaults = os.path.join(tree, "roles", "nvidia_persistence", "defaults", "main.yml")
    unit_dirs = ["{{ case_dir }}/etc", "{{ case_dir }}/lib"]
    cases = {name: {"files": case["files"], "facts": None,
                    "vars": dict(case["vars"], nvidia_persistence_active=True,
                                 nvidia_persistence_dropin_path="{{ case_dir }}/" + DROPIN)}
             for name, case in inputs.items()}
    return role_harness.run_cases(
        cases, _tasks(tree), {"use": "{{ nvidia_persistence_use | default(none) }}",
                              "unit_changed": "{{ nvidia_persistence_unit.changed | default(none) }}",
                              "found": "{{ nvidia_persistence_unit.found | default(none) }}"},
        os.path.join(tree, "library"), os.path.join(tree, "module_utils"), vars_files=[defaults],
        module_defaults={"nvidia_driver_persistenced": {"unit_dirs": unit_dirs},
                         "capture_unmask": {"unit_dirs": unit_dirs}}, check=check)


def capture_before(tree):
    inputs = persistence_inputs()
    out = {}
    for check in (False, True):
        for name, result in run_persistence(tree, inputs, check).items():
            out["%s_%s" % ("check" if check else "run", name)] = {"inputs": dict(inputs[name], check=check),
                                                                   "outputs": result}
    return {"persistence_choice": out}


# ---------------------------------------------------------------- the role now, against the Jinja of 1c34c40

def _before():
    with open(os.path.join(role_harness.FIXTURES, "persistence_choice.json"), encoding="utf-8") as handle:
        return json.load(handle)


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_the_role_chooses_and_stops_as_the_jinja_did(check):
    before = dict((name.split("_", 1)[1], case) for name, case in _before().items()
                  if name.startswith("check_" if check else "run_"))
    assert len(before) == len(units()) * 3 * 2
    now = run_persistence(role_harness.ROOT, dict((name, case["inputs"]) for name, case in before.items()), check)
    for name, case in before.items():
        old, new = case["outputs"], now[name]
        assert (new["use"], new["unit_changed"], new["found"]) == (old["use"], old["unit_changed"], old["found"]), name
        assert (new["failed"] or {}).get("task") == (old["failed"] or {}).get("task"), (name, new["failed"])
    uses = set(case["outputs"]["use"] for case in before.values())
    assert uses == {"daemon", "nvidia-smi", None}  # None: the host stopped at the mask first


@pytest.mark.parametrize("method, found, masked, unmask, use", [
    ("auto", True, False, False, "daemon"),
    ("daemon", True, False, False, "daemon"),
    ("nvidia-smi", True, False, False, "nvidia-smi"),
    ("auto", False, False, False, "nvidia-smi"),
    # daemon without a daemon: nvidia-smi here; the role refuses it ("Refuse the daemon method without the daemon")
    ("daemon", False, False, True, "nvidia-smi"),
    ("auto", False, True, True, "daemon"),   # unmasked by the role next
    ("daemon", False, True, True, "daemon"),
    ("auto", False, True, False, "nvidia-smi"),   # the role stops at the mask before
    ("nvidia-smi", False, True, True, "nvidia-smi"),
])
def test_choose(method, found, masked, unmask, use):
    assert pu.choose(method, found, masked, unmask) == use


def test_the_drop_in_is_removed_for_nvidia_smi_only():
    assert [pu.dropin_state(m) for m in pu.METHODS] == ["present", "present", "absent"]
    assert pu.dropin_state("nvidia-smi", "present") == "present"


def test_the_module_through_ansible_says_how(tmp_path):
    lib, etc = tmp_path / "lib", tmp_path / "etc"
    lib.mkdir()
    etc.mkdir()
    (lib / SERVICE).write_text(_unit("ubuntu-nvidia-compute-utils"))
    dropin = tmp_path / "dropin.conf"
    args = {"unit_dirs": [str(etc), str(lib)], "dropin": str(dropin)}
    result = run_ansible_module("nvidia_driver_persistenced", dict(args, method="auto"), "--check")
    assert result["use"] == "daemon" and result["changed"] and not dropin.exists()
    result = run_ansible_module("nvidia_driver_persistenced", dict(args, method="nvidia-smi"))
    assert result["use"] == "nvidia-smi" and not result["changed"] and not dropin.exists()
    (etc / SERVICE).symlink_to(os.devnull)
    result = run_ansible_module("nvidia_driver_persistenced", dict(args, method="daemon", unmask=True))
    assert (result["use"], result["masked"], result["found"]) == ("daemon", True, False)
    result = run_ansible_module("nvidia_driver_persistenced", dict(args, method="auto"))
    assert result["use"] == "nvidia-smi"
