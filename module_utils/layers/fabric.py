# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Layer `fabric`: what the host's NVLink fabric needs, and whether it is there: on NVSwitch (HGX) hosts the fabric
manager at the driver's version (with NVLSM on NVLink 5), running, and every GPU's fabric set up (State Completed,
Status Success); on GB200/GB300 compute trays the IMEX service at the driver's version and no fabric manager."""
import re

from ansible.module_utils.gpu.host_parse import driver_branch
from ansible.module_utils.driver.debian_version import upstream_version
from ansible.module_utils.driver.fabric_manager import (
    FABRIC_MANAGER_SERVICE, IMEX_SERVICE, NVLINK5_PREREQUISITES, install_specs)
from ansible.module_utils.host import dpkg
from ansible.module_utils.layers.generic import basics
from ansible.module_utils.layers.base import evidence, guarded, result

_PACKAGES = (("fabric_manager", re.compile(r"^nvidia-fabricmanager(?:-\d{3})?$")),
             ("nscq", re.compile(r"^libnvidia-nscq(?:-\d{3})?$")),
             ("imex", re.compile(r"^nvidia-imex(?:-\d{3})?$")))


def _install_remedy(need, version, what="install"):
    """The apt lines of a need at the driver's version, in Ubuntu's archive and in NVIDIA's CUDA repository."""
    branch = driver_branch(version)
    if not branch:
        return "%s the %s at the driver's version" % (what, "IMEX service" if need == "imex" else "fabric manager")
    lines = []
    for style, title in (("ubuntu", "Ubuntu's archive"), ("nvidia", "NVIDIA's CUDA repository")):
        specs, refusal = install_specs(need, style, version)
        if not refusal:
            lines.append("`apt-get install %s` (%s)" % (" ".join(specs), title))
    service = IMEX_SERVICE if need == "imex" else FABRIC_MANAGER_SERVICE
    return "%s it at the driver's version: %s, hold it with the driver, then `systemctl enable --now %s`" % (
        what, " or ".join(lines), service)


def check_fabric(fabric, nvswitch_addresses, packages_text, fm_active, loaded_version, imex_active=None):
    """What the host's NVLink fabric needs (gpu_facts.fabric_facts' need: fabric_manager, fabric_manager+nvlsm,
    imex or none) and whether it is there. On an NVSwitch (HGX) host CUDA starts only once the fabric manager, at
    exactly the driver's version, has set the fabric up (on NVLink 5 with NVLSM); nvidia-smi looks healthy without it
    while every CUDA program fails with 802. A GB200/GB300 compute tray runs no fabric manager: the IMEX service at
    the driver's version shares GPU memory across its NVLink domain.
    fabric, nvswitch_addresses: the GPU facts' `fabric` (gpu_facts.fabric_facts) and `nvswitches`;
    packages_text: `dpkg-query -W` of the host; fm_active, imex_active: `systemctl is-active nvidia-fabricmanager`,
    `... nvidia-imex`; loaded_version: the loaded module's version."""
    command = ("nvidia-smi -q -x (fabric); lspci -nn (NVSwitch); dpkg-query -W 'nvidia-fabricmanager*' "
               "'libnvidia-nscq*' 'nvidia-imex*' nvlsm; systemctl is-active %s %s" % (FABRIC_MANAGER_SERVICE,
                                                                                      IMEX_SERVICE))
    fabric = fabric or {}
    need = fabric.get("need") or ("fabric_manager" if fabric.get("needed") else "none")
    gpus = fabric.get("gpus") or []
    installed = dpkg.installed_versions(dpkg.parse(packages_text))
    found = dict((kind, dict((name, upstream_version(version)) for name, version in installed.items()
                             if regex.match(name))) for kind, regex in _PACKAGES)
    fm, imex = found["fabric_manager"], found["imex"]
    nvlsm = installed.get("nvlsm")
    lines = ["%s: State %s, Status %s" % (f["pci_bus_id"] or "GPU %d" % i, f["state"], f["status"])
             for i, f in enumerate(gpus)][:8]
    lines += ["NVSwitch %s" % a for a in (nvswitch_addresses or [])[:4]]
    lines += ["%s %s installed" % (n, v) for kind in found.values() for n, v in sorted(kind.items())]
    lines += ["nvlsm %s installed" % nvlsm] if nvlsm else []
    lines.append("%s: %s" % (FABRIC_MANAGER_SERVICE, fm_active or "unknown"))
    if need == "imex" or imex_active:
        lines.append("%s: %s" % (IMEX_SERVICE, imex_active or "unknown"))
    state = fabric.get("state") or "unknown"
    data = {"need": need, "needed": bool(fabric.get("needed")), "reason": fabric.get("reason"), "state": state,
            "services": fabric.get("services") or [], "nvswitches": list(nvswitch_addresses or []),
            "fabric_manager": fm, "nscq": found["nscq"], "imex": imex, "nvlsm": nvlsm, "active": fm_active,
            "imex_active": imex_active, "driver_version": loaded_version}
    ev = evidence(command, lines)
    if need == "imex":
        return _check_imex(fabric, imex, fm_active, imex_active, loaded_version, ev, data)
    if need == "none":
        if state == "unknown":
            return result("fabric", "fabric", "skipped", "no NVSwitch on the PCI bus and no fabric state from "
                          "nvidia-smi (%s)" % (fabric.get("message") or "no GPU facts"), ev=ev, data=data)
        return result("fabric", "fabric", "ok", "no NVSwitch fabric: %s" % fabric.get("reason"), ev=ev, data=data)
    install = _install_remedy(need, loaded_version)
    if not fm:
        return result("fabric", "fabric", "fail", "%s, but no nvidia-fabricmanager package is installed: every CUDA "
                      "program fails with 802 (system not yet initialized)" % fabric.get("reason"), remedy=install,
                      ev=ev, data=data)
    wrong = sorted(n for n, v in fm.items() if loaded_version and v != loaded_version)
    if wrong:
        return result("fabric", "fabric", "fail", "fabric manager %s, driver %s: the fabric manager refuses to start "
                      "on another driver version" % (fm[wrong[0]], loaded_version),
                      remedy=_install_remedy(need, loaded_version, "install again"), ev=ev, data=data)
    if need == "fabric_manager+nvlsm" and not nvlsm:
        return result("fabric", "fabric", "fail", "%s, but NVLSM (package nvlsm) is not installed: the fabric "
                      "manager cannot set up NVLink 5, the fabric stays In Progress and CUDA fails with 802"
                      % fabric.get("reason"), remedy="%s; %s" % (install, NVLINK5_PREREQUISITES), ev=ev, data=data)
    if fm_active != "active":
        return result("fabric", "fabric", "fail", "%s is not running (%s): the fabric is not set up"
                      % (FABRIC_MANAGER_SERVICE, fm_active or "unknown"),
                      remedy="`systemctl enable --now %s` (after a driver reload: restart it); "
                             "`journalctl -u %s` says why it stopped%s" % (
                                 FABRIC_MANAGER_SERVICE, FABRIC_MANAGER_SERVICE,
                                 "; " + NVLINK5_PREREQUISITES if need == "fabric_manager+nvlsm" else ""),
                      ev=ev, data=data)
    if state in ("not_ready", "failed"):
        return result("fabric", "fabric", "fail", fabric.get("message"), remedy=fabric.get("fix"), ev=ev, data=data)
    if state == "unhealthy":
        return result("fabric", "fabric", "warn", fabric.get("message"), remedy=fabric.get("fix"), ev=ev, data=data)
    if state == "unknown":
        return result("fabric", "fabric", "warn", "%s runs at the driver's version, but nvidia-smi shows no fabric "
                      "state" % FABRIC_MANAGER_SERVICE, remedy="read `nvidia-smi -q` (Fabric) on a driver that "
                      "prints it", ev=ev, data=data)
    return result("fabric", "fabric", "ok", "%s %s running%s; %s" % (
        FABRIC_MANAGER_SERVICE, loaded_version, " with NVLSM %s" % nvlsm if nvlsm else "", fabric.get("message")),
        ev=ev, data=data)


def _check_imex(fabric, imex, fm_active, imex_active, loaded_version, ev, data):
    """A GB200/GB300 compute tray: nvidia-imex at the driver's version; its service runs where the operator gave it
    the rack's peers (/etc/nvidia-imex/nodes_config.cfg): a tray serving alone does without."""
    if not imex:
        return result("fabric", "fabric", "fail", "%s, but no nvidia-imex package is installed"
                      % fabric.get("reason"), remedy=_install_remedy("imex", loaded_version), ev=ev, data=data)
    wrong = sorted(n for n, v in imex.items() if loaded_version and v != loaded_version)
    if wrong:
        return result("fabric", "fabric", "fail", "%s %s, driver %s: IMEX aborts on another driver version"
                      % (wrong[0], imex[wrong[0]], loaded_version),
                      remedy=_install_remedy("imex", loaded_version, "install again"), ev=ev, data=data)
    if fm_active == "active":
        return result("fabric", "fabric", "warn", "%s runs on a GB200/GB300 compute tray, which has no NVSwitch of "
                      "its own: it has nothing to manage here" % FABRIC_MANAGER_SERVICE,
                      remedy="`systemctl disable --now %s`" % FABRIC_MANAGER_SERVICE, ev=ev, data=data)
    if (fabric.get("state") or "unknown") in ("not_ready", "failed", "unhealthy"):
        return result("fabric", "fabric", "warn" if fabric["state"] == "unhealthy" else "fail", fabric.get("message"),
                      remedy="this host runs no fabric manager (a GB200/GB300 compute tray): its fabric is set up "
                             "from the rack's NVLink switch trays; check those", ev=ev, data=data)
    if imex_active != "active":
        return result("fabric", "fabric", "ok", "nvidia-imex %s installed, %s %s: a tray serving alone does without "
                      "it (to share GPU memory across the rack's trays: list them in "
                      "/etc/nvidia-imex/nodes_config.cfg, the same on every tray, then `systemctl enable --now %s`)"
                      % (loaded_version, IMEX_SERVICE, imex_active or "not running", IMEX_SERVICE), ev=ev, data=data)
    return result("fabric", "fabric", "ok", "%s %s running; %s" % (IMEX_SERVICE, loaded_version,
                                                                   fabric.get("message")), ev=ev, data=data)


def _fabric(ctx):
    return guarded("fabric", "fabric", check_fabric, ctx.facts.get("fabric"), ctx.facts.get("nvswitches"),
                   (ctx.get("boot_caps") or {}).get("packages"), ctx.get("fabricmanager_active"),
                   ctx.facts.get("driver_version_kernel"), ctx.get("imex_active"))


CHECKS = {"fabric_basics": basics("fabric"), "fabric": _fabric}
