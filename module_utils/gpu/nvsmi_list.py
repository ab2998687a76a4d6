# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""`nvidia-smi -L` (the GPUs, their UUIDs and MIG devices) and `nvidia-smi --version` (the driver's
versions) -> raw facts dict. Pure stdlib (python >= 3.9), no Ansible imports.
"""
import re

from ansible.module_utils.gpu.nvsmi_common import (
    ParseError, _new_gpu, _new_result, _strip_deprecation, clean_text)


_LIST_GPU = re.compile(r"^GPU (\d+): (.*?) \(UUID: ([^)\s]+)\)\s*$")
_LIST_MIG = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: ([^)\s]+)\)\s*$")
# Drivers before 470 name a MIG device by its GPU and its GPU/compute instance ids:
# MIG-GPU-<gpu uuid>/<gi>/<ci>; later ones print an opaque MIG-<uuid> (no ids in it).
_LIST_MIG_OLD_UUID = re.compile(r"^MIG-(GPU-[0-9A-Fa-f-]+)/(\d+)/(\d+)$")


def parse_list(data):
    """`nvidia-smi -L` -> raw facts dict (names, UUIDs, MIG profiles)."""
    text = clean_text(data)
    result = _new_result("list")
    for line in text.split("\n"):
        match = _LIST_GPU.match(line.strip())
        if match:
            gpu = _new_gpu(int(match.group(1)))
            gpu["name"], gpu["uuid"] = match.group(2).strip(), match.group(3)
            result["gpus"].append(gpu)
            continue
        match = _LIST_MIG.match(line)
        if match and result["gpus"]:
            old = _LIST_MIG_OLD_UUID.match(match.group(3))
            result["gpus"][-1]["mig_devices"].append({
                "index": int(match.group(2)),
                "gpu_instance_id": int(old.group(2)) if old else None,
                "compute_instance_id": int(old.group(3)) if old else None,
                "profile": match.group(1), "uuid": match.group(3), "multiprocessor_count": None,
                "memory_total_mib": None, "memory_used_mib": None})
    if not result["gpus"]:
        raise ParseError("no 'GPU N: <name> (UUID: ...)' line")
    for gpu in result["gpus"]:
        if gpu["mig_devices"]:
            gpu["mig_mode"] = True
    return result


_VERSION_LINE = re.compile(r"^(NVIDIA-SMI|NVML|DRIVER|CUDA|KMD|CUDA UMD) version\s*:\s*(.*)$", re.IGNORECASE)


def parse_version(data):
    """`nvidia-smi --version` -> raw facts dict (driver facts only, no GPU list)."""
    values = {}
    for line in clean_text(data).split("\n"):
        match = _VERSION_LINE.match(line.strip())
        if match:
            values[match.group(1).upper()] = _strip_deprecation(match.group(2))
    if "NVIDIA-SMI" not in values:
        raise ParseError("no 'NVIDIA-SMI version :' line")
    result = _new_result("version")
    result["driver_version"] = values.get("KMD") or values.get("DRIVER")
    result["cuda_driver_version"] = values.get("CUDA UMD") or values.get("CUDA")
    result["nvml_version"] = values.get("NVML")
    result["message"] = "nvidia-smi --version: driver facts only, no GPU list"
    return result
