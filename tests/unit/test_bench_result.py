"""module_utils/serving/bench_result.py on real `vllm bench serve` / benchmark_serving.py result blocks
(tests/fixtures/vllm_bench/): the printed figures under their --save-result keys."""
import pytest

from conftest import read_fixture
from serving import bench_result

GB10 = read_fixture("vllm_bench", "serve-result_openai-chat_rate-0.2")
V9722 = read_fixture("vllm_bench", "benchmark_serving_rate-inf")
ASCEND = read_fixture("vllm_bench", "serve-result_rate-1.0_peak-rows")


def test_a_2026_block_with_failed_and_peak_rows_and_four_percentiles():
    f = bench_result.parse(GB10)
    assert (f["completed"], f["failed"], f["request_rate"], f["duration"]) == (50, 0, 0.2, 1044.40)
    assert (f["total_input_tokens"], f["total_output_tokens"]) == (55836, 209303)
    assert (f["request_throughput"], f["output_throughput"], f["total_token_throughput"]) == (0.05, 200.41, 253.87)
    assert (f["max_output_tokens_per_s"], f["max_concurrent_requests"]) == (133.00, 49.00)
    assert (f["mean_ttft_ms"], f["median_ttft_ms"], f["p50_ttft_ms"], f["p90_ttft_ms"], f["p95_ttft_ms"],
            f["p99_ttft_ms"]) == (651.77, 650.31, 650.31, 803.44, 835.59, 907.54)
    assert (f["mean_tpot_ms"], f["p99_tpot_ms"]) == (145.08, 175.09)
    assert (f["mean_itl_ms"], f["median_itl_ms"], f["p99_itl_ms"]) == (379.71, 160.95, 372.34)
    assert (f["mean_e2el_ms"], f["p99_e2el_ms"]) == (582602.37, 939497.39)


def test_a_2024_block_with_the_settings_printed_before_it_and_capitalised_total():
    f = bench_result.parse(V9722)
    assert (f["request_rate"], f["max_concurrency"], f["completed"]) == ("inf", 10, 100)
    assert (f["duration"], f["request_throughput"], f["output_throughput"], f["total_token_throughput"]) == \
        (15.90, 6.29, 46.93, 4934.95)
    assert (f["mean_ttft_ms"], f["median_ttft_ms"], f["p99_ttft_ms"]) == (1073.16, 1022.13, 1522.29)
    assert (f["p99_tpot_ms"], f["p99_itl_ms"]) == (79.29, 87.79)
    # Rows that release did not print are absent, not zero.
    assert "failed" not in f and "max_output_tokens_per_s" not in f and "mean_e2el_ms" not in f


def test_a_block_whose_pad_spaces_were_lost():
    f = bench_result.parse(ASCEND)
    assert (f["completed"], f["request_rate"], f["duration"], f["output_throughput"]) == (200, 1.00, 202.27, 126.56)
    assert (f["max_output_tokens_per_s"], f["max_concurrent_requests"], f["total_token_throughput"]) == \
        (422.00, 10.00, 323.98)
    assert (f["mean_itl_ms"], f["median_itl_ms"], f["p99_itl_ms"]) == (17.35, 17.25, 43.29)


def test_progress_lines_before_the_block_are_ignored_and_the_last_block_counts():
    f = bench_result.parse("Starting initial single prompt test run...\n100%|####| 100/100\n" + V9722 + GB10)
    assert f["completed"] == 50


@pytest.mark.parametrize("text, words", [
    ("", "no 'Serving Benchmark Result' block"),
    ("Traceback (most recent call last):\n  ...\nConnectionRefusedError: [Errno 111]", "no 'Serving Benchmark"),
    (GB10.split("-----Time per Output")[0], "no closing line"),
])
def test_no_whole_block_is_an_error_naming_it(text, words):
    with pytest.raises(bench_result.BenchResultError) as err:
        bench_result.parse(text)
    assert words in str(err.value)
