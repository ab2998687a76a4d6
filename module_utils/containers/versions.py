# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the container tools say their version is: the one parser of each version output.

    version_tuple(text)    the first dotted version in a text as (major, minor, patch), or None
    version_token(text)    that version as the tool printed it ('26.1.5+dfsg1', '1.7.24~ds1'), or None
    engine_version(text)   the container engine's: `docker version --format '{{.Server.Version}}'` (or
                           .Client), `dockerd --version`, `containerd --version`, `podman --version`,
                           docker info's ServerVersion -> the token
    engine_major(text)     its major release (26), or None
    ctk_version(text)      `nvidia-ctk --version` -> '1.18.0'

Real outputs in tests/fixtures/cdi_versions/ and tests/fixtures/gpus_path/ (tests/unit/test_tool_versions.py).
Pure functions over captured text; the commands run through host/runner.py.
"""
import re

_VERSION_IN_TEXT = re.compile(r"(?<![\w.])v?(\d+)\.(\d+)(?:\.(\d+))?")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# "NVIDIA Container Toolkit CLI version 1.18.0" (the first line of `nvidia-ctk --version`; `commit: ...` follows)
_CTK_VERSION = re.compile(r"\bversion\s+v?(\d+\.\d+\.\d+\S*)", re.I)


def version_tuple(text):
    """The first dotted version in a text, as a tuple of three ints, or None.

    Takes what the tools print: '26.1.5+dfsg1', '1.7.24~ds1', 'v2.0.0', 'podman version 4.3.1',
    'containerd containerd.io 1.7.27 05044ec...', 'NVIDIA Container Toolkit CLI version 1.18.0'.
    """
    match = _VERSION_IN_TEXT.search(text or "")
    if not match:
        return None
    return tuple(int(part or 0) for part in match.groups())


def version_token(text):
    """The version as the tool printed it ('26.1.5+dfsg1', '1.7.24~ds1'), without a leading 'v' or a
    trailing comma; None when the text names no version."""
    for token in (text or "").split():
        if version_tuple(token) and _VERSION_IN_TEXT.match(token):
            return token.rstrip(",").lstrip("v")
    return None


def engine_version(text):
    """The container engine's version as it printed it, from any of its version outputs (see the module's
    docstring), or None."""
    return version_token(text)


def engine_major(text):
    """The engine's major release (docker 26 from '26.1.5+dfsg1' or 'Docker version 26.1.5, build ...'), or None."""
    version = version_tuple(engine_version(text))
    return version[0] if version else None


def ctk_version(text):
    """`nvidia-ctk --version` -> '1.18.0' (the version after the word 'version'; else the first version in
    the text); None when it names none."""
    text = _ANSI.sub("", text or "")
    match = _CTK_VERSION.search(text)
    return match.group(1) if match else version_token(text)
