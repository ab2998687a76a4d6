# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The driver's packages: what the host's apt and dpkg say (``apt-cache madison``/``show``/``pkgnames``,
``dpkg-query -W``/``-S``, the kernel images and their flavour), the package names of each style (Ubuntu's archive,
with DKMS or Canonical's signed modules; Debian's; NVIDIA's CUDA repository), and what is installed: the driver,
its kernel modules (open or proprietary), the packages that pull DKMS, NVIDIA's pinning packages of other branches.

Pure stdlib, no Ansible imports; unit-tested on captured outputs.
"""
import re

from ansible.module_utils.driver.cuda_repo import plan_packages as cuda_repo_packages
from ansible.module_utils.driver.debian_version import upstream_version
from ansible.module_utils.driver.secure_boot import signed_modules_metapackage
from ansible.module_utils.gpu.host_parse import driver_branch
from ansible.module_utils.host.dpkg import parse as parse_dpkg


# Binary packages built from NVIDIA's driver sources: Ubuntu nvidia-*/libnvidia-*/linux-*-nvidia-*,
# xserver-xorg-video-nvidia-*; Debian also libcuda1, libnvcuvid1, libnvoptix1, ...
DRIVER_PACKAGE = re.compile(r"nvidia|^libcuda|^libnv")
# Ubuntu's prebuilt kernel modules carry the kernel's version, not the driver's.
_UBUNTU_KMOD = re.compile(r"^linux-(?:modules|objects|signatures)-nvidia-(\d+)(-server)?(-open)?-")


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
                "kernel_modules": installed_kernel_modules(dpkg), "packages": [], "held": [],
                "versions": {}}
    version = dpkg[owner]["version"]
    upstream = upstream_version(version)
    packages = driver_packages(dpkg, upstream, driver_branch(upstream))
    return {"package": owner, "version": version, "upstream": upstream, "branch": driver_branch(upstream),
            "kernel_modules": installed_kernel_modules(dpkg), "packages": packages,
            "held": [p for p in packages if dpkg[p]["held"]],
            "versions": dict((p, dpkg[p]["version"]) for p in packages)}


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
