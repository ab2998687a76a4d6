# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The operator's apt pins (apt_preferences(5)): the files apt reads them from, how apt reads them, and which
stanzas would stand in the way of a driver plan (driver_plan.py): those of the files other than
gpuhost's own pin file.

Pure stdlib, no Ansible imports.

    pins = operator_pins(files, own_path, result)   # the operator's apt pins this plan would override
"""
import fnmatch
import posixpath
import re

from ansible.module_utils.driver.driver_request import DriverChoiceError
from ansible.module_utils.driver.driver_sources import SourcesError, paragraphs


# ---------------------------------------------------------------------------------------------
# The operator's apt pins (apt_preferences(5)): files other than gpuhost's own pin file

PREFERENCES = "/etc/apt/preferences"
PREFERENCES_PARTS = "/etc/apt/preferences.d"
BACKUP_DIR = "/var/backups/gpuhost"
# apt_preferences(5): alphanumerics, hyphen, underscore and period; apt's own check (GetListOfFilesInDir
# in apt-pkg/contrib/fileutl.cc) also lets ':' through, so a file named that way is read too.
_PREF_PART_NAME = re.compile(r"^[A-Za-z0-9_:.-]+$")
_WILDCARD = re.compile(r"[*?\[]")


def apt_reads_preferences_part(name):
    """Whether apt reads the file `name` of /etc/apt/preferences.d.

    apt_preferences(5): the files "have either no or "pref" as filename extension and only contain
    alphanumeric, hyphen (-), underscore (_) and period (.) characters"; others are ignored (with a notice).
    Like apt, names starting with a period (hidden files) or ending with one are skipped too.
    """
    if not name or name.startswith(".") or name.endswith(".") or not _PREF_PART_NAME.match(name):
        return False
    return "." not in name or name.rsplit(".", 1)[1] == "pref"


def preference_files(part_names, main=PREFERENCES, parts=PREFERENCES_PARTS):
    """The paths apt reads its pins from, in its order: the accepted names of `parts` (sorted), then `main`."""
    accepted = sorted(name for name in part_names or [] if apt_reads_preferences_part(name))
    return [posixpath.join(parts, name) for name in accepted] + [main]


def _priority(value):
    if value is None:
        return None
    if value.strip() == "never":  # apt >= 2.x, only for 'Package: *'
        return -32768
    try:
        return int(value.strip())
    except ValueError:
        return None


def parse_preferences(text):
    """apt_preferences(5) text -> [{line, packages, pin_type, pin, priority, generic}], one per stanza.

    packages: the patterns of the Package line (names, globs, /regex/); generic: 'Package: *' (the form
    that sets the priority of whole sources); pin_type: version, release, origin (lower case; None without
    a Pin line); pin: the rest of the Pin line; priority: the Pin-Priority as a number (None when missing
    or not a number). Comments ('#') and Explanation lines are skipped. Raises ValueError for a line apt
    could not read either.
    """
    stanzas = []
    try:
        found = paragraphs(text or "")
    except SourcesError as exc:
        raise ValueError(str(exc))
    for line, fields in found:
        package = (fields.get("package") or "").strip()
        pin_type, _sep, pin = (fields.get("pin") or "").strip().partition(" ")
        stanzas.append({"line": line, "packages": package.split(), "generic": package == "*",
                        "pin_type": pin_type.lower() or None, "pin": pin.strip(),
                        "priority": _priority(fields.get("pin-priority"))})
    return stanzas


def _expression_matches(pattern, value):
    """apt's pkgVersionMatch::ExpressionMatches: /regex/ (extended, case-insensitive, unanchored) or an
    fnmatch glob (case-insensitive)."""
    if len(pattern) > 1 and pattern.startswith("/") and pattern.endswith("/"):
        try:
            return re.search(pattern[1:-1], value, re.IGNORECASE) is not None
        except re.error:
            return False  # apt warns "Invalid regular expression" and matches nothing
    return fnmatch.fnmatchcase(value.lower(), pattern.lower())


def package_pattern_matches(pattern, name):
    """Whether a Package pattern of a preferences stanza names the binary package `name`, as apt's
    pkgPolicy::CreatePin reads it: an architecture qualifier is dropped; /regex/ or a pattern with * ? [
    is an expression, anything else the exact name. 'src:' patterns name source packages, which the plan
    does not know: they match nothing here."""
    if pattern.startswith("src:"):
        return False
    if ":" in pattern:
        pattern = pattern.rsplit(":", 1)[0]
    if (len(pattern) > 1 and pattern.startswith("/") and pattern.endswith("/")) or _WILDCARD.search(pattern):
        return _expression_matches(pattern, name)
    return pattern == name


def version_pin_matches(pattern, version):
    """Whether 'Pin: version <pattern>' selects the Debian version `version` (pkgVersionMatch: a trailing
    '*' makes a prefix match, else the whole version; then the pattern as a glob or /regex/)."""
    prefix = pattern.endswith("*")
    core = pattern[:-1] if prefix else pattern
    if version.lower().startswith(core.lower()) if prefix else version.lower() == core.lower():
        return True
    return _expression_matches(core, version)


def _prediction_vs_pin(pattern, wanted):
    """(may match, must match) of 'Pin: version <pattern>' against a predicted plan's version
    (580.95.05, 580.* or >=580), whose package versions are not known yet. Undecidable patterns (a regex,
    an epoch) may match and need not."""
    if pattern.startswith("/") or ":" in pattern:
        return True, False
    wild = _WILDCARD.search(pattern)
    literal = pattern[:wild.start()] if wild else pattern
    pure_prefix = bool(wild) and wild.start() == len(pattern) - 1 and pattern.endswith("*")
    if wanted.startswith(">="):
        branch = re.match(r"^(\d{3,4})\.", literal)
        return (branch is None or int(branch.group(1)) >= int(wanted[2:])), False
    # Every candidate version starts with `head`: '580.95.05-' (a Debian revision follows) or '580.'.
    exact = not wanted.endswith(".*")
    head = wanted + "-" if exact else wanted[:-1]
    if not wild:
        return literal.startswith(head) or (exact and literal == wanted), False
    may = literal.startswith(head) or head.startswith(literal)
    return may, pure_prefix and head.startswith(literal)


def _stanza_conflict(stanza, version, predicted_version):
    """How the stanza treats the planned version: 'pinned' (a version pin elsewhere), 'barred' (a negative
    pin on it), or None (no conflict; release and origin pins choose sources, not versions)."""
    priority = stanza["priority"]
    if not priority:
        return None
    if stanza["pin_type"] in ("release", "origin"):
        # Only a negative pin on every source ('Pin: release *') bars every version of the package.
        return "barred" if priority < 0 and stanza["pin"] in ("*", '"*"') else None
    if stanza["pin_type"] != "version" or not stanza["pin"]:
        return None
    if version is not None:
        matches = version_pin_matches(stanza["pin"], version)
        return ("barred" if matches else None) if priority < 0 else (None if matches else "pinned")
    may, must = _prediction_vs_pin(stanza["pin"], predicted_version)
    return ("barred" if must else None) if priority < 0 else (None if may else "pinned")


def operator_pins(files, own_path, plan_result, owners=None):
    """The stanzas of apt preference files other than gpuhost's own (`own_path`) that would stand in the
    way of the plan: a version pin (Pin-Priority > 0) on a package of the plan or of the installed driver
    whose version it does not match, or a negative pin that bars the planned version.

    files: [(path, text)] as preference_files() lists them. Returns [{file, line, packages (the matched
    package names), patterns (the stanza's Package patterns), pin ('version 570.*'), priority, effect
    ('pinned' or 'barred'), wanted (the version compared)}]. A plan that changes nothing
    conflicts with nothing. A file a package of the driver ships (`owners`: {path: package}, e.g. the
    preferences file of NVIDIA's nvidia-driver-pinning-<branch>) changes with the driver: it is no operator's.
    Raises DriverChoiceError for a file apt could not read either.
    """
    if plan_result.get("action") == "none":
        return []
    own = posixpath.normpath(own_path) if own_path else None
    versions = {p["name"]: p.get("version") for p in plan_result.get("package_versions") or []}
    names = list(plan_result.get("packages") or [])
    for name in list(versions) + list((plan_result.get("installed") or {}).get("packages") or []):
        if name not in names:
            names.append(name)
    main_version = plan_result.get("package_version")
    predicted = plan_result.get("version") if main_version is None else None
    found = []
    for path, text in files:
        if own and posixpath.normpath(path) == own:
            continue
        if (owners or {}).get(path) in names:
            continue
        try:
            stanzas = parse_preferences(text)
        except ValueError as exc:
            raise DriverChoiceError("the apt preferences file %s cannot be read (%s); apt refuses it too. Fix "
                                    "that file" % (path, exc))
        for stanza in stanzas:
            if stanza["generic"]:
                continue
            matched, wanted, effect = [], None, None
            for name in names:
                if not any(package_pattern_matches(pattern, name) for pattern in stanza["packages"]):
                    continue
                version = versions.get(name) or main_version
                this = _stanza_conflict(stanza, version, predicted)
                if this:
                    matched.append(name)
                    wanted, effect = version or predicted, effect or this
            if matched:
                found.append({"file": path, "line": stanza["line"], "packages": matched,
                              "patterns": stanza["packages"],
                              "pin": ("%s %s" % (stanza["pin_type"], stanza["pin"])).strip(),
                              "priority": stanza["priority"], "effect": effect, "wanted": wanted})
    return found


def operator_pin_error(result_plan, pins):
    """Why the run stops before a driver change would override apt pins the operator wrote (None: it need not)."""
    if not pins or result_plan["action"] == "none":
        return None
    said = []
    for pin in pins:
        if pin["effect"] == "pinned":
            said.append("the operator pinned %s to %s in %s (Pin-Priority %d)"
                        % (", ".join(pin["packages"]), pin["pin"], pin["file"], pin["priority"]))
        else:
            said.append("the operator barred %s (Pin: %s) in %s (Pin-Priority %d)"
                        % (", ".join(pin["packages"]), pin["pin"], pin["file"], pin["priority"]))
    installed = result_plan["installed"]
    files = sorted({pin["file"] for pin in pins})
    wanted = result_plan.get("package_version") or result_plan["version"]
    if installed.get("upstream"):
        change = "%s the driver from %s to %s" % (result_plan["action"], installed["upstream"], wanted)
    else:
        change = "install driver %s" % wanted
    return ("%s; this run would %s (branch %s, %s), which %s. Nothing was changed. Fix: "
            "keep nvidia_driver_branch/nvidia_driver_version at %s, or set nvidia_driver_release_operator_holds: "
            "true to let gpuhost move %s aside (kept under %s)"
            % ("; ".join(said), change, result_plan["branch"],
               result_plan["main_package"], "that pin does not allow" if len(pins) == 1 else "those pins do not allow",
               "the pinned driver" if all(p["effect"] == "pinned" for p in pins) else "a driver the pins allow",
               ("that file (%s)" if len(files) == 1 else "those files (%s)") % ", ".join(files), BACKUP_DIR))
