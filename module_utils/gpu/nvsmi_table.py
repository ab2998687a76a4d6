# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The default `nvidia-smi` table -> raw facts dict: the 79- and 89-column layouts, the MIG sub-table, the
driver 610+ KMD header; a table cut short is read as far as it goes with partial=True. Pure stdlib
(python >= 3.9), no Ansible imports.
"""
import re

from ansible.module_utils.gpu.nvsmi_common import (
    _BUS_ID, ParseError, TruncatedInput, _compute_mode, _cut_short, _float, _int, _mib, _mode, _new_gpu,
    _new_process, _new_result, _value, clean_text)


_TABLE_HEADER = re.compile(r"\|\s*NVIDIA-SMI\s+(\S+)")
_RE_DRIVER = re.compile(r"Driver Version:\s*(\S+)")
_RE_KMD = re.compile(r"KMD Version:\s*(\S+)")
_RE_CUDA = re.compile(r"(?<!UMD )CUDA Version:\s*(\S+)")
_RE_CUDA_UMD = re.compile(r"CUDA UMD Version:\s*(\S+)")
_GPU_ROW1 = re.compile(r"^\s*(\d+)\s+(.*?)\s+(On|Off|WDDM|TCC|MCDM|N/A)\s*$")
_GPU_ROW1_BUS = re.compile(r"^\s*(" + _BUS_ID + r")\s+(\S+)\s*$")
_GPU_ROW2_LEFT = re.compile(r"^\s*(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*/\s*(\S+)\s*$")
_MEM_PAIR = re.compile(r"(\d+)\s*MiB\s*/\s*(\d+)\s*MiB")
_MIG_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$")
_PROC_WITH_GI = re.compile(r"^\s*(\d+)\s+(\S+)\s+(\S+)\s+(\d+|N/A)\s+(\S+)\s+(.*?)\s*(\d+MiB|N/A)\s*$")
_PROC_OLD = re.compile(r"^\s*(\d+)\s+(\d+|N/A)\s+(\S+)\s+(.*?)\s*(\d+MiB|N/A)\s*$")


def _cells(line):
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|"):
        body = body[:-1]
    return body.split("|")


def _is_rule(line):
    stripped = line.strip()
    return len(stripped) > 2 and stripped[0] in "+|" and set(stripped) <= set("+|-=")


def _table_snapshots(lines):
    """Start line of each table (the '+---' above its 'NVIDIA-SMI' header)."""
    starts = []
    for i, line in enumerate(lines):
        if _TABLE_HEADER.search(line):
            starts.append(i - 1 if i > 0 and _is_rule(lines[i - 1]) else i)
    return starts


def _table_gpu_blocks(lines, start):
    """Yield lists of GPU rows (2 or 3 lines each) from the GPU box that begins after '|===|'."""
    i = start
    blocks, block = [], []
    while i < len(lines):
        line = lines[i]
        if _is_rule(line):
            if block:
                blocks.append(block)
                block = []
            if line.strip().startswith("+") or line.strip().startswith("|-"):
                # '+---' closes a GPU block; a blank or a non-table line after it ends the box.
                nxt = lines[i + 1] if i + 1 < len(lines) else ""
                if not nxt.strip().startswith("|") or "=" in nxt or "MIG devices" in nxt or "Processes" in nxt:
                    return blocks, i + 1, True
        elif line.strip().startswith("|"):
            block.append(line)
        else:
            break
        i += 1
    if block:
        blocks.append(block)
    return blocks, i, False


def _table_gpu(block, index_hint, windows):
    row1 = _cells(block[0])
    if len(row1) < 3 or len(block) < 2:
        raise TruncatedInput("table GPU block is incomplete (truncated?)")
    m1 = _GPU_ROW1.match(row1[0])
    mbus = _GPU_ROW1_BUS.match(row1[1])
    if not m1 or not mbus:
        raise ParseError("unrecognised table GPU row: %r" % block[0].strip()[:80])
    gpu = _new_gpu(int(m1.group(1)))
    gpu["name"] = m1.group(2).strip()
    token = m1.group(3)
    if windows or token in ("WDDM", "TCC", "MCDM"):
        gpu["driver_model"] = _value(token)
    else:
        gpu["persistence_mode"] = _mode(token)
    gpu["pci_bus_id"] = mbus.group(1)
    row2 = _cells(block[1])
    if len(row2) < 3:
        raise TruncatedInput("table GPU block is incomplete (truncated?)")
    m2 = _GPU_ROW2_LEFT.match(row2[0])
    if m2:
        gpu["fan_speed_pct"] = _int(m2.group(1))
        gpu["temperature_c"] = _int(m2.group(2))
        gpu["performance_state"] = _value(m2.group(3))
        gpu["power_draw_w"] = _float(m2.group(4))
        gpu["power_limit_w"] = _float(m2.group(5))
    mem = _MEM_PAIR.search(row2[1])
    if mem:
        gpu["memory_used_mib"], gpu["memory_total_mib"] = int(mem.group(1)), int(mem.group(2))
        gpu["memory_free_mib"] = None  # the table shows no free/reserved split
    util = row2[2].split()
    if util:
        gpu["utilization_gpu"] = _int(util[0])
        gpu["compute_mode"] = _compute_mode(" ".join(util[1:])) if len(util) > 1 else None
    if len(block) >= 3:
        row3 = _cells(block[2])
        if len(row3) >= 3 and not row3[0].strip() and not row3[1].strip():
            gpu["mig_mode"] = _mode(row3[2])
    return gpu


def _table_mig(lines, start, gpus_by_index):
    """Parse the 'MIG devices:' box starting at start; return the next line index."""
    i = start
    seen_rule = False
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped:
            break
        if "=" in stripped and _is_rule(line):
            seen_rule = True
        elif seen_rule and stripped.startswith("|") and not _is_rule(line):
            cells = _cells(line)
            match = _MIG_ROW.match(cells[0]) if cells else None
            if match:
                mem = _MEM_PAIR.search(cells[1]) if len(cells) > 1 else None
                sm = cells[2].split() if len(cells) > 2 else []
                gpu = gpus_by_index.get(int(match.group(1)))
                if gpu is not None:
                    gpu["mig_devices"].append({
                        "index": int(match.group(4)),
                        "gpu_instance_id": int(match.group(2)),
                        "compute_instance_id": int(match.group(3)),
                        "profile": None, "uuid": None,
                        "multiprocessor_count": _int(sm[0]) if sm else None,
                        "memory_total_mib": int(mem.group(2)) if mem else None,
                        "memory_used_mib": int(mem.group(1)) if mem else None,
                    })
        i += 1
    return i


def _table_processes(lines, start, result):
    """Parse the 'Processes:' box; return True when it is closed by its '+---' rule."""
    with_gi = False
    seen_rule = False
    for line in lines[start:]:
        stripped = line.strip()
        if not stripped:
            continue
        if not seen_rule:
            if "PID" in stripped and "GI" in stripped:
                with_gi = True
            if "=" in stripped and _is_rule(line):
                seen_rule = True
            continue
        if _is_rule(line):
            return True
        if not stripped.startswith("|"):
            return False
        body = _cells(line)[0]
        if "no running processes found" in body.lower():
            continue
        match = (_PROC_WITH_GI if with_gi else _PROC_OLD).match(body)
        if not match:
            result["warnings"].append("unrecognised process row: %r" % stripped[:80])
            continue
        proc = _new_process()
        proc["gpu_index"] = int(match.group(1))
        if with_gi:
            proc["gpu_instance_id"], proc["compute_instance_id"] = _int(match.group(2)), _int(match.group(3))
            pid, ptype, name, mem = match.group(4), match.group(5), match.group(6), match.group(7)
        else:
            pid, ptype, name, mem = match.group(2), match.group(3), match.group(4), match.group(5)
        proc["pid"], proc["type"] = _int(pid), _value(ptype)
        proc["name"], proc["used_mib"] = _value(name), _mib(mem)
        result["processes"].append(proc)
    return False


def parse_table(data, partial=False):
    """The default `nvidia-smi` table -> raw facts dict (the last table when several are appended).
    partial=True: a table cut short (`| head`, a terminal's height) gives the GPU rows it has."""
    text = clean_text(data)
    lines = [line.strip() for line in text.split("\n")]
    starts = _table_snapshots(lines)
    if not starts:
        raise ParseError("no 'NVIDIA-SMI' table header")
    lines = lines[starts[-1]:]
    result = _new_result("table")
    result["samples"] = len(starts)
    header = next(line for line in lines if _TABLE_HEADER.search(line))
    for regex, key in ((_RE_KMD, "driver_version"), (_RE_DRIVER, "driver_version"),
                       (_RE_CUDA_UMD, "cuda_driver_version"), (_RE_CUDA, "cuda_driver_version")):
        match = regex.search(header)
        if match and result[key] is None:
            result[key] = _value(match.group(1).rstrip("|"))
    windows = any("Driver-Model" in line for line in lines[:12])
    head_end = next((i for i, line in enumerate(lines) if _is_rule(line) and "=" in line), None)
    if head_end is None:
        _cut_short(result, partial, "table ends before its GPU rows (truncated?)")
        return result
    blocks, pos, closed = _table_gpu_blocks(lines, head_end + 1)
    if not blocks:
        _cut_short(result, partial, "table has no GPU rows (truncated?)")
        return result
    if not closed:
        _cut_short(result, partial, "table ends inside the GPU section (truncated?)")
    for n, block in enumerate(blocks):
        try:
            result["gpus"].append(_table_gpu(block, n, windows))
        except ParseError:
            if not partial or closed or n + 1 < len(blocks):
                raise  # only the last GPU row of a table cut inside its GPU box may be cut
    if not closed:
        return result
    by_index = {gpu["index"]: gpu for gpu in result["gpus"]}
    procs_at = None
    i = pos
    while i < len(lines):
        if "MIG devices:" in lines[i]:
            i = _table_mig(lines, i + 1, by_index)
            continue
        if re.search(r"\|\s*Processes:", lines[i]):
            procs_at = i
            break
        i += 1
    if procs_at is None:
        _cut_short(result, partial, "table ends before the Processes section (truncated?)")
        return result
    if not _table_processes(lines, procs_at + 1, result):
        result["warnings"].append("the Processes box is not closed: the process list may be cut short")
    return result
