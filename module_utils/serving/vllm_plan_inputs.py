# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The vLLM memory plan's inputs (vllm_plan and the modules beside it): the one error a bad input raises,
the checks of numbers, utilisations and flags, and the vLLM version whose rules a plan follows.

Pure functions, stdlib only, Python >= 3.9 (shipped to hosts as module_utils).
"""
import math

from ansible.module_utils.serving import vllm_overheads as vo


class PlanError(ValueError):
    """Bad input to the plan; the message is one line meant for an operator."""


# ---------------------------------------------------------------- inputs

def _number(value, name, minimum=None, integer=False, allow_none=False):
    if value is None:
        if allow_none:
            return None
        raise PlanError("%s is required" % name)
    if isinstance(value, bool):
        raise PlanError("%s must be a number, got %r" % (name, value))
    try:
        number = float(str(value).replace(",", "").replace("_", ""))
    except (TypeError, ValueError):
        raise PlanError("%s must be a number, got %r" % (name, value))
    if math.isnan(number) or math.isinf(number):
        raise PlanError("%s must be finite, got %r" % (name, value))
    if integer:
        if number != int(number):
            raise PlanError("%s must be a whole number, got %r" % (name, value))
        number = int(number)
    if minimum is not None and number < minimum:
        raise PlanError("%s must be >= %s, got %r" % (name, minimum, value))
    return number


def _utilization(value, name="gpu_memory_utilization"):
    util = _number(value, name)
    if not 0 < util <= 1:
        raise PlanError("%s must be in (0, 1], got %r (a share of the whole device)" % (name, value))
    return util


def _flag(value, name):
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "1", "on"):
        return True
    if text in ("false", "no", "0", "off"):
        return False
    if text in ("auto", ""):
        return None
    raise PlanError("%s must be true, false or auto, got %r" % (name, value))


def resolve_version(vllm_version=None, image=None):
    """(version tuple or None, text, source) from --vllm-version or the image's tag."""
    if vllm_version:
        version = vo.parse_version(vllm_version)
        if version is None:
            raise PlanError("vllm_version %r is not a version like 0.11.0" % vllm_version)
        return version, str(vllm_version), "given"
    if image:
        text = vo.version_of_image(image)
        if text:
            return vo.parse_version(text), text, "image tag %s" % image
        return None, None, "image %s names no version: newest known rules" % image
    return None, None, "not given: newest known rules"
