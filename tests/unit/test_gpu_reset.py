"""nvidia-smi -r's outputs (gpu/nvsmi_reset.py) and the simulator's, against real captures (tests/fixtures/gpu_reset)."""
import os

import pytest

from gpu import nvsmi_reset
from conftest import FIXTURES

RESET = os.path.join(FIXTURES, "gpu_reset")


def load(name):
    with open(os.path.join(RESET, name), encoding="utf-8") as handle:
        return handle.read()


def test_every_capture_is_read():
    names = sorted(n for n in os.listdir(RESET) if n.endswith(".txt"))
    assert len(names) == 6
    for name in names:
        parsed = nvsmi_reset.parse_reset(load(name))
        assert parsed["reset"] or parsed["not_reset"], name


@pytest.mark.parametrize("name, buses", [
    ("reset_535_2xA100_success_yandex-enable-mig_dedented.txt", ["00000000:8B:00.0", "00000000:8C:00.0"]),
    ("gpu-reset_8gpus_success_k8s-test-infra-759.txt", ["00000000:0%d:00.0" % i for i in range(1, 9)]),
])
def test_success_lists_each_gpu_and_ends_all_done(name, buses):
    parsed = nvsmi_reset.parse_reset(load(name))
    assert parsed == {"reset": buses, "not_reset": [], "all_done": True, "in_use_count": None}


def test_in_use_names_each_gpu_and_counts_them():
    parsed = nvsmi_reset.parse_reset(load("reset_535_2xA100_in-use_yandex-troubleshooting.txt"))
    assert parsed["reset"] == [] and not parsed["all_done"]
    assert parsed["not_reset"] == [
        {"bus": "00000000:8B:00.0", "reason": "In use by another client", "kind": "in_use"},
        {"bus": "00000000:8C:00.0", "reason": "In use by another client", "kind": "in_use"}]
    assert parsed["in_use_count"] == 2


def test_not_supported_is_its_own_kind():
    parsed = nvsmi_reset.parse_reset(load("reset_535_2xA100_not-supported_yandex-troubleshooting.txt"))
    assert [(g["bus"], g["kind"]) for g in parsed["not_reset"]] == [
        ("00000000:8B:00.0", "not_supported"), ("00000000:8C:00.0", "not_supported")]
    assert parsed["in_use_count"] is None


def test_the_older_drivers_form():
    parsed = nvsmi_reset.parse_reset(load("gpu-reset_old-form_in-use_1gpu_gpu-operator-118.txt"))
    assert parsed["not_reset"] == [{"bus": "00000000:C1:00.0", "reason": "in use by another process",
                                    "kind": "in_use"}]
    assert parsed["in_use_count"] == 1


def test_inside_mig_parteds_log_line():
    parsed = nvsmi_reset.parse_reset(load("mig-parted-log_reset-in-use_1gpu_magic-castle-387.txt"))
    assert parsed["not_reset"] == [{"bus": "00000000:00:06.0", "reason": "In use by another client",
                                    "kind": "in_use"}]
    assert parsed["in_use_count"] == 1 and parsed["reset"] == []


def test_nothing_read_from_other_text():
    assert nvsmi_reset.parse_reset("") == {"reset": [], "not_reset": [], "all_done": False, "in_use_count": None}
    # A line that only looks like a refused GPU, outside the refusal's list, is not one.
    assert nvsmi_reset.parse_reset("  GPU 00000000:8B:00.0: Not Supported\n")["not_reset"] == []
