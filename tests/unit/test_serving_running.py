"""Layer `serving`, check serving_running: a serving container the record lists, or the vllm role's label marks,
that is not running. Real `docker inspect` of two such containers on Debian 12's docker 20.10.24, one running, one
stopped by `docker stop` (exit 137, restart policy unless-stopped: it stays stopped, as after a driver reboot)."""
import json
import os

from layers import serving
from layers.base import summarise
from conftest import FIXTURES

with open(os.path.join(FIXTURES, "docker", "docker-inspect_20.10.24+dfsg1_debian12_serving-running_serving-stopped.json"),
          encoding="utf-8") as _handle:
    INSPECT_TEXT = _handle.read()
BOTH = ["qwen25-3b-awq-0", "qwen3-32b-fp8"]


def inspected(text=INSPECT_TEXT, rc=0):
    return {"argv": ["docker", "inspect"] + BOTH, "rc": rc, "stdout": text, "stderr": ""}


def record(*names):
    return json.dumps({"driver": {"version": "580.95.05"}, "vllm": {"instances": dict((n, {}) for n in names)}})


def test_a_stopped_serving_container_fails_the_serving_layer_with_how_it_stopped():
    check = serving.check_serving_running(inspected(), serving.recorded_instances(record(*BOTH)), BOTH)
    assert check["status"] == "fail" and check["layer"] == "serving"
    assert check["summary"] == "serving container qwen3-32b-fp8 not running"
    assert check["data"]["stopped"] == ["qwen3-32b-fp8"] and check["data"]["running"] == ["qwen25-3b-awq-0"]
    assert "docker start qwen3-32b-fp8" in check["remedy"] and "site.yml --tags vllm" in check["remedy"]
    assert any("qwen3-32b-fp8: exited (exit code 137" in line and "restart policy unless-stopped" in line
               for line in check["evidence"]["lines"])


def test_a_recorded_instance_without_a_container_is_named():
    check = serving.check_serving_running(inspected(), ["gone"] + BOTH, BOTH)
    assert check["status"] == "fail" and check["data"]["missing"] == ["gone"]
    assert "recorded instance gone has no container" in check["summary"]


def test_running_containers_and_none_at_all_are_ok():
    running_only = json.dumps([c for c in json.loads(INSPECT_TEXT) if c["State"]["Status"] == "running"])
    check = serving.check_serving_running(inspected(running_only), ["qwen25-3b-awq-0"], ["qwen25-3b-awq-0"])
    assert check["status"] == "ok" and check["data"]["running"] == ["qwen25-3b-awq-0"]
    assert serving.check_serving_running(None, [], [])["status"] == "ok"


def test_not_required_by_default_it_is_a_warning_that_names_the_container():
    check = serving.check_serving_running(inspected(), BOTH, BOTH)
    out = summarise([check])
    assert out["failed_layer"] is None and out["layers"]["serving"]["status"] == "warn"
    assert "qwen3-32b-fp8 not running" in out["message"]
    assert summarise([check], required_layers=("serving",))["failed_layer"] == "serving"


def test_a_broken_record_reads_as_no_recorded_instance():
    assert serving.recorded_instances("{not json") == [] and serving.recorded_instances(None) == []
    assert serving.recorded_instances(record("b", "a")) == ["a", "b"]
