# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The converged fingerprint of a GPU host: what site.yml left, so a re-run can tell it has nothing to do.

A fingerprint holds digests of what the roles were given (their inputs and their code, hashed on the
control node) and of what they manage on the host: the files and directories they write, the dpkg
state of their packages, the systemd units, the kernel and loaded driver, the serving containers.
site.yml records it after a full, successful run; the next run compares the host's fingerprint now
with it and skips the roles only when nothing differs (and the live stack checks out). Any difference,
even one gpuhost did not cause, means a full run: the fast path can only be wrong by being slow.
"""
import hashlib
import os
import stat

from ansible.module_utils.urls import open_url

FORMAT = 1
# Compared item by item, in this order, so a miss names what changed.
SECTIONS = ("code", "inputs", "os", "driver_loaded", "reboot_required", "packages", "units", "files",
            "containers")


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


def path_digests(path):
    """{path: digest} for a file, a symlink or every entry under a directory ("absent" when missing).

    Contents and link targets only: ownership and times are left out, so a copy that rewrites a file
    with the same bytes is not a change. A file that cannot be read is a change every time.
    """
    digests = {}
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return {path: "absent"}
    if stat.S_ISLNK(mode):
        digests[path] = "link:" + os.readlink(path)
    elif stat.S_ISDIR(mode):
        digests[path] = "dir"
        for name in sorted(os.listdir(path)):
            digests.update(path_digests(os.path.join(path, name)))
    elif stat.S_ISREG(mode):
        try:
            with open(path, "rb") as handle:
                digests[path] = _sha256(handle.read())
        except OSError as exc:
            digests[path] = "unreadable: %s" % exc.strerror
    else:
        digests[path] = "special"
    return digests


def parse_os_release(text):
    """"ID VERSION_ID" of /etc/os-release (an OS upgrade changes what the roles would do)."""
    fields = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip('"')
    return ("%s %s" % (fields.get("ID", ""), fields.get("VERSION_ID", ""))).strip()


def parse_systemctl_show(stdout):
    """{unit: "ActiveState UnitFileState"} from `systemctl show -p Id,ActiveState,UnitFileState U...`."""
    units, current = {}, {}
    for line in (stdout or "").splitlines() + [""]:
        if not line.strip():
            if current.get("Id"):
                units[current["Id"]] = "%s %s" % (current.get("ActiveState", ""), current.get("UnitFileState", ""))
            current = {}
            continue
        key, _sep, value = line.partition("=")
        current[key] = value
    return units


def fingerprint(code, inputs, os_release, driver_loaded, reboot_required, packages, units, files,
                containers):
    """The fingerprint as stored: every section a string or a flat {name: string} map."""
    return {
        "format": FORMAT,
        "code": code,
        "inputs": inputs,
        "os": os_release,
        "driver_loaded": driver_loaded or "none",
        "reboot_required": bool(reboot_required),
        "packages": {name: "%s %s %s" % (p["version"], p["want"], p["status"]) for name, p in packages.items()},
        "units": dict(units),
        "files": dict(files),
        "containers": dict(containers),
    }


def _map_differences(section, recorded, current):
    recorded, current = recorded or {}, current or {}
    found = []
    for name in sorted(set(recorded) | set(current)):
        before, after = recorded.get(name, "absent"), current.get(name, "absent")
        if before != after:
            if section == "files":
                found.append("files: %s changed" % name)
            else:
                found.append("%s: %s was %r, is %r" % (section, name, before, after))
    return found


def differences(recorded, current):
    """What differs between the recorded fingerprint and the host's now, as messages; [] means none."""
    if not recorded:
        return ["no converged fingerprint yet (site.yml has not completed a full run on this host)"]
    if recorded.get("format") != FORMAT:
        return ["fingerprint format %r, this gpuhost writes %r" % (recorded.get("format"), FORMAT)]
    found = []
    for section in SECTIONS:
        before, after = recorded.get(section), current.get(section)
        if isinstance(before, dict) or isinstance(after, dict):
            found.extend(_map_differences(section, before, after))
        elif before != after:
            if section in ("code", "inputs"):
                found.append("%s changed since the last full run" % (
                    "gpuhost's roles and modules" if section == "code" else "the roles' variables"))
            else:
                found.append("%s: was %r, is %r" % (section, before, after))
    return found


def health_code(url, timeout):
    """What a serving container's /health answers: 200 when healthy, else the HTTP code or why it did not answer.
    The host's own serving address: never through a proxy."""
    try:
        return open_url(url.rstrip("/") + "/health", timeout=timeout, validate_certs=False, use_proxy=False).getcode()
    except Exception as exc:  # pylint: disable=broad-except  # any failure to answer is the same finding
        return getattr(exc, "code", None) or str(exc)


def health_problems(instances, status, timeout):
    """Serving containers that are not running, or whose /health does not answer 200, as messages."""
    problems = []
    for name in sorted(instances):
        if status.get(name) != "running":
            problems.append("serving: container %s is %s" % (name, status.get(name)))
            continue
        url = instances[name].get("url")
        if not url:
            continue
        code = health_code(url, timeout)
        if code != 200:
            problems.append("serving: %s/health answered %s" % (url.rstrip("/"), code))
    return problems
