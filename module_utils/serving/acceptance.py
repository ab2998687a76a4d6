# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A serving acceptance run judged (issue 40 item 3): `vllm bench serve`'s figures (bench_result.parse), what the
instance's GPUs did meanwhile (nvsmi_dmon.load_summary) and their clock event reasons
(`--query-gpu=index,clocks_event_reasons.active`), against the operator's optional thresholds.

    verdict = judge(figures, load, reasons={0: 0x4}, thresholds={"min_output_tok_s": 500})

What can and cannot be read (docs/research/sm-activity.md): dmon's `sm` column is NVML's utilization.gpu, the share
of time a kernel ran, not how many SMs it filled, so a GPU-Util well below 100 % under load says the GPU waited for
work (the load's concurrency, or the CPU side: scheduler, tokenizer), and under-filled kernels cannot be told from it
(that needs GPM's SM activity on Hopper and later, or DCGM's profiling fields). A clock event reason active under load
(SW Power Cap, a slowdown) is named with the GPU's peak power and temperature and its clock range; SW Power Cap
alone at idle is normal, so reasons are read while the load runs.

Pure stdlib, no Ansible imports.
"""
# NVML's clock event reason bits (nvml.h / dcgm_nvml.h: nvmlClocksEventReason*), the ones that slow a busy GPU.
SLOWDOWNS = (
    (0x4, "SW Power Cap", "the board is at its power limit: clocks drop to stay under it"),
    (0x8, "HW Slowdown", "the hardware halved its clocks or more (power brake, or over temperature)"),
    (0x20, "SW Thermal Slowdown", "the driver lowered clocks to keep the GPU or its memory under its temperature"),
    (0x40, "HW Thermal Slowdown", "the GPU is over its temperature limit: clocks cut hard"),
    (0x80, "HW Power Brake Slowdown", "an external power brake (the chassis' power supply) cut the clocks"),
)
# Below this mean GPU-Util under load, the GPU waited for work rather than ran it.
IDLE_UNDER_LOAD_PCT = 50
THRESHOLDS = {
    "min_output_tok_s": ("output_throughput", "below", "output token throughput %s tok/s is below the %s tok/s asked"),
    "max_p99_ttft_ms": ("p99_ttft_ms", "above", "P99 time to first token %s ms is above the %s ms allowed"),
}


def _n(value):
    """A figure as people write it: 299, 9.4; '?' for none."""
    if value is None:
        return "?"
    return str(int(value)) if float(value).is_integer() else str(value)


def under_load(series):
    """dmon's series without each GPU's first and last sample where it has more than two: those straddle the start
    and the end of the load (a sampler started before the first request and stopped after the last reads an idle
    GPU there), which would pull a short run's GPU-Util down."""
    return dict((index, samples[1:-1] if len(samples) > 2 else samples) for index, samples in series.items())


def slowdowns(mask):
    """[(name, why)] of the slowdown bits set in a clock event reasons mask (int, or nvidia-smi's hex text)."""
    if isinstance(mask, str):
        try:
            mask = int(mask.strip(), 16)
        except ValueError:
            return []
    return [(name, why) for bit, name, why in SLOWDOWNS if (mask or 0) & bit]


def _finding(code, severity, message, gpu=None):
    out = {"code": code, "severity": severity, "message": message}
    if gpu is not None:
        out["gpu"] = gpu
    return out


def _requests(figures):
    findings = []
    completed, failed = figures.get("completed") or 0, figures.get("failed") or 0
    if not completed:
        findings.append(_finding("no_request_completed", "fail", "no request of the load completed"))
    elif failed:
        findings.append(_finding("requests_failed", "fail", "%d of %d requests failed" % (failed, failed + completed)))
    return findings


def _thresholds(figures, thresholds):
    findings = []
    for name, limit in sorted((thresholds or {}).items()):
        if limit is None or name not in THRESHOLDS:
            continue
        key, side, text = THRESHOLDS[name]
        value = figures.get(key)
        if value is None:
            findings.append(_finding("figure_missing", "fail", "%s is set but the run reported no %s" % (name, key)))
        elif (value < limit) if side == "below" else (value > limit):
            findings.append(_finding(name, "fail", text % (value, limit)))
    return findings


def _gpu(index, load, mask):
    findings = []
    util = load.get("util_mean")
    if util is None:
        findings.append(_finding("util_not_reported", "info", "GPU %s reports no utilisation (a MIG GPU does not): "
                                 "whether it was busy is not known" % index, index))
    elif util < IDLE_UNDER_LOAD_PCT:
        findings.append(_finding("gpu_waited", "warn", "GPU %s ran kernels only %s %% of the time under load: it "
                                 "waited for work (the load's concurrency is too low for it, or the CPU side - the "
                                 "scheduler, the tokenizer - cannot feed it)" % (index, _n(util)), index))
    slowed = slowdowns(mask)
    if load.get("power_violation_max") and not any(name == "SW Power Cap" for name, _why in slowed):
        slowed.append(("power violation", "dmon's pviol: %s %% of the time held at the power limit"
                       % _n(load["power_violation_max"])))
    if load.get("thermal_violation") and not any("Thermal" in name for name, _why in slowed):
        slowed.append(("thermal violation", "dmon's tviol: over a temperature limit"))
    for name, why in slowed:
        findings.append(_finding("clocks_slowed", "warn", "GPU %s: %s under load - %s (peak %s W, %s C; graphics "
                                 "clock %s-%s MHz)" % (index, name, why, _n(load.get("power_max_w")),
                                                       _n(load.get("temperature_max_c")),
                                                       _n(load.get("clock_min_mhz")), _n(load.get("clock_max_mhz"))),
                                 index))
    return findings


def judge(figures, load, reasons=None, thresholds=None):
    """{status: pass|warn|fail, findings: [{code, severity, message, gpu?}]}. figures: bench_result.parse();
    load: {GPU index: load_summary entry} of the instance's GPUs; reasons: {GPU index: clock event reasons mask
    sampled under load}; thresholds: {min_output_tok_s, max_p99_ttft_ms} (unset: reported, never failed)."""
    findings = _requests(figures) + _thresholds(figures, thresholds)
    for index in sorted(load or {}):
        findings += _gpu(index, load[index], (reasons or {}).get(index))
    severities = set(f["severity"] for f in findings)
    status = "fail" if "fail" in severities else "warn" if "warn" in severities else "pass"
    return {"status": status, "findings": findings}
