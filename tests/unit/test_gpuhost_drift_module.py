"""The gpuhost_drift module run by real ansible on local files: it reads the record file itself when no
record is passed (drift.yml's check gathers no facts)."""
import json
import os

import pytest

from conftest import ANSIBLE, run_ansible_module

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE), reason="ansible not installed in this venv")

LAYERS = ("driver", "persistence", "docker", "toolkit", "runtime_config", "cdi", "container", "health")
# A live stack as gpu_stack_check returns it: every layer ok, 580.105.08 loaded, the CDI spec fine.
STACK = {"driver_version": "580.105.08", "gpu_state": "ok",
         "layers": {name: {"status": "ok", "summary": "%s works" % name} for name in LAYERS},
         "checks": [{"name": "cdi_spec", "status": "ok", "summary": "fresh"}]}


def run_module(args, *flags):
    return run_ansible_module("gpuhost_drift", args, *flags)


def test_reads_the_record_file_when_no_record_is_given(tmp_path):
    record = tmp_path / "gpuhost.fact"
    # No packages recorded, so dpkg is not asked; the driver converged was 580.95.05.
    record.write_text(json.dumps({"driver": {"version": "580.95.05"}, "cdi": {"driver_version": "580.95.05"}}))
    res = run_module({"stack": STACK, "record_path": str(record)}, "--check")
    assert res.get("failed") is not True, res
    assert res["changed"] is False
    assert res["recorded_driver_version"] == "580.95.05"
    codes = [f["code"] for layer in res["layers"].values() for f in layer["findings"]]
    assert "driver_changed" in codes and "cdi_stale" in codes


def test_a_given_record_wins_over_the_file(tmp_path):
    record = tmp_path / "gpuhost.fact"
    record.write_text(json.dumps({"driver": {"version": "580.95.05"}}))
    res = run_module({"stack": STACK, "record_path": str(record), "record": {"driver": {"version": "580.105.08"}}})
    assert res["recorded_driver_version"] == "580.105.08"
    assert res["drifted"] is False


def test_missing_file_is_an_empty_record_and_a_malformed_one_fails_naming_it(tmp_path):
    missing = run_module({"stack": STACK, "record_path": str(tmp_path / "none.fact")})
    assert missing.get("failed") is not True, missing
    assert missing["recorded_driver_version"] is None and missing["drifted"] is False
    bad = tmp_path / "gpuhost.fact"
    bad.write_text('{"driver": ')
    res = run_module({"stack": STACK, "record_path": str(bad)})
    assert res.get("failed") is True
    assert str(bad) in res["msg"] and "site.yml" in res["msg"]
    assert bad.read_text() == '{"driver": '
