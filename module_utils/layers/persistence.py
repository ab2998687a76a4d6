# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Layer `persistence`: persistence mode on every GPU (nvidia-persistenced), and the declared MIG layout."""
from ansible.module_utils.gpu.mig_apply import DISABLED as MIG_DISABLED, LayoutError, instance_names, normalise_layout
from ansible.module_utils.gpu.mig_parse import parse_lgi
from ansible.module_utils.layers.generic import basics
from ansible.module_utils.layers.base import _cmd, _grep, evidence, guarded, result

REMEDY_PERSISTENCE = ("`systemctl enable --now nvidia-persistenced` (role nvidia_persistence, "
                      "site.yml --tags persistence); `nvidia-smi -pm 1` does not survive a reboot")


def check_persistence(facts, captures, persistenced_active=None, persistenced_enabled=None):
    """Persistence mode on every GPU (without it the driver unloads when the GPU is idle)."""
    attempts = captures.get("smi") or []
    xml = attempts[0]["stdout"] if attempts and attempts[0]["rc"] == 0 else ""
    lines = _grep(xml, r"<persistence_mode>")
    if persistenced_active is not None:
        lines.append("systemctl is-active nvidia-persistenced: %s" % persistenced_active)
    if persistenced_enabled is not None:
        lines.append("systemctl is-enabled nvidia-persistenced: %s" % persistenced_enabled)
    ev = evidence(attempts[0]["argv"] if attempts else "nvidia-smi -q -x", lines,
                  attempts[0]["rc"] if attempts else None)
    gpus = facts.get("gpus") or []
    if facts.get("state") != "ok" or not gpus:
        return result("persistence", "persistence", "skipped", "nvidia-smi does not work (driver layer)", ev=ev)
    off = [g for g in gpus if g.get("persistence_mode") is False]
    unknown = [g for g in gpus if g.get("persistence_mode") is None]
    data = {"off": [g.get("index") for g in off], "daemon": persistenced_active, "unit": persistenced_enabled}
    masked = persistenced_enabled in ("masked", "masked-runtime")
    unmask = ("the unit is masked, so it cannot be started: `systemctl unmask nvidia-persistenced && systemctl "
              "enable --now nvidia-persistenced` (site.yml -e nvidia_persistence_unmask=true does it; gpuhost "
              "never masks it, so ask who did)")
    if off and masked:
        return result("persistence", "persistence", "fail", "persistence mode is off on GPU %s: nvidia-persistenced "
                      "is masked" % ", ".join(str(g.get("index")) for g in off), remedy=unmask, ev=ev, data=data)
    if masked:
        return result("persistence", "persistence", "warn", "persistence mode is on now, but nvidia-persistenced is "
                      "masked: the next reboot or driver reload turns it off", remedy=unmask, ev=ev, data=data)
    if off:
        return result("persistence", "persistence", "fail", "persistence mode is off on GPU %s%s"
                      % (", ".join(str(g.get("index")) for g in off),
                         " (nvidia-persistenced is %s)" % persistenced_active if persistenced_active else ""),
                      remedy=REMEDY_PERSISTENCE, ev=ev, data=data)
    if unknown and len(unknown) == len(gpus):
        return result("persistence", "persistence", "skipped", "nvidia-smi does not report persistence mode "
                      "(not a Linux driver?)", ev=ev, data=data)
    return result("persistence", "persistence", "ok", "persistence mode on for %d GPU(s)" % len(gpus),
                  ev=ev, data=data)


def check_mig_layout(declared, facts, lgi_cap=None):
    """The MIG layout the nvidia_mig role declared (its host record, or the `mig_layout` option) against the GPUs:
    MIG mode per GPU from the facts, the GPU instances from `nvidia-smi mig -lgi`. A layout lost at a reboot (the
    boot unit did not run, or failed) or changed by hand fails here."""
    command = "nvidia-smi mig -lgi"
    try:
        wanted = normalise_layout(declared)
    except LayoutError as exc:
        return result("mig_layout", "persistence", "warn", "the declared MIG layout cannot be read: %s" % exc.msg,
                      remedy="fix nvidia_mig_layout", ev=evidence(command))
    if not wanted:
        # Nothing declared, nothing to drift from (as the fabric check passes a host without NVSwitch).
        return result("mig_layout", "persistence", "ok", "no MIG layout declared (nvidia_mig_layout): nothing to compare",
                      ev=evidence(command))
    gpus = dict((g.get("index"), g) for g in facts.get("gpus") or [])
    if facts.get("state") != "ok" or not gpus:
        return result("mig_layout", "persistence", "skipped", "nvidia-smi does not work (driver layer)",
                      ev=evidence(command))
    rows = []
    if lgi_cap is not None and lgi_cap.get("rc") == 0:
        rows = parse_lgi(lgi_cap.get("stdout") or "")
    live, differ, lines = {}, [], []
    for index in sorted(wanted):
        want = wanted[index]
        gpu = gpus.get(index)
        if gpu is None:
            live[index] = None
            differ.append(index)
            lines.append("GPU %d: not on this host" % index)
            continue
        names = instance_names([r for r in rows if r["gpu"] == index])
        live[index] = names if gpu.get("mig_mode") is True else MIG_DISABLED
        have = "MIG disabled" if live[index] == MIG_DISABLED else "MIG enabled: %s" % (", ".join(names) or "no instance")
        lines.append("GPU %d: %s (declared: %s)" % (index, have, "MIG disabled" if want == MIG_DISABLED
                                                    else ", ".join(want) or "no instance"))
        if want == MIG_DISABLED:
            same = gpu.get("mig_mode") is not True
        else:
            same = gpu.get("mig_mode") is True and sorted(names) == sorted(want)
        if not same:
            differ.append(index)
    data = {"declared": dict((str(k), v) for k, v in wanted.items()),
            "live": dict((str(k), v) for k, v in live.items()), "differ": differ}
    ev = evidence(_cmd(lgi_cap) if lgi_cap else command, lines, lgi_cap.get("rc") if lgi_cap else None)
    if differ:
        first = differ[0]
        lost = live.get(first) in (MIG_DISABLED, []) and wanted[first] not in (MIG_DISABLED, [])
        return result("mig_layout", "persistence", "fail",
                      "MIG layout differs from the declared one on GPU %s: %s%s"
                      % (", ".join(str(i) for i in differ), lines[sorted(wanted).index(first)],
                         " - lost at a reboot or GPU reset?" if lost else ""),
                      remedy="apply it again: `systemctl restart gpuhost-mig` (see `journalctl -u gpuhost-mig`) or "
                             "site.yml --tags mig; stop the serving containers on the GPU first",
                      ev=ev, data=data)
    return result("mig_layout", "persistence", "ok", "MIG layout as declared on GPU %s"
                  % ", ".join(str(i) for i in sorted(wanted)), ev=ev, data=data)


def _persistence(ctx):
    return guarded("persistence", "persistence", check_persistence, ctx.facts, ctx.gpu,
                   ctx.get("persistenced_active"), ctx.get("persistenced_enabled"))


def _mig_layout(ctx):
    return guarded("mig_layout", "persistence", check_mig_layout, ctx.opts["mig_layout"], ctx.facts,
                   ctx.get("mig_lgi"))


CHECKS = {"persistence_basics": basics("persistence"), "persistence": _persistence,
          "mig_layout": _mig_layout}
