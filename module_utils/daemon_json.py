# -*- coding: utf-8 -*-
"""Pure logic for /etc/docker/daemon.json: parse, merge, render. No Ansible imports.

Two writers share daemon.json on a GPU host: the docker role (merging the operator's options) and
`nvidia-ctk runtime configure` (adding the nvidia runtime). Both render the file the way
nvidia-ctk 1.20 does (sorted keys, 4-space indent, no trailing newline, Go's HTML escaping), so a file
written by either one reads as unchanged to the other and runs stay idempotent.
"""
import json


class DaemonJsonError(ValueError):
    """daemon.json exists but is not a JSON object; it must be reported, never overwritten."""


def parse(text, path="/etc/docker/daemon.json"):
    """Return the config dict of a daemon.json text. Empty or whitespace-only means no settings.

    A file that is not a JSON object raises DaemonJsonError naming the file and the parse error.
    """
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DaemonJsonError("%s is not valid JSON: %s" % (path, exc))
    if not isinstance(data, dict):
        raise DaemonJsonError("%s must hold a JSON object, found %s" % (path, type(data).__name__))
    return data


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
