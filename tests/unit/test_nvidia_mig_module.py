"""library/nvidia_mig.py through real ansible (one task on localhost) against the simulated nvidia-smi on PATH:
check mode changes nothing, --diff shows one line per GPU, a refusal fails the task with the layer and the fix,
a second run changes nothing."""
import os
import sys

import pytest

from conftest import ROOT, run_ansible_module

sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "simulator"))
from simhelpers import BIN, make_state, run_smi  # noqa: E402

TWO = {"layout": {"0": ["3g.40gb", "3g.40gb"]}}


@pytest.fixture
def host(tmp_path, monkeypatch):
    state = tmp_path / "state.json"
    make_state(state, models=("h100",))
    monkeypatch.setenv("GPUSIM_STATE", str(state))
    monkeypatch.setenv("PATH", BIN + os.pathsep + os.environ.get("PATH", ""))
    return state


def lgi(state):
    out, rc = run_smi(state, "mig", "-lgi")
    return [] if rc else [line for line in out.splitlines() if " MIG " in line]


def test_check_mode_and_diff_change_nothing(host):
    before = host.read_text()
    res = run_ansible_module("nvidia_mig", TWO, "--check", "--diff")
    assert res["changed"] is True and not res.get("failed"), res
    assert res["commands"] == ["nvidia-smi -i 0 -mig 1"]
    assert res["diff"] == {"before": "GPU 0: MIG disabled\n", "after": "GPU 0: MIG enabled: 3g.40gb, 3g.40gb\n"}
    assert host.read_text() == before


def test_apply_then_nothing_to_do(host):
    res = run_ansible_module("nvidia_mig", TWO)
    assert res["changed"] is True and not res.get("failed"), res
    assert len(lgi(host)) == 2 and res["after"] == {"0": "MIG enabled: 3g.40gb, 3g.40gb"}
    again = run_ansible_module("nvidia_mig", TWO)
    assert again["changed"] is False and again["commands"] == []


def test_a_refusal_fails_the_task_naming_the_layer_and_the_profiles(host):
    run_smi(host, "-mig", "1")
    before = host.read_text()
    res = run_ansible_module("nvidia_mig", {"layout": {"0": ["3g.20gb"]}})
    assert res["failed"] is True and res["changed"] is False
    assert res["msg"].startswith("MIG layer (nvidia_mig)") and "7g.80gb" in res["msg"]
    assert host.read_text() == before
