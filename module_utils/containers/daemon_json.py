# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure logic for /etc/docker/daemon.json: parse, merge, render. No Ansible imports.

Two writers share daemon.json on a GPU host: the docker role (merging the operator's options) and
`nvidia-ctk runtime configure` (adding the nvidia runtime). Both render the file the way
nvidia-ctk 1.20 does (sorted keys, 4-space indent, no trailing newline, Go's HTML escaping), so a file
written by either one reads as unchanged to the other and runs stay idempotent.
"""
import json

from ansible.module_utils.containers.versions import engine_major


class DaemonJsonError(ValueError):
    """daemon.json exists but is not a JSON object; it must be reported, never overwritten."""


BOM = u"\ufeff"
# Docker reads daemon.json with a UTF-8 byte order mark from 23.0 (moby/moby#44770, backported to
# 23.0 in #44777); before that Go's decoder stops at it ("invalid character 'ï' looking for
# beginning of value").
BOM_ACCEPTED_FROM = 23


def parse(text, path="/etc/docker/daemon.json", accepts_bom=True):
    """Return the config dict of a daemon.json text. Empty or whitespace-only means no settings.

    A file that is not a JSON object raises DaemonJsonError naming the file, where the error is
    as a person counts it (line and column; a trailing comma is named at the comma, not at the
    brace after it) and the line itself.  A leading byte order mark is read past when the engine
    does (accepts_bom: docker >= 23), else refused as the engine refuses it.
    """
    if text is None:
        return {}
    if text.startswith(BOM):
        if not accepts_bom:
            raise DaemonJsonError("%s starts with a UTF-8 byte order mark, which this docker (before 23.0) "
                                  "cannot read: save it as UTF-8 without a BOM" % path)
        text = text[len(BOM):]
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DaemonJsonError("%s is not valid JSON: %s" % (path, locate_error(text, exc)))
    if not isinstance(data, dict):
        raise DaemonJsonError("%s must hold a JSON object, found %s" % (path, type(data).__name__))
    return data


def engine_accepts_bom(version_text):
    """Whether the docker of `dockerd --version` / `docker info` ServerVersion reads a BOM; None: unknown."""
    major = engine_major(version_text)
    return None if major is None else major >= BOM_ACCEPTED_FROM


def _line_col(text, pos):
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def locate_error(text, exc):
    """The parse error where a person would look for it: 'line 3, column 27: ...: <that line>'."""
    pos = getattr(exc, "pos", None)
    message = getattr(exc, "msg", None) or str(exc)
    if pos is None:
        return str(exc)
    before = text[:pos].rstrip()
    if before.endswith(",") and (message.startswith("Expecting property name") or message.startswith("Expecting value")
                                 or message.startswith("Illegal trailing comma")):
        pos, message = len(before) - 1, "a trailing comma (JSON allows none before } or ])"
    line, column = _line_col(text, pos)
    shown = text.split("\n")[line - 1].strip() if text else ""
    return "line %d, column %d: %s: %s" % (line, column, message, shown[:120])


def merge(current, options):
    """Merge `options` into `current` and return a new dict; `current` is not changed.

    Keys only in `current` (the operator's own) always survive. Objects merge key by key, at any
    depth (so `features.cdi` joins an existing `features.buildkit`); any other value given in
    `options` (strings, numbers, lists) replaces the current one. A value of None in `options`
    removes that key: the only way a key ever goes.
    """
    result = dict(current)
    for key, value in options.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = value
    return result


def fill_defaults(current, defaults):
    """`defaults` added where `current` has nothing yet, at any depth, and a new dict returned: a value the file
    already has (the operator's, or an earlier run's) is kept, whatever it is."""
    result = dict(current)
    for key, value in (defaults or {}).items():
        if key not in result:
            result[key] = value
        elif isinstance(value, dict) and isinstance(result[key], dict):
            result[key] = fill_defaults(result[key], value)
    return result


# Seed 000's training container (`--ulimit memlock=-1 --ulimit stack=67108864`) as docker's defaults for every
# container (dockerd's `default-ulimits`): pinned memory for NCCL and data loaders (the default memlock is 64 KB),
# and the stack PyTorch recommends. Where daemon.json already sets one, that one stays.
TRAINING_ULIMITS = {"default-ulimits": {
    "memlock": {"Name": "memlock", "Hard": -1, "Soft": -1},
    "stack": {"Name": "stack", "Hard": 67108864, "Soft": 67108864},
}}


def keep_features(before, after):
    """nvidia-ctk <= 1.20.0 replaces the whole `features` map when it sets `features.cdi`.

    Put back every feature key of `before` that `after` dropped, keeping `after`'s values.
    """
    old = before.get("features")
    new = after.get("features")
    if not isinstance(old, dict) or not isinstance(new, dict):
        return after
    restored = dict(after)
    restored["features"] = dict(old, **new)
    return restored


def render(config):
    """Text of daemon.json as nvidia-ctk writes it (Go json.MarshalIndent with 4 spaces)."""
    text = json.dumps(config, indent=4, sort_keys=True, ensure_ascii=False, separators=(",", ": "))
    # Go's encoder escapes these even inside strings; match it so both writers agree byte for byte.
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                          (u"\u2028", "\\u2028"), (u"\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text


def changed_keys(before, after):
    """Sorted top-level keys whose value differs between two configs (added, changed or removed)."""
    keys = set(before) | set(after)
    return sorted(k for k in keys if before.get(k, _MISSING) != after.get(k, _MISSING))


_MISSING = object()
