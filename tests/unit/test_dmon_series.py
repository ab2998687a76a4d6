"""nvsmi_dmon.dmon_series / load_summary: what a load run's `nvidia-smi dmon` samples say per GPU, on real captures
(expected figures read off the captures)."""
import pytest

from conftest import read_fixture
from gpu import nvsmi_dmon
from gpu.nvsmi_common import TruncatedInput

H100 = read_fixture("nvidia_smi", "017_dmon_590.48.01_H100_load")
MIG = read_fixture("nvidia_smi", "006_dmon_590.48.01_H100-MIG_load")
OLD = read_fixture("nvidia_smi", "037_dmon_extended-columns")
PRO6000 = read_fixture("nvidia_smi_dmon", "dmon-c1-s-pucm_595.91.07")
IDLE_DT = read_fixture("nvidia_smi_dmon", "dmon_select-pucvmet_options-DT")


def test_an_h100_under_load():
    (h100,) = nvsmi_dmon.load_summary(nvsmi_dmon.dmon_series(H100)).values()
    assert h100["samples"] == 5
    assert (h100["util_mean"], h100["util_min"], h100["memory_activity_mean"]) == (100, 100, 9.4)
    assert (h100["power_max_w"], h100["temperature_max_c"]) == (636, 65)
    assert (h100["clock_min_mhz"], h100["clock_max_mhz"]) == (1980, 1980)
    # -s puc has no violation or framebuffer columns: unknown, not zero.
    assert h100["power_violation_max"] is None and h100["thermal_violation"] is None
    assert h100["framebuffer_max_mib"] is None


def test_four_gpus_at_their_power_cap_one_sample_each():
    """The 595 host's GPUs 2 and 3 drew 299 W of a 300 W limit with SW Power Cap active (its query capture):
    their graphics clocks sat at 1192/1200 MHz against 1897/2017 on GPUs 0 and 1."""
    summary = nvsmi_dmon.load_summary(nvsmi_dmon.dmon_series(PRO6000))
    assert sorted(summary) == [0, 1, 2, 3]
    assert [summary[i]["clock_min_mhz"] for i in range(4)] == [1897, 2017, 1192, 1200]
    assert [summary[i]["power_max_w"] for i in range(4)] == [294, 292, 299, 299]
    assert [summary[i]["util_mean"] for i in range(4)] == [98, 99, 100, 100]
    assert [summary[i]["framebuffer_max_mib"] for i in range(4)] == [90538, 90536, 48243, 48209]
    # GDDR boards report no memory temperature ("-"); gtemp is the GPU's.
    assert summary[0]["temperature_max_c"] == 81


def test_mig_reports_no_utilisation():
    (gpu,) = nvsmi_dmon.load_summary(nvsmi_dmon.dmon_series(MIG)).values()
    assert gpu["util_mean"] is None and gpu["memory_activity_mean"] is None
    assert gpu["power_max_w"] == 440 and gpu["clock_min_mhz"] == 1980


def test_violations_in_the_extended_columns():
    (gpu,) = nvsmi_dmon.load_summary(nvsmi_dmon.dmon_series(OLD)).values()
    assert gpu["power_violation_max"] == 100 and gpu["thermal_violation"] is False
    assert gpu["temperature_max_c"] == 59     # an older driver's single `temp` column
    assert gpu["framebuffer_max_mib"] == 145


def test_date_and_time_columns_and_a_line_cut_by_ctrl_c():
    series = nvsmi_dmon.dmon_series(IDLE_DT)
    rows = series[0]
    assert rows[0]["date"] == "20260816" and rows[0]["time"] == "09:22:34"
    assert all(r["txpci"] != "^C" for r in rows)
    summary = nvsmi_dmon.load_summary(series)[0]
    assert (summary["util_mean"], summary["power_max_w"], summary["clock_max_mhz"]) == (0, 6, 180)
    assert (summary["power_violation_max"], summary["thermal_violation"]) == (0, False)


def test_no_sample_is_truncated_input():
    with pytest.raises(TruncatedInput):
        nvsmi_dmon.dmon_series(H100.split("\n")[0] + "\n" + H100.split("\n")[1] + "\n")
