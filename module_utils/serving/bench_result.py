# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""`vllm bench serve`'s printed result (and `benchmarks/benchmark_serving.py`'s before it), read into the keys of its
`--save-result` JSON, so that a serving acceptance run reports figures a user can set beside their own runs.

    figures = parse(text)    # {"request_throughput": 6.29, "p99_ttft_ms": 1522.29, ..., "max_concurrency": 10}

The block (vLLM `vllm/benchmarks/serve.py`, function `benchmark`): a "Serving Benchmark Result" header of `=`, rows
`"{:<40} {:<10}"` (pasted captures may lose the pad spaces), one section per metric in `--percentile-metrics` with
`Mean`, `Median` and a `P<p>` row per `--metric-percentiles` value, a footer of 50 `=`. Which rows appear depends on
the release and the flags (`Failed requests` from late 2025, the `Peak` rows from mid 2025, `Total Token throughput`
capitalised before 2025): a row that is absent is absent from the result, never a zero. Real blocks:
tests/fixtures/vllm_bench/ (docs/research/serving-acceptance.md 1a/1b for the key names).

Pure stdlib, no Ansible imports.
"""
import re

HEADER = re.compile(r"^=+ Serving Benchmark Result =+\s*$")
FOOTER = re.compile(r"^={50}\s*$")
ROW = re.compile(r"^(?P<label>[^:]+?):\s+(?P<value>\S+)\s*$")

# Printed label -> the JSON key (serve.py's result dict).
ROWS = {
    "successful requests": "completed",
    "failed requests": "failed",
    "benchmark duration (s)": "duration",
    "total input tokens": "total_input_tokens",
    "total generated tokens": "total_output_tokens",
    "request throughput (req/s)": "request_throughput",
    "request goodput (req/s)": "request_goodput",
    "output token throughput (tok/s)": "output_throughput",
    "peak output token throughput (tok/s)": "max_output_tokens_per_s",
    "peak concurrent requests": "max_concurrent_requests",
    "total token throughput (tok/s)": "total_token_throughput",
    "request rate configured (rps)": "request_rate",
    "maximum request concurrency": "max_concurrency",
    "traffic request rate": "request_rate",
}
# The metric's short name in a percentile row ("P99 TTFT (ms)") -> its key part (p99_ttft_ms).
METRICS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2el"}
STAT = re.compile(r"^(?P<stat>mean|median|std|p(?P<p>\d+(?:\.\d+)?))\s+(?P<metric>[A-Za-z0-9]+)\s+\(ms\)$", re.I)


class BenchResultError(ValueError):
    pass


def _number(text):
    if text in ("inf", "None"):
        return text if text == "inf" else None
    try:
        return int(text)
    except ValueError:
        return float(text)


def _key(label):
    name = label.strip().lower()
    if name in ROWS:
        return ROWS[name]
    match = STAT.match(label.strip())
    if not match or match.group("metric").lower() not in METRICS:
        return None
    stat = match.group("stat").lower()
    if match.group("p"):
        percent = float(match.group("p"))
        stat = "p%s" % (int(percent) if percent.is_integer() else match.group("p"))
    return "%s_%s_ms" % (stat, METRICS[match.group("metric").lower()])


def parse(text):
    """The figures of the last result block in `text` (a run's whole output may hold progress lines and the settings
    printed before the block), by their --save-result key; BenchResultError when there is no whole block."""
    lines = (text or "").replace("\r\n", "\n").split("\n")
    starts = [i for i, line in enumerate(lines) if HEADER.match(line)]
    if not starts:
        raise BenchResultError("no 'Serving Benchmark Result' block in the output of vllm bench serve")
    start = starts[-1]
    end = next((i for i in range(start + 1, len(lines)) if FOOTER.match(lines[i])), None)
    if end is None:
        raise BenchResultError("the 'Serving Benchmark Result' block has no closing line (the run was cut short?)")
    figures = {}
    # The settings the run printed just before the block (benchmark_serving.py: rate and concurrency).
    for line in lines[max(0, start - 4):start] + lines[start + 1:end]:
        match = ROW.match(line)
        key = _key(match.group("label")) if match else None
        if key:
            try:
                figures[key] = _number(match.group("value"))
            except ValueError:
                raise BenchResultError("vllm bench serve printed %r, which is not a number" % line.strip())
    if "completed" not in figures:
        raise BenchResultError("the result block has no 'Successful requests' row")
    return figures
