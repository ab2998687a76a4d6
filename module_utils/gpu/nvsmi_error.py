# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nvidia-smi's error texts (couldn't communicate with the driver, NVML driver/library version mismatch, ...)
-> the facts' state, by the error catalogue's `smi` entries. Pure stdlib (python >= 3.9).
"""
import re

from ansible.module_utils.diagnosis import error_catalogue as catalogue
from ansible.module_utils.gpu.nvsmi_common import (
    ParseError, _new_result, clean_text)


def classify_error(data):
    """(state, message, nvml_library_version) for an nvidia-smi error text, or None."""
    text = " ".join(clean_text(data).split())
    lower = text.lower()
    for state, entry in catalogue.in_scope("smi"):
        match = catalogue.matches(entry, text, lower)
        if not match:
            continue
        nvml = re.search(r"NVML library version:\s*([0-9][0-9.]*[0-9])", text)
        message = entry["meaning"]
        if state == "error" and entry["regex"].groups:
            message = "%s: %s" % (message, match.group(0)[:160])
        return state, message, nvml.group(1) if nvml else None
    return None


def parse_error(data):
    """An nvidia-smi error text -> raw facts dict with its state."""
    found = classify_error(data)
    if found is None:
        raise ParseError("not a known nvidia-smi error text")
    result = _new_result("error")
    result["state"], result["message"], nvml = found
    if nvml:
        # The mismatch message names the userspace (NVML) library version, not the module's.
        result["driver_version"] = nvml
        result["nvml_version"] = nvml
    return result
