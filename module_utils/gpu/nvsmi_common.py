# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What every nvidia-smi parser shares: the errors they raise, the canonical names of the clock reasons, the
value helpers (nvidia-smi's spellings of "no value", sizes, modes, PCI ids) and the shapes of a GPU, a
process and a raw result.

Pure stdlib (python >= 3.9), no Ansible imports. The parser of each form (nvsmi_xml, nvsmi_q, nvsmi_table,
nvsmi_csv, nvsmi_list, nvsmi_error, nvsmi_dmon) builds on these; nvsmi_parse tells the forms apart and
normalises what they read.
"""
import re

from ansible.module_utils.gpu.gpu_arch import normalise_device_id


class ParseError(ValueError):
    """The input is not a complete nvidia-smi output that these parsers understand."""


class UnsupportedForm(ParseError):
    """A recognised nvidia-smi form that carries no device facts (dmon, pmon, -q excerpts, topo, mig)."""


class TruncatedInput(ParseError):
    """A recognised form that stops before its end (a capture cut short)."""


# nvidia-smi's clocks (throttle|event) reasons, canonical names. "Clocks Throttle Reasons"
# became "Clocks Event Reasons" in 535; both spellings map here.
CLOCK_REASONS = (
    "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
    "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
    "display_clocks_setting",
)
# NVML nvmlClocksEventReason* bit values, in the order of CLOCK_REASONS (0x1 .. 0x100).
_CLOCK_REASON_BITS = tuple((1 << i, name) for i, name in enumerate(CLOCK_REASONS))

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_BUS_ID = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"
_BUS_ID_RE = re.compile(r"^" + _BUS_ID + r"$")
_NA_VALUES = frozenset((
    "", "n/a", "na", "none", "not supported", "unknown error", "unknown", "insufficient permissions",
    "requested functionality has been deprecated", "not available in wddm driver model",
    "gpu is lost", "-", "not found",
))


# ---------------------------------------------------------------------------------------------
# small value helpers


class _CleanText(str):
    """A str clean_text() already produced, so the next parser in the chain skips the work."""


def clean_text(data):
    """Text from bytes or str: UTF-8 (invalid bytes replaced), no BOM, no ANSI colour, LF only."""
    if isinstance(data, _CleanText):
        return data
    if isinstance(data, (bytes, bytearray)):
        data = bytes(data).decode("utf-8", "replace")
    if not isinstance(data, str):
        raise ParseError("input is not text")
    text = data
    if "\r" in text:  # membership tests are far cheaper than no-op replaces on a 1 MB capture
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "\x00" in text:
        text = text.replace("\x00", "")
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return _CleanText(text)


def _value(raw):
    """Stripped value, or None for nvidia-smi's many spellings of 'no value'."""
    if raw is None:
        return None
    text = " ".join(str(raw).split())
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1].strip()
    if text.lower() in _NA_VALUES or text.lower().startswith("not available"):
        return None
    return text


def _strip_deprecation(raw):
    """'610.62 [Deprecated; will be removed ...]' -> '610.62' (driver 610+ -q header)."""
    text = _value(raw)
    if text is None:
        return None
    text = re.sub(r"\s*\[[^\]]*\]\s*$", "", text).strip()
    if not text or text.lower().startswith("deprecated"):
        return None
    return text


_NUMBER = re.compile(r"^[-+]?\d+(?:\.\d+)?")


def _number(raw):
    text = _value(raw)
    if text is None:
        return None
    match = _NUMBER.match(text.replace(",", ""))
    if not match:
        return None
    try:
        return float(match.group(0))
    except ValueError:
        return None


def _int(raw):
    num = _number(raw)
    return None if num is None else int(num)


def _float(raw):
    num = _number(raw)
    return None if num is None else round(num, 2)


def _mib(raw):
    """'81559 MiB' / '81559MiB' / '81559' / '1.5 GiB' -> MiB as int; None when not a size."""
    text = _value(raw)
    if text is None:
        return None
    num = _number(text)
    if num is None:
        return None
    unit = text.replace(",", "")[len(_NUMBER.match(text.replace(",", "")).group(0)):].strip().lower()
    scale = {"": 1, "mib": 1, "mb": 1, "gib": 1024, "gb": 1024, "kib": 1.0 / 1024, "kb": 1.0 / 1024}
    if unit not in scale:
        return None
    return int(round(num * scale[unit]))


def _mode(raw):
    """Enabled/On/Yes -> True, Disabled/Off/No -> False, else None."""
    text = _value(raw)
    if text is None:
        return None
    low = text.lower()
    if low in ("enabled", "enable", "on", "yes", "true", "1"):
        return True
    if low in ("disabled", "disable", "off", "no", "false", "0"):
        return False
    return None


def _active(raw):
    text = _value(raw)
    if text is None:
        return None
    low = text.lower()
    if low == "active":
        return True
    if low == "not active":
        return False
    return None


_COMPUTE_MODES = {
    "default": "Default", "exclusive_process": "Exclusive_Process", "e. process": "Exclusive_Process",
    "exclusive_thread": "Exclusive_Thread", "e. thread": "Exclusive_Thread",
    "prohibited": "Prohibited",
}


def _compute_mode(raw):
    text = _value(raw)
    if text is None:
        return None
    return _COMPUTE_MODES.get(text.lower(), text)


def pci_ids(raw):
    """nvidia-smi 'pci.device_id' ('0x233010DE' / '2BB410DE') -> ('0x2330', '0x10de') or (None, None)."""
    text = _value(raw)
    if text is None:
        return None, None
    dev = normalise_device_id(text)
    if dev is None:
        return None, None
    return "0x" + dev, "0x10de"


def pci_address(bus_id):
    """nvidia-smi bus id '00000000:61:00.0' -> sysfs/lspci -D form '0000:61:00.0' (lower case)."""
    if not isinstance(bus_id, str):
        return None
    text = bus_id.strip()
    match = re.match(r"^(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])$", text)
    if not match:
        return None
    domain = int(match.group(1) or "0", 16)
    return "%04x:%s:%s.%s" % (domain, match.group(2).lower(), match.group(3).lower(), match.group(4))


def _new_gpu(index):
    """Every GPU dict has every key, so consumers never need .get()."""
    return {
        "index": index, "name": None, "product_brand": None, "datacenter": None, "uuid": None,
        "pci_bus_id": None, "pci_address": None,
        "pci_device_id": None, "pci_vendor_id": None, "pci_id": None, "minor_number": None,
        "architecture": None, "compute_capability": None, "min_driver_branch": None,
        "open_kernel_modules_required": None,
        "memory_total_mib": None, "memory_used_mib": None, "memory_free_mib": None,
        "memory_reserved_mib": None, "persistence_mode": None, "driver_model": None,
        "compute_mode": None, "mig_mode": None, "mig_mode_pending": None, "mig_devices": [],
        "utilization_gpu": None,
        "utilization_memory": None, "power_draw_w": None, "power_limit_w": None,
        "temperature_c": None, "fan_speed_pct": None, "performance_state": None,
        "clocks_event_reasons_active": None,
    }


# The scalar facts of a GPU that nvidia-smi's forms print, each with how its text becomes the fact (None: the
# text itself), in one place so that every form reads a fact alike; each form's table names where it prints them.
GPU_SCALARS = (
    ("minor_number", _int), ("architecture", None), ("memory_total_mib", _mib), ("memory_used_mib", _mib),
    ("memory_free_mib", _mib), ("memory_reserved_mib", _mib), ("persistence_mode", _mode), ("driver_model", None),
    ("compute_mode", _compute_mode), ("mig_mode", _mode), ("mig_mode_pending", _mode), ("compute_capability", None),
    ("utilization_gpu", _int), ("utilization_memory", _int), ("power_draw_w", _float), ("power_limit_w", _float),
    ("temperature_c", _int), ("fan_speed_pct", _int), ("performance_state", None),
)


def read_scalars(gpu, places, read, text=None):
    """Set `gpu`'s GPU_SCALARS that a form prints: places maps a fact to where the form prints it (a fact it does
    not name is left as it is), read(*where) gives what stands there; text (default: none) cleans the text of a
    fact that has no conversion, for a form whose read() gives it raw."""
    for fact, convert in GPU_SCALARS:
        if fact in places:
            value = read(*places[fact])
            gpu[fact] = convert(value) if convert else (text(value) if text else value)


def _new_process():
    return {"pid": None, "name": None, "used_mib": None, "type": None, "gpu_index": None,
            "pci_bus_id": None, "gpu_uuid": None, "gpu_instance_id": None,
            "compute_instance_id": None}


def _new_result(form):
    return {"form": form, "schema": None, "state": "ok", "message": None,
            "driver_version": None, "cuda_driver_version": None, "nvml_version": None,
            "attached_gpus": None, "samples": 1, "gpus": [], "processes": [], "warnings": [],
            "partial": False}


def _cut_short(result, partial, message):
    """A capture that stops early (or an excerpt): TruncatedInput, or with partial=True a note on the
    facts read so far (result["partial"], and a warning naming what is missing)."""
    if not partial:
        raise TruncatedInput(message)
    result["partial"] = True
    result["warnings"].append("partial capture: %s; the facts cover only what was pasted"
                              % message.replace(" (truncated?)", "").replace("; truncated?", ""))


def _decode_reason_mask(raw):
    text = _value(raw)
    if text is None:
        return None
    try:
        mask = int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None
    return [name for bit, name in _CLOCK_REASON_BITS if mask & bit]
