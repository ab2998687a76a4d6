"""gpuhost_record through real Ansible: a section's keys merged in, entries removed by name (the vllm role's
absent.yml drops removed serving containers this way), the operator's other sections kept, check mode writing
nothing, and a file that is not a JSON object left untouched."""
import json

from conftest import run_ansible_module

RECORD = {"driver": {"version": "580.95.05"},
          "vllm": {"instances": {"qwen3-32b-fp8": {"port": 18000}, "qwen25-3b-awq-0": {"port": 18001}}}}


def _record(tmp_path, content):
    path = tmp_path / "gpuhost.fact"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_removed_instances_leave_the_record_and_the_rest_stays(tmp_path):
    path = _record(tmp_path, RECORD)
    result = run_ansible_module("gpuhost_record", {"section": "vllm", "path": str(path),
                                                   "remove": {"instances": ["qwen3-32b-fp8", "never-deployed"]}})
    assert result["changed"]
    assert json.loads(path.read_text()) == {"driver": {"version": "580.95.05"},
                                            "vllm": {"instances": {"qwen25-3b-awq-0": {"port": 18001}}}}
    again = run_ansible_module("gpuhost_record", {"section": "vllm", "path": str(path),
                                                  "remove": {"instances": ["qwen3-32b-fp8"]}})
    assert not again["changed"]


def test_removing_from_a_section_without_that_object_changes_nothing(tmp_path):
    path = _record(tmp_path, {"driver": {"version": "580.95.05"}})
    result = run_ansible_module("gpuhost_record", {"section": "vllm", "path": str(path),
                                                   "remove": {"instances": ["a"]}})
    assert not result["changed"] and "instances" not in json.dumps(json.loads(path.read_text()))


def test_check_mode_reports_the_change_and_writes_nothing(tmp_path):
    path = _record(tmp_path, RECORD)
    before = path.read_text()
    result = run_ansible_module("gpuhost_record", {"section": "vllm", "path": str(path),
                                                   "remove": {"instances": ["qwen25-3b-awq-0"]}}, "--check")
    assert result["changed"] and path.read_text() == before


def test_data_merges_into_the_section(tmp_path):
    path = _record(tmp_path, RECORD)
    run_ansible_module("gpuhost_record", {"section": "driver", "path": str(path),
                                          "data": {"kernel_modules": "open"}})
    assert json.loads(path.read_text())["driver"] == {"version": "580.95.05", "kernel_modules": "open"}


def test_a_record_that_is_not_json_is_left_untouched(tmp_path):
    path = _record(tmp_path, "{not json")
    result = run_ansible_module("gpuhost_record", {"section": "vllm", "path": str(path),
                                                   "remove": {"instances": ["a"]}})
    assert result["failed"] and "left untouched" in result["msg"] and path.read_text() == "{not json"
