# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""dpkg's package states: the one `dpkg-query` format gpuhost asks for and the one parser of what dpkg says.

Every caller (the stack check's layers, the driver plan, Secure Boot's module source, drift and the converged
fingerprint) queries with FORMAT and reads the answer with parse(). parse() also reads the two other ways
dpkg prints the same state, so older captures and `dpkg -l` pastes need no parser of their own:

    FORMAT      ${Package}\t${Version}\t${db:Status-Abbrev}\n     e.g. "nvidia-driver\t580.105.08-1\thi "
    words       ${Package}\t${Version}\t${db:Status-Want}\t${db:Status-Status}[\t${db:Status-Eflag}]
    dpkg -l     "hi  nvidia-driver  580.105.08-1  amd64  NVIDIA metapackage"

The three status letters (dpkg-query(1), --list): desired action u i h r p (unknown, install, hold,
deinstall, purge); package status n c H U F W t i (not-installed, config-files, half-installed, unpacked,
half-configured, triggers-awaited, triggers-pending, installed); error flag ' ' or R (reinst-required).
The words are dpkg's own (db:Status-Want / db:Status-Status / db:Status-Eflag), so a package reads the same
whichever form it came in.

Each package: {version, want, status, eflag, abbrev, held, installed, unpacked, half}:
    held        want is hold (apt-mark hold / dpkg --set-selections)
    installed   configured: status installed or triggers-pending/-awaited, held or not ('hi' counts)
    unpacked    its files are on disk (installed, or unpacked / half-configured: a failed postinst)
    half        dpkg left it part way (half-installed, unpacked, half-configured) or wants it reinstalled
"""
import re

FORMAT = "${Package}\t${Version}\t${db:Status-Abbrev}\n"

WANT = {"u": "unknown", "i": "install", "h": "hold", "r": "deinstall", "p": "purge"}
STATUS = {"n": "not-installed", "c": "config-files", "H": "half-installed", "U": "unpacked",
          "F": "half-configured", "W": "triggers-awaited", "t": "triggers-pending", "i": "installed"}
EFLAG = {" ": "ok", "R": "reinstreq"}
_LETTER = dict([(word, letter) for letter, word in WANT.items()] + [(word, letter) for letter, word in STATUS.items()]
               + [("ok", " "), ("reinstreq", "R")])
CONFIGURED = ("installed", "triggers-pending", "triggers-awaited")
ON_DISK = CONFIGURED + ("unpacked", "half-configured")
HALF = ("half-installed", "unpacked", "half-configured")

_ABBREV = re.compile(r"^[uihrp][ncHUFWti][ R]?$")
_LIST_ROW = re.compile(r"^(?P<abbrev>[uihrp][ncHUFWti][ R]?)\s+(?P<pkg>[a-z0-9][a-z0-9.+-]*)(?::[a-z0-9]+)?\s+"
                       r"(?P<version>\S+)")


def query_argv(dpkg_query, packages=(), extra=()):
    """`dpkg-query -W -f FORMAT PACKAGE...`: extra fields (e.g. '${Depends}') go after the status, tab-separated."""
    fmt = FORMAT if not extra else FORMAT[:-1] + "".join("\t" + f for f in extra) + "\n"
    return [dpkg_query, "-W", "-f", fmt] + list(packages)


def entry(version, want, status, eflag="ok"):
    """One package's state from dpkg's words."""
    version = version or None
    return {"version": version, "want": want, "status": status, "eflag": eflag,
            "abbrev": "".join(_LETTER.get(w, "?") for w in (want, status, eflag)),
            "held": want == "hold", "installed": status in CONFIGURED and bool(version),
            "unpacked": status in ON_DISK and bool(version),
            "half": status in HALF or eflag == "reinstreq"}


def _from_abbrev(version, abbrev):
    abbrev = abbrev if len(abbrev) > 2 else abbrev + " "
    return entry(version, WANT[abbrev[0]], STATUS[abbrev[1]], EFLAG.get(abbrev[2], "ok"))


def _line(line):
    """(name, entry) of one line in any of the three forms, or None."""
    fields = line.split("\t")
    if len(fields) >= 3 and fields[0].strip():
        name, version = fields[0].strip(), fields[1].strip()
        if len(fields) >= 4 and fields[2] in WANT.values() and fields[3] in STATUS.values():
            eflag = fields[4].strip() if len(fields) > 4 and fields[4].strip() in EFLAG.values() else "ok"
            return name, entry(version, fields[2], fields[3], eflag)
        abbrev = fields[2].rstrip("\r\n")
        return (name, _from_abbrev(version, abbrev)) if _ABBREV.match(abbrev) else None
    match = _LIST_ROW.match(line)
    if match:
        return match.group("pkg"), _from_abbrev(match.group("version"), match.group("abbrev"))
    return None


def parse(text):
    """{package: state} of `dpkg-query -W -f FORMAT`, the words form or `dpkg -l` (':arch' dropped; of two
    architectures of one name the installed one wins). Lines of anything else are skipped."""
    found = {}
    for raw in (text or "").replace("\r\n", "\n").split("\n"):
        parsed = _line(raw)
        if not parsed:
            continue
        name, state = parsed
        name = name.split(":")[0]
        if name not in found or (state["unpacked"] and not found[name]["unpacked"]):
            found[name] = state
    return found


def installed_versions(packages):
    """{package: version} of the configured ones (held or not) of parse()'s result."""
    return dict((name, p["version"]) for name, p in (packages or {}).items() if p["installed"])


def describe(state):
    """'half-configured (dpkg iF)': what a person reads for a state."""
    word = state["status"] if state["eflag"] == "ok" else "%s, reinstall required" % state["status"]
    return "%s (dpkg %s)" % (word, state["abbrev"].rstrip())
