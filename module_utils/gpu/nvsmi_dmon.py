# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""`nvidia-smi dmon` and `nvidia-smi pmon` (time series per GPU / per process) -> raw facts dict with each
GPU's (process's) latest sample. Pure stdlib (python >= 3.9), no Ansible imports.
"""
import re

from ansible.module_utils.gpu.nvsmi_common import (
    ParseError, TruncatedInput, _float, _int, _mib, _new_gpu, _new_process, _new_result, _value, clean_text)


_DMON = re.compile(r"^#\s*gpu\s+(?:pwr|sm|gtemp|temp)\b", re.I | re.M)
_PMON = re.compile(r"^#\s*gpu\s+pid\s+type\b", re.I | re.M)


# dmon / pmon: a header line "# gpu pwr gtemp ..." (with -o DT: "#Date Time gpu ..."), a units line
# "# Idx W C ...", then one row per GPU (pmon: per process) and sample; nvidia-smi repeats both header
# lines every screenful. "-" is a value the GPU does not report (under MIG, sm and mem).
# dmon column -> (GPU fact, converter); the other columns (mtemp, enc, dec, jpg, ofa, mclk, pclk, pviol,
# tviol, bar1, sbecc, dbecc, pci, rxpci, txpci) have no GPU fact.
_DMON_COLUMNS = {"pwr": ("power_draw_w", "float"), "gtemp": ("temperature_c", "int"),
                 "temp": ("temperature_c", "int"), "sm": ("utilization_gpu", "int"),
                 "mem": ("utilization_memory", "int"), "fb": ("memory_used_mib", "mib")}


def _sampled_rows(text):
    """(column names of the first '#' header line, data rows as token lists) of a dmon/pmon output."""
    columns, rows = None, []
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            if columns is None:
                columns = [name.lower() for name in stripped.lstrip("#").split()]
            continue
        if columns is not None:
            rows.append(stripped.split())
    if not columns or "gpu" not in columns:
        raise ParseError("no '# gpu ...' header line of nvidia-smi dmon/pmon")
    return columns, rows


def _convert(kind, raw):
    return {"float": _float, "int": _int, "mib": _mib}[kind](raw)


def parse_dmon(data):
    """`nvidia-smi dmon` -> raw facts dict: one GPU per index with its latest sample (power, temperature,
    SM and memory utilisation, framebuffer used); samples = the most rows of one GPU. A time series names
    no GPU model, UUID or memory total."""
    columns, rows = _sampled_rows(clean_text(data))
    result = _new_result("dmon")
    latest, counts, skipped = {}, {}, 0
    for tokens in rows:
        record = dict(zip(columns, tokens))
        index = _int(record.get("gpu")) if len(tokens) == len(columns) else None
        if index is None:
            skipped += 1
            continue
        latest[index] = record
        counts[index] = counts.get(index, 0) + 1
    if not latest:
        raise TruncatedInput("nvidia-smi dmon output has no sample row (truncated?)")
    for index, record in latest.items():
        gpu = _new_gpu(index)
        for column, (key, kind) in _DMON_COLUMNS.items():
            if column in record and gpu[key] is None:
                gpu[key] = _convert(kind, record[column])
        result["gpus"].append(gpu)
    result["samples"] = max(counts.values())
    result["warnings"].append("nvidia-smi dmon: %d sample(s) per GPU, the latest reported; a time series names no "
                              "GPU model, UUID or memory total (capture 'nvidia-smi -q -x' for those)"
                              % result["samples"])
    if skipped:
        result["warnings"].append("%d dmon row(s) do not fit the header's %d columns and were skipped"
                                  % (skipped, len(columns)))
    return result


def parse_pmon(data):
    """`nvidia-smi pmon` -> raw facts dict: the GPUs by index and the processes each runs (pid, type, the
    command name pmon prints, and framebuffer MiB with `-s m`), each with its latest sample."""
    columns, rows = _sampled_rows(clean_text(data))
    if "pid" not in columns:
        raise ParseError("no 'pid' column: not nvidia-smi pmon output")
    result = _new_result("pmon")
    gpus, procs, counts, skipped = {}, {}, {}, 0
    for tokens in rows:
        if len(tokens) < len(columns):
            skipped += 1
            continue
        # the command is the last column and may hold spaces
        tokens = tokens[:len(columns) - 1] + [" ".join(tokens[len(columns) - 1:])]
        record = dict(zip(columns, tokens))
        index = _int(record.get("gpu"))
        if index is None:
            skipped += 1
            continue
        gpus.setdefault(index, _new_gpu(index))
        pid = _int(record.get("pid"))
        if pid is None:
            continue  # "-": no process on this GPU in this sample
        proc = procs.get((index, pid)) or _new_process()
        proc["gpu_index"], proc["pid"] = index, pid
        proc["type"] = _value(record.get("type"))
        proc["name"] = _value(record.get("command"))
        proc["used_mib"] = _mib(record.get("fb"))
        procs[(index, pid)] = proc
        counts[(index, pid)] = counts.get((index, pid), 0) + 1
    if not gpus:
        raise TruncatedInput("nvidia-smi pmon output has no sample row (truncated?)")
    result["gpus"] = list(gpus.values())
    result["processes"] = list(procs.values())
    result["samples"] = max(counts.values()) if counts else 1
    result["warnings"].append("nvidia-smi pmon: %d sample(s), the latest per process reported; pmon names no GPU "
                              "model and truncates command names" % result["samples"])
    if skipped:
        result["warnings"].append("%d pmon row(s) do not fit the header's %d columns and were skipped"
                                  % (skipped, len(columns)))
    return result


def dmon_series(data):
    """`nvidia-smi dmon` -> {GPU index: [one dict per sample, column -> raw text]}, in the order sampled. A row that
    does not fit the header (a line cut by ^C) is dropped."""
    columns, rows = _sampled_rows(clean_text(data))
    series = {}
    for tokens in rows:
        index = _int(tokens[columns.index("gpu")]) if len(tokens) == len(columns) else None
        if index is not None:
            series.setdefault(index, []).append(dict(zip(columns, tokens)))
    if not series:
        raise TruncatedInput("nvidia-smi dmon output has no sample row (truncated?)")
    return series


def _column(samples, *names):
    """The numbers of the first of `names` the samples have ("-": not reported, left out)."""
    name = next((n for n in names if samples and n in samples[0]), None)
    values = [_float(s.get(name)) for s in samples] if name else []
    return [v for v in values if v is not None]


def _stat(values, how):
    return round(how(values), 1) if values else None


def load_summary(series):
    """What each GPU's samples of a load say: {index: {samples, util_mean, util_min (dmon's `sm`: the share of the
    sample period in which a kernel ran, NVML's utilization.gpu, not how many SMs it filled), memory_activity_mean,
    power_max_w, temperature_max_c, clock_min_mhz, clock_max_mhz (pclk), power_violation_max (pviol, %),
    thermal_violation (tviol seen), framebuffer_max_mib}}; None where the output lacks the column or the GPU does not
    report it (MIG: sm and mem are "-")."""
    def mean(values):
        return sum(values) / len(values)
    out = {}
    for index, samples in sorted(series.items()):
        util = _column(samples, "sm")
        tviol = _column(samples, "tviol")
        out[index] = {
            "samples": len(samples), "util_mean": _stat(util, mean), "util_min": _stat(util, min),
            "memory_activity_mean": _stat(_column(samples, "mem"), mean),
            "power_max_w": _stat(_column(samples, "pwr"), max),
            "temperature_max_c": _stat(_column(samples, "gtemp", "temp"), max),
            "clock_min_mhz": _stat(_column(samples, "pclk"), min), "clock_max_mhz": _stat(_column(samples, "pclk"), max),
            "power_violation_max": _stat(_column(samples, "pviol"), max),
            "thermal_violation": (max(tviol) > 0) if tviol else None,
            "framebuffer_max_mib": _stat(_column(samples, "fb"), max),
        }
    return out
