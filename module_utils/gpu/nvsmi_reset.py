# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What `nvidia-smi -r [-i N]` (`--gpu-reset`) says: which GPUs it reset, which it could not, and why.

The forms, each in tests/fixtures/gpu_reset/ as people captured them:
- success (535 and later): "GPU 00000000:8B:00.0 was successfully reset." for each GPU, then "All done.";
- refusal (535 and later): "The following GPUs could not be reset:", then one indented line per GPU with the
  reason ("  GPU 00000000:8B:00.0: In use by another client", "...: Not Supported"), and, for GPUs in use, a blank
  line and "N device(s) is/are currently being used by one or more other processes (e.g., Fabric Manager, ...)";
- refusal (older drivers, gpu-operator#118): "GPU 00000000:C1:00.0 is currently in use by another process." and
  the same trailer;
- any of them inside another tool's log line (mig-parted), its newlines written as "\\n".
A GPU is "in use" when anything holds it open: a CUDA process, nvidia-persistenced, the fabric manager, DCGM's
nv-hostengine, dcgm-exporter, nvidia_drm with modeset=1. "Not Supported": the GPU cannot be reset alone (an active
NVLink on A100 boards, as Yandex Cloud's MIG guide says; a GPU that is the display's).

Pure functions, stdlib only (shipped to hosts as module_utils).
"""
import re

_BUS = r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])"
_RESET = re.compile(r"GPU %s was successfully reset\." % _BUS)
_HEADER = "The following GPUs could not be reset:"
_NOT_RESET = re.compile(r"^\s+GPU %s: (.+?)\s*$" % _BUS)
_OLD_IN_USE = re.compile(r"GPU %s is currently in use by another process\." % _BUS)
_IN_USE_COUNT = re.compile(r"(\d+) devices? (?:is|are) currently being used by one or more other processes")

# The reason's words -> its kind: what the caller can do about it.
IN_USE, NOT_SUPPORTED, OTHER = "in_use", "not_supported", "other"
_KINDS = (("in use by another", IN_USE), ("not supported", NOT_SUPPORTED))


def _kind(reason):
    text = reason.lower()
    for words, kind in _KINDS:
        if words in text:
            return kind
    return OTHER


def parse_reset(text):
    """nvidia-smi -r's output -> {"reset": [bus as printed], "not_reset": [{"bus", "reason", "kind"}],
    "all_done": bool, "in_use_count": int or None}. Lines it does not know (a prompt, a tool's log prefix) are
    read past."""
    text = text or ""
    if "\n" not in text.strip() and "\\n" in text:
        text = text.replace("\\n", "\n")
    out = {"reset": [], "not_reset": [], "all_done": False, "in_use_count": None}
    listing = False
    for line in text.splitlines():
        if _HEADER in line:
            listing = True
            continue
        found = _RESET.search(line)
        if found:
            out["reset"].append(found.group(1))
            continue
        found = _OLD_IN_USE.search(line)
        if found:
            out["not_reset"].append({"bus": found.group(1), "reason": "in use by another process", "kind": IN_USE})
            continue
        found = _NOT_RESET.match(line) if listing else None
        if found:
            out["not_reset"].append({"bus": found.group(1), "reason": found.group(2), "kind": _kind(found.group(2))})
            continue
        if not line.strip():
            listing = False
        found = _IN_USE_COUNT.search(line)
        if found:
            out["in_use_count"] = int(found.group(1))
        if line.strip() == "All done.":
            out["all_done"] = True
    return out
