# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Debian versions as dpkg orders them (``dpkg --compare-versions``), their upstream part, the newest of several.

Pure stdlib, no Ansible imports: the driver's decisions (driver_plan.py, branch_choice.py, driver_packages.py),
the fabric layer and the CUDA an image needs compare versions here.
"""

# ---------------------------------------------------------------------------------------------
# Debian versions


def _order(char):
    if char == "~":
        return -1
    if char.isdigit() or char == "":
        return 0
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _verrevcmp(left, right):
    """dpkg's verrevcmp(): alternating non-digit (lexical, '~' first) and digit (numeric) runs."""
    i = j = 0
    while i < len(left) or j < len(right):
        first_diff = 0
        while (i < len(left) and not left[i].isdigit()) or (j < len(right) and not right[j].isdigit()):
            a = _order(left[i]) if i < len(left) and not left[i].isdigit() else 0
            b = _order(right[j]) if j < len(right) and not right[j].isdigit() else 0
            if a != b:
                return a - b
            i += 1
            j += 1
        while i < len(left) and left[i] == "0":
            i += 1
        while j < len(right) and right[j] == "0":
            j += 1
        while i < len(left) and j < len(right) and left[i].isdigit() and right[j].isdigit():
            if not first_diff:
                first_diff = ord(left[i]) - ord(right[j])
            i += 1
            j += 1
        if i < len(left) and left[i].isdigit():
            return 1
        if j < len(right) and right[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def _split_version(version):
    epoch, _sep, rest = version.partition(":") if ":" in version else ("0", "", version)
    upstream, _sep, revision = rest.rpartition("-") if "-" in rest else (rest, "", "0")
    return int(epoch or 0), upstream, revision


def compare_versions(left, right):
    """<0, 0, >0 as ``dpkg --compare-versions`` orders two Debian versions."""
    le, lu, lr = _split_version(left)
    re_, ru, rr = _split_version(right)
    if le != re_:
        return le - re_
    return _verrevcmp(lu, ru) or _verrevcmp(lr, rr)


def upstream_version(version):
    """'1:580.95.05-0ubuntu0.24.04.1' -> '580.95.05'."""
    return _split_version(version)[1] if version else None


def newest_version(versions):
    best = None
    for version in versions:
        if best is None or compare_versions(version, best) > 0:
            best = version
    return best
