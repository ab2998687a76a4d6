# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which NVIDIA driver a host gets, and whether it may have it: the nvidia_driver role's plan of changes (the
packages to install at their versions, to remove, to purge, to hold), its checks after the install, and the reboot.

Pure stdlib, no Ansible imports. Host evidence comes in as text (``apt-cache madison``,
``dpkg-query -W``, ``dpkg-query -S``, ``ubuntu-drivers devices``) or as the PCI devices of
nvidia_gpu_facts; everything here is a function of that input, so it is unit-tested on captured
outputs. The module library/nvidia_driver_plan.py is the thin shell that runs the commands.

    gpus = gpu_summary(pci_devices)                 # architecture facts per GPU (driver_request)
    pre = precheck(request, gpus)                   # refusals that need no host query (driver_request)
    result = plan(request, gpus, io)                # packages, versions, action (io: HostQuery)
    reboot = reboot_decision(installed, gpu_facts)  # installed vs loaded driver
    pins = operator_pins(files, own_path, result)   # the operator's apt pins this plan would override

The plan's parts, in module_utils/driver/: driver_request.py (the request, the GPUs, DriverChoiceError),
debian_version.py, driver_packages.py (apt's and dpkg's outputs, package names, what is installed),
branch_choice.py (the branch per style), apt_preferences.py (operator_pins: the operator's apt pins).
"""
import re
from functools import cmp_to_key

from ansible.module_utils.driver.branch_choice import resolve_branch
from ansible.module_utils.driver.debian_version import compare_versions, newest_version, upstream_version
from ansible.module_utils.driver.driver_packages import (
    dkms_packages_to_remove, installed_driver, kernel_flavour, parse_apt_show, replaced_pinning_packages,
    signed_flavours, signed_module_versions, top_packages, ubuntu_variant)
from ansible.module_utils.driver.driver_request import DriverChoiceError, check_branch, precheck
from ansible.module_utils.driver.fabric_manager import fabric_packages
from ansible.module_utils.driver.secure_boot import signed_modules_metapackage
from ansible.module_utils.gpu.host_parse import driver_branch


# ---------------------------------------------------------------------------------------------
# The plan


def _main_candidates(dpkg):
    """Installed driver metapackages/utilities, for a host whose nvidia-smi has no owner package."""
    return sorted(name for name, info in dpkg.items() if info["installed"]
                  and re.match(r"^nvidia-(?:driver|utils)(?:-\d+)?(?:-server)?(?:-open)?$", name))


def _pick(versions, upstream):
    """The newest of `versions` whose upstream part is `upstream`."""
    return newest_version([v for v in versions if upstream_version(v) == upstream])


def plan(request, gpus, query):
    """What the role installs. `query` answers ubuntu_drivers(), madison(pkgs), dpkg(), smi_owner().

    Returns branch, branch_source, kernel_modules(+_reason), packages (main first), main_package,
    version (upstream wanted), package_version (main package's full version), install (apt specs
    name=version), action (none|install|upgrade|downgrade|change), installed (see installed_driver),
    available (versions of the main package in the branch), unattended_upgrades.
    With request["sources_pending"] (a check run that adds the sources itself) and no package in the
    sources yet, the plan is a prediction (predicted: True, version "<branch>.*").
    Raises DriverChoiceError naming the GPU, the branch and the fix.
    """
    pre = precheck(request, gpus)
    dpkg = query.dpkg()
    installed = installed_driver(dpkg, query.smi_owner(), _main_candidates(dpkg))
    branch, source = resolve_branch(request, pre, gpus, installed, query)
    check_branch(branch, gpus, source)
    modules = pre["kernel_modules"]
    signed = request["style"] == "ubuntu" and not request.get("dkms")
    if signed:
        request = dict(request, **resolve_kernel_flavour(request, query))
    packages = top_packages(request, branch, modules)
    # The style's refusal was precheck's; the pinned ones go at exactly the driver's version.
    fabric = fabric_packages(pre["fabric_need"], request["style"], branch) if pre["fabric_services"] else {}
    fabric_names = (fabric.get("pinned") or []) + (fabric.get("unpinned") or [])
    packages += [name for name in fabric_names if name not in packages]
    main = packages[0]
    madison = query.madison(packages)
    available = sorted((v for v in madison.get(main, []) if driver_branch(v) == branch),
                       key=cmp_to_key(compare_versions), reverse=True)
    main_installed = dpkg.get(main, {}).get("installed")
    other = [v for v in madison.get(main, []) if driver_branch(v) != branch]
    if not available and other and request["style"] == "ubuntu":
        raise DriverChoiceError(
            "%s in the apt sources is %s, not a branch %d driver: Ubuntu made it a transitional package that "
            "pulls a newer branch. Fix: set nvidia_driver_branch: %d (or auto) after checking the GPU is supported by it"
            % (main, ", ".join(other), branch, max(driver_branch(v) or 0 for v in other)))
    if request.get("version"):
        wanted = _pick(available, request["version"]) or (request["version"] if request["version"] in available else None)
        if wanted is None:
            if main_installed and upstream_version(dpkg[main]["version"]) == request["version"]:
                wanted = dpkg[main]["version"]
            else:
                raise DriverChoiceError(
                    "nvidia_driver_version %s is not available for %s (branch %d offers: %s); pick one of those"
                    % (request["version"], main, branch, ", ".join(available) or "nothing"))
    elif request.get("upgrade"):
        wanted = available[0] if available else (dpkg[main]["version"] if main_installed else None)
    elif installed["branch"] == branch:
        wanted = (dpkg[main]["version"] if main_installed and upstream_version(dpkg[main]["version"]) == installed["upstream"]
                  else _pick(available, installed["upstream"]) or (available[0] if available else None))
    else:
        wanted = available[0] if available else None
    if wanted is None and request.get("sources_pending"):
        return _predicted_plan(request, pre, branch, source, modules, packages, installed, dpkg)
    if wanted is None:
        raise DriverChoiceError(
            "no %s package (branch %d) is in the apt sources; %s" % (
                main, branch, "add the archive that has it (nvidia_driver_repositories)" if request["style"] == "ubuntu"
                else "enable non-free (nvidia_driver_debian_components) or set nvidia_driver_repositories"))
    upstream = upstream_version(wanted)
    fixed, notes = {}, []
    if signed:
        fixed, notes = signed_module_choice(request, branch, modules, upstream, query)
        packages = [name for name in packages if name not in notes_dropped(notes)]
    install = []
    for name in packages:
        version = fixed.get(name) or (wanted if name == main else _pick(madison.get(name, []), upstream))
        if version is None and dpkg.get(name, {}).get("installed") and upstream_version(dpkg[name]["version"]) == upstream:
            version = dpkg[name]["version"]
        install.append({"name": name, "version": version,
                        "spec": "%s=%s" % (name, version) if version else name,
                        "installed": dpkg.get(name, {}).get("version") if dpkg.get(name, {}).get("installed") else None})
    lacking = [p["name"] for p in install if p["name"] in (fabric.get("pinned") or []) and p["version"] is None]
    if lacking:
        service = "IMEX service" if pre["fabric_need"] == "imex" else "fabric manager"
        offered = sorted(set(upstream_version(v) for v in madison.get(lacking[0], [])), key=cmp_to_key(compare_versions))
        raise DriverChoiceError(
            "%s %s is not in the apt sources (they offer %s): the %s must be exactly the driver's version or it "
            "refuses to start, so the driver stays as it is. Fix: a driver version the apt sources have the %s for "
            "(nvidia_driver_version)" % (lacking[0], upstream, ", ".join(offered) or "none", service, service))
    remove = dkms_packages_to_remove(dpkg) if signed else []
    satisfied = all(p["installed"] and (p["version"] is None or p["installed"] == p["version"]) for p in install)
    if satisfied and not remove:
        action = "none"
    elif not installed["upstream"]:
        action = "install"
    elif installed["branch"] != branch or any(not p["installed"] for p in install):
        action = "change"
    else:
        order = compare_versions(upstream, installed["upstream"])
        action = "upgrade" if order > 0 else ("downgrade" if order < 0 else "change")
    return _plan_result(pre, branch, source, modules, packages, installed, dpkg, version=upstream,
                        package_version=wanted, install=install, action=action, available=available,
                        remove=remove, kernel=_kernel_result(request, notes))


def _kernel_result(request, notes=()):
    """What the plan knows of the kernel the modules are for (Ubuntu's signed modules; None for DKMS)."""
    if "kernel_release" not in request:
        return None
    return {"release": request["kernel_release"], "flavour": request["kernel_flavour_resolved"],
            "flavour_source": request["kernel_flavour_source"], "notes": [n["text"] for n in notes]}


def notes_dropped(notes):
    return [n["dropped"] for n in notes if n.get("dropped")]


def resolve_kernel_flavour(request, query):
    """{kernel_release, kernel_flavour_resolved, kernel_flavour_source}: the running kernel and its flavour
    (nvidia_driver_kernel_flavour, else the installed linux-image-<flavour> metapackage that depends on it)."""
    release = query.kernel_release()
    asked = request.get("kernel_flavour") or "auto"
    if asked != "auto":
        return {"kernel_release": release, "kernel_flavour_resolved": asked,
                "kernel_flavour_source": "nvidia_driver_kernel_flavour"}
    flavour, evidence = kernel_flavour(query.kernel_images(), release)
    if flavour is None:
        raise DriverChoiceError(
            "cannot tell the flavour of the running kernel %s, which names Canonical's signed nvidia modules "
            "(linux-modules-nvidia-<branch>-server[-open]-<flavour>): %s. Fix: set nvidia_driver_kernel_flavour "
            "(generic, generic-hwe-24.04, aws, ...), or nvidia_driver_dkms: true to build the module with DKMS"
            % (release, evidence))
    return {"kernel_release": release, "kernel_flavour_resolved": flavour, "kernel_flavour_source": evidence}


def signed_module_choice(request, branch, modules, upstream, query):
    """({package: version}, notes) of Canonical's signed modules for driver `upstream`: the running kernel's
    package at the version built against that driver (refused when there is none), and the flavour's
    metapackage likewise (left out, with a note, when the archive's metapackage follows another driver).

    Refuses a flavour the archive has no signed modules for, naming the flavours that have them."""
    flavor = request["flavor"]
    variant = ubuntu_variant(branch, flavor, modules)
    kernel, flavour = request["kernel_release"], request["kernel_flavour_resolved"]
    meta = signed_modules_metapackage(branch, flavour, modules == "open", flavor == "server")
    own = signed_modules_metapackage(branch, kernel, modules == "open", flavor == "server")
    offered = signed_flavours(query.pkgnames("linux-modules-nvidia-%s-" % variant), variant)
    if flavour not in offered:
        raise DriverChoiceError(
            "the apt sources have no Canonical-signed nvidia modules for the %s kernel flavour (%s, from %s): %s. "
            "Fix: run a kernel of a flavour that has them, or set nvidia_driver_dkms: true to build the module "
            "with DKMS (under Secure Boot its key must then be enrolled as a MOK at the console)"
            % (flavour, meta, request["kernel_flavour_source"],
               "flavours with signed %s modules: %s" % (variant, ", ".join(offered)) if offered
               else "no flavour has signed %s modules there" % variant))
    stanzas = parse_apt_show(query.show([meta, own]))
    own_versions = signed_module_versions(stanzas, own, branch, flavor)
    fit = [v for v, driver in own_versions.items() if driver == upstream]
    if not fit:
        if not own_versions:
            raise DriverChoiceError(
                "the apt sources have no signed nvidia modules for the running kernel %s (%s): the archive builds "
                "them for the flavour's current kernels only. Fix: upgrade the kernel (apt install linux-%s), "
                "reboot into it and run again; or set nvidia_driver_dkms: true" % (kernel, own, flavour))
        drivers = sorted(set(d for d in own_versions.values() if d), key=cmp_to_key(compare_versions))
        raise DriverChoiceError(
            "the signed nvidia modules for the running kernel %s (%s) are built for driver %s, not %s: the "
            "module must be exactly the driver's version. Fix: nvidia_driver_version: %s (or nvidia_driver_upgrade: "
            "true for the newest), or nvidia_driver_dkms: true" % (
                kernel, own, " and ".join(drivers) or "no known version", upstream, drivers[-1] if drivers else "?"))
    fixed = {own: newest_version(fit)}
    meta_fit = [v for v, driver in signed_module_versions(stanzas, meta, branch, flavor).items() if driver == upstream]
    notes = []
    if meta_fit:
        fixed[meta] = newest_version(meta_fit)
    else:
        notes.append({"dropped": meta, "text": (
            "%s is left out: the archive's version of it follows another driver than %s, so kernels the flavour "
            "installs later get no module for this driver (the reboot check refuses to start them)" % (meta, upstream))})
    return fixed, notes


def _plan_result(pre, branch, source, modules, packages, installed, dpkg, **chosen):
    """plan()'s result: what was resolved, and what was chosen (version, package_version, install,
    action, available; a prediction adds predicted and predicted_reason)."""
    install = chosen.pop("install")
    chosen.setdefault("remove", [])
    chosen.setdefault("purge", replaced_pinning_packages(dpkg, branch))
    chosen.setdefault("kernel", None)
    return dict({
        "branch": branch, "branch_source": source, "min_branch": pre["min_branch"],
        "kernel_modules": modules, "kernel_modules_reason": pre["kernel_modules_reason"],
        "packages": packages, "main_package": packages[0],
        "install": [p["spec"] for p in install], "package_versions": install, "installed": installed,
        "unattended_upgrades": bool(dpkg.get("unattended-upgrades", {}).get("installed")),
        "fabric_manager": pre["fabric_manager"], "fabric_manager_reason": pre["fabric_manager_reason"],
        "fabric_need": pre["fabric_need"], "fabric_services": pre["fabric_services"],
    }, **chosen)


def _predicted_plan(request, pre, branch, source, modules, packages, installed, dpkg):
    """The plan of a check run whose apt sources are not on the host yet (they are added by the same run):
    the packages are known by name, their version only once apt has read the new sources."""
    exact_branch = pre["branch"] is not None or request["style"] == "ubuntu" or installed["branch"] == branch
    upstream = request.get("version") or ("%d.*" % branch if exact_branch else ">=%d" % branch)
    install = [{"name": name, "version": None, "spec": name,
                "installed": dpkg.get(name, {}).get("version") if dpkg.get(name, {}).get("installed") else None}
               for name in packages]
    return _plan_result(
        pre, branch, source, modules, packages, installed, dpkg, version=upstream, package_version=None,
        install=install, action="install" if not installed["upstream"] else "change", available=[],
        predicted=True, remove=dkms_packages_to_remove(dpkg) if "kernel_release" in request else [],
        kernel=_kernel_result(request),
        predicted_reason="the apt sources this run adds are not on the host yet (check mode): the newest "
                         "package of branch %s they offer" % upstream.replace(".*", ""))


# ---------------------------------------------------------------------------------------------
# After the install


def verify_installed(result_plan, installed):
    """Errors when what is installed is not what was asked for (transitional packages, held versions)."""
    errors = []
    if not installed["upstream"]:
        errors.append("no NVIDIA driver is installed after installing %s (nothing ships nvidia-smi)"
                      % ", ".join(result_plan["install"]))
        return errors
    if installed["branch"] != result_plan["branch"]:
        errors.append(
            "asked for branch %d (%s) but the installed driver is %s from %s: Ubuntu turns retired -server "
            "branches into transitional packages that pull a newer branch. Fix: set nvidia_driver_branch: %d "
            "(or auto) after checking the GPU is supported by it"
            % (result_plan["branch"], result_plan["main_package"], installed["upstream"], installed["package"],
               installed["branch"]))
    elif installed["upstream"] != result_plan["version"]:
        errors.append("asked for driver %s but %s is installed (from %s)"
                      % (result_plan["version"], installed["upstream"], installed["package"]))
    if installed["kernel_modules"] not in (None, result_plan["kernel_modules"]):
        errors.append("asked for the %s kernel modules but the installed ones are %s"
                      % (result_plan["kernel_modules"], installed["kernel_modules"]))
    return errors


def hold_owners(installed, record):
    """Which of the held driver packages gpuhost held (`ours`) and which the operator did (`operator`), and
    what gpuhost's record says after this run holds the rest (`gpuhost`, `gpuhost_versions`: "name=version").

    `record` is the host's recorded driver section (ansible_local.gpuhost.driver) or None. A hold is
    gpuhost's only if gpuhost set it on the version installed now: an operator who downgrades the driver and
    holds the same package names has made holds of their own. Records before `held_versions` tell the
    version by the driver they recorded (`version`); runs before `held_by_gpuhost` held every package they
    recorded.
    """
    record = record or {}
    versions = installed.get("versions") or {}
    if "held_versions" in record:
        recorded = dict(entry.split("=", 1) for entry in record.get("held_versions") or [] if "=" in entry)
        ours = set(p for p, version in recorded.items() if versions.get(p) == version)
    else:
        names = record.get("held_by_gpuhost") if "held_by_gpuhost" in record else record.get("packages")
        same_driver = record.get("version") in (None, installed.get("upstream"))
        ours = set(names or []) if same_driver else set()
    held = installed.get("held") or []
    operator = sorted(p for p in held if p not in ours)
    gpuhost = sorted(p for p in installed.get("packages") or [] if p not in operator)
    # "name=version" (apt's own spelling), a list: the record's merge replaces a list where it would merge a dict.
    return {"ours": sorted(p for p in held if p in ours), "operator": operator,
            "gpuhost": gpuhost, "gpuhost_versions": ["%s=%s" % (p, versions.get(p)) for p in gpuhost]}


def operator_hold_error(result_plan, operator_held):
    """Why the run stops before a driver change would release holds the operator made (None: it need not)."""
    if not operator_held or result_plan["action"] == "none":
        return None
    installed = result_plan["installed"]
    return ("the operator held %s (driver %s, branch %s); this run would %s to %s (branch %s, %s) and so "
            "release those holds. Nothing was changed. Fix: keep nvidia_driver_branch/nvidia_driver_version "
            "at the held driver, or set nvidia_driver_release_operator_holds: true to let gpuhost release and "
            "re-hold them"
            % (", ".join(operator_held), installed["upstream"], installed["branch"], result_plan["action"],
               result_plan["version"], result_plan["branch"], result_plan["main_package"]))


def disruption(result):
    """What the driver's run would do to the host's serving, for site.yml's rollout plan: '' when nothing
    (no change, no reboot), else the change ("driver change 570.195.03 -> 580.95.05") or the reboot's reason."""
    if result.get("action", "none") != "none":
        installed = (result.get("installed") or {}).get("upstream")
        if installed == result["version"]:
            # Same version, packages added (e.g. nvidia-persistenced): no module change, but the install
            # still notifies the chain that reconfigures and restarts the engine.
            added = [p["name"] for p in result.get("package_versions") or [] if not p.get("installed")]
            return "driver %s packages added: %s" % (installed, ", ".join(added) or "none")
        return "driver %s %s -> %s" % (result["action"], installed or "none", result["version"])
    reboot = result.get("reboot") or {}
    if reboot.get("required"):
        return "reboot: %s" % reboot["reason"]
    return ""


def reboot_decision(installed_upstream, installed_modules, gpu_facts):
    """{required, reason, installed, loaded}: reboot when the loaded module is not the installed driver."""
    facts = gpu_facts or {}
    loaded = facts.get("driver_version_kernel")
    loaded_modules = (facts.get("kernel_modules") or {}).get("flavor")
    result = {"required": False, "reason": None, "installed": installed_upstream, "loaded": loaded,
              "loaded_kernel_modules": loaded_modules}
    if not installed_upstream:
        return result
    if facts.get("state") == "version_mismatch":
        result.update(required=True, reason="NVML reports a driver/library version mismatch (installed %s, loaded %s)"
                      % (installed_upstream, loaded or "unknown"))
    elif not loaded:
        result.update(required=True, reason="driver %s is installed but no NVIDIA kernel module is loaded"
                      % installed_upstream)
    elif loaded != installed_upstream:
        result.update(required=True, reason="driver %s is installed but %s is loaded" % (installed_upstream, loaded))
    elif installed_modules in ("open", "proprietary") and loaded_modules and loaded_modules != installed_modules:
        result.update(required=True, reason="the %s kernel modules are installed but the %s ones are loaded"
                      % (installed_modules, loaded_modules))
    return result
