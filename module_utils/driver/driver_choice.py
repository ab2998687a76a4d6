# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which NVIDIA driver a host gets, and whether it may have it: the nvidia_driver role's decisions.

Pure stdlib, no Ansible imports. Host evidence comes in as text (``apt-cache madison``,
``dpkg-query -W``, ``dpkg-query -S``, ``ubuntu-drivers devices``) or as the PCI devices of
nvidia_gpu_facts; everything here is a function of that input, so it is unit-tested on captured
outputs. The module library/nvidia_driver_plan.py is the thin shell that runs the commands.

    gpus = gpu_summary(pci_devices)                 # architecture facts per GPU
    pre = precheck(request, gpus)                   # refusals that need no host query
    result = plan(request, gpus, io)                # packages, versions, action (io: HostQuery)
    reboot = reboot_decision(installed, gpu_facts)  # installed vs loaded driver
    pins = operator_pins(files, own_path, result)   # the operator's apt pins this plan would override
"""
import fnmatch
import posixpath
import re
from functools import cmp_to_key

from ansible.module_utils.driver.cuda_repo import plan_packages as cuda_repo_packages
from ansible.module_utils.driver.driver_sources import SourcesError, paragraphs
from ansible.module_utils.gpu.gpu_arch import lookup as arch_lookup
from ansible.module_utils.gpu.host_parse import (
    HostParseError, driver_branch, package_traits, parse_ubuntu_drivers_devices)
from ansible.module_utils.driver.secure_boot import signed_modules_metapackage
from ansible.module_utils.host.dpkg import parse as parse_dpkg


class DriverChoiceError(ValueError):
    """The request cannot be served on this host; the message names the GPU, the branch and the fix."""


# nvidia: NVIDIA's CUDA repository (module_utils/driver/cuda_repo.py names its packages; request["cuda_repo_family"]
# debian|ubuntu says which naming the host's repository uses).
STYLES = ("ubuntu", "debian", "nvidia")
FLAVORS = ("server", "desktop")
KERNEL_MODULES = ("auto", "open", "proprietary")
FABRIC_MANAGER_MODES = ("auto", "always", "never")
# Binary packages built from NVIDIA's driver sources: Ubuntu nvidia-*/libnvidia-*/linux-*-nvidia-*,
# xserver-xorg-video-nvidia-*; Debian also libcuda1, libnvcuvid1, libnvoptix1, ...
DRIVER_PACKAGE = re.compile(r"nvidia|^libcuda|^libnv")
# Ubuntu's prebuilt kernel modules carry the kernel's version, not the driver's.
_UBUNTU_KMOD = re.compile(r"^linux-(?:modules|objects|signatures)-nvidia-(\d+)(-server)?(-open)?-")
_BRANCH = re.compile(r"^\d{3,4}$")
# A kernel flavour as Ubuntu's linux-image-<flavour> metapackages name them (generic, generic-hwe-24.04, aws-64k).
_KERNEL_FLAVOUR = re.compile(r"^[a-z][a-z0-9.+-]*$")
_DRIVER_VERSION = re.compile(r"^\d{3,4}(?:\.\d+){1,3}$")


# ---------------------------------------------------------------------------------------------
# Debian versions


def _order(char):
    if char == "~":
        return -1
    if char.isdigit() or char == "":
        return 0
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _verrevcmp(left, right):
    """dpkg's verrevcmp(): alternating non-digit (lexical, '~' first) and digit (numeric) runs."""
    i = j = 0
    while i < len(left) or j < len(right):
        first_diff = 0
        while (i < len(left) and not left[i].isdigit()) or (j < len(right) and not right[j].isdigit()):
            a = _order(left[i]) if i < len(left) and not left[i].isdigit() else 0
            b = _order(right[j]) if j < len(right) and not right[j].isdigit() else 0
            if a != b:
                return a - b
            i += 1
            j += 1
        while i < len(left) and left[i] == "0":
            i += 1
        while j < len(right) and right[j] == "0":
            j += 1
        while i < len(left) and j < len(right) and left[i].isdigit() and right[j].isdigit():
            if not first_diff:
                first_diff = ord(left[i]) - ord(right[j])
            i += 1
            j += 1
        if i < len(left) and left[i].isdigit():
            return 1
        if j < len(right) and right[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def _split_version(version):
    epoch, _sep, rest = version.partition(":") if ":" in version else ("0", "", version)
    upstream, _sep, revision = rest.rpartition("-") if "-" in rest else (rest, "", "0")
    return int(epoch or 0), upstream, revision


def compare_versions(left, right):
    """<0, 0, >0 as ``dpkg --compare-versions`` orders two Debian versions."""
    le, lu, lr = _split_version(left)
    re_, ru, rr = _split_version(right)
    if le != re_:
        return le - re_
    return _verrevcmp(lu, ru) or _verrevcmp(lr, rr)


def upstream_version(version):
    """'1:580.95.05-0ubuntu0.24.04.1' -> '580.95.05'."""
    return _split_version(version)[1] if version else None


def _newest(versions):
    best = None
    for version in versions:
        if best is None or compare_versions(version, best) > 0:
            best = version
    return best


# ---------------------------------------------------------------------------------------------
# Host outputs


def parse_madison(text):
    """``apt-cache madison P...`` -> {package: [versions, in the order listed, without repeats]}."""
    result = {}
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 3 or not parts[0] or not parts[1]:
            continue
        versions = result.setdefault(parts[0], [])
        if parts[1] not in versions:
            versions.append(parts[1])
    return result


def parse_dpkg_query(text):
    """``dpkg-query -W -f FORMAT`` (host/dpkg.py, the one dpkg parser) -> {package: info}.

    info: version, want (first status letter), installed (the package's files are on disk: status
    letter i, or a half-configured/unpacked one), held (selection 'hold'), config_files (removed, its
    conffiles left: status letter c, `rc` in dpkg -l).
    """
    return dict((name, {"version": p["version"], "want": p["abbrev"][:1], "held": p["held"],
                        "installed": p["unpacked"], "config_files": p["status"] == "config-files"})
                for name, p in parse_dpkg(text).items())


def parse_dpkg_owners(text):
    """``dpkg-query -S PATH...`` -> {path: the (first) owning package}, in dpkg's order ('diversion by' lines
    are skipped; a path no package owns is only on stderr)."""
    owners = {}
    for line in (text or "").splitlines():
        if line.startswith("diversion by") or ": " not in line:
            continue
        owner, path = line.split(": ", 1)
        owner = owner.split(",")[0].strip().split(":")[0]
        if owner:
            owners.setdefault(path.strip(), owner)
    return owners


def parse_dpkg_search(text):
    """``dpkg-query -S PATH`` -> the owning package, or None."""
    return next(iter(parse_dpkg_owners(text).values()), None)


def parse_kernel_images(text):
    """``dpkg-query -W -f FORMAT`` with ``${Depends}`` after it (host/dpkg.query_argv) ``'linux-image-*'`` ->
    {package: {version, installed, depends: [names]}} (installed as parse_dpkg_query reads it; alternatives and
    version constraints dropped)."""
    packages = parse_dpkg_query(text)
    result = {}
    for line in (text or "").splitlines():
        fields = line.split("\t")
        name = fields[0].split(":")[0]
        if name not in packages:
            continue
        depends = [alt.strip().split(" ")[0].split(":")[0]
                   for dep in (fields[3] if len(fields) > 3 else "").split(",") for alt in dep.split("|") if alt.strip()]
        result[name] = {"version": packages[name]["version"], "installed": packages[name]["installed"],
                        "depends": depends}
    return result


# Ubuntu's kernel metapackages: linux-image-<flavour> (generic, generic-hwe-24.04, aws, ...), not a kernel's
# own linux-image-<release>, linux-image-unsigned-* or linux-image-extra-*.
_IMAGE_META = re.compile(r"^linux-image-(?!unsigned-|extra-|uc-)([a-z][a-z0-9.+-]*)$")


def kernel_flavour(images, running):
    """(flavour, evidence) of the running kernel: the installed linux-image-<flavour> metapackage that depends
    on linux-image-<running> (or its -unsigned- image), as ubuntu-drivers finds it; 'virtual' is generic.
    (None, why) when no installed metapackage names it."""
    wanted = {"linux-image-" + running, "linux-image-unsigned-" + running}
    hits = sorted(name for name, info in (images or {}).items()
                  if info.get("installed") and _IMAGE_META.match(name) and wanted & set(info.get("depends") or []))
    if not hits:
        metas = sorted(n for n, i in (images or {}).items() if i.get("installed") and _IMAGE_META.match(n))
        return None, ("no installed linux-image-<flavour> metapackage depends on the running kernel's image "
                      "linux-image-%s (installed metapackages: %s)" % (running, ", ".join(metas) or "none"))
    flavour = _IMAGE_META.match(hits[0]).group(1)
    flavour = "generic" if flavour == "virtual" else flavour
    return flavour, "%s depends on linux-image-%s%s" % (hits[0], running,
                                                        " (also: %s)" % ", ".join(hits[1:]) if hits[1:] else "")


def signed_flavours(names, variant):
    """``apt-cache pkgnames linux-modules-nvidia-<variant>-`` -> the kernel flavours the archive has Canonical-
    signed modules of this variant for (their metapackages; per-kernel packages start with a digit)."""
    prefix = "linux-modules-nvidia-%s-" % variant
    skip = tuple(x for x in ("open-", "server-") if "-" + x[:-1] not in "-" + variant)
    flavours = set()
    for name in (names or "").split():
        if not name.startswith(prefix):
            continue
        rest = name[len(prefix):]
        if rest and not rest[0].isdigit() and not rest.startswith(skip):
            flavours.add(rest)
    return sorted(flavours)


_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):\s?(.*)$")


def parse_apt_show(text):
    """``apt-cache show P...`` -> [{package, version, depends}] (every version apt knows, in its order).
    Paragraphs are separated by blank lines; only the fields matter, so a description whose continuation
    lines lost their leading space (as copies in documents do) is read too."""
    stanzas = []
    for block in re.split(r"\n\s*\n", text or ""):
        fields = {}
        for line in block.splitlines():
            match = _FIELD.match(line)
            if match and match.group(1).lower() not in fields:
                fields[match.group(1).lower()] = match.group(2).strip()
        if fields.get("package"):
            stanzas.append({"package": fields["package"], "version": fields.get("version", ""),
                            "depends": fields.get("depends", "")})
    return stanzas


def built_for_driver(depends, branch, flavor):
    """The driver a signed-modules package was built against: the lower bound of its
    nvidia-kernel-common-<branch>[-server] dependency ('>= 580.95.05'), upstream version; else None."""
    common = re.escape("nvidia-kernel-common-%d%s" % (branch, "-server" if flavor == "server" else ""))
    match = re.search(r"(?:^|[,|]\s*)%s\s*\(\s*>=\s*([^)\s]+)\s*\)" % common, depends or "")
    return upstream_version(match.group(1)) if match else None


def signed_module_versions(stanzas, name, branch, flavor):
    """{version of `name`: the driver it was built against} from parse_apt_show()."""
    return dict((s["version"], built_for_driver(s["depends"], branch, flavor)) for s in stanzas
                if s["package"] == name and s["version"])


# ---------------------------------------------------------------------------------------------
# GPUs

# ---------------------------------------------------------------------------------------------
# GPUs


def gpu_summary(pci_devices):
    """nvidia_gpu_facts pci_devices -> [{name, pci_id, pci_address, architecture, min_branch, max_branch,
    open_required, open_supported, known}] (architecture facts from module_utils/gpu_arch)."""
    gpus = []
    for dev in pci_devices or []:
        if not isinstance(dev, dict) or (dev.get("is_nvidia_gpu") is False):
            continue
        arch = arch_lookup(dev.get("device_id") or dev.get("pci_id"), dev.get("product")) or {}
        gpus.append({
            "name": dev.get("product") or dev.get("description") or "NVIDIA GPU %s" % dev.get("pci_id"),
            "pci_id": dev.get("pci_id"),
            "pci_address": dev.get("pci_address"),
            "architecture": arch.get("architecture") or dev.get("architecture"),
            "min_branch": arch.get("min_driver_branch") or dev.get("min_driver_branch"),
            "max_branch": arch.get("max_driver_branch"),
            "open_required": bool(arch.get("open_kernel_modules_required")
                                  or dev.get("open_kernel_modules_required")),
            "open_supported": arch.get("open_kernel_modules_supported", True) if arch else True,
            "known": bool(arch),
        })
    return gpus


def describe(gpu):
    """'RTX PRO 6000 Blackwell Server Edition (10de:2bb5 at 0000:17:00.0)'."""
    return "%s (%s at %s)" % (gpu["name"], gpu.get("pci_id"), gpu.get("pci_address"))


def min_branch(gpus):
    needs = [g["min_branch"] for g in gpus if g.get("min_branch")]
    return max(needs) if needs else None


def max_branch(gpus):
    """The newest branch every GPU is still driven by (580 for Maxwell/Pascal/Volta), None when no GPU has a last."""
    lasts = [g["max_branch"] for g in gpus if g.get("max_branch")]
    return min(lasts) if lasts else None


# ---------------------------------------------------------------------------------------------
# The request


def validate_request(request):
    """Refuse malformed values (argument_specs does this in the role; the module repeats it)."""
    if request.get("style") not in STYLES:
        raise DriverChoiceError("package style must be one of %s, got %r" % (", ".join(STYLES), request.get("style")))
    if request.get("flavor") not in FLAVORS:
        raise DriverChoiceError("nvidia_driver_flavor must be server or desktop, got %r" % request.get("flavor"))
    if request.get("kernel_modules") not in KERNEL_MODULES:
        raise DriverChoiceError("nvidia_driver_kernel_modules must be auto, open or proprietary, got %r"
                                % request.get("kernel_modules"))
    if (request.get("fabric_manager") or "auto") not in FABRIC_MANAGER_MODES:
        raise DriverChoiceError("nvidia_driver_fabric_manager must be auto, always or never, got %r"
                                % request.get("fabric_manager"))
    flavour = request.get("kernel_flavour") or "auto"
    if flavour != "auto" and not _KERNEL_FLAVOUR.match(flavour):
        raise DriverChoiceError("nvidia_driver_kernel_flavour must be auto or an Ubuntu kernel flavour such as generic, "
                                "generic-hwe-24.04 or aws; got %r" % flavour)
    branch = str(request.get("branch") or "auto")
    if branch != "auto" and not _BRANCH.match(branch):
        raise DriverChoiceError("nvidia_driver_branch must be a branch number such as 580, or auto; got %r" % branch)
    version = request.get("version") or ""
    if version and not (_DRIVER_VERSION.match(version) or driver_branch(version)):
        raise DriverChoiceError("nvidia_driver_version must be a driver version such as 580.95.05, got %r" % version)
    if branch != "auto" and version and driver_branch(version) != int(branch):
        raise DriverChoiceError("nvidia_driver_version %s is not in nvidia_driver_branch %s; set one of them to match"
                                % (version, branch))


def requested_branch(request):
    """(branch, source) from the request alone: explicit branch, else the version's; else (None, None)."""
    branch = str(request.get("branch") or "auto")
    if branch != "auto":
        return int(branch), "nvidia_driver_branch"
    if request.get("version"):
        return driver_branch(request["version"]), "nvidia_driver_version"
    return None, None


def resolve_kernel_modules(requested, gpus):
    """(open|proprietary, reason). auto: open when a GPU requires the open modules (gpu_arch).

    Refuses proprietary modules for a GPU that requires the open ones (it would show "No devices
    were found"), the open modules for a GPU without a GSP (Maxwell, Pascal, Volta), and a mix of both.
    """
    need_open = [g for g in gpus if g["open_required"]]
    no_open = [g for g in gpus if not g["open_supported"]]
    if need_open and no_open:
        raise DriverChoiceError(
            "no single kernel module flavour drives every GPU of this host: %s require%s the open modules and %s "
            "cannot use them; split these GPUs over hosts" % (
                ", ".join(describe(g) for g in need_open), "s" if len(need_open) == 1 else "",
                ", ".join(describe(g) for g in no_open)))
    if requested == "proprietary" and need_open:
        raise DriverChoiceError(
            "%s require%s the NVIDIA open kernel modules (%s); proprietary modules were asked for "
            "(nvidia_driver_kernel_modules: proprietary) and would find no device. Fix: set "
            "nvidia_driver_kernel_modules: auto (or open)" % (
                ", ".join(describe(g) for g in need_open), "s" if len(need_open) == 1 else "",
                "/".join(sorted({g["architecture"] or "this architecture" for g in need_open}))))
    if requested == "open" and no_open:
        raise DriverChoiceError(
            "%s cannot use the NVIDIA open kernel modules (no GSP: %s); open modules were asked for. Fix: set "
            "nvidia_driver_kernel_modules: auto (or proprietary)" % (
                ", ".join(describe(g) for g in no_open),
                "/".join(sorted({g["architecture"] or "unknown" for g in no_open}))))
    if requested in ("open", "proprietary"):
        return requested, "nvidia_driver_kernel_modules: %s" % requested
    if need_open:
        return "open", "%s require%s the open kernel modules" % (
            ", ".join(describe(g) for g in need_open), "s" if len(need_open) == 1 else "")
    return "proprietary", "no GPU of this host requires the open kernel modules"


def check_branch(branch, gpus, source):
    """Refuse a branch below a GPU's minimum, or above the last branch that drives it (gpu_arch min/max_driver_branch)."""
    if branch is None:
        return
    retired = [g for g in gpus if g.get("max_branch") and branch > g["max_branch"]]
    if retired:
        last = min(g["max_branch"] for g in retired)
        raise DriverChoiceError(
            "%s %s driven by branch %d at most (NVIDIA: the %d series is the last to support %s); branch %d (from %s) "
            "would find no GPU there. Fix: set nvidia_driver_branch: %d (or auto, which stays at or below it)" % (
                ", ".join(describe(g) for g in retired), "is" if len(retired) == 1 else "are", last, last,
                "/".join(sorted(set(g["architecture"] or "these GPUs" for g in retired))), branch, source, last))
    low = [g for g in gpus if g.get("min_branch") and branch < g["min_branch"]]
    if low:
        need = max(g["min_branch"] for g in low)
        raise DriverChoiceError(
            "%s need%s driver branch >= %d; branch %d (from %s) is too old for %s. Fix: set "
            "nvidia_driver_branch: auto or a branch >= %d" % (
                ", ".join(describe(g) for g in low), "s" if len(low) == 1 else "", need, branch, source,
                "it" if len(low) == 1 else "them", need))


def fabric_manager_wanted(request):
    """(wanted, reason): an NVSwitch (HGX) host needs nvidia-fabricmanager at exactly the driver's version, or
    every CUDA program fails with 802 while nvidia-smi looks healthy. request["nvswitches"]: the NVSwitch
    PCI addresses (nvidia_gpu_facts); request["fabric_manager"]: auto | always | never."""
    mode = request.get("fabric_manager") or "auto"
    switches = request.get("nvswitches") or []
    if mode == "never":
        return False, "nvidia_driver_fabric_manager: never%s" % (
            " (%d NVSwitch on the PCI bus: CUDA fails with 802 until a fabric manager at the driver's version "
            "runs)" % len(switches) if switches else "")
    if not switches:
        if mode == "always":
            raise DriverChoiceError(
                "nvidia_driver_fabric_manager is always, but this host has no NVSwitch on the PCI bus: the fabric "
                "manager exits there with NV_WARN_NOTHING_TO_DO and its service fails. Fix: "
                "nvidia_driver_fabric_manager: auto")
        return False, "no NVSwitch on the PCI bus"
    if request["style"] != "ubuntu":
        raise DriverChoiceError(
            "this host has %d NVSwitch (%s): it needs nvidia-fabricmanager at the driver's exact version, which "
            "%s. Fix: an Ubuntu host (nvidia_driver_package_style: ubuntu with "
            "Ubuntu's archive), or nvidia_driver_fabric_manager: never to install the driver alone (CUDA then "
            "fails with 802 until a matching fabric manager runs)" % (
                len(switches), ", ".join(switches[:4]),
                "gpuhost does not install from NVIDIA's CUDA repository yet (nvidia_driver_package_style: nvidia)"
                if request["style"] == "nvidia" else "Debian's archive does not carry"))
    return True, "%d NVSwitch on the PCI bus (%s)" % (len(switches), ", ".join(switches[:4]))


def fabric_manager_packages(branch):
    """Ubuntu's fabric manager packages of a branch (no -server/-open variants; they depend on the exact
    nvidia-kernel-common-<branch>-server-<version>: docs/research/hgx-fabric-manager.md 1b)."""
    return ["nvidia-fabricmanager-%d" % branch, "libnvidia-nscq-%d" % branch]


def precheck(request, gpus):
    """Every refusal that needs no host query: run before anything on the host changes."""
    validate_request(request)
    modules, reason = resolve_kernel_modules(request["kernel_modules"], gpus)
    branch, source = requested_branch(request)
    check_branch(branch, gpus, source)
    fabric, fabric_reason = fabric_manager_wanted(request)
    return {"kernel_modules": modules, "kernel_modules_reason": reason, "branch": branch,
            "branch_source": source, "min_branch": min_branch(gpus), "max_branch": max_branch(gpus),
            "fabric_manager": fabric,
            "fabric_manager_reason": fabric_reason}


# ---------------------------------------------------------------------------------------------
# Package names


def ubuntu_variant(branch, flavor, modules):
    """'580-server-open': the part every package of an Ubuntu driver variant carries."""
    return "%d%s%s" % (branch, "-server" if flavor == "server" else "", "-open" if modules == "open" else "")


def ubuntu_package(branch, flavor, modules):
    """nvidia-driver-580-server-open, nvidia-driver-580-server, nvidia-driver-580-open, nvidia-driver-580."""
    return "nvidia-driver-" + ubuntu_variant(branch, flavor, modules)


def ubuntu_signed_packages(branch, flavor, modules, kernel_flavour=None, kernel=None):
    """The Ubuntu driver without DKMS, as `ubuntu-drivers install --gpgpu` chooses it (research
    ubuntu-signed-modules-no-dkms.md 1, 2): nvidia-headless-no-dkms-<variant> (no nvidia-dkms-*, no
    nvidia-smi), nvidia-utils-<branch>[-server] for nvidia-smi, the flavour's signed-modules metapackage
    (it follows the flavour's kernels) and the running kernel's own package (the metapackage depends on the
    flavour's newest kernel only)."""
    variant = ubuntu_variant(branch, flavor, modules)
    packages = ["nvidia-headless-no-dkms-" + variant, "nvidia-utils-%d%s" % (branch, "-server" if flavor == "server" else "")]
    if kernel_flavour:
        packages.append(signed_modules_metapackage(branch, kernel_flavour, modules == "open", flavor == "server"))
    if kernel:
        packages.append(signed_modules_metapackage(branch, kernel, modules == "open", flavor == "server"))
    return packages


def top_packages(request, branch, modules):
    """The packages the role names to apt, main package first."""
    if request["style"] == "ubuntu" and not request.get("dkms"):
        packages = ubuntu_signed_packages(branch, request["flavor"], modules, request.get("kernel_flavour_resolved"),
                                          request.get("kernel_release"))
    elif request["style"] == "ubuntu":
        packages = [ubuntu_package(branch, request["flavor"], modules)]
    elif request["style"] == "nvidia":
        packages = cuda_repo_packages(request.get("cuda_repo_family") or "debian", branch, modules)
    else:
        packages = list(request.get("debian_packages") or ["nvidia-driver"])
        kernel = (request.get("debian_kernel_packages") or {}).get(modules)
        if kernel and kernel not in packages:
            packages.insert(1, kernel)
    for extra in request.get("extra_packages") or []:
        if extra not in packages:
            packages.append(extra)
    return packages


def installed_kernel_modules(dpkg):
    """open|proprietary from the installed kernel-module packages, else None."""
    flavours = set()
    for name, info in dpkg.items():
        if not info["installed"]:
            continue
        match = _UBUNTU_KMOD.match(name)
        if match:
            flavours.add("open" if match.group(3) else "proprietary")
        # nvidia-dkms-open / nvidia-dkms: NVIDIA's Ubuntu names from branch 590 (no branch in the name)
        elif re.match(r"^nvidia-(?:open-kernel|kernel-open)-dkms$|^nvidia-dkms(?:-\d+)?(?:-server)?-open$", name):
            flavours.add("open")
        elif re.match(r"^nvidia-kernel-dkms$|^nvidia-dkms(?:-\d+)?(?:-server)?$", name):
            flavours.add("proprietary")
    return flavours.pop() if len(flavours) == 1 else ("mixed" if flavours else None)


def installed_driver(dpkg, smi_owner, main_candidates=()):
    """What is installed: the package that ships nvidia-smi decides the version and branch.

    (Ubuntu turns old -server branches into transitional packages: nvidia-driver-470-server may
    stay installed while nvidia-utils-535-server ships nvidia-smi. The utilities are the truth.)
    """
    owner = smi_owner if smi_owner and dpkg.get(smi_owner, {}).get("installed") else None
    if owner is None:
        owner = next((p for p in main_candidates if dpkg.get(p, {}).get("installed")), None)
    if owner is None:
        return {"package": None, "version": None, "upstream": None, "branch": None,
                "kernel_modules": installed_kernel_modules(dpkg), "packages": [], "held": []}
    version = dpkg[owner]["version"]
    upstream = upstream_version(version)
    packages = driver_packages(dpkg, upstream, driver_branch(upstream))
    return {"package": owner, "version": version, "upstream": upstream, "branch": driver_branch(upstream),
            "kernel_modules": installed_kernel_modules(dpkg), "packages": packages,
            "held": [p for p in packages if dpkg[p]["held"]]}


def driver_packages(dpkg, upstream, branch, also=()):
    """Installed packages of the driver at `upstream`: what the role holds."""
    names = set()
    for name, info in dpkg.items():
        if not info["installed"]:
            continue
        kmod = _UBUNTU_KMOD.match(name)
        if kmod and branch and int(kmod.group(1)) == branch:
            names.add(name)
        elif DRIVER_PACKAGE.search(name) and upstream_version(info["version"]) == upstream:
            names.add(name)
        elif branch and name == "nvidia-driver-pinning-%d" % branch:
            # NVIDIA's CUDA repository: the branch's pinning package has a version of its own (590-5)
            names.add(name)
    for name in also:
        if dpkg.get(name, {}).get("installed"):
            names.add(name)
    return sorted(names)


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
    newest = _newest([v for v in offered if not ceiling or (driver_branch(v) or 0) <= ceiling])
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


# ---------------------------------------------------------------------------------------------
# The plan


def _main_candidates(dpkg):
    """Installed driver metapackages/utilities, for a host whose nvidia-smi has no owner package."""
    return sorted(name for name, info in dpkg.items() if info["installed"]
                  and re.match(r"^nvidia-(?:driver|utils)(?:-\d+)?(?:-server)?(?:-open)?$", name))


def _pick(versions, upstream):
    """The newest of `versions` whose upstream part is `upstream`."""
    return _newest([v for v in versions if upstream_version(v) == upstream])


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
    fabric = fabric_manager_packages(branch) if pre["fabric_manager"] else []
    packages += [name for name in fabric if name not in packages]
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
    lacking = [p["name"] for p in install if p["name"] in fabric and p["version"] is None]
    if lacking:
        offered = sorted(set(upstream_version(v) for v in madison.get(lacking[0], [])), key=cmp_to_key(compare_versions))
        raise DriverChoiceError(
            "%s %s is not in the apt sources (they offer %s): the fabric manager must be exactly the driver's "
            "version or it refuses to start, so the driver stays as it is. Fix: a driver version the archive has "
            "the fabric manager for (nvidia_driver_version)" % (lacking[0], upstream, ", ".join(offered) or "none"))
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
    fixed = {own: _newest(fit)}
    meta_fit = [v for v, driver in signed_module_versions(stanzas, meta, branch, flavor).items() if driver == upstream]
    notes = []
    if meta_fit:
        fixed[meta] = _newest(meta_fit)
    else:
        notes.append({"dropped": meta, "text": (
            "%s is left out: the archive's version of it follows another driver than %s, so kernels the flavour "
            "installs later get no module for this driver (the reboot check refuses to start them)" % (meta, upstream))})
    return fixed, notes


# Installed packages that build the module with DKMS: with Canonical's signed modules chosen they go (their
# module in updates/dkms would load before the signed one in kernel/, and Secure Boot rejects it).
_DKMS_DRIVER = re.compile(r"^nvidia-dkms-\d+(?:-server)?(?:-open)?$|^nvidia-(?:driver|headless)-\d+(?:-server)?(?:-open)?$")


def dkms_packages_to_remove(dpkg):
    """The installed Ubuntu packages that pull DKMS (nvidia-dkms-*, and the nvidia-driver-* / nvidia-headless-*
    metapackages that depend on it)."""
    return sorted(name for name, info in dpkg.items() if info["installed"] and _DKMS_DRIVER.match(name))


_PINNING = re.compile(r"^nvidia-driver-pinning-(\d+)$")


def replaced_pinning_packages(dpkg, branch):
    """NVIDIA's pinning packages of other branches that apt removed when the branch changed (each Conflicts with the
    others), their preferences file left behind as a conffile: purged, so that no stale pin outlives its branch."""
    return sorted(name for name, info in dpkg.items()
                  if info.get("config_files") and _PINNING.match(name) and _PINNING.match(name).group(1) != str(branch))


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
    """Which of the held driver packages gpuhost held (`ours`) and which the operator did (`operator`).

    `record` is the host's recorded driver section (ansible_local.gpuhost.driver) or None. Runs before
    `held_by_gpuhost` was recorded held every package they recorded, so those count as ours.
    """
    record = record or {}
    if "held_by_gpuhost" in record:
        ours = set(record.get("held_by_gpuhost") or [])
    else:
        ours = set(record.get("packages") or [])
    held = installed.get("held") or []
    return {"ours": sorted(p for p in held if p in ours),
            "operator": sorted(p for p in held if p not in ours)}


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


# ---------------------------------------------------------------------------------------------
# The operator's apt pins (apt_preferences(5)): files other than gpuhost's own pin file

PREFERENCES = "/etc/apt/preferences"
PREFERENCES_PARTS = "/etc/apt/preferences.d"
BACKUP_DIR = "/var/backups/gpuhost"
# apt_preferences(5): alphanumerics, hyphen, underscore and period; apt's own check (GetListOfFilesInDir
# in apt-pkg/contrib/fileutl.cc) also lets ':' through, so a file named that way is read too.
_PREF_PART_NAME = re.compile(r"^[A-Za-z0-9_:.-]+$")
_WILDCARD = re.compile(r"[*?\[]")


def apt_reads_preferences_part(name):
    """Whether apt reads the file `name` of /etc/apt/preferences.d.

    apt_preferences(5): the files "have either no or "pref" as filename extension and only contain
    alphanumeric, hyphen (-), underscore (_) and period (.) characters"; others are ignored (with a notice).
    Like apt, names starting with a period (hidden files) or ending with one are skipped too.
    """
    if not name or name.startswith(".") or name.endswith(".") or not _PREF_PART_NAME.match(name):
        return False
    return "." not in name or name.rsplit(".", 1)[1] == "pref"


def preference_files(part_names, main=PREFERENCES, parts=PREFERENCES_PARTS):
    """The paths apt reads its pins from, in its order: the accepted names of `parts` (sorted), then `main`."""
    accepted = sorted(name for name in part_names or [] if apt_reads_preferences_part(name))
    return [posixpath.join(parts, name) for name in accepted] + [main]


def _priority(value):
    if value is None:
        return None
    if value.strip() == "never":  # apt >= 2.x, only for 'Package: *'
        return -32768
    try:
        return int(value.strip())
    except ValueError:
        return None


def parse_preferences(text):
    """apt_preferences(5) text -> [{line, packages, pin_type, pin, priority, generic}], one per stanza.

    packages: the patterns of the Package line (names, globs, /regex/); generic: 'Package: *' (the form
    that sets the priority of whole sources); pin_type: version, release, origin (lower case; None without
    a Pin line); pin: the rest of the Pin line; priority: the Pin-Priority as a number (None when missing
    or not a number). Comments ('#') and Explanation lines are skipped. Raises ValueError for a line apt
    could not read either.
    """
    stanzas = []
    try:
        found = paragraphs(text or "")
    except SourcesError as exc:
        raise ValueError(str(exc))
    for line, fields in found:
        package = (fields.get("package") or "").strip()
        pin_type, _sep, pin = (fields.get("pin") or "").strip().partition(" ")
        stanzas.append({"line": line, "packages": package.split(), "generic": package == "*",
                        "pin_type": pin_type.lower() or None, "pin": pin.strip(),
                        "priority": _priority(fields.get("pin-priority"))})
    return stanzas


def _expression_matches(pattern, value):
    """apt's pkgVersionMatch::ExpressionMatches: /regex/ (extended, case-insensitive, unanchored) or an
    fnmatch glob (case-insensitive)."""
    if len(pattern) > 1 and pattern.startswith("/") and pattern.endswith("/"):
        try:
            return re.search(pattern[1:-1], value, re.IGNORECASE) is not None
        except re.error:
            return False  # apt warns "Invalid regular expression" and matches nothing
    return fnmatch.fnmatchcase(value.lower(), pattern.lower())


def package_pattern_matches(pattern, name):
    """Whether a Package pattern of a preferences stanza names the binary package `name`, as apt's
    pkgPolicy::CreatePin reads it: an architecture qualifier is dropped; /regex/ or a pattern with * ? [
    is an expression, anything else the exact name. 'src:' patterns name source packages, which the plan
    does not know: they match nothing here."""
    if pattern.startswith("src:"):
        return False
    if ":" in pattern:
        pattern = pattern.rsplit(":", 1)[0]
    if (len(pattern) > 1 and pattern.startswith("/") and pattern.endswith("/")) or _WILDCARD.search(pattern):
        return _expression_matches(pattern, name)
    return pattern == name


def version_pin_matches(pattern, version):
    """Whether 'Pin: version <pattern>' selects the Debian version `version` (pkgVersionMatch: a trailing
    '*' makes a prefix match, else the whole version; then the pattern as a glob or /regex/)."""
    prefix = pattern.endswith("*")
    core = pattern[:-1] if prefix else pattern
    if version.lower().startswith(core.lower()) if prefix else version.lower() == core.lower():
        return True
    return _expression_matches(core, version)


def _prediction_vs_pin(pattern, wanted):
    """(may match, must match) of 'Pin: version <pattern>' against a predicted plan's version
    (580.95.05, 580.* or >=580), whose package versions are not known yet. Undecidable patterns (a regex,
    an epoch) may match and need not."""
    if pattern.startswith("/") or ":" in pattern:
        return True, False
    wild = _WILDCARD.search(pattern)
    literal = pattern[:wild.start()] if wild else pattern
    pure_prefix = bool(wild) and wild.start() == len(pattern) - 1 and pattern.endswith("*")
    if wanted.startswith(">="):
        branch = re.match(r"^(\d{3,4})\.", literal)
        return (branch is None or int(branch.group(1)) >= int(wanted[2:])), False
    # Every candidate version starts with `head`: '580.95.05-' (a Debian revision follows) or '580.'.
    exact = not wanted.endswith(".*")
    head = wanted + "-" if exact else wanted[:-1]
    if not wild:
        return literal.startswith(head) or (exact and literal == wanted), False
    may = literal.startswith(head) or head.startswith(literal)
    return may, pure_prefix and head.startswith(literal)


def _stanza_conflict(stanza, version, predicted_version):
    """How the stanza treats the planned version: 'pinned' (a version pin elsewhere), 'barred' (a negative
    pin on it), or None (no conflict; release and origin pins choose sources, not versions)."""
    priority = stanza["priority"]
    if not priority:
        return None
    if stanza["pin_type"] in ("release", "origin"):
        # Only a negative pin on every source ('Pin: release *') bars every version of the package.
        return "barred" if priority < 0 and stanza["pin"] in ("*", '"*"') else None
    if stanza["pin_type"] != "version" or not stanza["pin"]:
        return None
    if version is not None:
        matches = version_pin_matches(stanza["pin"], version)
        return ("barred" if matches else None) if priority < 0 else (None if matches else "pinned")
    may, must = _prediction_vs_pin(stanza["pin"], predicted_version)
    return ("barred" if must else None) if priority < 0 else (None if may else "pinned")


def operator_pins(files, own_path, plan_result, owners=None):
    """The stanzas of apt preference files other than gpuhost's own (`own_path`) that would stand in the
    way of the plan: a version pin (Pin-Priority > 0) on a package of the plan or of the installed driver
    whose version it does not match, or a negative pin that bars the planned version.

    files: [(path, text)] as preference_files() lists them. Returns [{file, line, packages (the matched
    package names), patterns (the stanza's Package patterns), pin ('version 570.*'), priority, effect
    ('pinned' or 'barred'), wanted (the version compared)}]. A plan that changes nothing
    conflicts with nothing. A file a package of the driver ships (`owners`: {path: package}, e.g. the
    preferences file of NVIDIA's nvidia-driver-pinning-<branch>) changes with the driver: it is no operator's.
    Raises DriverChoiceError for a file apt could not read either.
    """
    if plan_result.get("action") == "none":
        return []
    own = posixpath.normpath(own_path) if own_path else None
    versions = {p["name"]: p.get("version") for p in plan_result.get("package_versions") or []}
    names = list(plan_result.get("packages") or [])
    for name in list(versions) + list((plan_result.get("installed") or {}).get("packages") or []):
        if name not in names:
            names.append(name)
    main_version = plan_result.get("package_version")
    predicted = plan_result.get("version") if main_version is None else None
    found = []
    for path, text in files:
        if own and posixpath.normpath(path) == own:
            continue
        if (owners or {}).get(path) in names:
            continue
        try:
            stanzas = parse_preferences(text)
        except ValueError as exc:
            raise DriverChoiceError("the apt preferences file %s cannot be read (%s); apt refuses it too. Fix "
                                    "that file" % (path, exc))
        for stanza in stanzas:
            if stanza["generic"]:
                continue
            matched, wanted, effect = [], None, None
            for name in names:
                if not any(package_pattern_matches(pattern, name) for pattern in stanza["packages"]):
                    continue
                version = versions.get(name) or main_version
                this = _stanza_conflict(stanza, version, predicted)
                if this:
                    matched.append(name)
                    wanted, effect = version or predicted, effect or this
            if matched:
                found.append({"file": path, "line": stanza["line"], "packages": matched,
                              "patterns": stanza["packages"],
                              "pin": ("%s %s" % (stanza["pin_type"], stanza["pin"])).strip(),
                              "priority": stanza["priority"], "effect": effect, "wanted": wanted})
    return found


def operator_pin_error(result_plan, pins):
    """Why the run stops before a driver change would override apt pins the operator wrote (None: it need not)."""
    if not pins or result_plan["action"] == "none":
        return None
    said = []
    for pin in pins:
        if pin["effect"] == "pinned":
            said.append("the operator pinned %s to %s in %s (Pin-Priority %d)"
                        % (", ".join(pin["packages"]), pin["pin"], pin["file"], pin["priority"]))
        else:
            said.append("the operator barred %s (Pin: %s) in %s (Pin-Priority %d)"
                        % (", ".join(pin["packages"]), pin["pin"], pin["file"], pin["priority"]))
    installed = result_plan["installed"]
    files = sorted({pin["file"] for pin in pins})
    wanted = result_plan.get("package_version") or result_plan["version"]
    if installed.get("upstream"):
        change = "%s the driver from %s to %s" % (result_plan["action"], installed["upstream"], wanted)
    else:
        change = "install driver %s" % wanted
    return ("%s; this run would %s (branch %s, %s), which %s. Nothing was changed. Fix: "
            "keep nvidia_driver_branch/nvidia_driver_version at %s, or set nvidia_driver_release_operator_holds: "
            "true to let gpuhost move %s aside (kept under %s)"
            % ("; ".join(said), change, result_plan["branch"],
               result_plan["main_package"], "that pin does not allow" if len(pins) == 1 else "those pins do not allow",
               "the pinned driver" if all(p["effect"] == "pinned" for p in pins) else "a driver the pins allow",
               ("that file (%s)" if len(files) == 1 else "those files (%s)") % ", ".join(files), BACKUP_DIR))


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
