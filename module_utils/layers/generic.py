# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The generic checks every layer gets before its own: `<layer>_basics`, from what the registry says the layer
owns (registry.Owns). A fault nobody wrote a check for still lands on the right layer with its real cause:

    packages   not installed (held counts as installed), left half done by dpkg (iU, iF, iH, ..R), or a set
               that must share one version at two
    configs    a file the layer reads that does not parse (daemon.json, the runtime's config.toml, the CDI spec)
    resources  the disk the layer writes to (free bytes and inodes; "no space left on device" in the engine's own
               failure), the users its units run as
    units      masked, failed or restarting in a loop, with the journal's reason for the failure

They come in that order, causes before symptoms: a unit that fails because its user is gone is reported as the
missing user, a docker that cannot start on a full disk as docker's full disk (prune, free space), not as a GPU
problem further up. The check's summary and remedy are its first, worst finding's; every finding is in
data.findings. Pure: captures in (layers/stack.py `capture()` takes them, read-only), a result out.
"""
import fnmatch
import re

from ansible.module_utils.containers.cdi_spec import CdiSpecError, read_spec
from ansible.module_utils.containers.daemon_json import DaemonJsonError, engine_accepts_bom, parse as parse_daemon_json
from ansible.module_utils.host import dpkg, systemd
from ansible.module_utils.layers import registry
from ansible.module_utils.layers.base import _out, evidence, guarded, result

DOCKER_ROOT_DEFAULT = "/var/lib/docker"
# Below this many free inodes nothing can be created, whatever the free bytes say.
INODES_FAIL = 1000
RANK = {"fail": 2, "warn": 1, "ok": 0}


def _finding(kind, status, summary, remedy=None, lines=(), command=None):
    return {"kind": kind, "status": status, "summary": summary, "remedy": remedy if status != "ok" else None,
            "lines": [l for l in lines if l], "command": command}


def _install_remedy(layer, names):
    what = "it" if len(names) == 1 else "them"
    if not layer.roles:
        return "install %s" % what
    return "install %s: site.yml --tags %s (role %s)" % (what, layer.tags[0], layer.roles[0])


def _repair_remedy(layer, names):
    return ("dpkg stopped part way: `dpkg --configure -a` says which maintainer script fails and why (fix that), "
            "then `apt-get install -f`, or reinstall: `apt-get install --reinstall %s`%s"
            % (" ".join(names), "; site.yml --tags %s" % layer.tags[0] if layer.tags else ""))


def _owned_names(spec, packages, opts):
    names = list(opts.get(spec.option) or ()) if spec.option else list(spec.names)
    matched = sorted(p for p in packages if any(fnmatch.fnmatchcase(p, pat) for pat in spec.patterns)
                     and not any(fnmatch.fnmatchcase(p, pat) for pat in spec.exclude) and p not in names)
    return names, matched


def package_findings(layer, spec, packages, opts):
    """Required names installed (held counts), nothing of the layer's half done, one version where asked."""
    if spec is None or packages is None:
        return [], []
    names, matched = _owned_names(spec, packages, opts)
    command = "dpkg-query -W -f '%s'" % dpkg.FORMAT.replace("\t", "\\t").replace("\n", "\\n")
    lines = ["%s %s %s" % (n, packages[n]["abbrev"].rstrip(), packages[n]["version"] or "")
             for n in names + matched if n in packages]
    out = []
    half = [n for n in names + matched if n in packages and packages[n]["half"]]
    if half:
        out.append(_finding("package_half", "fail", "%s: %s" % (
            "; ".join("%s %s" % (n, dpkg.describe(packages[n])) for n in half),
            "dpkg never finished installing %s" % ("it" if len(half) == 1 else "them")),
            _repair_remedy(layer, half), [l for l in lines if l.split()[0] in half], command))
    absent = [n for n in names if n not in half and not (packages.get(n) or {}).get("installed")]
    if absent:
        out.append(_finding(
            "package_missing", "fail", "not installed: %s" % ", ".join(
                n if n not in packages else "%s (%s)" % (n, dpkg.describe(packages[n])) for n in absent),
            _install_remedy(layer, absent),
            [l for l in lines if l.split()[0] in absent] or ["%s: not known to dpkg" % n for n in absent], command))
    versions = sorted(set(packages[n]["version"] for n in names if (packages.get(n) or {}).get("unpacked")))
    if spec.same_version and len(versions) > 1:
        at = ", ".join("%s %s" % (n, packages[n]["version"]) for n in names if (packages.get(n) or {}).get("unpacked"))
        pins = " ".join("%s=%s" % (n, versions[-1]) for n in names)
        out.append(_finding(
            "package_versions", "warn", "%s packages at different versions: %s" % (layer.name, at),
            "install them at one version: `apt-get install %s` (site.yml --tags %s pins them together)"
            % (pins, layer.tags[0] if layer.tags else layer.name),
            lines, command))
    installed = [n for n in names + matched if (packages.get(n) or {}).get("installed")]
    notes = []
    if installed:
        notes.append("%s installed" % (", ".join("%s %s" % (n, packages[n]["version"]) for n in installed)
                                       if len(installed) <= 4 else "%d packages" % len(installed)))
    return out, notes


def _daemon_json_finding(path, text, host):
    running = host.get("engine_running")
    try:
        parse_daemon_json(text, path, accepts_bom=engine_accepts_bom(host.get("engine_version")) is not False)
        return None
    except DaemonJsonError as exc:
        message = str(exc)
    line = re.search(r"\bline (\d+)", message)
    where = " at line %s" % line.group(1) if line else ""
    return _finding("config", "warn" if running else "fail",
                    "%s does not parse: %s%s" % (path, message.split(": ", 1)[-1] if message.startswith(path)
                                                 else message,
                                                 " (docker runs on the config it read when it started; the next "
                                                 "restart refuses this one)" if running else ""),
                    "fix %s%s by hand (gpuhost never rewrites a file it cannot read), then `systemctl restart docker`"
                    % (path, where), [message], "read %s" % path)


def _toml_finding(path, text):
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        return None
    try:
        tomllib.loads(text)
        return None
    except ValueError as exc:
        return _finding("config", "fail", "%s does not parse as TOML: %s (every container through the nvidia "
                        "runtime reads it)" % (path, exc),
                        "fix %s by hand, or write NVIDIA's defaults again: `nvidia-ctk config default --output=%s`, "
                        "then `nvidia-ctk runtime configure` (site.yml --tags toolkit)" % (path, path),
                        ["%s: %s" % (path, exc)], "read %s" % path)


def _cdi_finding(path, text):
    try:
        read_spec(text)
        return None
    except CdiSpecError as exc:
        return _finding("config", "fail", "%s is not a CDI spec it can read: %s" % (path, exc),
                        "write it again: `nvidia-ctk cdi generate --output=%s` (role nvidia_cdi: site.yml --tags cdi)"
                        % path, ["%s: %s" % (path, exc)], "read %s" % path)


def config_findings(configs, host, opts):
    out, notes = [], []
    for config in configs:
        path = config.path or opts.get(config.option)
        text = (host.get("configs") or {}).get(path)
        if not path or text is None:
            continue
        finding = {"daemon_json": _daemon_json_finding, "toml": lambda p, t, _h: _toml_finding(p, t),
                   "cdi": lambda p, t, _h: _cdi_finding(p, t)}[config.kind](path, text, host)
        if finding:
            out.append(finding)
        else:
            notes.append("%s parses" % path)
    return out, notes


def _gib(value):
    return "%.1f GiB" % (value / float(1024 ** 3))


def disk_remedy(path):
    return ("free space on the file system of %s (not a GPU problem): `docker system df` shows what docker holds; "
            "`docker container prune`, `docker image prune`, `docker builder prune` free it (not `image prune -a`: it "
            "also deletes the images this check runs with --pull never); `df -h %s`, `du -xsh %s/*` find the rest; "
            "or move docker's data-root (daemon.json) to a larger disk" % (path, path, path))


def disk_findings(disks, host):
    out, notes = [], []
    for disk in disks:
        path = host.get("docker_root") or DOCKER_ROOT_DEFAULT if disk.path == "docker_root" else disk.path
        space = (host.get("disks") or {}).get(path)
        if not space:
            continue
        where = "%s %s%s" % (disk.label, path, " (on %s)" % space["measured"] if space["measured"] != path else "")
        line = "statvfs %s: %s free of %s, %s inodes free of %s" % (
            space["measured"], _gib(space["free"]), _gib(space["total"]), space["free_inodes"], space["inodes"])
        if space["inodes"] and space["free_inodes"] < INODES_FAIL:
            out.append(_finding("disk", "fail", "%s: no free inodes (%d left): nothing can be created there, "
                                "'no space left on device'" % (where, space["free_inodes"]), disk_remedy(path),
                                [line], "statvfs %s" % space["measured"]))
        elif space["free"] < disk.warn_bytes:
            status = "fail" if space["free"] < disk.fail_bytes else "warn"
            out.append(_finding("disk", status, "%s: only %s free of %s%s" % (
                where, _gib(space["free"]), _gib(space["total"]),
                ": writes fail with 'no space left on device'" if status == "fail" else ""),
                disk_remedy(path), [line], "statvfs %s" % space["measured"]))
        else:
            notes.append("%s free on %s" % (_gib(space["free"]), path))
    return out, notes


def failure_text_findings(keys, units, host):
    """'no space left on device' in what the engine itself answered (docker info, a container it would not
    start, dockerd --validate) or in the journal of a unit of the layer."""
    texts = [(key, (host.get("failures") or {}).get(key)) for key in keys]
    texts += [("journalctl -u %s" % u.name, (host.get("journals") or {}).get(u.name)) for u in units]
    for key, text in texts:
        text = text or ""
        hit = [l.strip() for l in text.splitlines() if "no space left on device" in l.lower()]
        if hit:
            root = host.get("docker_root") or DOCKER_ROOT_DEFAULT
            return [_finding("disk", "fail", "the engine reports no space left on device: %s" % hit[0],
                             disk_remedy(root), hit[:3], key.replace("_", " "))]
    return []


def _unit_definitions(host, units):
    found = {}
    for unit in units:
        info = (host.get("units") or {}).get(unit.name) or {}
        found[unit.name] = systemd.unit_users(info.get("definition"), unit.user_option)
    return found


def _state(info):
    return systemd.unit_state((info or {}).get("show"))


def _short(unit):
    return unit.name[:-len(".service")] if unit.name.endswith(".service") else unit.name


def _user_remedy(name, info, unit):
    fragment = (info.get("show") or {}).get("FragmentPath") or "/lib/systemd/system/%s" % unit.name
    return ("create the user again: `dpkg-reconfigure $(dpkg -S %s | cut -d: -f1)` (the package's postinst creates "
            "it), or `adduser --system --group --no-create-home --home /nonexistent %s`; then `systemctl enable --now "
            "%s`" % (fragment, name or "<user>", _short(unit)))


def user_findings(units, host, users_of):
    out = []
    for unit in units:
        info = (host.get("units") or {}).get(unit.name) or {}
        state = _state(info)
        if state in (None, "not-found", "masked"):
            continue
        for name, where in users_of.get(unit.name) or []:
            exists = (host.get("users") or {}).get(name)
            if exists is not False:
                continue
            blocked = state in ("failed", "restarting") or (unit.must_run and state == "inactive")
            out.append(_finding(
                "user", "fail" if blocked else "warn",
                "%s runs as user %s (%s), which does not exist: %s" % (
                    unit.name, name, where, "it cannot start" if blocked else "it runs now, the next start fails"),
                _user_remedy(name, info, unit),
                ["getent passwd %s: no such user" % name, "%s: %s" % (unit.name, where)],
                "getent passwd %s" % name))
    return out


def unit_findings(layer, units, host, users_of):
    out, notes = [], []
    for unit in units:
        info = (host.get("units") or {}).get(unit.name) or {}
        show = info.get("show") or {}
        state = _state(info)
        short = _short(unit)
        line = "systemctl show %s: %s" % (unit.name, " ".join("%s=%s" % (k, show[k]) for k in systemd.SHOW_PROPERTIES
                                                              if k != "Id" and show.get(k)))
        if state is None or state == "not-found":
            continue
        if state == "masked":
            active = show.get("ActiveState") == "active"
            out.append(_finding(
                "unit_masked", "fail" if (unit.must_run and not active) or show.get("ActiveState") == "failed"
                else "warn", "%s is masked: %s" % (unit.name, "it runs now, but cannot start again"
                                                   if active else "it cannot be started"),
                "`systemctl unmask %s && systemctl enable --now %s` (gpuhost never masks it, so ask who did)"
                % (short, short), [line], "systemctl show %s" % unit.name))
            continue
        if state not in ("failed", "restarting"):
            notes.append("%s %s" % (unit.name, state))
            continue
        users = [u for u, _w in users_of.get(unit.name) or []]
        cause = systemd.failure_cause(info.get("journal"), show, users)
        why = cause["reason"] or "the journal does not say why"
        facts = ", ".join(p for p in ("exit status %s" % cause["status"] if cause["status"] else None,
                                      "result %s" % cause["result"] if cause["result"] else None) if p)
        then = "then `systemctl enable --now %s`" % short
        if cause["kind"] in ("user", "group"):
            remedy = "the %s it runs as does not resolve: %s" % (cause["kind"], _user_remedy(cause["user"], info, unit))
        elif cause["kind"] == "exec":
            remedy = ("its executable %s is missing: reinstall the package that ships it (`dpkg -S %s`; site.yml "
                      "--tags %s); %s" % (cause["path"] or "", cause["path"] or "<path>",
                                          layer.tags[0] if layer.tags else layer.name, then))
        elif cause["kind"] == "disk":
            remedy = disk_remedy(host.get("docker_root") or DOCKER_ROOT_DEFAULT) + "; " + then
        else:
            remedy = "`journalctl -u %s -b` says why (the line above): fix that, %s" % (short, then)
        out.append(_finding(
            "unit_failed", "fail", "%s %s%s: %s" % (unit.name, "keeps failing" if state == "restarting" else "failed",
                                                    " (%s)" % facts if facts else "", why),
            remedy, [line, cause["line"]], "systemctl show %s; journalctl -u %s -b -n %d --no-pager"
            % (unit.name, unit.name, systemd.JOURNAL_LINES)))
    return out, notes


def _read_commands(own, units, host, opts):
    """What was read for the layer, as commands a person can run again."""
    out = []
    if own.packages and host.get("packages") is not None:
        out.append("dpkg-query -W")
    if units:
        out.append("systemctl show %s" % " ".join(u.name for u in units))
    out += ["read %s" % (c.path or opts.get(c.option)) for c in own.configs if (c.path or opts.get(c.option))]
    if own.disks and host.get("disks") is not None:
        out.append("statvfs %s" % " ".join(sorted(p for p in host["disks"])))
    return "; ".join(out) or "(nothing)"


def check_basics(layer_name, host, opts):
    """The layer's generic findings (packages, configs, resources, units, in that order) as one check result."""
    layer = registry.get(layer_name)
    own = layer.owns
    name = layer_name + "_basics"
    if own.engine and host.get("engine") and own.engine != host.get("engine"):
        return result(name, layer_name, "skipped", "the engine here is %s: %s's packages, units and files are not "
                      "this host's" % (host.get("engine"), own.engine), ev=evidence("(none)"))
    conditions = host.get("conditions") or {}
    units = [u for u in own.units if not u.when or conditions.get(u.when)]
    users_of = _unit_definitions(host, units)
    findings, notes = [], ["%s not needed here (%s)" % (u.name, u.when.replace("_", " ") + ": no")
                           for u in own.units if u not in units]
    for part in (package_findings(layer, own.packages, host.get("packages"), opts),
                 config_findings(own.configs, host, opts)):
        findings += part[0]
        notes += part[1]
    disks, disk_notes = disk_findings(own.disks, host)
    if (own.failures or own.disks) and not [f for f in disks if f["status"] == "fail"]:
        disks += failure_text_findings(own.failures, units, host)
    findings += disks + user_findings(units, host, users_of)
    notes += disk_notes
    unit_out, unit_notes = unit_findings(layer, units, host, users_of)
    findings += unit_out
    notes += unit_notes
    read = [k for k, owned in (("packages", own.packages), ("units", units), ("configs", own.configs),
                               ("disks", own.disks)) if owned and host.get(k) is not None]
    data = {"findings": findings, "read": read,
            "units": dict((u.name, _state((host.get("units") or {}).get(u.name))) for u in units),
            "users": dict((n, (host.get("users") or {}).get(n)) for u in units for n, _w in users_of.get(u.name) or [])}
    worst = max([f["status"] for f in findings] or ["ok"], key=lambda s: RANK[s])
    decisive = [f for f in findings if f["status"] == worst]
    lines = [l for f in decisive + [f for f in findings if f not in decisive] for l in f["lines"]] + notes
    commands = []
    for f in decisive + findings:
        if f["command"] and f["command"] not in commands:
            commands.append(f["command"])
    ev = evidence("; ".join(commands) or _read_commands(own, units, host, opts), lines)
    if not findings and not notes:
        if not read:
            return result(name, layer_name, "skipped", "nothing of the %s layer's could be read (%s)" % (
                layer_name, "; ".join(w for o, w in ((own.packages, "no dpkg-query"), (units, "systemctl does not "
                                                     "answer: %s" % (host.get("units_error") or "not found"))) if o)),
                          ev=ev, data=data)
        return result(name, layer_name, "ok", "nothing of the %s layer's is installed or running here to check"
                      % layer_name, ev=ev, data=data)
    if worst == "ok":
        return result(name, layer_name, "ok", "; ".join(notes)[:300], ev=ev, data=data)
    first = decisive[0]
    more = len(findings) - 1
    return result(name, layer_name, worst, first["summary"] + (" (and %d more: see data.findings)" % more
                                                               if more else ""),
                  remedy=first["remedy"], ev=ev, data=data)


def failure_keys():
    """Every capture key a layer names as holding failures it owns (registry Owns.failures)."""
    return sorted(set(key for layer in registry.REGISTRY if layer.owns for key in layer.owns.failures))


def host_inputs(captures, opts, engine, facts):
    """What the layers' generic checks read, from the captures (layers/stack.py `capture()`)."""
    caps = captures
    packages = None
    if (caps.get("boot_caps") or {}).get("packages") is not None or caps.get("dpkg"):
        packages = dpkg.parse((caps.get("boot_caps") or {}).get("packages"))
        packages.update(dpkg.parse((caps.get("dpkg") or {}).get("stdout")))
    configs = dict(caps.get("configs") or {})
    if caps.get("daemon_json") is not None:
        configs[opts["docker_config"]] = caps["daemon_json"]
    spec = (caps.get("cdi_specs") or {}).get(opts["cdi_spec_path"])
    if spec is not None:
        configs[opts["cdi_spec_path"]] = spec
    show = caps.get("units_show")
    units = None
    if show is not None and show.get("rc") == 0:
        shown = systemd.parse_show(show.get("stdout"))
        units = dict((name, {"show": shown.get(name), "definition": (caps.get("units_cat") or {}).get(name),
                             "journal": _out((caps.get("units_journal") or {}).get(name)) or None})
                     for name in set(list(shown) + list(caps.get("units_cat") or {})))
    units_error = None
    if show is not None and show.get("rc") != 0:
        units_error = (_out(show).strip().splitlines() or ["exit status %s" % show.get("rc")])[0]
    users = dict((user, systemd.user_exists(user, cap, caps.get("passwd")))
                 for user, cap in (caps.get("users") or {}).items())
    failures = dict((key, _out(caps.get(key))) for key in failure_keys() if caps.get(key))
    engine_state = caps.get("engine_state") or {}
    return {"packages": packages, "units": units, "units_error": units_error, "users": users,
            "configs": configs or None,
            "disks": caps.get("disks"), "docker_root": caps.get("docker_root"), "failures": failures,
            "journals": dict((name, _out(cap)) for name, cap in (caps.get("units_journal") or {}).items()),
            "engine": engine, "engine_running": bool(engine_state.get("running")),
            "engine_version": engine_state.get("version"),
            "conditions": {"fabric_needed": bool(((facts or {}).get("fabric") or {}).get("needed"))}}


def basics(layer_name):
    """The `<layer>_basics` check of a layer's check module (its CHECKS lists it first)."""
    name = layer_name + "_basics"

    def run(ctx):
        host = ctx.memo("host_inputs", lambda: host_inputs(ctx.captures, ctx.opts, ctx.engine, ctx.facts))
        return guarded(name, layer_name, check_basics, layer_name, host, ctx.opts)
    run.__name__ = "_" + name
    return run
