# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""`nvidia-smi --query-gpu` / `--query-compute-apps` CSV -> raw facts dict, with or without a header line,
and the field lists the nvidia_gpu_facts module asks for. Pure stdlib (python >= 3.9), no Ansible imports.
"""
import csv
import re

from ansible.module_utils.gpu.nvsmi_common import (
    CLOCK_REASONS, ParseError, _active, _cut_short, _decode_reason_mask, _int, _mib, _new_gpu, _new_process,
    _new_result, _value, clean_text, pci_ids, read_scalars)


# Field lists the module asks for in its CSV fallback; the CLI recognises headerless CSV
# only when it has exactly these columns.
GPU_QUERY_FIELDS = (
    "index", "name", "uuid", "pci.bus_id", "pci.device_id", "driver_version",
    "persistence_mode", "compute_mode", "memory.total", "memory.used", "memory.free",
    "utilization.gpu", "power.draw", "power.limit", "temperature.gpu",
)
GPU_QUERY_FIELDS_EXTENDED = GPU_QUERY_FIELDS + ("mig.mode.current", "compute_cap")
COMPUTE_APPS_FIELDS = ("gpu_uuid", "gpu_bus_id", "pid", "process_name", "used_memory")

_CSV_FIELD = re.compile(r"^[a-z][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*(?: \[[^\]]+\])?$")
_GPU_FIELD_HINTS = frozenset(("index", "name", "uuid", "pci.bus_id", "memory.total", "memory.used",
                              "driver_version", "serial", "utilization.gpu", "count", "gpu_name"))
_APPS_FIELD_HINTS = frozenset(("pid", "process_name", "used_gpu_memory", "used_memory"))
# The --query-gpu fields of each of the GPU_SCALARS (the first present with a value counts).
_CSV_PLACES = {
    "memory_total_mib": ("memory.total",), "memory_used_mib": ("memory.used",), "memory_free_mib": ("memory.free",),
    "memory_reserved_mib": ("memory.reserved",), "persistence_mode": ("persistence_mode",),
    "driver_model": ("driver_model.current",), "compute_mode": ("compute_mode",), "mig_mode": ("mig.mode.current",),
    "mig_mode_pending": ("mig.mode.pending",), "compute_capability": ("compute_cap",),
    "utilization_gpu": ("utilization.gpu",), "utilization_memory": ("utilization.memory",),
    "power_draw_w": ("power.draw", "power.draw.average", "power.draw.instant"),
    "power_limit_w": ("power.limit", "enforced.power.limit"), "temperature_c": ("temperature.gpu",),
    "fan_speed_pct": ("fan.speed",), "performance_state": ("pstate",),
}


def _csv_rows(text):
    lines = [line for line in text.split("\n") if line.strip()]
    try:
        return [[cell.strip() for cell in row] for row in csv.reader(lines, skipinitialspace=True)]
    except csv.Error as exc:
        raise ParseError("CSV could not be read: %s" % exc)


def _field_name(header_cell):
    return re.sub(r"\s*\[[^\]]*\]\s*$", "", header_cell.strip()).strip()


def csv_header_kind(line):
    """'gpu' / 'apps' when line is a --query-* CSV header, else None."""
    cells = [c.strip() for c in line.split(",")]
    if not cells or not all(_CSV_FIELD.match(c) for c in cells):
        return None
    names = set(_field_name(c) for c in cells)
    if names & _APPS_FIELD_HINTS and "pid" in names:
        return "apps"
    if names & _GPU_FIELD_HINTS:
        return "gpu"
    return None


def _split_header(rows, fields, result=None, partial=False):
    """(field names, data rows): header given, or the first row, repeated headers dropped. A row with
    another number of fields is a cut capture: TruncatedInput, or with partial=True skipped (noted)."""
    if fields is not None:
        names = [_field_name(f) for f in fields]
        data = rows
    else:
        if not rows:
            raise ParseError("empty CSV")
        header = rows[0]
        names = [_field_name(c) for c in header]
        data = [row for row in rows[1:] if row != header]
    for n, row in enumerate(data):
        if len(row) != len(names):
            _cut_short(result if result is not None else _new_result("csv"), partial,
                       "CSV row %d has %d fields, the header %d (truncated?)" % (n + 1, len(row), len(names)))
    return names, [row for row in data if len(row) == len(names)]


def _first(record, *names):
    for name in names:
        if name in record:
            value = _value(record[name])
            if value is not None:
                return value
    return None


def _csv_reasons(record):
    active, seen = [], False
    for prefix in ("clocks_event_reasons.", "clocks_throttle_reasons."):
        for name in CLOCK_REASONS:
            key = prefix + name
            alt = key.replace("display_clocks_setting", "display_clock_setting")
            for candidate in (key, alt):
                if candidate in record:
                    seen = True
                    if _active(record[candidate]):
                        active.append(name)
    if seen:
        return sorted(set(active), key=CLOCK_REASONS.index)
    mask = _first(record, "clocks_event_reasons.active", "clocks_throttle_reasons.active")
    return _decode_reason_mask(mask) if mask is not None else None


def _csv_gpu(record, position):
    index = _int(_first(record, "index"))
    gpu = _new_gpu(position if index is None else index)
    gpu["name"] = _first(record, "name", "gpu_name")
    gpu["uuid"] = _first(record, "uuid", "gpu_uuid")
    gpu["pci_bus_id"] = _first(record, "pci.bus_id", "gpu_bus_id")
    gpu["pci_device_id"], gpu["pci_vendor_id"] = pci_ids(_first(record, "pci.device_id"))
    read_scalars(gpu, _CSV_PLACES, lambda *names: _first(record, *names))
    gpu["clocks_event_reasons_active"] = _csv_reasons(record)
    return gpu


def parse_query_gpu_csv(data, fields=None, partial=False):
    """`--query-gpu=... --format=csv[,noheader][,nounits]` -> raw facts dict.

    With fields=None the first line is the header (repeated headers from a sampling loop are
    dropped). Repeated samples of the same GPU collapse to the latest one.
    """
    text = clean_text(data)
    result = _new_result("csv_query_gpu")
    names, data_rows = _split_header(_csv_rows(text), fields, result, partial)
    latest, order = {}, []
    for position, row in enumerate(data_rows):
        record = dict(zip(names, row))
        key = _first(record, "index", "uuid", "pci.bus_id")
        key = ("row", position) if key is None else key
        if key not in latest:
            order.append(key)
        latest[key] = (position, record)
        version = _first(record, "driver_version")
        if version:
            result["driver_version"] = version
    result["samples"] = max(1, len(data_rows) // max(1, len(order)))
    for n, key in enumerate(order):
        result["gpus"].append(_csv_gpu(latest[key][1], n))
    if not result["gpus"]:
        raise ParseError("CSV has a header but no GPU rows")
    if result["samples"] > 1:
        result["warnings"].append("%d samples per GPU; the latest is reported" % result["samples"])
    return result


def parse_compute_apps_csv(data, fields=None, partial=False):
    """`--query-compute-apps=... --format=csv[,noheader][,nounits]` -> raw facts dict (processes only)."""
    text = clean_text(data)
    rows = _csv_rows(text)
    result = _new_result("csv_compute_apps")
    if not rows:
        return result  # noheader output with no processes is empty
    if fields is None and rows and "no running" in ",".join(rows[0]).lower():
        return result
    names, data_rows = _split_header(rows, fields, result, partial)
    for row in data_rows:
        record = dict(zip(names, row))
        if "no running" in " ".join(row).lower():
            continue
        proc = _new_process()
        proc["pid"] = _int(_first(record, "pid"))
        proc["name"] = _first(record, "process_name", "name")
        proc["used_mib"] = _mib(_first(record, "used_gpu_memory", "used_memory"))
        proc["pci_bus_id"] = _first(record, "gpu_bus_id", "pci.bus_id")
        proc["gpu_uuid"] = _first(record, "gpu_uuid", "uuid")
        proc["type"] = "C"  # compute-apps lists compute contexts only
        result["processes"].append(proc)
    return result
