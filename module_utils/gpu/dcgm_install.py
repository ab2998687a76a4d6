# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""DCGM 4 on a host (role nvidia_dcgm, issue 40): which packages, at which version, what goes, and the apt pin that
keeps NVIDIA's CUDA repository from serving the driver where the driver comes from the distribution.

NVIDIA/DCGM cmake/packaging.cmake: `datacenter-gpu-manager-4-core` (nv-hostengine, dcgmi, the nvidia-dcgm unit) and
one `datacenter-gpu-manager-4-cuda<N>` per CUDA major (the diagnostic's plugins); DCGM's install guide: "install
binaries targeting the major version of the CUDA user-mode driver" (nvidia-smi's "CUDA Version"). CUDA 13 dropped
Maxwell, Pascal and Volta, so those GPUs take cuda12 on a 580 driver that reports 13.0. DCGM 4 replaces 3.x's
single `datacenter-gpu-manager` package (they conflict).

Pure stdlib, no Ansible imports.
"""
import fnmatch
import re

from ansible.module_utils.containers.cuda_requirement import CudaRequirementError, cuda_major_minor
from ansible.module_utils.driver.debian_version import upstream_version
from ansible.module_utils.driver.driver_packages import parse_madison
from ansible.module_utils.host import dpkg

CORE = "datacenter-gpu-manager-4-core"
CUDA_PACKAGE = "datacenter-gpu-manager-4-cuda%d"
DCGM3 = "datacenter-gpu-manager"
SERVICE = "nvidia-dcgm.service"
# The architectures CUDA 13 no longer builds for (CUDA 13.0 release notes): their plugins are cuda12's.
CUDA13_DROPPED = ("Kepler", "Maxwell", "Pascal", "Volta")
_CUDA_PLUGINS = re.compile(r"^datacenter-gpu-manager-4-cuda(\d+)$")
# NVIDIA's CUDA repository names the packages of the driver, the fabric manager and the container toolkit like
# this (both the Debian and the Ubuntu repositories): where the driver is the distribution's, apt must never take
# one of them from NVIDIA's repository.
PINNED_PATTERNS = ("nvidia-*", "libnvidia-*", "libcuda*", "cuda-drivers*", "firmware-nvidia-*",
                   "xserver-xorg-video-nvidia*", "libxnvctrl*")
# The CUDA repository's Release file (docs/research/cuda-repo-packaging.md 1).
CUDA_REPO_RELEASE = "l=NVIDIA CUDA"
# The driver role installs one of these where the driver is NVIDIA's own (cuda_repo.pinning_package).
DRIVER_PINNING = "nvidia-driver-pinning-*"


class DcgmPlanError(ValueError):
    """The host cannot take DCGM as asked; the message says why and what to do."""


def cuda_major(cuda_driver_version, architectures=(), wanted=None):
    """(the CUDA major of DCGM's plugins, why): `wanted` where the operator set one, else the CUDA major the driver
    reports (nvidia-smi's "CUDA Version"), 12 where a GPU's architecture is one CUDA 13 dropped."""
    if wanted not in (None, ""):
        try:
            return int(wanted), "nvidia_dcgm_cuda_major: %s" % wanted
        except (TypeError, ValueError):
            raise DcgmPlanError("nvidia_dcgm_cuda_major must be a CUDA major version such as 12 or 13, not %r"
                                % (wanted,))
    try:
        major = int(cuda_major_minor(cuda_driver_version).split(".")[0])
    except CudaRequirementError:
        raise DcgmPlanError("the driver reports no CUDA version (nvidia-smi does not work?): DCGM's diagnostic "
                            "plugins follow it; install the driver first (site.yml --tags driver) or set "
                            "nvidia_dcgm_cuda_major")
    dropped = sorted(set(a for a in architectures or () if a in CUDA13_DROPPED))
    if major >= 13 and dropped:
        return 12, "the driver reports CUDA %s, but CUDA 13 does not run on %s GPUs" % (
            cuda_driver_version, "/".join(dropped))
    return major, "the driver reports CUDA %s" % cuda_driver_version


def installed_plugins(installed):
    """{CUDA major: package} of the DCGM 4 diagnostic plugins among {package: version}."""
    return dict((int(m.group(1)), name) for name, m in ((n, _CUDA_PLUGINS.match(n)) for n in installed) if m)


def _candidate(madison, name, wanted):
    """The repository's version of `name` for the DCGM release `wanted` (4.5.2), or its newest without one."""
    versions = madison.get(name) or []
    if not wanted:
        return versions[0] if versions else None
    for version in versions:
        if upstream_version(version) == wanted:
            return version
    return None


def plan(dpkg_text, madison_text, major, wanted_version=None):
    """What apt is to do: {packages: [core, cuda<N>], install: ['name=version' where not installed at it],
    remove: [DCGM 3, other majors' plugins], installed: {name: version}, version: the upstream version,
    driver_from_cuda_repo: whether the driver role pinned NVIDIA's own driver}.

    Without wanted_version the installed release stays (held, as the driver is); a first install takes the
    repository's newest. madison_text: `apt-cache madison` of both packages."""
    packages = dpkg.parse(dpkg_text)
    installed = dpkg.installed_versions(packages)
    madison = parse_madison(madison_text)
    names = [CORE, CUDA_PACKAGE % major]
    current = installed.get(CORE)
    release = wanted_version or (upstream_version(current) if current else None)
    install, missing = [], []
    for name in names:
        have = installed.get(name)
        if have and (not release or upstream_version(have) == release):
            continue
        version = _candidate(madison, name, release)
        if not version:
            missing.append(name)
            continue
        install.append("%s=%s" % (name, version))
    if missing:
        offered = sorted(set(upstream_version(v) for n in names for v in madison.get(n) or []))
        raise DcgmPlanError("NVIDIA's CUDA repository has no %s%s (it has %s): %s"
                            % (" or ".join(missing), " at %s" % release if release else "",
                               ", ".join(offered) or "no DCGM 4 package",
                               "set nvidia_dcgm_version to one of those" if offered else
                               "check nvidia_dcgm_cuda_repo_url and that apt's index is fresh"))
    if not release:
        release = upstream_version(install[0].split("=", 1)[1])
    remove = sorted(([DCGM3] if DCGM3 in installed else [])
                    + [name for plugin_major, name in installed_plugins(installed).items() if plugin_major != major])
    return {"packages": names, "install": install, "remove": remove, "installed": installed,
            "version": release,
            "held": sorted(name for name in names if (packages.get(name) or {}).get("held")),
            "driver_from_cuda_repo": any(fnmatch.fnmatchcase(name, DRIVER_PINNING) for name in installed)}


def pin_text(patterns=PINNED_PATTERNS, release=CUDA_REPO_RELEASE):
    """apt_preferences(5) file: nothing of the driver's, the fabric manager's or the toolkit's from NVIDIA's CUDA
    repository (Pin-Priority below 0: apt never installs such a version)."""
    return ("# gpuhost (role nvidia_dcgm): NVIDIA's CUDA repository is here for DCGM only. The driver, the fabric\n"
            "# manager and the container toolkit come from elsewhere: apt never takes them from it.\n"
            "Package: %s\nPin: release %s\nPin-Priority: -1\n" % (" ".join(patterns), release))
