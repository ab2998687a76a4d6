"""Form detection, the paste damage real captures carry, truncation, and error texts."""
import os

import pytest

from gpu import nvsmi_parse as n
from gpu.nvsmi_common import ParseError, TruncatedInput, UnsupportedForm, _mib, pci_address, pci_ids
from gpu.nvsmi_csv import COMPUTE_APPS_FIELDS, GPU_QUERY_FIELDS, parse_compute_apps_csv, parse_query_gpu_csv
from conftest import FIXTURES

SMI = os.path.join(FIXTURES, "nvidia_smi")


def load(name):
    with open(os.path.join(SMI, name), encoding="utf-8") as handle:
        return handle.read()


@pytest.mark.parametrize("prefix, form", [
    ("001", "table"), ("015", "table"), ("047", "table"), ("051", "table"),
    ("003", "q"), ("016", "q"), ("033", "q"), ("054", "q"),
    ("019", "xml"), ("043", "xml"), ("044", "xml"),
    ("004", "csv_query_gpu"), ("024", "csv_query_gpu"), ("053", "csv_query_gpu"),
    ("005", "csv_compute_apps"),
    ("027", "list"), ("028", "list"), ("026", "version"),
    ("029", "error"), ("031", "error"), ("032", "error"),
    ("006", "dmon"), ("017", "dmon"), ("037", "dmon"), ("007", "pmon"),
])
def test_detect_form(prefix, form):
    name = next(f for f in os.listdir(SMI) if f.startswith(prefix + "_"))
    assert n.detect_form(load(name)) == form


def test_detect_nothing_in_unrelated_text():
    assert n.detect_form("hello world\nthis is not nvidia-smi\n") is None
    with pytest.raises(ParseError):
        n.facts_from_output("hello world\n")
    with pytest.raises(ParseError):
        n.facts_from_output("")


# --- paste damage ------------------------------------------------------------------------------

def test_crlf_and_ansi_colour_do_not_change_the_facts():
    text = load("002_table_590.48.01_H100-MIG_load_processes.txt")
    damaged = "\x1b[1m" + text.replace("\n", "\r\n").replace("Off |", "\x1b[32mOff\x1b[0m |")
    assert n.facts_from_output(damaged)["gpus"] == n.facts_from_output(text)["gpus"]
    assert n.facts_from_output(damaged)["processes"] == n.facts_from_output(text)["processes"]


def test_bytes_with_invalid_utf8_are_read():
    data = load("011_table_595.80_L40S_load.txt").encode().replace(b"ffmpeg", b"ff\xffmpeg", 1)
    facts = n.facts_from_output(data)
    assert facts["processes"][0]["name"] == "ff\ufffdmpeg"


def test_two_tables_appended_report_the_last():
    first = load("018_table_590.48.01_H100_idle_no-processes.txt")
    second = load("002_table_590.48.01_H100-MIG_load_processes.txt")
    facts = n.facts_from_output(first + "\n" + second)
    assert facts["samples"] == 2
    assert facts["gpus"][0]["memory_used_mib"] == 11125  # 002's value, not 018's 0
    assert len(facts["processes"]) == 3


def test_two_xml_documents_appended_report_the_last():
    first = load("023_qx_Tesla-P100.xml")
    second = load("043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml")
    facts = n.facts_from_output(first + second)
    assert facts["samples"] == 2
    assert facts["gpus"][0]["pci_device_id"] == "0x2bb4"


def test_indented_table_parses_like_an_unindented_one():
    text = load("051_table_550.90.07_2xL4_vllm-ray-pods_0MiB-processes_indented.txt")
    dedented = "\n".join(line[3:] if line.startswith("   ") else line for line in text.split("\n"))
    assert n.facts_from_output(text)["gpus"] == n.facts_from_output(dedented)["gpus"]


def test_kmd_header_of_driver_610():
    facts = n.facts_from_output(load("015_table_610.62_RTX2080S_windows-wddm_load.txt"))
    assert (facts["driver_version"], facts["cuda_driver_version"]) == ("610.62", "13.3")
    q = n.facts_from_output(load("016_q_610.62_RTX2080S_windows_idle.txt"))
    # "Driver Version : 610.62 [Deprecated; ...]" must not leak its bracket
    assert (q["driver_version"], q["cuda_driver_version"]) == ("610.62", "13.3")


def test_old_throttle_naming_maps_to_event_names():
    new = n.facts_from_output(load("016_q_610.62_RTX2080S_windows_idle.txt"))["gpus"][0]
    assert new["clocks_event_reasons_active"] == ["gpu_idle"]
    xml_old = n.facts_from_output(load("023_qx_Tesla-P100.xml"))["gpus"][0]
    xml_new = n.facts_from_output(load("022_qx_535_RTX4090.xml"))["gpus"][0]
    assert xml_old["clocks_event_reasons_active"] == xml_new["clocks_event_reasons_active"] == ["gpu_idle"]


def test_csv_throttle_columns_and_bitmask():
    header = "index, name, uuid, clocks_throttle_reasons.sw_power_cap, clocks_throttle_reasons.hw_slowdown"
    row = "0, Tesla T4, GPU-1, Active, Not Active"
    gpu = n.facts_from_output(header + "\n" + row + "\n")["gpus"][0]
    assert gpu["clocks_event_reasons_active"] == ["sw_power_cap"]
    mask = "index, name, uuid, clocks_event_reasons.active\n0, Tesla T4, GPU-1, 0x0000000000000044\n"
    assert n.facts_from_output(mask)["gpus"][0]["clocks_event_reasons_active"] == [
        "sw_power_cap", "hw_thermal_slowdown"]


# --- CSV variants --------------------------------------------------------------------------------

MODULE_ROW = ("0, NVIDIA H100 80GB HBM3, GPU-1a2b, 00000000:00:09.0, 0x233010DE, 590.48.01, Enabled, "
              "Default, 81559, 11125, 69956, [N/A], 433.78, 700.00, 53")


def test_headerless_nounits_csv_with_the_module_field_list():
    facts = n.facts_from_output(MODULE_ROW + "\n")
    gpu = facts["gpus"][0]
    assert facts["form"] == "csv_query_gpu"
    assert (gpu["memory_used_mib"], gpu["memory_total_mib"], gpu["utilization_gpu"]) == (11125, 81559, None)
    assert gpu["persistence_mode"] is True and gpu["pci_device_id"] == "0x2330"
    assert facts["driver_version"] == "590.48.01"


def test_headerless_compute_apps_with_the_module_field_list():
    text = "GPU-1a2b, 00000000:00:09.0, 21180, /root/tools/memhog, 2296\n"
    facts = n.facts_from_output(text)
    assert facts["form"] == "csv_compute_apps"
    assert [(p["pid"], p["used_mib"]) for p in facts["processes"]] == [(21180, 2296)]


def test_units_and_nounits_agree():
    units = "index, name, uuid, memory.total [MiB], power.draw [W]\n0, L4, GPU-1, 23034 MiB, 35.12 W\n"
    nounits = "index, name, uuid, memory.total [MiB], power.draw [W]\n0, L4, GPU-1, 23034, 35.12\n"
    assert n.facts_from_output(units)["gpus"] == n.facts_from_output(nounits)["gpus"]


def test_merge_processes_joins_by_bus_id():
    gpus = n.normalise(parse_query_gpu_csv(MODULE_ROW + "\n", GPU_QUERY_FIELDS))
    apps = parse_compute_apps_csv("GPU-other, 00000000:00:09.0, 7, vllm, 900\n", COMPUTE_APPS_FIELDS)
    merged = n.merge_processes(gpus, apps)
    assert merged["processes"][0]["gpu_index"] == 0


# --- truncation ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml",
    "019_qx_A100-SXM4-MIG.xml",
    "003_q_590.48.01_H100-MIG_load.txt",
    "033_q_537.13_RTX4090_persistence-on.txt",
    "001_table_570.133.20_2xH100_no-processes.txt",
    "047_table_390.25_8xGTX1080Ti_processes_no-cuda-version.txt",
])
def test_cut_in_half_is_truncated(name):
    text = load(name)
    with pytest.raises(TruncatedInput):
        n.facts_from_output(text[:len(text) // 2])


def test_csv_with_a_short_last_row_is_truncated():
    text = load("053_query-gpu_RTX2070_repeated-header-samples.csv").rstrip("\n")
    with pytest.raises(TruncatedInput):
        n.facts_from_output(text[:-30])


def test_open_processes_box_is_a_warning_not_an_error():
    facts = n.facts_from_output(load("051_table_550.90.07_2xL4_vllm-ray-pods_0MiB-processes_indented.txt"))
    assert any("not closed" in w for w in facts["warnings"])


# --- error texts -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, state", [
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure\n"
     "that the latest NVIDIA driver is installed and running.\n", "driver_not_loaded"),
    ("Failed to initialize NVML: Driver/library version mismatch\n", "version_mismatch"),
    ("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n",
     "version_mismatch"),
    ("No devices were found\n", "error"),
    ("bash: nvidia-smi: command not found\n", "no_driver"),
    ("Command 'nvidia-smi' not found, but can be installed with:\n\nsudo apt install nvidia-utils-580\n",
     "no_driver"),
    ("Failed to initialize NVML: Unknown Error\n", "error"),
    ("Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n", "error"),
])
def test_error_texts_map_to_states(text, state):
    facts = n.facts_from_output(text)
    assert facts["form"] == "error" and facts["state"] == state
    assert facts["message"]


def test_mismatch_userspace_version_comes_from_the_nvml_line():
    facts = n.facts_from_output(load("029_error_nvml-version-mismatch_570.124.txt"))
    assert facts["driver_version"] == facts["nvml_version"] == "570.124"


# --- unit helpers --------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, mib", [
    ("81559 MiB", 81559), ("81559MiB", 81559), ("81559", 81559), ("1 GiB", 1024),
    ("[N/A]", None), ("N/A", None), ("Not available in WDDM driver model", None), ("12 bananas", None),
])
def test_mib(raw, mib):
    assert _mib(raw) == mib


def test_pci_helpers():
    assert pci_ids("0x233010DE") == ("0x2330", "0x10de")
    assert pci_ids("2BB410DE") == ("0x2bb4", "0x10de")
    assert pci_ids("000000DE") == (None, None)
    assert pci_address("00000000:AB:00.0") == "0000:ab:00.0"
    assert pci_address("0000:00:03.0") == "0000:00:03.0"
    assert pci_address("garbage") is None


def test_headerless_csv_with_unknown_columns_is_refused_with_a_reason():
    with pytest.raises(UnsupportedForm) as info:
        n.facts_from_output("4242, vllm, 1234\n4243, python3, 10\n")
    assert "without a header" in str(info.value)


def test_truncated_table_name_still_gets_its_architecture():
    # the default table cuts long names: "NVIDIA RTX PRO 6000 Blac..."
    text = load("001_table_570.133.20_2xH100_no-processes.txt").replace(
        "NVIDIA H100 80GB HBM3     ", "NVIDIA RTX PRO 6000 Blac...", 1)
    gpu = n.facts_from_output(text)["gpus"][0]
    assert gpu["name"] == "NVIDIA RTX PRO 6000 Blac..."
    assert (gpu["architecture"], gpu["compute_capability"]) == ("Blackwell", "12.0")


def test_every_form_reads_a_scalar_fact_alike():
    """read_scalars (nvsmi_common.GPU_SCALARS): the -q, XML and CSV parsers convert each fact one way; a fact the
    form does not name stays as it was, and text cleaning applies only to facts without a conversion."""
    from gpu.nvsmi_common import _new_gpu, _value, read_scalars
    values = {"mem": "[81559 MiB]", "pstate": " P0 [x] ", "lim": "N/A"}
    gpu = dict(_new_gpu(0), fan_speed_pct="kept")
    places = {"memory_total_mib": ("mem",), "performance_state": ("pstate",), "power_limit_w": ("lim",)}
    read_scalars(gpu, places, lambda name: values[name], text=_value)
    assert (gpu["memory_total_mib"], gpu["performance_state"], gpu["power_limit_w"]) == (81559, "P0 [x]", None)
    assert gpu["fan_speed_pct"] == "kept"
    read_scalars(gpu, {"performance_state": ("pstate",)}, lambda name: values[name])
    assert gpu["performance_state"] == " P0 [x] "
