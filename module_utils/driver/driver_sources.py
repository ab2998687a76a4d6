# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Enable apt components (non-free, non-free-firmware, ...) in a host's existing Debian sources.

Pure stdlib, no Ansible imports. Two formats:
- deb822 (``/etc/apt/sources.list.d/debian.sources``, the default since Debian 12's installer for new
  systems and trixie's): the ``Components:`` field of every stanza that already has the anchor
  component (``main``) gets the missing components appended;
- one-line (``/etc/apt/sources.list``): every ``deb``/``deb-src`` line with the anchor component does.
Everything else - comments, other fields, order, blank lines, other stanzas - is kept byte for byte.
"""
import re


class SourcesError(ValueError):
    """The file is not an apt sources file this module can edit."""


_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):(.*)$")


def _stanzas(lines):
    """Index ranges [start, end) of the deb822 paragraphs (blank lines separate them)."""
    spans, start = [], None
    for i, line in enumerate(lines):
        if line.strip() == "":
            if start is not None:
                spans.append((start, i))
                start = None
        elif start is None:
            start = i
    if start is not None:
        spans.append((start, len(lines)))
    return spans


def _fields(lines, start, end):
    """{lower-case field: (first line index, last line index, value)} of one paragraph (comments skipped)."""
    fields = {}
    current = None
    for i in range(start, end):
        line = lines[i].rstrip("\n")
        if line.startswith("#"):
            continue
        if line[:1] in (" ", "\t") and current:
            # current is a tuple once set
            name, first, _last, value = current  # pylint: disable=unpacking-non-sequence
            current = (name, first, i, value + " " + line.strip())
            fields[name] = (first, i, current[3])
            continue
        match = _FIELD.match(line)
        if not match:
            raise SourcesError("line %d is neither a field, a continuation nor a comment: %r" % (i + 1, line))
        current = (match.group(1).lower(), i, i, match.group(2).strip())
        fields[current[0]] = (i, i, current[3])
    return fields


def paragraphs(text):
    """[(first line number, {lower-case field: value})] of every deb822 paragraph that is not only comments.

    Also reads apt_preferences(5) files (apt_preferences.parse_preferences). Raises SourcesError naming the line
    that is neither a field, a continuation nor a comment.
    """
    lines = text.splitlines(True)
    result = []
    for start, end in _stanzas(lines):
        if all(lines[i].startswith("#") for i in range(start, end)):
            continue
        result.append((start + 1, {name: field[2] for name, field in _fields(lines, start, end).items()}))
    return result


def _merge(existing, wanted):
    return existing + [c for c in wanted if c not in existing]


def enable_deb822(text, components, anchor="main"):
    """(new text, [description of each changed stanza]) for a deb822 .sources file."""
    lines = text.splitlines(True)
    changes = []
    replacements = {}
    for start, end in _stanzas(lines):
        if all(lines[i].startswith("#") for i in range(start, end)):
            continue
        fields = _fields(lines, start, end)
        if "components" not in fields:
            continue  # a flat repository (Suites: /) has none
        first, last, value = fields["components"]
        have = value.split()
        if anchor and anchor not in have:
            continue
        if fields.get("enabled", (0, 0, "yes"))[2].lower() == "no":
            continue
        new = _merge(have, components)
        if new == have:
            continue
        prefix = re.match(r"^([A-Za-z-]+:[ \t]*)", lines[first]).group(1)
        ending = "\n" if lines[last].endswith("\n") else ""
        replacements[first] = (last, prefix + " ".join(new) + ending)
        uris = fields.get("uris", (0, 0, "?"))[2]
        suites = fields.get("suites", (0, 0, "?"))[2]
        changes.append("%s %s: %s -> %s" % (uris, suites, " ".join(have), " ".join(new)))
    out = []
    i = 0
    while i < len(lines):
        if i in replacements:
            last, line = replacements[i]
            out.append(line)
            i = last + 1
            continue
        out.append(lines[i])
        i += 1
    return "".join(out), changes


_ONE_LINE = re.compile(r"^(\s*deb(?:-src)?\s+(?:\[[^\]]*\]\s+)?\S+\s+\S+)((?:\s+[^\s#]+)*)(\s*(?:#.*)?)$")


def enable_one_line(text, components, anchor="main"):
    """(new text, changes) for a one-line-format sources.list."""
    out, changes = [], []
    for line in text.splitlines(True):
        body = line.rstrip("\n")
        ending = line[len(body):]
        match = None if body.lstrip().startswith("#") else _ONE_LINE.match(body)
        if not match:
            out.append(line)
            continue
        have = match.group(2).split()
        if not have or (anchor and anchor not in have):
            out.append(line)
            continue
        new = _merge(have, components)
        if new == have:
            out.append(line)
            continue
        changes.append("%s: %s -> %s" % (match.group(1).strip(), " ".join(have), " ".join(new)))
        out.append(match.group(1) + " " + " ".join(new) + match.group(3) + ending)
    return "".join(out), changes


def components_of(text, deb822=True):
    """[components of each enabled entry], for reporting and tests."""
    result = []
    if deb822:
        lines = text.splitlines(True)
        for start, end in _stanzas(lines):
            if all(lines[i].startswith("#") for i in range(start, end)):
                continue
            fields = _fields(lines, start, end)
            if "components" in fields:
                result.append(fields["components"][2].split())
    else:
        for line in text.splitlines():
            match = None if line.lstrip().startswith("#") else _ONE_LINE.match(line)
            if match:
                result.append(match.group(2).split())
    return result


# ---------------------------------------------------------------------------------------------
# other sources of one repository

_SOURCE_LINE = re.compile(r"^\s*(deb|deb-src)\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)")


def source_entries(text, deb822):
    """[{uri, suite, signed_by, line}] of the enabled entries of one apt sources file: a deb822 `.sources`
    (Enabled: no skipped) or a one-line `.list` (comments skipped). Raises SourcesError for a deb822 file apt
    could not read either."""
    out = []
    if deb822:
        for line, fields in paragraphs(text):
            if fields.get("enabled", "yes").strip().lower() == "no":
                continue
            for uri in fields.get("uris", "").split():
                for suite in fields.get("suites", "").split():
                    out.append({"uri": uri, "suite": suite, "signed_by": fields.get("signed-by") or None, "line": line})
        return out
    for number, raw in enumerate(text.splitlines(), 1):
        match = _SOURCE_LINE.match(raw)
        if not match:
            continue
        options = dict(o.split("=", 1) for o in (match.group(2) or "").split() if "=" in o)
        out.append({"uri": match.group(3), "suite": match.group(4), "signed_by": options.get("signed-by"),
                    "line": number})
    return out


def conflicting_sources(files, uri, suite, signed_by, arch=None):
    """The entries of {path: text} that name the repository (uri, a trailing slash aside, and suite) with
    another Signed-By: apt then refuses every source ("Conflicting values set for option Signed-By regarding
    source ..."). arch: the host's dpkg architecture, which apt puts for `$(ARCH)` in a URI before it
    compares. [{path, line, signed_by}]; a deb822 file apt cannot read either is skipped."""
    def same(text):
        return (text.replace("$(ARCH)", arch) if arch else text).rstrip("/")
    want = same(uri)
    found = []
    for path in sorted(files):
        try:
            entries = source_entries(files[path], deb822=path.endswith(".sources"))
        except SourcesError:
            continue
        for entry in entries:
            if same(entry["uri"]) == want and entry["suite"] == suite and entry["signed_by"] != signed_by:
                found.append({"path": path, "line": entry["line"], "signed_by": entry["signed_by"]})
    return found
