# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""systemd's word on a unit: its state (`systemctl show`), its definition (`systemctl cat`: the users it runs as),
why it failed (`journalctl -u UNIT -b -n 20 --no-pager`), and whether a user exists (`getent passwd`).

Pure functions over captured text. The exit statuses are systemd.exec(5)'s "Process Exit Codes" (203 EXEC: the
executable could not be run; 216 GROUP, 217 USER: the group or user the unit names could not be resolved);
the journal lines are systemd's own wording ("Failed to determine user credentials: No such process",
"Failed at step EXEC spawning /usr/bin/x: No such file or directory"), see tests/fixtures/generic/README.md.
"""
import re

from ansible.module_utils.driver.persistenced_unit import parse_unit

SHOW_PROPERTIES = ("Id", "LoadState", "ActiveState", "SubState", "UnitFileState", "Result", "ExecMainCode",
                   "ExecMainStatus", "FragmentPath")
JOURNAL_LINES = 20
EXIT_NAMES = {"200": "CHDIR", "203": "EXEC", "216": "GROUP", "217": "USER", "226": "NAMESPACE"}


def show_argv(systemctl, units):
    return [systemctl, "show", "-p", ",".join(SHOW_PROPERTIES), "--"] + list(units)


def cat_argv(systemctl, unit):
    return [systemctl, "cat", "--", unit]


def journal_argv(journalctl, unit):
    return [journalctl, "-u", unit, "-b", "-n", str(JOURNAL_LINES), "--no-pager"]


def parse_show(text):
    """{unit: {property: value}} of `systemctl show -p ... UNIT...` (one block per unit, blank-line separated;
    blocks without an Id are dropped)."""
    units, current = {}, {}
    for line in (text or "").replace("\r\n", "\n").split("\n") + [""]:
        if not line.strip():
            if current.get("Id"):
                units[current["Id"]] = current
            current = {}
            continue
        key, sep, value = line.partition("=")
        if sep:
            current[key.strip()] = value.strip()
    return units


def unit_state(show):
    """'masked', 'failed', 'restarting' (activating, auto-restart: it keeps failing), 'active', 'inactive',
    'not-found' or None (systemd said nothing) of one parse_show() entry."""
    if not show:
        return None
    if show.get("LoadState") == "masked" or show.get("UnitFileState") in ("masked", "masked-runtime"):
        return "masked"
    if show.get("LoadState") == "not-found":
        return "not-found"
    active = show.get("ActiveState")
    if active == "failed":
        return "failed"
    if active == "activating" and show.get("SubState") == "auto-restart":
        return "restarting"
    if active in ("active", "reloading", "activating"):
        return "active"
    return "inactive" if active else None


def exit_status(show):
    """'217/USER' of ExecMainStatus where the main process exited with one of systemd's own codes."""
    code = (show or {}).get("ExecMainStatus")
    if code and code != "0":
        return "%s/%s" % (code, EXIT_NAMES[code]) if code in EXIT_NAMES else code
    return None


def _exec_starts(values):
    """ExecStart= as systemd applies it (an empty assignment clears the list), each an argv list."""
    argvs = []
    for value in values:
        if not value:
            argvs = []
            continue
        argvs.append(value.lstrip("-@+!:").split())
    return argvs


def unit_users(definition, user_option=None):
    """[(user, where)] the unit runs as: its User= (none for DynamicUser=yes, root or 0), and the value of the
    daemon's own `user_option` (nvidia-persistenced --user NAME) in its ExecStart."""
    service = parse_unit(definition).get("Service", [])
    values = dict(service)
    users = []
    user = values.get("User")
    dynamic = (values.get("DynamicUser") or "").lower() in ("yes", "true", "1", "on")
    if user and not dynamic and user not in ("root", "0"):
        users.append((user, "User=%s" % user))
    if user_option:
        for argv in _exec_starts([v for k, v in service if k == "ExecStart"]):
            for i, word in enumerate(argv):
                name = argv[i + 1] if word == user_option and i + 1 < len(argv) else (
                    word.split("=", 1)[1] if word.startswith(user_option + "=") else None)
                if name and name not in [u for u, _w in users]:
                    users.append((name, "ExecStart %s %s" % (user_option, name)))
    return users


def user_exists(name, getent=None, passwd_text=None):
    """True/False of `getent passwd NAME` (exit 0 with its entry; 2: not found, getent(1)), else of /etc/passwd
    (passwd(5): name:password:UID:...); None when neither says."""
    if getent is not None and getent.get("rc") in (0, 2):
        return getent["rc"] == 0 and any(l.split(":", 1)[0] == name for l in (getent.get("stdout") or "").splitlines())
    if passwd_text is not None:
        return any(l.split(":", 1)[0] == name for l in passwd_text.splitlines() if ":" in l)
    return None


# A journal line: "<stamp> <host> <ident>[pid]: <message>" (short, short-iso, any locale's month), or a bare
# "<ident>[pid]: <message>" as pasted.
_STAMPED = re.compile(r"^(?:(?:\S+\s+){2}\d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT[\d:.,+-]+)\s+\S+\s+"
                      r"(?P<ident>[^\s\[:]+)(?:\[\d+\])?:\s?(?P<msg>.*)$")
_BARE = re.compile(r"^(?P<ident>[^\s\[:]+)\[\d+\]:\s?(?P<msg>.*)$")
# systemd's bookkeeping around a failure: it says that, not why.
_BOOKKEEPING = re.compile(
    r"^(?:Starting |Started |Stopping |Stopped |Failed to start |Reloading |Reloaded |Finished |"
    r"\S+: (?:Main|Control) process exited|\S+: Failed with result|\S+: Unit entered failed state|"
    r"\S+: Scheduled restart job|\S+: Start request repeated too quickly|\S+: Consumed |"
    r"\S+: Deactivated successfully|\S+: Succeeded|\S+: Service hold-off time over|"
    r"\S+: Referenced but unset environment|Configuration file \S+ is marked)", re.I)
_EXITED = re.compile(r"(?:Main|Control) process exited, code=\w+,? status=(?P<status>\d+(?:/\w+)?)")
_RESULT = re.compile(r"Failed with result '(?P<result>[^']+)'")
_USER = re.compile(r"Failed to determine user credentials|Failed at step USER spawning|status=217/USER|"
                   r"Failed to find user ID of user '(?P<daemon_user>[^']+)'")
_GROUP = re.compile(r"Failed to determine group credentials|Failed at step GROUP spawning|status=216/GROUP")
_EXEC = re.compile(r"Failed to locate executable (?P<path1>\S+): (?P<err1>.+)$|"
                   r"Failed at step EXEC spawning (?P<path2>\S+): (?P<err2>.+)$|status=203/EXEC")
_DISK = re.compile(r"no space left on device", re.I)
# systemd.service(5) Result= values where systemd, not the daemon, ended the process.
_RESULTS = {"signal": "its process was killed by a signal", "core-dump": "its process dumped core",
            "oom-kill": "the kernel's OOM killer killed it", "timeout": "it did not start or stop in time",
            "watchdog": "its watchdog timed out"}


def journal_messages(text):
    """[(ident, message)] of a journal excerpt (journalctl's '-- ...' and the catalogue's '░░' lines dropped)."""
    out = []
    for raw in (text or "").replace("\r\n", "\n").split("\n"):
        line = raw.strip()
        if not line or line.startswith("--") or line.startswith("\u2591") or line.startswith("Hint:"):
            continue
        match = _STAMPED.match(line) or _BARE.match(line)
        out.append((match.group("ident"), match.group("msg").strip()) if match else (None, line))
    return out


def failure_cause(journal_text, show=None, users=()):
    """Why a unit failed, from its journal (and `systemctl show`'s exit status): {kind, reason, line, status,
    result, user, path}. kind: 'user' or 'group' (the account it runs as does not resolve), 'exec' (its executable
    cannot be run), 'disk' (no space left on device), 'other' (the last line that is not systemd's bookkeeping), or
    None when the journal says nothing."""
    messages = journal_messages(journal_text)
    status = exit_status(show)
    result = (show or {}).get("Result") if (show or {}).get("Result") not in (None, "", "success") else None
    for _ident, msg in messages:
        exited, failed = _EXITED.search(msg), _RESULT.search(msg)
        if exited and not status:
            status = exited.group("status")
        if failed and failed.group("result") != "start-limit-hit":
            result = failed.group("result")
    cause = {"kind": None, "reason": None, "line": None, "status": status, "result": result,
             "user": users[0] if users else None, "path": None}
    for kind, regex in (("user", _USER), ("group", _GROUP), ("exec", _EXEC), ("disk", _DISK)):
        hits = [(ident, msg, m) for ident, msg in messages for m in [regex.search(msg)] if m]
        code = {"user": "217", "group": "216", "exec": "203"}.get(kind)
        if not hits and code and (show or {}).get("ExecMainStatus") == code:
            hits = [(None, "status=%s" % exit_status(show), None)]
        if not hits:
            continue
        # The line that names what is missing (a path, a user) decides over systemd's status line.
        named = [h for h in hits if h[2] is not None and any(h[2].groupdict().get(g) for g in
                                                             ("daemon_user", "path1", "path2"))]
        ident, msg, match = (named or hits)[0]
        cause.update(kind=kind, reason=msg, line=("%s: %s" % (ident, msg)) if ident else msg)
        if match is not None and match.groupdict().get("daemon_user"):
            cause["user"] = match.group("daemon_user")
        if match is not None and kind == "exec":
            cause["path"] = match.group("path1") or match.group("path2")
        return cause
    if result in _RESULTS:
        # systemd ended it (a signal, the OOM killer, a timeout): the daemon's last words are not the reason
        cause.update(kind="other", reason=_RESULTS[result] + (" (status %s)" % status if status else ""))
        cause["line"] = next((m for _i, m in reversed(messages) if _RESULT.search(m) or _EXITED.search(m)), None)
        return cause
    said = [(ident, msg) for ident, msg in messages if not _BOOKKEEPING.match(msg)]
    if said:
        ident, msg = said[-1]
        cause.update(kind="other", reason=msg, line=("%s: %s" % (ident, msg)) if ident else msg)
    elif status or result:
        cause.update(kind="other", reason="exit status %s" % status if status else "result %s" % result)
    return cause
