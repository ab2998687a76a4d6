# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nvidia-persistenced's packaged systemd unit: does it leave persistence mode off, and the drop-in that fixes it.

Pure stdlib, no Ansible imports.

Ubuntu's nvidia-compute-utils-<branch> ships (static, no [Install]):
    [Unit]  StopWhenUnneeded=true
    [Service]  ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
The daemon then runs "healthy" with persistence mode off. Debian's nvidia-persistenced and NVIDIA's own
unit start it with persistence mode on (and have [Install] WantedBy=multi-user.target).
"""
import re

NO_PM_FLAG = "--no-persistence-mode"
HEADER = ("# Managed by gpuhost (role nvidia_persistence). The packaged unit leaves persistence mode off;\n"
          "# this runs nvidia-persistenced with persistence mode on and keeps it running.\n")


def parse_unit(text):
    """{section: [(key, value), ...]} of a systemd unit file (comments and blank lines skipped,
    backslash continuations joined)."""
    sections = {}
    current = None
    pending = ""
    for raw in (text or "").splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        if not line or line[0] in "#;":
            continue
        header = re.match(r"^\[(.+)\]$", line)
        if header:
            current = sections.setdefault(header.group(1), [])
            continue
        if current is None or "=" not in line:
            continue
        key, _sep, value = line.partition("=")
        current.append((key.strip(), value.strip()))
    return sections


def _values(sections, section, key):
    return [v for k, v in sections.get(section, []) if k == key]


def _effective_exec_start(values):
    """systemd semantics: an empty ExecStart= clears the list."""
    result = []
    for value in values:
        if value == "":
            result = []
        else:
            result.append(value)
    return result


def analyse(unit_text):
    """What the packaged unit does: exec_start, no_persistence_mode, stop_when_unneeded, static, and the
    drop-in text that makes it run with persistence mode on ('' when none is needed)."""
    sections = parse_unit(unit_text)
    exec_start = _effective_exec_start(_values(sections, "Service", "ExecStart"))
    no_pm = any(NO_PM_FLAG in cmd.split() for cmd in exec_start)
    stop_values = _values(sections, "Unit", "StopWhenUnneeded")
    stop_when_unneeded = bool(stop_values) and stop_values[-1].lower() in ("1", "yes", "true", "on")
    install = sections.get("Install", [])
    static = not any(k in ("WantedBy", "RequiredBy", "Alias", "Also", "UpheldBy") for k, _value in install)
    lines = []
    if stop_when_unneeded:
        lines += ["[Unit]", "StopWhenUnneeded=false", ""]
    if no_pm:
        fixed = [" ".join(w for w in cmd.split() if w != NO_PM_FLAG) for cmd in exec_start]
        lines += ["[Service]", "ExecStart="] + ["ExecStart=%s" % cmd for cmd in fixed] + [""]
    dropin = (HEADER + "\n".join(lines).rstrip("\n") + "\n") if lines else ""
    return {"exec_start": exec_start, "no_persistence_mode": no_pm, "stop_when_unneeded": stop_when_unneeded,
            "static": static, "dropin": dropin}


METHODS = ("auto", "daemon", "nvidia-smi")


def choose(method, found, masked, unmask):
    """How persistence mode is kept on: "daemon" (nvidia-persistenced) or "nvidia-smi" (`nvidia-smi -pm 1`, legacy
    persistence mode, lost at every reboot).

    method: auto, daemon or nvidia-smi (role nvidia_persistence's nvidia_persistence_method); found: the unit is
    installed and not masked; masked: it is masked; unmask: the caller unmasks a masked unit (it stops instead
    when not). The daemon wherever there is one, or will be once unmasked, unless nvidia-smi is asked for; daemon
    without a daemon is the caller's to refuse."""
    return "daemon" if method != "nvidia-smi" and (found or (masked and unmask)) else "nvidia-smi"


def dropin_state(method, state=None):
    """The drop-in's state: as given, else absent for method nvidia-smi (no daemon to fix), present otherwise."""
    return state or ("absent" if method == "nvidia-smi" else "present")
