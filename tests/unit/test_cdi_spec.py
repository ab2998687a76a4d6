"""CDI spec reading, on the spec and `cdi list` output of the real nvidia-ctk 1.20.0."""
import json
import os

import pytest

from conftest import FIXTURES
from containers.cdi_spec import CdiSpecError, parse_cdi_list, read_spec, shadowing, staleness

CTK = os.path.join(FIXTURES, "nvidia_ctk")


def read(name):
    with open(os.path.join(CTK, name), encoding="utf-8") as handle:
        return handle.read()


def test_real_spec_summary():
    spec = read_spec(read("cdi-generate_mock-A100_nvidia.yaml"))
    assert spec["kind"] == "nvidia.com/gpu"
    assert spec["cdi_version"] == "0.5.0"
    # Read from the file: devices "0", the GPU's UUID, "all"; driver 999.88.77 (go-nvml mock).
    assert spec["devices"] == ["0", "GPU-f8ddbc2d-77d0-4c5a-9594-0afcab382164", "all"]
    assert spec["driver_versions"] == ["999.88.77"]


def test_sorted_key_layout_of_older_toolkits():
    # nvidia-ctk <= 1.17 writes specs through sigs.k8s.io/yaml: keys sorted, lists at their parent's
    # indent, so a device's `name:` comes after its containerEdits. The same real spec in that layout.
    yaml = pytest.importorskip("yaml")
    original = read("cdi-generate_mock-A100_nvidia.yaml")
    older = yaml.safe_dump(yaml.safe_load(original), sort_keys=True, default_flow_style=False, indent=2)
    assert older.startswith("cdiVersion: 0.5.0\ncontainerEdits:") and "\n- containerEdits:\n" in older
    assert read_spec(older) == read_spec(original)


def test_fresh_and_stale():
    spec = read_spec(read("cdi-generate_mock-A100_nvidia.yaml"))
    assert staleness(spec, "999.88.77") == []
    reasons = staleness(spec, "580.105.08")
    assert reasons and "999.88.77" in reasons[0] and "580.105.08" in reasons[0]


def test_json_form():
    text = json.dumps({"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [{"name": "0"}],
                       "containerEdits": {"mounts": [{"hostPath": "/usr/lib/libcuda.so.580.95.05"}]}})
    assert read_spec(text)["driver_versions"] == ["580.95.05"]


@pytest.mark.parametrize("text", ["", "hello: world\n", "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"])
def test_not_a_spec(text):
    with pytest.raises(CdiSpecError):
        read_spec(text)


def test_cdi_list():
    assert parse_cdi_list(read("cdi-list_with-spec.stdout")) == [
        "nvidia.com/gpu=0", "nvidia.com/gpu=GPU-f8ddbc2d-77d0-4c5a-9594-0afcab382164", "nvidia.com/gpu=all"]
    # With no spec, the tool prints only a log line, on stderr.
    assert parse_cdi_list(read("cdi-list_no-spec.stderr")) == []


def test_var_run_cdi_shadows_etc_cdi():
    spec = read_spec(read("cdi-generate_mock-A100_nvidia.yaml"))
    specs = {"/etc/cdi/nvidia.yaml": spec, "/var/run/cdi/nvidia.yaml": spec}
    assert shadowing(specs, "/etc/cdi/nvidia.yaml") == ["/var/run/cdi/nvidia.yaml"]
    assert shadowing(specs, "/var/run/cdi/nvidia.yaml") == []
    assert shadowing({"/etc/cdi/nvidia.yaml": spec}, "/etc/cdi/nvidia.yaml") == []
