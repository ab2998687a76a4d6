# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Layer `fabric`: on NVSwitch (HGX) hosts, the fabric manager at the driver's version, running, and every
GPU's fabric set up (State Completed, Status Success)."""
import re

from ansible.module_utils.gpu.host_parse import driver_branch
from ansible.module_utils.driver.debian_version import upstream_version
from ansible.module_utils.host import dpkg
from ansible.module_utils.layers.generic import basics
from ansible.module_utils.layers.base import evidence, guarded, result

FABRIC_MANAGER_SERVICE = "nvidia-fabricmanager"
_FM_PACKAGE = re.compile(r"^nvidia-fabricmanager(?:-(?P<branch>\d{3}))?$")


def check_fabric(fabric, nvswitch_addresses, packages_text, fm_active, loaded_version):
    """On an NVSwitch (HGX) host CUDA starts only once the fabric manager, at exactly the driver's version, has
    set the fabric up; nvidia-smi looks healthy without it while every CUDA program fails with 802.
    fabric, nvswitch_addresses: the GPU facts' `fabric` (gpu_facts.fabric_facts) and `nvswitches`;
    packages_text: `dpkg-query -W` of the host; fm_active: `systemctl is-active nvidia-fabricmanager`;
    loaded_version: the loaded module's version."""
    command = ("nvidia-smi -q -x (fabric); lspci -nn (NVSwitch); dpkg-query -W 'nvidia-fabricmanager*'; "
               "systemctl is-active %s" % FABRIC_MANAGER_SERVICE)
    fabric = fabric or {}
    gpus = fabric.get("gpus") or []
    installed = dpkg.installed_versions(dpkg.parse(packages_text))
    fm = dict((name, upstream_version(version)) for name, version in installed.items() if _FM_PACKAGE.match(name))
    lines = ["%s: State %s, Status %s" % (f["pci_bus_id"] or "GPU %d" % i, f["state"], f["status"])
             for i, f in enumerate(gpus)][:8]
    lines += ["NVSwitch %s" % a for a in (nvswitch_addresses or [])[:4]]
    lines += ["%s %s installed" % (n, v) for n, v in sorted(fm.items())]
    lines.append("%s: %s" % (FABRIC_MANAGER_SERVICE, fm_active or "unknown"))
    state = fabric.get("state") or "unknown"
    data = {"needed": bool(fabric.get("needed")), "reason": fabric.get("reason"), "state": state,
            "nvswitches": list(nvswitch_addresses or []), "fabric_manager": fm, "active": fm_active,
            "driver_version": loaded_version}
    ev = evidence(command, lines)
    if not fabric.get("needed"):
        if state == "unknown":
            return result("fabric", "fabric", "skipped", "no NVSwitch on the PCI bus and no fabric state from "
                          "nvidia-smi (%s)" % (fabric.get("message") or "no GPU facts"), ev=ev, data=data)
        return result("fabric", "fabric", "ok", "no NVSwitch fabric: %s" % fabric.get("reason"), ev=ev, data=data)
    branch = driver_branch(loaded_version) or "<branch>"
    install = ("install the fabric manager at the driver's version: `apt-get install nvidia-fabricmanager-%s=%s-*` "
               "(Ubuntu's archive; NVIDIA's CUDA repository names it nvidia-fabricmanager from 580 on), hold it "
               "with the driver, then `systemctl enable --now %s`" % (branch, loaded_version or "<driver version>",
                                                                      FABRIC_MANAGER_SERVICE))
    if not fm:
        return result("fabric", "fabric", "fail", "%s, but no nvidia-fabricmanager package is installed: every CUDA "
                      "program fails with 802 (system not yet initialized)" % fabric.get("reason"), remedy=install,
                      ev=ev, data=data)
    wrong = sorted(n for n, v in fm.items() if loaded_version and v != loaded_version)
    if wrong:
        return result("fabric", "fabric", "fail", "fabric manager %s, driver %s: the fabric manager refuses to start "
                      "on another driver version" % (fm[wrong[0]], loaded_version), remedy=install.replace(
                          "install the fabric manager", "install the fabric manager again"), ev=ev, data=data)
    if fm_active != "active":
        return result("fabric", "fabric", "fail", "%s is not running (%s): the fabric is not set up"
                      % (FABRIC_MANAGER_SERVICE, fm_active or "unknown"),
                      remedy="`systemctl enable --now %s` (after a driver reload: restart it); "
                             "`journalctl -u %s` says why it stopped" % (FABRIC_MANAGER_SERVICE, FABRIC_MANAGER_SERVICE),
                      ev=ev, data=data)
    if state in ("not_ready", "failed"):
        return result("fabric", "fabric", "fail", fabric.get("message"), remedy=fabric.get("fix"), ev=ev, data=data)
    if state == "unhealthy":
        return result("fabric", "fabric", "warn", fabric.get("message"), remedy=fabric.get("fix"), ev=ev, data=data)
    if state == "unknown":
        return result("fabric", "fabric", "warn", "%s runs at the driver's version, but nvidia-smi shows no fabric "
                      "state" % FABRIC_MANAGER_SERVICE, remedy="read `nvidia-smi -q` (Fabric) on a driver that "
                      "prints it", ev=ev, data=data)
    return result("fabric", "fabric", "ok", "%s %s running; %s" % (FABRIC_MANAGER_SERVICE, loaded_version,
                                                                   fabric.get("message")), ev=ev, data=data)


def _fabric(ctx):
    return guarded("fabric", "fabric", check_fabric, ctx.facts.get("fabric"), ctx.facts.get("nvswitches"),
                   (ctx.get("boot_caps") or {}).get("packages"), ctx.get("fabricmanager_active"),
                   ctx.facts.get("driver_version_kernel"))


CHECKS = {"fabric_basics": basics("fabric"), "fabric": _fabric}
