# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Layer `toolkit`: the NVIDIA Container Toolkit's packages, nvidia-ctk and the runtime hook."""
from ansible.module_utils.containers.versions import ctk_version as ctk_version_of
from ansible.module_utils.host import dpkg
from ansible.module_utils.layers.generic import basics
from ansible.module_utils.layers.base import (
    DEFAULT_TOOLKIT_PACKAGES, REMEDY_INSTALL_TOOLKIT, _grep, _lines, _out, evidence, guarded, result)


def check_toolkit(dpkg_cap, ctk_cap, ctk_path, hook_path, packages=DEFAULT_TOOLKIT_PACKAGES):
    """Toolkit packages installed (pinned together; held counts as installed), nvidia-ctk and the runtime hook
    present. dpkg_cap: `dpkg-query -W -f FORMAT PACKAGE...` (host/dpkg.py)."""
    lines, problems, versions = [], [], {}
    if dpkg_cap is not None:
        states = dpkg.parse(dpkg_cap.get("stdout"))
        versions = dpkg.installed_versions(states)
        lines += _lines(dpkg_cap.get("stdout"))
        lines += _grep(dpkg_cap.get("stderr"), r"no packages found")
        half = [p for p in packages if (states.get(p) or {}).get("half")]
        absent = [p for p in packages if not versions.get(p) and p not in half]
        if absent:
            problems.append("not installed: %s" % ", ".join(absent))
        if half:
            problems.append("left half done by dpkg: %s" % ", ".join(
                "%s %s" % (p, dpkg.describe(states[p])) for p in half))
    ctk_version = ctk_version_of(_out(ctk_cap)) if ctk_cap else None
    if ctk_path:
        lines += _grep(_out(ctk_cap), r"version")[:1] or ["%s --version: %s" % (ctk_path, _lines(_out(ctk_cap))[:1])]
    else:
        lines.append("nvidia-ctk: not found")
        problems.append("nvidia-ctk not found")
    if not hook_path:
        lines.append("nvidia-container-runtime-hook: not found")
        problems.append("nvidia-container-runtime-hook not found (docker --gpus needs it)")
    command = [c for c in (" ".join(dpkg_cap["argv"][:2]) + " ..." if dpkg_cap else None,
                           "nvidia-ctk --version") if c]
    ev = evidence("; ".join(command), lines, dpkg_cap.get("rc") if dpkg_cap else None)
    installed = dict((p, v) for p, v in versions.items() if v)
    data = {"packages": installed, "nvidia_ctk_version": ctk_version}
    if problems:
        return result("toolkit", "toolkit", "fail", "NVIDIA Container Toolkit: " + "; ".join(problems),
                      remedy=REMEDY_INSTALL_TOOLKIT, ev=ev, data=data)
    distinct = sorted(set(v for p, v in installed.items() if p in packages))
    if len(distinct) > 1:
        return result("toolkit", "toolkit", "warn", "toolkit packages at different versions: %s"
                      % ", ".join("%s %s" % (p, installed[p]) for p in packages if p in installed),
                      remedy="pin them together (nvidia_container_toolkit_version, site.yml --tags toolkit)",
                      ev=ev, data=data)
    return result("toolkit", "toolkit", "ok", "NVIDIA Container Toolkit %s (nvidia-ctk %s)"
                  % (distinct[0] if distinct else "installed", ctk_version or "unknown"), ev=ev, data=data)


def _toolkit(ctx):
    return guarded("toolkit", "toolkit", check_toolkit, ctx.get("dpkg"), ctx.get("ctk_version"), ctx.get("ctk_path"),
                   ctx.get("hook_path"), ctx.opts["toolkit_packages"])


CHECKS = {"toolkit_basics": basics("toolkit"), "toolkit": _toolkit}
