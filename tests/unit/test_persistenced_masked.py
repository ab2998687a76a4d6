"""A masked nvidia-persistenced is the operator's: nvidia_driver_persistenced reports it and changes nothing
(a masked unit used to read as "needs no drop-in", so the module deleted gpuhost's own drop-in before the role
stopped), and role nvidia_persistence stops naming the layer and the fix."""
import os
import sys

import jinja2
import pytest
import yaml

import nvidia_driver_persistenced as module
from conftest import FIXTURES, ROOT, run_ansible_module

ANSIBLE = os.path.join(os.path.dirname(sys.executable), "ansible")
OURS = "# Managed by gpuhost (role nvidia_persistence).\n[Service]\nExecStart=\nExecStart=/usr/bin/nvidia-persistenced\n"


def host(tmp_path, mask):
    """/etc (with the mask, and our drop-in from an earlier run) over /lib (Ubuntu's packaged unit)."""
    etc, lib = tmp_path / "etc", tmp_path / "lib"
    lib.mkdir()
    with open(os.path.join(FIXTURES, "host", "nvidia-persistenced.service_ubuntu-nvidia-compute-utils.txt"),
              encoding="utf-8") as handle:
        (lib / "nvidia-persistenced.service").write_text(handle.read())
    (etc / "nvidia-persistenced.service.d").mkdir(parents=True)
    dropin = etc / "nvidia-persistenced.service.d" / "gpuhost-persistence-mode.conf"
    dropin.write_text(OURS)
    if mask == "link":
        (etc / "nvidia-persistenced.service").symlink_to(os.devnull)
    elif mask == "empty":
        (etc / "nvidia-persistenced.service").write_text("")
    return [str(etc), str(lib)], dropin


@pytest.mark.parametrize("mask", ["link", "empty"])
@pytest.mark.parametrize("state", ["present", "absent"])
def test_a_masked_unit_leaves_the_drop_in_alone(tmp_path, mask, state):
    unit_dirs, _ = host(tmp_path, mask)
    result, wanted = module.plan("nvidia-persistenced.service", unit_dirs, state)
    assert wanted is None
    assert result == {"changed": False, "found": False, "masked": True,
                      "mask_path": os.path.join(unit_dirs[0], "nvidia-persistenced.service")}


def test_an_unmasked_unit_still_gets_its_drop_in(tmp_path):
    unit_dirs, _ = host(tmp_path, None)
    result, wanted = module.plan("nvidia-persistenced.service", unit_dirs, "present")
    assert result["found"] is True and result["masked"] is False and "mask_path" not in result
    assert result["unit_path"] == os.path.join(unit_dirs[1], "nvidia-persistenced.service")
    assert wanted.startswith("# Managed by gpuhost") and "--no-persistence-mode" not in wanted.split("[Service]")[1]
    assert module.plan("nvidia-persistenced.service", unit_dirs, "absent")[1] == ""


@pytest.mark.skipif(not os.path.exists(ANSIBLE), reason="ansible not installed in this venv")
def test_the_module_run_by_ansible_keeps_our_drop_in_on_a_masked_unit(tmp_path):
    unit_dirs, dropin = host(tmp_path, "link")
    for state in ("present", "absent"):
        result = run_ansible_module("nvidia_driver_persistenced",
                                    {"unit_dirs": unit_dirs, "dropin": str(dropin), "state": state}, "--diff")
        assert result["changed"] is False and result["masked"] is True and "diff" not in result, result
        assert dropin.read_text() == OURS


def _task(tasks, name):
    return next(i for i, task in enumerate(tasks) if task.get("name") == name)


def test_the_role_stops_at_a_masked_unit_naming_the_layer_and_the_fix():
    with open(os.path.join(ROOT, "roles", "nvidia_persistence", "tasks", "gpus.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    read = _task(tasks, "Fix the packaged nvidia-persistenced unit where it leaves persistence mode off")
    stop = _task(tasks, "Stop at a masked nvidia-persistenced (the operator masked it)")
    unmask = _task(tasks, "Unmask nvidia-persistenced (nvidia_persistence_unmask)")
    assert read < stop < unmask
    assert "nvidia_persistence_unit.masked | default(false)" in tasks[stop]["when"]
    msg = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(
        tasks[stop]["ansible.builtin.fail"]["msg"]).render(
        inventory_hostname="gpu1", nvidia_persistence_service="nvidia-persistenced.service",
        nvidia_persistence_unit={"masked": True, "mask_path": "/etc/systemd/system/nvidia-persistenced.service"})
    assert msg.startswith("persistence layer (nvidia_persistence) on gpu1: nvidia-persistenced.service is masked")
    assert "`systemctl unmask nvidia-persistenced.service`" in msg
    assert "(/etc/systemd/system/nvidia-persistenced.service)" in msg and "changed nothing" in msg
