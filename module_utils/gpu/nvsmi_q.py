# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""`nvidia-smi -q` (text) -> raw facts dict: the indented key/value tree and the GPU sections read from it,
whole captures and (partial=True) excerpts. Pure stdlib (python >= 3.9), no Ansible imports.
"""
import re

from ansible.module_utils.gpu.nvsmi_common import (
    _BUS_ID, UnsupportedForm, _active, _cut_short, _float, _int, _mib, _new_gpu, _new_process, _new_result,
    _strip_deprecation, _value, clean_text, pci_ids, read_scalars)


_Q_SEPARATOR = re.compile(r"\s:(?= |$)")  # "Key<spaces>: value"; keys never contain " :"
_Q_GPU = re.compile(r"^GPU (" + _BUS_ID + r")$")

# The key path of each of the GPU_SCALARS in a GPU section (the power facts are read by _q_gpu itself: their keys
# stand at different depths across driver versions).
_Q_PLACES = {
    "minor_number": ("Minor Number",), "architecture": ("Product Architecture",),
    "memory_total_mib": ("FB Memory Usage", "Total"), "memory_used_mib": ("FB Memory Usage", "Used"),
    "memory_free_mib": ("FB Memory Usage", "Free"), "memory_reserved_mib": ("FB Memory Usage", "Reserved"),
    "persistence_mode": ("Persistence Mode",), "driver_model": ("Driver Model", "Current"),
    "compute_mode": ("Compute Mode",), "mig_mode": ("MIG Mode", "Current"), "mig_mode_pending": ("MIG Mode", "Pending"),
    "utilization_gpu": ("Utilization", "GPU"), "utilization_memory": ("Utilization", "Memory"),
    "temperature_c": ("Temperature", "GPU Current Temp"), "fan_speed_pct": ("Fan Speed",),
    "performance_state": ("Performance State",),
}

_Q_REASON_LABELS = {
    "idle": "gpu_idle",
    "gpu idle": "gpu_idle",
    "applications clocks setting": "applications_clocks_setting",
    "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown",
    "hw thermal slowdown": "hw_thermal_slowdown",
    "hw power brake slowdown": "hw_power_brake_slowdown",
    "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal_slowdown",
    "display clock setting": "display_clocks_setting",
    "display clocks setting": "display_clocks_setting",
}


class _QNode(object):
    __slots__ = ("key", "value", "children", "indent")

    def __init__(self, key, value, indent):
        self.key, self.value, self.indent, self.children = key, value, indent, []

    def find(self, *keys):
        """First child whose key equals one of keys (case-insensitive)."""
        wanted = [k.lower() for k in keys]
        for key in wanted:
            for child in self.children:
                if child.key.lower() == key:
                    return child
        return None

    def get(self, *path):
        node = self
        for key in path:
            node = node.find(key) if node is not None else None
        return None if node is None else node.value

    def walk(self):
        """All descendants, depth first; iterative so deep indentation cannot overflow the stack."""
        stack = list(reversed(self.children))
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))


def _q_tree(text):
    root = _QNode("", None, -1)
    stack = [root]
    for line in text.split("\n"):
        if not line.strip() or line.strip().startswith("=====") and "NVSMI LOG" in line:
            continue
        line = line.expandtabs(4).rstrip()
        body = line.lstrip(" ")
        indent = len(line) - len(body)
        # Linear split (a regex with two free-width parts backtracks badly on long lines).
        sep = _Q_SEPARATOR.search(body)
        if sep and body[:sep.start()].strip():
            key, value = body[:sep.start()].strip(), body[sep.end():].strip()
        else:
            key, value = body.strip(), None
        if not key:
            continue
        node = _QNode(key, value, indent)
        while len(stack) > 1 and stack[-1].indent >= indent:
            stack.pop()
        stack[-1].children.append(node)
        stack.append(node)
    return root


def _q_reasons(section):
    if section is None:
        return None
    active = []
    for node in section.walk():
        name = _Q_REASON_LABELS.get(node.key.lower())
        if name and _active(node.value):
            active.append(name)
    return active


def _q_gpu(section, index, bus_id):
    gpu = _new_gpu(index)
    gpu["name"] = _value(section.get("Product Name"))
    gpu["product_brand"] = _value(section.get("Product Brand"))
    gpu["uuid"] = _value(section.get("GPU UUID"))
    gpu["pci_bus_id"] = _value(section.get("PCI", "Bus Id")) or bus_id
    gpu["pci_device_id"], gpu["pci_vendor_id"] = pci_ids(section.get("PCI", "Device Id"))
    read_scalars(gpu, _Q_PLACES, section.get, text=_value)
    power = section.find("GPU Power Readings", "Power Readings")
    if power is not None:
        draws, limits = {}, {}
        for node in power.walk():
            key = node.key.lower()
            if key in ("power draw", "average power draw", "instantaneous power draw"):
                draws.setdefault(key, node.value)
            elif key in ("current power limit", "enforced power limit", "power limit"):
                limits.setdefault(key, node.value)
        gpu["power_draw_w"] = _float(draws.get("power draw") or draws.get("average power draw")
                                     or draws.get("instantaneous power draw"))
        gpu["power_limit_w"] = _float(limits.get("current power limit") or limits.get("enforced power limit")
                                      or limits.get("power limit"))
    gpu["clocks_event_reasons_active"] = _q_reasons(
        section.find("Clocks Event Reasons", "Clocks Throttle Reasons"))
    for child in section.children:
        if child.key.lower() != "mig device":
            continue
        gpu["mig_devices"].append({
            "index": _int(child.get("Index")),
            "gpu_instance_id": _int(child.get("GPU Instance ID")),
            "compute_instance_id": _int(child.get("Compute Instance ID")),
            "profile": None, "uuid": None,
            "multiprocessor_count": _int(child.get("Device Attributes", "Shared", "Multiprocessor count")),
            "memory_total_mib": _mib(child.get("Shared FB Memory Usage", "Total") or child.get("FB Memory Usage", "Total")),
            "memory_used_mib": _mib(child.get("Shared FB Memory Usage", "Used") or child.get("FB Memory Usage", "Used")),
        })
    processes = []
    section_procs = section.find("Processes")
    pending = {}
    for child in (section_procs.children if section_procs is not None else ()):
        key = child.key.lower()
        if key == "gpu instance id":
            pending["gpu_instance_id"] = _int(child.value)
        elif key == "compute instance id":
            pending["compute_instance_id"] = _int(child.value)
        elif key == "process id":
            proc = _new_process()
            proc.update(pending)
            pending = {}
            proc["pid"] = _int(child.value)
            proc["type"] = _value(child.get("Type"))
            proc["name"] = _value(child.get("Name"))
            proc["used_mib"] = _mib(child.get("Used GPU Memory"))
            proc["gpu_index"], proc["pci_bus_id"], proc["gpu_uuid"] = index, gpu["pci_bus_id"], gpu["uuid"]
            processes.append(proc)
    return gpu, processes, section_procs is not None


def _has_facts(gpu):
    return any(value not in (None, []) for key, value in gpu.items() if key != "index")


def parse_q(data, partial=False):
    """`nvidia-smi -q` text -> raw facts dict. partial=True: an excerpt (`grep -A`, `-d MEMORY` cut, one GPU
    section of several, a section without its end) is read as far as it goes; an excerpt without any
    'GPU <bus id>' line reads as one GPU whose index is unknown."""
    text = clean_text(data)
    root = _q_tree(text)
    result = _new_result("q")
    result["driver_version"] = _strip_deprecation(root.get("KMD Version")) or \
        _strip_deprecation(root.get("Driver Version"))
    result["cuda_driver_version"] = _strip_deprecation(root.get("CUDA UMD Version")) or \
        _strip_deprecation(root.get("CUDA Version"))
    result["attached_gpus"] = _int(root.get("Attached GPUs"))
    sections = []
    for child in root.children:
        match = _Q_GPU.match(child.key)
        if match and child.value is None:
            sections.append((child, match.group(1)))
    if not sections:
        if result["attached_gpus"] == 0:
            return result
        if "NVSMI LOG" not in text and result["driver_version"] is None:
            if not partial:
                raise UnsupportedForm("an excerpt of nvidia-smi -q (no 'GPU <bus id>' section): no device facts")
            gpu, processes, _has_processes = _q_gpu(root, None, None)
            if _has_facts(gpu):
                result["gpus"].append(gpu)
                result["processes"].extend(processes)
            _cut_short(result, partial, "an excerpt of nvidia-smi -q without its 'GPU <bus id>' line: which GPU "
                                        "it shows is not known")
            return result
        _cut_short(result, partial, "-q text has no 'GPU <bus id>' section (truncated?)")
        return result
    last_has_processes = True
    for index, (section, bus_id) in enumerate(sections):
        gpu, processes, last_has_processes = _q_gpu(section, index, bus_id)
        result["gpus"].append(gpu)
        result["processes"].extend(processes)
    if result["attached_gpus"] is not None and result["attached_gpus"] > len(sections):
        _cut_short(result, partial, "-q text says %s attached GPUs but has %d GPU section(s) (truncated?)"
                   % (result["attached_gpus"], len(sections)))
    if not last_has_processes or result["gpus"][-1]["memory_total_mib"] is None:
        _cut_short(result, partial, "-q text ends inside the last GPU section (no Processes entry; truncated?)")
    return result
