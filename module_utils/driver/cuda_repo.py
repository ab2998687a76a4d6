# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVIDIA's CUDA repository as a driver source (nvidia_driver_package_style: nvidia): names only.

Pure stdlib, Python >= 3.9, no Ansible imports. Every fact here is in
docs/research/cuda-repo-packaging.md with its source; the unit tests read the real captures in
tests/fixtures/cuda_repo/.

  repo_distro        ("Debian", "12") -> "debian12"; ("Ubuntu", "24.04") -> "ubuntu2404"
  repo_arch          "x86_64" -> "x86_64", "aarch64" -> "sbsa" (NVIDIA's directory names)
  repo_url           <base>/<distro>/<arch>/ (a flat repository: Suites "/")
  signing_key        the key file and fingerprint of a distro's repository (debian13 has its own key)
  family             debian | ubuntu: which naming the repository of a distro uses
  pinning_package    nvidia-driver-pinning-<branch> (its own version is not the driver's: "580-5")
  driver_packages    what the role names to apt for a branch and a kernel module flavour, main first
  plan_packages      those and the branch's pinning package
  repository         a host's repository (or the one nvidia_driver_cuda_repo_distro names): URL, key, naming family
  parse_pinning      `apt-cache search nvidia-driver-pinning` -> branches and versions offered
  archive_branches   the driver branches a host's own archive offers (madison lines not from the CUDA repo)
  auto_style         Debian + a GPU whose minimum branch the archive does not reach -> nvidia, and why
"""
import re

DEFAULT_BASE_URL = "https://developer.download.nvidia.com/compute/cuda/repos"

# Key file and fingerprint per repository (research §1): one key for debian12 and Ubuntu, another for debian13.
_CUDATOOLS = ("3bf863cc.pub", "EB693B3035CD5710E231E123A4B469963BF863CC")
_KITMAKER_TRIXIE = ("8793F200.pub", "02182E60104FCDC26EAE1B8597A5D4CB8793F200")
KEYS = {
    "debian12": _CUDATOOLS,
    "debian13": _KITMAKER_TRIXIE,
    "ubuntu2204": _CUDATOOLS,
    "ubuntu2404": _CUDATOOLS,
}
# The last branch packaged under branch-suffixed names in NVIDIA's Ubuntu repository (research §3).
LAST_SUFFIXED_BRANCH = 580
# NVIDIA's Debian repository names the open DKMS package unlike Debian's archive (nvidia-open-kernel-dkms).
DEBIAN_KERNEL_PACKAGES = {"open": "nvidia-kernel-open-dkms", "proprietary": "nvidia-kernel-dkms"}

_PINNING = re.compile(r"^nvidia-driver-pinning-(\d{3,4})((?:\.\d+){1,3})?$")
_UPSTREAM = re.compile(r"^(?:\d+:)?(\d{3,4})\.")


class CudaRepoError(ValueError):
    """The host or request has no CUDA repository counterpart; the message says what would."""


def repo_distro(distribution, version):
    """('Debian', '12') -> 'debian12'; ('Ubuntu', '24.04') -> 'ubuntu2404'; None when NVIDIA has none here."""
    name = (distribution or "").strip().lower()
    version = str(version or "").strip()
    if name == "debian":
        distro = "debian%s" % version.split(".", 1)[0]
    elif name == "ubuntu":
        distro = "ubuntu%s" % version.replace(".", "")
    else:
        return None
    return distro if distro in KEYS else None


def repo_arch(machine):
    """NVIDIA's directory of an architecture: x86_64 as is, arm64 servers under sbsa."""
    machine = (machine or "").strip()
    if machine in ("x86_64", "amd64"):
        return "x86_64"
    if machine in ("aarch64", "arm64"):
        return "sbsa"
    raise CudaRepoError("NVIDIA's CUDA repository has no driver packages for architecture %r" % machine)


def repo_url(base, distro, arch):
    """The flat repository's URL, with the trailing slash apt's deb822 URIs keep."""
    return "%s/%s/%s/" % (base.rstrip("/"), distro, arch)


def signing_key(distro):
    """{'file', 'fingerprint'} of a distro's repository key."""
    if distro not in KEYS:
        raise CudaRepoError("no NVIDIA CUDA repository key is known for %r (known: %s)"
                            % (distro, ", ".join(sorted(KEYS))))
    keyfile, fingerprint = KEYS[distro]
    return {"file": keyfile, "fingerprint": fingerprint}


def family(distro):
    """debian | ubuntu: the package naming of that repository."""
    if (distro or "").startswith("debian"):
        return "debian"
    if (distro or "").startswith("ubuntu"):
        return "ubuntu"
    raise CudaRepoError("not an NVIDIA CUDA repository distro: %r" % distro)


def pinning_package(branch):
    return "nvidia-driver-pinning-%d" % int(branch)


def driver_packages(repo_family, branch, modules):
    """The packages the role names to apt, main package first (its version decides the others').

    Debian: NVIDIA's repository keeps Debian's unsuffixed names for every branch: nvidia-driver and the
    DKMS package of the module flavour. Ubuntu: nvidia-open-<B> / cuda-drivers-<B> up to 580, nvidia-open /
    cuda-drivers from 590 (the branch then lives only in the version, held by the pinning package).
    No branch (None or 0: not chosen yet): the unsuffixed names, whose newest version is the newest branch.
    """
    branch = int(branch) if branch else None
    if modules not in ("open", "proprietary"):
        raise CudaRepoError("kernel modules must be open or proprietary, got %r" % modules)
    if repo_family == "debian":
        return ["nvidia-driver", DEBIAN_KERNEL_PACKAGES[modules]]
    if repo_family == "ubuntu":
        base = "nvidia-open" if modules == "open" else "cuda-drivers"
        return [base if branch is None or branch > LAST_SUFFIXED_BRANCH else "%s-%d" % (base, branch)]
    raise CudaRepoError("package family must be debian or ubuntu, got %r" % repo_family)


def plan_packages(repo_family, branch, modules):
    """driver_packages and, once the branch is known, its pinning package last (installed by name)."""
    packages = driver_packages(repo_family, branch, modules)
    return packages + [pinning_package(branch)] if branch else packages


def repository(distribution, version, machine, base_url=DEFAULT_BASE_URL, distro=None):
    """Where a host's CUDA repository is: {distro, arch, family, url, key_url, key_file, fingerprint}.

    distro: NVIDIA's directory for the host when its facts do not name one (a derivative of Ubuntu or Debian,
    e.g. Linux Mint 22 -> ubuntu2404); its key and package naming follow the directory, not the facts.
    """
    if distro:
        distro = distro.strip().lower()
        if distro not in KEYS:
            raise CudaRepoError("nvidia_driver_cuda_repo_distro %r is not a CUDA repository gpuhost knows (known: %s)"
                                % (distro, ", ".join(sorted(KEYS))))
    else:
        distro = repo_distro(distribution, version)
    if distro is None:
        raise CudaRepoError("NVIDIA's CUDA repository has no driver packages gpuhost knows for %s %s (known: %s; "
                            "a derivative names its base with nvidia_driver_cuda_repo_distro)"
                            % (distribution, version, ", ".join(sorted(KEYS))))
    arch = repo_arch(machine)
    key = signing_key(distro)
    url = repo_url(base_url, distro, arch)
    return {"distro": distro, "arch": arch, "family": family(distro), "url": url, "key_url": url + key["file"],
            "key_file": key["file"], "fingerprint": key["fingerprint"]}


def parse_pinning(text):
    """`apt-cache search nvidia-driver-pinning` (or a list of names) -> {'branches': [...], 'versions': [...]}."""
    branches, versions = set(), set()
    lines = text.splitlines() if isinstance(text, str) else list(text or [])
    for line in lines:
        name = line.split(" - ", 1)[0].strip()
        match = _PINNING.match(name)
        if not match:
            continue
        if match.group(2):
            versions.add(match.group(1) + match.group(2))
        else:
            branches.add(int(match.group(1)))
    return {"branches": sorted(branches), "versions": sorted(versions, key=lambda v: [int(x) for x in v.split(".")])}


def archive_branches(madison_text, exclude_url=None):
    """Driver branches in `apt-cache madison` lines, leaving out those served from exclude_url (the CUDA repo)."""
    branches = set()
    exclude = (exclude_url or "").rstrip("/")
    for line in (madison_text or "").splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 3 or not parts[1]:
            continue
        if exclude and parts[2].split()[0].rstrip("/") == exclude:
            continue
        match = _UPSTREAM.match(parts[1])
        if match:
            branches.add(int(match.group(1)))
    return sorted(branches)


def auto_style(distribution, min_branch, archive, cuda_repo_url=None):
    """(style, reason) for nvidia_driver_package_style: auto.

    archive: `apt-cache madison nvidia-driver` of the host's sources. Ubuntu stays ubuntu (its archive
    carries every branch NVIDIA supports there); Debian stays debian while its archive has a branch
    >= the GPUs' minimum, else NVIDIA's repository is the only source of a driver for them.
    """
    name = (distribution or "").strip().lower()
    if name == "ubuntu":
        return "ubuntu", "Ubuntu: the driver comes from Ubuntu's archive"
    if name != "debian":
        raise CudaRepoError("no driver package style is known for distribution %r" % distribution)
    offered = archive_branches(archive, exclude_url=cuda_repo_url)
    if not min_branch:
        return "debian", "Debian: no GPU of this host needs more than the archive's driver"
    usable = [b for b in offered if b >= int(min_branch)]
    if usable:
        return "debian", "Debian: the archive's nvidia-driver reaches branch %d (these GPUs need >= %d)" % (
            max(usable), int(min_branch))
    return "nvidia", (
        "Debian's archive offers nvidia-driver %s, below branch %d that these GPUs need: the driver comes "
        "from NVIDIA's CUDA repository (nvidia_driver_package_style: nvidia)" % (
            "branch " + ", ".join(str(b) for b in offered) if offered else "in no branch", int(min_branch)))
