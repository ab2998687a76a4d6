# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The driver branch when the request names none (nvidia_driver_branch: auto), per style: the installed driver's
while the GPUs allow it; Ubuntu's archive: ubuntu-drivers' recommendation in the flavour asked for; Debian's archive
and NVIDIA's CUDA repository: the newest branch the apt sources offer, at or below the GPUs' ceiling (the last
branch that drives them).

Pure stdlib, no Ansible imports.
"""
from ansible.module_utils.driver.debian_version import newest_version
from ansible.module_utils.driver.driver_packages import top_packages, ubuntu_package
from ansible.module_utils.driver.driver_request import DriverChoiceError, describe, max_branch, min_branch
from ansible.module_utils.gpu.host_parse import (
    HostParseError, driver_branch, package_traits, parse_ubuntu_drivers_devices)


# ---------------------------------------------------------------------------------------------
# Branch


def branch_from_ubuntu_drivers(text, request, modules, gpus):
    """(branch, detail) from ``ubuntu-drivers devices``: the recommended branch, in the flavour asked for.

    ubuntu-drivers recommends one package per GPU, in any flavour (often the desktop -open one).
    The branch of the recommendation is kept when the flavour's package (nvidia-driver-<B>-server
    [-open]) is a candidate for every GPU; else the newest branch that is.
    """
    try:
        devices = parse_ubuntu_drivers_devices(text or "")
    except HostParseError as exc:
        raise DriverChoiceError("ubuntu-drivers devices: %s; set nvidia_driver_branch" % exc)
    want_server = request["flavor"] == "server"
    want_open = modules == "open"
    nvidia = [d for d in devices if d.get("vendor_id") == "10de"
              or any(x.get("branch") for x in d["drivers"])]
    if not nvidia:
        raise DriverChoiceError("ubuntu-drivers devices lists no NVIDIA GPU; set nvidia_driver_branch")
    common = None
    recommended = []
    for device in nvidia:
        fitting = {x["branch"] for x in device["drivers"] if x.get("branch")
                   and x["server"] == want_server and x["open"] == want_open}
        common = fitting if common is None else common & fitting
        traits = package_traits(device.get("recommended"))
        if traits["branch"]:
            recommended.append(traits["branch"])
    floor, ceiling = min_branch(gpus) or 0, max_branch(gpus)
    common = {b for b in (common or set()) if b >= floor and (not ceiling or b <= ceiling)}
    wanted = ubuntu_package(0, request["flavor"], modules).replace("-0", "-<branch>")
    if not common:
        raise DriverChoiceError("ubuntu-drivers devices offers no %s (branch >= %d%s) for %s; set nvidia_driver_branch"
                                % (wanted, floor, ", <= %d" % ceiling if ceiling else "",
                                   ", ".join(describe(g) for g in gpus) or "this host's GPUs"))
    if recommended and max(recommended) in common:
        return max(recommended), "ubuntu-drivers recommends branch %d" % max(recommended)
    return max(common), "newest %s ubuntu-drivers offers (its recommendation %s is not in this flavour)" % (
        wanted.replace("<branch>", str(max(common))), ", ".join(str(b) for b in recommended) or "none")


def resolve_branch(request, pre, gpus, installed, query):
    """(branch, source): request > installed (while usable) > ubuntu-drivers (Ubuntu) / newest packaged (Debian)."""
    if pre["branch"] is not None:
        return pre["branch"], pre["branch_source"]
    floor = pre["min_branch"] or 0
    if installed["branch"] and installed["branch"] >= floor:
        return installed["branch"], "the installed driver (%s); auto never changes branch" % installed["upstream"]
    if request["style"] == "ubuntu":
        text = query.ubuntu_drivers()
        if text is None and request.get("sources_pending") and floor:
            return floor, ("ubuntu-drivers' recommendation once the run installs ubuntu-drivers-common, at least "
                           "branch %d for these GPUs (check mode)" % floor)
        if text is None:
            raise DriverChoiceError("nvidia_driver_branch is auto but ubuntu-drivers is not installed "
                                    "(package ubuntu-drivers-common); install it or set nvidia_driver_branch")
        return branch_from_ubuntu_drivers(text, request, pre["kernel_modules"], gpus)
    main = top_packages(request, 0, pre["kernel_modules"])[0]
    if request["style"] == "nvidia" and request.get("sources_pending") and floor:
        # Debian's own nvidia-driver may be readable already; NVIDIA's repository, the one that counts, is not.
        return floor, ("newest %s of NVIDIA's CUDA repository this run adds, at least branch %d for these GPUs "
                       "(check mode cannot read it yet)" % (main, floor))
    ceiling = pre.get("max_branch")
    offered = query.madison([main]).get(main, [])
    newest = newest_version([v for v in offered if not ceiling or (driver_branch(v) or 0) <= ceiling])
    if newest is None and offered and ceiling:
        raise DriverChoiceError(
            "nvidia_driver_branch is auto but the apt sources offer %s only past branch %d, the last that drives %s "
            "(%s); add a source that has branch %d, or set nvidia_driver_branch" % (
                main, ceiling, ", ".join(describe(g) for g in gpus if g.get("max_branch") == ceiling),
                ", ".join(offered), ceiling))
    if (not newest or not driver_branch(newest)) and request.get("sources_pending") and floor:
        return floor, ("newest %s of the apt sources this run adds, at least branch %d for these GPUs "
                       "(check mode cannot read those sources yet)" % (main, floor))
    if not newest or not driver_branch(newest):
        if request["style"] == "nvidia":
            raise DriverChoiceError("nvidia_driver_branch is auto but no %s package is in the apt sources: is "
                                    "NVIDIA's CUDA repository (nvidia_driver_cuda_repo_url) reachable?" % main)
        raise DriverChoiceError("nvidia_driver_branch is auto but no %s package is in the apt sources "
                                "(enable non-free, or set nvidia_driver_repositories)" % main)
    return driver_branch(newest), "newest %s in the apt sources (%s)%s" % (
        main, newest, ", at most branch %d for these GPUs" % ceiling if ceiling else "")
