# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A process's resource limits as the kernel prints them (`/proc/<pid>/limits`, fs/proc/base.c proc_pid_limits):

    Limit                     Soft Limit           Hard Limit           Units
    Max stack size            8388608              unlimited            bytes
    Max locked memory         65536                65536                bytes
    Max nice priority         0                    0

One row per limit, the name (words with spaces) then the soft and hard values (a number or `unlimited`) and the
units, which some rows lack; older kernels pad every row with trailing spaces. Pure stdlib; real captures in
tests/fixtures/limits/.
"""
import re

UNLIMITED = "unlimited"
MEMLOCK = "Max locked memory"
STACK = "Max stack size"
_ROW = re.compile(r"^(Max [A-Za-z ]*?[A-Za-z])\s+(\d+|unlimited)\s+(\d+|unlimited)(?:\s+(\S+))?\s*$")


class LimitsParseError(ValueError):
    """The text is not a /proc/<pid>/limits table."""


def _value(token):
    return UNLIMITED if token == UNLIMITED else int(token)


def parse_limits(text):
    """/proc/<pid>/limits -> {name: {"soft", "hard", "units"}}: values are ints (the units' own: bytes for memory)
    or UNLIMITED; units None where the row has none. Raises LimitsParseError where no row reads."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    limits = {}
    for line in (text or "").replace("\r\n", "\n").split("\n"):
        match = _ROW.match(line.strip())
        if match:
            name, soft, hard, units = match.groups()
            limits[name] = {"soft": _value(soft), "hard": _value(hard), "units": units}
    if not limits:
        raise LimitsParseError("no 'Max ... <soft> <hard>' row (not /proc/<pid>/limits)")
    return limits


def at_least(value, need):
    """Whether a limit value (int or UNLIMITED) allows `need`; UNLIMITED allows anything."""
    return value == UNLIMITED or (value is not None and value >= need)


def describe(value, units="bytes"):
    """A limit value as a person reads it: `unlimited`, `65536 bytes (64 KiB)`."""
    if value == UNLIMITED or value is None:
        return UNLIMITED if value == UNLIMITED else "unknown"
    if units != "bytes":
        return "%d %s" % (value, units or "")
    for size, unit in ((1024 ** 3, "GiB"), (1024 ** 2, "MiB"), (1024, "KiB")):
        if value >= size and value % size == 0:
            return "%d bytes (%d %s)" % (value, value // size, unit)
    return "%d bytes" % value
