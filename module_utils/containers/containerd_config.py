# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure logic for registering the NVIDIA runtime with containerd: no Ansible imports, Python stdlib only.

`nvidia-ctk runtime configure --runtime=containerd` (toolkit >= 1.18) writes a drop-in
(/etc/containerd/conf.d/99-nvidia.toml from 1.18.1, /etc/containerd/config.d/ in 1.18.0) and adds
`<drop-in dir>/*.toml` to the `imports` of the root config.toml, which it re-renders whole (keys sorted,
comments gone). The module takes only the drop-in from the tool; the root config gets its `imports`
entry from `ensure_import` here, which edits that one statement and leaves every other byte alone.

Facts relied on (docs/research/containerd-k3s.md):
- Config versions: containerd 1.x `version = 2`, 2.0-2.2 `version = 3`, 2.3 `version = 4`. A non-empty file
  without `version` is version 1, which cannot import drop-ins; an empty or missing file counts as 2
  for the tool (its default).
- An imported file's version must not be higher than the root's: containerd 2.3.0-2.3.4 refuse to start
  ("drop-in config version 4 higher than root config version 2"). The tool copies the root's version
  into the drop-in when it reads the root from the file (`--config-source=file`).

Reading uses tomllib (Python >= 3.11); without it (older targets) a small reader of the root table's
statements is used, enough for `version` and `imports`, and full validation is left to nvidia-ctk.
"""
import fnmatch
import os
import re

try:
    import tomllib
except ImportError:  # Python < 3.11 on the target
    tomllib = None

DEFAULT_DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
# nvidia-ctk's version for an empty or missing root config (containerd 1.6/1.7 and 2.x all read it).
TOOL_DEFAULT_VERSION = 2
CONTAINERD_OF_VERSION = {2: "containerd 1.x", 3: "containerd 2.0-2.2", 4: "containerd 2.3"}


class ContainerdConfigError(ValueError):
    """A config the module must not touch: reported, never rewritten."""


# --------------------------------------------------------------------------------------------------
# A reader of the root table's statements (the lines before the first [table] header): where each
# starts and ends, so one statement can be edited in place.

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", "e": "\x1b", '"': '"', "\\": "\\"}


def _line_col(text, pos):
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def _error(text, pos, what):
    line, col = _line_col(text, pos)
    shown = text.split("\n")[line - 1].strip()[:120] if text else ""
    return ContainerdConfigError("%s (at line %d, column %d): %s" % (what, line, col, shown))


def _skip_blank(text, i):
    while i < len(text) and text[i] in " \t":
        i += 1
    return i


def _read_string(text, i):
    """The TOML string starting at text[i] (a quote): (its value, index after it)."""
    quote = text[i]
    triple = text.startswith(quote * 3, i)
    i += 3 if triple else 1
    out = []
    while i < len(text):
        c = text[i]
        if triple and text.startswith(quote * 3, i):
            # Up to two quotes may end the content right before the closing three.
            extra = 0
            while extra < 2 and text.startswith(quote * 4, i + extra):
                extra += 1
            out.append(quote * extra)
            value = "".join(out)
            if value.startswith("\n"):
                value = value[1:]
            return value, i + extra + 3
        if not triple and c == quote:
            return "".join(out), i + 1
        if not triple and c == "\n":
            break
        if c == "\\" and quote == '"':
            nxt = text[i + 1:i + 2]
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
                continue
            if nxt in ("u", "U"):
                width = 4 if nxt == "u" else 8
                digits = text[i + 2:i + 2 + width]
                if len(digits) == width and all(d in "0123456789abcdefABCDEF" for d in digits):
                    out.append(chr(int(digits, 16)))
                    i += 2 + width
                    continue
            if triple and nxt in (" ", "\t", "\n", "\r"):
                # Line-ending backslash: trims the whitespace that follows.
                j = i + 1
                while j < len(text) and text[j] in " \t\r\n":
                    j += 1
                i = j
                continue
            raise _error(text, i, "invalid escape in a string")
        out.append(c)
        i += 1
    raise _error(text, i - 1, "unterminated string")


def _skip_comment(text, i):
    end = text.find("\n", i)
    return len(text) if end < 0 else end


def _skip_value(text, i):
    """Index after the value starting at text[i]."""
    if i >= len(text):
        raise _error(text, i, "a value is missing")
    c = text[i]
    if c in "\"'":
        return _read_string(text, i)[1]
    if c in "[{":
        depth = 0
        while i < len(text):
            c = text[i]
            if c in "\"'":
                i = _read_string(text, i)[1]
                continue
            if c == "#":
                i = _skip_comment(text, i)
                continue
            if c in "[{":
                depth += 1
            elif c in "]}":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        raise _error(text, len(text) - 1, "unterminated array or inline table")
    end = i
    while end < len(text) and text[end] not in "#\r\n":
        end += 1
    while end > i and text[end - 1] in " \t":
        end -= 1
    if end == i:
        raise _error(text, i, "a value is missing")
    return end


def _read_key(text, i):
    parts = []
    while True:
        if i < len(text) and text[i] in "\"'":
            part, i = _read_string(text, i)
        else:
            match = _BARE_KEY.match(text, i)
            if not match:
                raise _error(text, i, "expected a key")
            part, i = match.group(), match.end()
        parts.append(part)
        i = _skip_blank(text, i)
        if i < len(text) and text[i] == ".":
            i = _skip_blank(text, i + 1)
            continue
        return parts, i


def root_statements(text):
    """The `key = value` statements of the root table, in order, and where the first [table] starts.

    Returns (statements, tables_at); each statement is a dict with `key` (a tuple of the dotted key's
    parts), `line_start` (start of its line), `value_start`, `value_end` and `end` (after its newline).
    tables_at is None when the file has no table.
    """
    statements = []
    i = 0
    while i < len(text):
        c = text[i]
        if c in " \t\r\n":
            i += 1
        elif c == "#":
            i = _skip_comment(text, i)
        elif c == "[":
            return statements, i
        else:
            line_start = text.rfind("\n", 0, i) + 1
            parts, i = _read_key(text, i)
            if i >= len(text) or text[i] != "=":
                raise _error(text, i, "expected '=' after a key")
            value_start = _skip_blank(text, i + 1)
            value_end = _skip_value(text, value_start)
            j = _skip_blank(text, value_end)
            if j < len(text) and text[j] == "#":
                j = _skip_comment(text, j)
            if j < len(text) and text[j] == "\r":
                j += 1
            if j < len(text) and text[j] != "\n":
                raise _error(text, j, "expected the end of the line after a value")
            end = min(j + 1, len(text))
            statements.append(dict(key=tuple(parts), line_start=line_start, value_start=value_start,
                                   value_end=value_end, end=end))
            i = end
    return statements, None


class _Unread(object):
    """A value the small reader does not decode (only ints, strings and arrays of strings matter here)."""

    def __repr__(self):
        return "<value>"


def _decode(raw):
    if raw[:1] in "\"'":
        return _read_string(raw, 0)[0]
    if raw[:1] == "[":
        items, i = [], 1
        while i < len(raw):
            c = raw[i]
            if c in " \t\r\n,":
                i += 1
            elif c == "#":
                i = _skip_comment(raw, i)
            elif c == "]":
                return items
            elif c in "\"'":
                value, i = _read_string(raw, i)
                items.append(value)
            else:
                return _Unread()
        return _Unread()
    if re.match(r"^[+-]?\d[\d_]*$", raw):
        return int(raw.replace("_", ""))
    return _Unread()


# --------------------------------------------------------------------------------------------------
# The root config

def _toml_error(path, exc):
    return ContainerdConfigError("%s is not valid TOML: %s" % (path, exc))


def parse_root(text, path="/etc/containerd/config.toml"):
    """What the module needs of a root config: a dict with `empty` (no keys and no tables: what the tool
    treats as a missing file), `version`, `imports`, `statements` (see root_statements) and `data` (the
    whole parsed file, or None without tomllib).

    Raises ContainerdConfigError naming the file for a text that is not TOML, or a root table this
    reader cannot locate the statements of (then the file is never edited).
    """
    data = None
    if tomllib is not None:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise _toml_error(path, exc)
    try:
        statements, tables_at = root_statements(text)
    except ContainerdConfigError as exc:
        raise _toml_error(path, exc)
    values = {}
    for statement in statements:
        if len(statement["key"]) == 1:
            values[statement["key"][0]] = _decode(text[statement["value_start"]:statement["value_end"]])
    if data is not None:
        version, imports, empty = data.get("version"), data.get("imports"), not data
        # Both readers must agree before the small one is trusted to locate the statement it edits.
        for key, value in (("version", version), ("imports", imports)):
            if (key in data) != (key in values) or (
                    key in data and not isinstance(values[key], _Unread) and value != values[key]):
                raise ContainerdConfigError("%s: the `%s` key is not a plain statement of the root table "
                                            "(dotted or inside an inline table); write it as `%s = ...` "
                                            "near the top of the file" % (path, key, key))
    else:
        version, imports = values.get("version"), values.get("imports")
        empty = not statements and tables_at is None
    return dict(empty=empty, version=version, imports=imports, statements=statements, data=data)


def config_version(root, path="/etc/containerd/config.toml"):
    """The root config's version as nvidia-ctk and containerd read it. root: parse_root's dict, or None
    for a missing file. An empty or missing file is TOOL_DEFAULT_VERSION.

    Raises ContainerdConfigError for a version-1 config (no `version` line or `version = 1`): it cannot
    import a drop-in, and the tool would rewrite the whole file instead.
    """
    if root is None or root["empty"]:
        return TOOL_DEFAULT_VERSION
    version = root["version"]
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
        raise ContainerdConfigError("%s: `version` must be a whole number (2 for containerd 1.x, 3 for 2.0-2.2, "
                                    "4 for 2.3), found %r" % (path, version))
    if version is None or version == 1:
        what = "has no `version` line" if version is None else "says `version = 1`"
        raise ContainerdConfigError(
            "%s %s, so containerd and nvidia-ctk read it as config version 1, which cannot import the "
            "toolkit's drop-in (nvidia-ctk would rewrite the whole file). Put `version = 2` (containerd 1.6/1.7) "
            "or `version = 3` (containerd 2.x) as its first line, converting the plugin sections if needed "
            "(`containerd config migrate` does it on 2.x)" % (path, what))
    return version


def dropin_version(text, path="nvidia-ctk's drop-in"):
    """`version` of a drop-in text (None when it has none)."""
    root = parse_root(text, path)
    return root["version"]


def version_mismatch(root_version, drop_version):
    """Why a drop-in of `drop_version` must not be imported by a root of `root_version`, or None."""
    if drop_version == root_version:
        return None
    return ("the drop-in has config version %s but the root config has version %s: they must match, or containerd "
            "merges the wrong plugin sections (%s names its CRI plugin differently), and containerd 2.3.0-2.3.4 "
            "refuse to start on an import whose version is higher than the root's"
            % (drop_version, root_version, CONTAINERD_OF_VERSION.get(drop_version, "that version")))


def import_pattern(drop_in):
    """The `imports` entry nvidia-ctk adds for a drop-in: its directory + /*.toml."""
    return os.path.dirname(drop_in) + "/*.toml"


def imports_cover(imports, drop_in, root_path="/etc/containerd/config.toml"):
    """Whether one of `imports` already makes containerd read `drop_in`: the same path, or a glob over its
    directory (containerd resolves a relative entry against the root config's directory; `*` does not
    cross a `/`)."""
    for entry in imports or ():
        if not isinstance(entry, str):
            continue
        full = entry if os.path.isabs(entry) else os.path.join(os.path.dirname(root_path), entry)
        full = os.path.normpath(full)
        if full == os.path.normpath(drop_in):
            return True
        if os.path.dirname(full) == os.path.dirname(drop_in) and "/" not in os.path.basename(full) \
                and fnmatch.fnmatchcase(os.path.basename(drop_in), os.path.basename(full)):
            return True
    return False


def _toml_string(value, literal=False):
    if literal and "'" not in value and "\n" not in value:
        return "'%s'" % value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"%s"' % escaped


def render_new_root(pattern, version=TOOL_DEFAULT_VERSION):
    """The root config nvidia-ctk writes when there was none (corpus containerd_configure_config.toml)."""
    return "imports = [%s]\nversion = %d\n" % (_toml_string(pattern), version)


def _array_insert(text, start, end, pattern):
    """Text of the array text[start:end] with `pattern` appended, in the array's own layout and quotes."""
    raw = text[start:end]
    last_end, quotes, i = None, [], 1
    while i < len(raw) - 1:
        c = raw[i]
        if c in "\"'":
            quotes.append(c)
            i = _read_string(raw, i)[1]
            last_end = i
        elif c == "#":
            i = _skip_comment(raw, i)
        else:
            i += 1
    literal = bool(quotes) and all(q == "'" for q in quotes)
    item = _toml_string(pattern, literal)
    if last_end is None:
        return "[" + item + raw[1:]
    tail = raw[last_end:]
    if "\n" in tail:
        # One element per line: the new one goes on a line of its own, indented like the last one, with a
        # trailing comma when the array has one.
        line_start = raw.rfind("\n", 0, last_end) + 1
        indent = re.match(r"[ \t]*", raw[line_start:]).group()
        comma = re.match(r"[ \t]*,", tail)
        head = raw[:last_end] + (comma.group() if comma else ",")
        rest = tail[comma.end():] if comma else tail
        newline = rest.index("\n")
        return head + rest[:newline + 1] + indent + item + ("," if comma else "") + "\n" + rest[newline + 1:]
    return raw[:last_end] + ", " + item + raw[last_end:]


def ensure_import(text, root, drop_in, root_path="/etc/containerd/config.toml"):
    """The root config's text with `drop_in` imported; `text` itself when it already is.

    text/root: the file and parse_root's dict, or None for a missing file (then the file nvidia-ctk would
    write). Only the `imports` statement is added or edited; every other byte stays. A file without keys
    gets `imports` and `version = 2` appended (what the tool writes into an empty file).
    """
    pattern = import_pattern(drop_in)
    if text is None:
        return render_new_root(pattern)
    if root["empty"]:
        sep = "" if not text or text.endswith("\n") else "\n"
        return text + sep + render_new_root(pattern)
    imports = root["imports"]
    if imports is not None and (not isinstance(imports, list) or not all(isinstance(x, str) for x in imports)):
        raise ContainerdConfigError("%s: `imports` must be a list of paths, found %r" % (root_path, imports))
    if imports_cover(imports, drop_in, root_path):
        return text
    statement = next((s for s in root["statements"] if s["key"] == ("imports",)), None)
    if statement is not None:
        if text[statement["value_start"]:statement["value_start"] + 1] != "[":
            raise ContainerdConfigError("%s: `imports` must be an array" % root_path)
        new_array = _array_insert(text, statement["value_start"], statement["value_end"], pattern)
        new = text[:statement["value_start"]] + new_array + text[statement["value_end"]:]
    else:
        # Right after `version`: containerd's docs want the version header first.
        after = next(s for s in root["statements"] if s["key"] == ("version",))
        at = after["end"]
        newline = "\r\n" if text[:at].endswith("\r\n") else "\n"
        line = "imports = [%s]%s" % (_toml_string(pattern), newline)
        if not text[:at].endswith("\n"):
            line = newline + line
        new = text[:at] + line + text[at:]
    _check_only_imports_changed(text, new, root, pattern, root_path)
    return new


def _check_only_imports_changed(before, after, root, pattern, path):
    """The edit must parse, add exactly `pattern` and leave every other setting as it was."""
    new_root = parse_root(after, path)
    expected = list(root["imports"] or []) + [pattern]
    same_rest = True
    if root["data"] is not None:
        old_rest = dict((k, v) for k, v in root["data"].items() if k != "imports")
        new_rest = dict((k, v) for k, v in new_root["data"].items() if k != "imports")
        same_rest = old_rest == new_rest
    if new_root["imports"] != expected or not same_rest:
        raise ContainerdConfigError("%s: could not add %r to `imports` without changing other settings; add it "
                                    "by hand" % (path, pattern))


def other_dropins_above(root_version, dropins):
    """[(path, version)] of the other imported drop-ins whose version is higher than the root's.

    dropins: {path: text}. Files that do not parse or have no version are skipped (not this module's).
    """
    found = []
    for path in sorted(dropins):
        try:
            version = dropin_version(dropins[path], path)
        except ContainerdConfigError:
            continue
        if isinstance(version, int) and not isinstance(version, bool) and version > root_version:
            found.append((path, version))
    return found


def plan(root_path, root_text, drop_in, dropin_current, dropin_wanted, root=None):
    """Every decision of a containerd registration, as data.

    root_text / dropin_current: the files now (None when missing); dropin_wanted: what nvidia-ctk wrote as the
    drop-in from this root config; root: parse_root's dict of root_text when the caller has it already.
    Raises ContainerdConfigError for a root config the module must not touch or a drop-in whose version
    differs from the root's.
    """
    if root is None and root_text is not None:
        root = parse_root(root_text, root_path)
    version = config_version(root, root_path)
    wanted_version = dropin_version(dropin_wanted)
    mismatch = version_mismatch(version, wanted_version)
    if mismatch:
        raise ContainerdConfigError("%s (root %s, drop-in %s)" % (mismatch, root_path, drop_in))
    root_after = ensure_import(root_text, root, drop_in, root_path)
    after = parse_root(root_after, root_path)
    return dict(
        config_version=version,
        import_pattern=import_pattern(drop_in),
        imports=after["imports"] or [],
        config_changed=root_after != root_text,
        config_after=root_after,
        drop_in_changed=dropin_current != dropin_wanted,
        changed=root_after != root_text or dropin_current != dropin_wanted,
    )


# --------------------------------------------------------------------------------------------------
# The runtimes a containerd config (a config.toml, a k3s-generated one, `containerd config dump`)
# defines for the CRI plugin: containerd 1.x's id and 2.x's.

CRI_PLUGINS = ("io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime")
# A runtime's table header or one of its subtables (`...runtimes.nvidia.options`, which defines the runtime
# implicitly), under either CRI plugin, with any TOML quoting: v2 configs use "...", k3s's v3 template and
# `containerd config dump` use '...'.
_RUNTIME_TABLE = re.compile(
    r"""^\s*\[\s*plugins\s*\.\s*(["'])(%s)\1\s*\.\s*containerd\s*\.\s*runtimes\s*\."""
    r"""\s*(?:(["'])([^"'\]]+)\3|([A-Za-z0-9_-]+))\s*(\.[^\]]*)?\]\s*$"""
    % "|".join(re.escape(p) for p in CRI_PLUGINS), re.M)
_TABLE_HEADER = re.compile(r"^\s*\[")
_BINARY_NAME = re.compile(r"""^\s*BinaryName\s*=\s*(["'])([^"']*)\1""")


def runtimes_in(config_text):
    """{runtime name: CRI plugin id} of every runtime table in a containerd config."""
    return {m.group(4) or m.group(5): m.group(2) for m in _RUNTIME_TABLE.finditer(config_text or "")}


def runtime_binaries(config_text):
    """{runtime name: the BinaryName of its `.options` table, or None} for every runtime in the config:
    the program containerd runs as runc for that runtime (nvidia-container-runtime for `nvidia`)."""
    binaries, options_of = {}, None
    for line in (config_text or "").splitlines():
        if _TABLE_HEADER.match(line):
            match = _RUNTIME_TABLE.match(line)
            name = (match.group(4) or match.group(5)) if match else None
            if name is not None:
                binaries.setdefault(name, None)
            options_of = name if match and (match.group(6) or "").strip(" .") == "options" else None
            continue
        found = _BINARY_NAME.match(line)
        if found and options_of is not None:
            binaries[options_of] = found.group(2)
    return binaries
