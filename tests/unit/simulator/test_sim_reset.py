"""The simulator's `nvidia-smi -r` prints what the real one prints (tests/fixtures/gpu_reset, real captures)."""
import os

from simhelpers import edit, make_state, run_smi, st

from gpu import nvsmi_reset  # noqa: E402  (tests/conftest.py serves module_utils)
from conftest import FIXTURES  # noqa: E402

RESET = os.path.join(FIXTURES, "gpu_reset")


def load(name):
    with open(os.path.join(RESET, name), encoding="utf-8") as handle:
        return handle.read()


def sim_two_a100(tmp_path):
    path = tmp_path / "s.json"
    make_state(path, models=("a100-80gb", "a100-80gb"))
    return path, [g["pci_bus_id"] for g in st.load(str(path))["gpus"]]


def as_captured(text, buses, captured_buses):
    for bus, real in zip(buses, captured_buses):
        text = text.replace(bus, real)
    return text


YANDEX_BUSES = ["00000000:8B:00.0", "00000000:8C:00.0"]


def test_simulated_reset_of_two_idle_gpus_is_yandexs_success(tmp_path):
    path, buses = sim_two_a100(tmp_path)
    out, rc = run_smi(path, "-r")
    assert rc == 0
    assert as_captured(out, buses, YANDEX_BUSES) == load("reset_535_2xA100_success_yandex-enable-mig_dedented.txt")


def test_simulated_reset_of_two_held_gpus_is_yandexs_refusal(tmp_path):
    path, buses = sim_two_a100(tmp_path)
    edit(path, lambda s: [g.update(persistence_mode=True) for g in s["gpus"]])
    out, rc = run_smi(path, "-r")
    assert rc == 255
    assert as_captured(out, buses, YANDEX_BUSES) == load("reset_535_2xA100_in-use_yandex-troubleshooting.txt")
    edit(path, lambda s: [g.update(persistence_mode=False, reset_unsupported=True) for g in s["gpus"]])
    out, rc = run_smi(path, "-r")
    assert as_captured(out, buses, YANDEX_BUSES) == load("reset_535_2xA100_not-supported_yandex-troubleshooting.txt")


def test_simulated_refusal_of_one_gpu_reads_as_the_singular(tmp_path):
    path, buses = sim_two_a100(tmp_path)
    edit(path, lambda s: s["gpus"][1].update(persistence_mode=True))
    out, rc = run_smi(path, "-r", "-i", "1")
    parsed = nvsmi_reset.parse_reset(out)
    assert rc == 255 and parsed["not_reset"] == [{"bus": buses[1], "reason": "In use by another client",
                                                   "kind": "in_use"}]
    assert parsed["in_use_count"] == 1 and "using this device" in out
