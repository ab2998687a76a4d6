"""module_utils/serving/acceptance.py: a serving acceptance run judged from real inputs - a real `vllm bench serve`
block, real dmon captures and a real clock event reasons query (tests/fixtures/vllm_bench, nvidia_smi_dmon,
nvidia_smi); the thresholds are the test's."""
from conftest import read_fixture
from gpu import nvsmi_dmon
from serving import acceptance, bench_result

FIGURES = bench_result.parse(read_fixture("vllm_bench", "serve-result_openai-chat_rate-0.2"))
PRO6000 = nvsmi_dmon.load_summary(nvsmi_dmon.dmon_series(read_fixture("nvidia_smi_dmon", "dmon-c1-s-pucm_595")))
REASONS = dict((int(row.split(",")[0]), row.split(",")[3].strip()) for row in read_fixture(
    "nvidia_smi_dmon", "query-gpu_throttle-reasons-active_595").splitlines() if row.strip())
H100 = nvsmi_dmon.load_summary(nvsmi_dmon.dmon_series(read_fixture("nvidia_smi", "017_dmon_590.48.01_H100_load")))
IDLE = nvsmi_dmon.load_summary(nvsmi_dmon.dmon_series(read_fixture("nvidia_smi_dmon", "dmon_select-pucvmet")))
MIG = nvsmi_dmon.load_summary(nvsmi_dmon.dmon_series(read_fixture("nvidia_smi", "006_dmon_590.48.01_H100-MIG")))


def test_a_busy_h100_with_no_reason_passes_and_thresholds_it_meets_hold():
    verdict = acceptance.judge(FIGURES, H100, {0: "0x0000000000000000"},
                               {"min_output_tok_s": 150, "max_p99_ttft_ms": 1000})
    assert verdict == {"status": "pass", "findings": []}


def test_the_power_capped_board_is_named_per_gpu_with_its_power_and_clocks():
    verdict = acceptance.judge(FIGURES, PRO6000, REASONS)
    assert verdict["status"] == "warn"
    slowed = [f for f in verdict["findings"] if f["code"] == "clocks_slowed"]
    assert [f["gpu"] for f in slowed] == [0, 1, 2, 3]
    assert "GPU 2: SW Power Cap under load" in slowed[2]["message"]
    assert "peak 299 W" in slowed[2]["message"] and "1192-1192 MHz" in slowed[2]["message"]


def test_thresholds_fail_the_run_naming_the_figure_and_the_limit():
    verdict = acceptance.judge(FIGURES, H100, None, {"min_output_tok_s": 250, "max_p99_ttft_ms": 900})
    assert verdict["status"] == "fail"
    messages = [f["message"] for f in verdict["findings"]]
    assert "output token throughput 200.41 tok/s is below the 250 tok/s asked" in messages
    assert "P99 time to first token 907.54 ms is above the 900 ms allowed" in messages


def test_an_idle_gpu_under_load_waited_and_a_mig_gpu_is_unknown():
    verdict = acceptance.judge(FIGURES, IDLE)
    assert [f["code"] for f in verdict["findings"]] == ["gpu_waited"]
    assert "only 0 % of the time" in verdict["findings"][0]["message"]
    verdict = acceptance.judge(FIGURES, MIG)
    assert verdict["status"] == "pass" and [f["code"] for f in verdict["findings"]] == ["util_not_reported"]


def test_failed_requests_fail_the_run():
    verdict = acceptance.judge(dict(FIGURES, failed=3), H100)
    assert verdict["status"] == "fail"
    assert verdict["findings"][0]["message"] == "3 of 53 requests failed"


def test_reason_bits():
    assert [n for n, _w in acceptance.slowdowns("0x0000000000000004")] == ["SW Power Cap"]
    assert [n for n, _w in acceptance.slowdowns(0x1 | 0x40 | 0x80)] == ["HW Thermal Slowdown", "HW Power Brake Slowdown"]
    assert acceptance.slowdowns("0x0000000000000001") == [] and acceptance.slowdowns("[N/A]") == []


def test_the_samples_straddling_the_load_are_left_out():
    """017's five H100 samples: the first and the last go (a sampler's edges), three stay."""
    series = nvsmi_dmon.dmon_series(read_fixture("nvidia_smi", "017_dmon_590.48.01_H100_load"))
    trimmed = acceptance.under_load(series)
    assert len(trimmed[0]) == 3 and trimmed[0] == series[0][1:4]
    assert acceptance.under_load({0: series[0][:2]}) == {0: series[0][:2]}
