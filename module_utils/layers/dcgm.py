# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Layer `dcgm`: NVIDIA's Data Center GPU Manager (role nvidia_dcgm): DCGM 4 installed with the diagnostic's
plugins for the driver's CUDA major, its host engine (nvidia-dcgm.service) running. The GPUs' diagnostic itself
(`dcgmi diag -r 1`) is the health layer's check dcgm_diag (check_dcgm_diag below, listed there)."""
from ansible.module_utils.gpu.dcgm_diag import FAILED, read_run, summary, tested_gpus
from ansible.module_utils.gpu.dcgm_install import (CORE, CUDA_PACKAGE, DCGM3, SERVICE, DcgmPlanError, cuda_major,
                                                   installed_plugins)
from ansible.module_utils.driver.debian_version import upstream_version
from ansible.module_utils.host import dpkg
from ansible.module_utils.layers.generic import basics
from ansible.module_utils.layers.base import evidence, guarded, result

REMEDY_INSTALL = "install DCGM 4: site.yml --tags dcgm -e gpuhost_dcgm=true (role nvidia_dcgm)"


def check_dcgm(packages_text, active, facts, expected=False):
    """DCGM 4 on the host: installed (where gpuhost_dcgm asks for it: `expected`), its host engine active, the
    plugins for the CUDA major the driver reports. packages_text: `dpkg-query -W` of the host; active:
    `systemctl is-active nvidia-dcgm`."""
    installed = dpkg.installed_versions(dpkg.parse(packages_text))
    core, dcgm3 = installed.get(CORE), installed.get(DCGM3)
    plugins = installed_plugins(installed)
    lines = ["%s %s installed" % (name, installed[name]) for name in sorted(installed)
             if name in (CORE, DCGM3) or name in plugins.values()]
    lines.append("systemctl is-active %s: %s" % (SERVICE, active or "unknown"))
    ev = evidence("dpkg-query -W 'datacenter-gpu-manager*'; systemctl is-active %s" % SERVICE, lines)
    data = {"version": upstream_version(core) if core else None, "dcgm3": dcgm3, "active": active,
            "plugins": sorted(plugins), "expected": bool(expected)}
    if not core:
        if dcgm3:
            return result("dcgm", "dcgm", "fail" if expected else "warn",
                          "DCGM 3 (%s %s) is installed: gpuhost reads DCGM 4's diagnostic" % (DCGM3, dcgm3),
                          remedy=REMEDY_INSTALL + ": it replaces DCGM 3", ev=ev, data=data)
        if expected:
            return result("dcgm", "dcgm", "fail", "DCGM is not installed (gpuhost_dcgm is on)", remedy=REMEDY_INSTALL,
                          ev=ev, data=data)
        return result("dcgm", "dcgm", "skipped", "DCGM is not installed (gpuhost_dcgm is off): no GPU diagnostic",
                      ev=ev, data=data)
    if active != "active":
        state = active or "not running"
        return result("dcgm", "dcgm", "fail", "%s is %s: dcgmi cannot reach the host engine" % (SERVICE, state),
                      remedy="`systemctl enable --now %s`; `journalctl -u %s -b` says why it stopped" % (SERVICE, SERVICE),
                      ev=ev, data=data)
    if facts.get("state") == "ok":
        try:
            major, why = cuda_major(facts.get("cuda_driver_version"),
                                    [g.get("architecture") for g in facts.get("gpus") or []])
        except DcgmPlanError:
            major, why = None, None
        data["cuda_major"] = major
        if major is not None and major not in plugins:
            return result("dcgm", "dcgm", "fail", "DCGM's diagnostic plugins for CUDA %d are not installed (%s; "
                          "installed: %s)" % (major, why, ", ".join("CUDA %d" % m for m in sorted(plugins)) or "none"),
                          remedy="`apt-get install %s=%s` and hold it (site.yml --tags dcgm)"
                                 % (CUDA_PACKAGE % major, core), ev=ev, data=data)
    return result("dcgm", "dcgm", "ok", "DCGM %s, host engine running, diagnostic plugins for CUDA %s"
                  % (upstream_version(core), ", ".join(str(m) for m in sorted(plugins)) or "none"), ev=ev, data=data)


def check_dcgm_diag(run, level, dcgm_result, mig_gpus=()):
    """The health layer's GPU diagnostic: `dcgmi diag -r LEVEL -j` (read_run's result, None where it was not run).
    A failed test fails the layer naming the GPU, the test and DCGM's message; a skipped test is said, never a pass.
    dcgm_result: the dcgm check (nothing to run without DCGM); mig_gpus: GPUs in MIG mode (DCGM cannot test a GPU
    split into several GPU instances)."""
    command = "dcgmi diag -r %s -j" % level
    if not level:
        return result("dcgm_diag", "health", "skipped", "the DCGM diagnostic is off (gpu_validate_dcgm_diag_level: 0)",
                      ev=evidence(command))
    if dcgm_result.get("status") != "ok":
        return result("dcgm_diag", "health", "skipped", "no DCGM diagnostic: %s" % dcgm_result.get("summary"),
                      ev=evidence(command))
    if run is None:
        return result("dcgm_diag", "health", "skipped", "dcgmi diag was not run", ev=evidence(command))
    found = run["verdict"] or {}
    lines = (found.get("messages") or [])[:8] or [summary(run, level)]
    ev = evidence(command, lines, run["rc"])
    data = {"level": level, "status": run["status"], "gpus": tested_gpus(run["parsed"]), "failed": found.get("failed") or [],
            "skipped": found.get("skipped") or [], "error": run["error"]}
    if run["status"] == "pass":
        return result("dcgm_diag", "health", "ok", summary(run, level), ev=ev, data=data)
    if run["status"] in FAILED:
        gpus = sorted(set(str(f["gpu"]) for f in found["failed"]))
        remedy = ("take GPU %s out of service and run `dcgmi diag -r 3` on it; %s" % (
            ", ".join(gpus) or "?", "DCGM asks to isolate it: replace it (NVIDIA support, with `nvidia-bug-report.sh`)"
            if run["status"] == "isolate" else "a failure that stays after a reset or reboot is the hardware's: "
            "NVIDIA support, with `nvidia-bug-report.sh` and the DCGM output"))
        return result("dcgm_diag", "health", "fail", summary(run, level), remedy=remedy, ev=ev, data=data)
    if mig_gpus and run["rc"] == 221:
        return result("dcgm_diag", "health", "skipped", "DCGM cannot test GPU %s: it is split into MIG instances"
                      % ", ".join(str(i) for i in mig_gpus), ev=ev, data=data)
    return result("dcgm_diag", "health", "warn", summary(run, level),
                  remedy="`dcgmi diag -r %s` by hand says more; `journalctl -u %s -b`" % (level, SERVICE),
                  ev=ev, data=data)


def read_diag(cap):
    """The dcgm_diag capture ({rc, stdout, stderr}) as read_run()'s result, or None."""
    return read_run(cap["rc"], cap.get("stdout"), cap.get("stderr")) if cap else None


def _dcgm(ctx):
    return guarded("dcgm", "dcgm", check_dcgm, (ctx.get("boot_caps") or {}).get("packages"), ctx.get("dcgm_active"),
                   ctx.facts, ctx.opts.get("dcgm_expected"))


def dcgm_diag(ctx):
    """The health layer's dcgm_diag check (layers/health.py lists it)."""
    mig = [g.get("index") for g in ctx.facts.get("gpus") or [] if g.get("mig_mode") is True]
    return guarded("dcgm_diag", "health", check_dcgm_diag, read_diag(ctx.get("dcgm_diag")),
                   ctx.opts.get("dcgm_diag_level"), ctx.check("dcgm"), mig)


CHECKS = {"dcgm_basics": basics("dcgm"), "dcgm": _dcgm}
