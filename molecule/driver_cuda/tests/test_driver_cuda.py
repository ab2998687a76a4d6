"""What converge (and the branch change and back) leave: the driver from NVIDIA's CUDA repository on a Blackwell host.

driver_cuda-bookworm: Debian 12, style auto, NVIDIA's debian12 repository. driver_cuda-ubuntu2404: style nvidia,
NVIDIA's ubuntu2404 repository (nvidia_driver_cuda_repo_distro). Expected names and shapes come from
docs/research/cuda-repo-packaging.md (NVIDIA's Debian repository keeps Debian's unsuffixed names and calls the open
DKMS package nvidia-kernel-open-dkms; its Ubuntu repository names packages nvidia-open-<B> up to 580 and
nvidia-open from 590; the branch is held by nvidia-driver-pinning-<B>), not from the role's output.
"""
import json

import pytest

VERSION = "590.48.01"
REPOS = {
    "debian12": {
        "revision": "-1",
        "driver": ["firmware-nvidia-gsp", "libcuda1", "libnvidia-ml1", "libnvidia-ptxjitcompiler1", "nvidia-driver",
                   "nvidia-kernel-open-dkms", "nvidia-persistenced", "nvidia-smi"],
        # Debian's archive's name of the open modules, and the proprietary ones
        "absent": ["nvidia-open-kernel-dkms", "nvidia-kernel-dkms"],
        "policy": "nvidia-driver", "dkms": "nvidia-kernel-open-dkms", "pinning": "590-5",
    },
    "ubuntu2404": {
        "revision": "-0ubuntu1",
        "driver": ["nvidia-open", "nvidia-driver-open", "nvidia-dkms-open", "nvidia-kernel-common",
                   "nvidia-kernel-source-open", "libnvidia-compute", "nvidia-utils", "nvidia-compute-utils"],
        # branch 580's names, replaced by the change back to 590
        "absent": ["nvidia-open-580", "nvidia-driver-580-open", "nvidia-dkms-580-open", "nvidia-utils-580",
                   "libnvidia-compute-580", "nvidia-driver-pinning-580"],
        "policy": "nvidia-open", "dkms": "nvidia-dkms-open", "pinning": "590-2ubuntu1",
    },
}


def repo_of(host):
    return "ubuntu2404" if host.backend.get_hostname().endswith("-ubuntu2404") else "debian12"


def test_debians_archive_is_below_blackwell(host):
    # the reason auto took NVIDIA's repository on the Debian host: Debian 12's own nvidia-driver is branch 535
    if repo_of(host) != "debian12":
        pytest.skip("the Ubuntu repository's host names its style")
    out = host.check_output("apt-cache madison nvidia-driver")
    debian = [line for line in out.splitlines() if "/cuda/repos/" not in line]
    assert debian and all(line.split("|")[1].strip().startswith("535.") for line in debian), out


def test_cuda_repository_source_with_the_checked_key(host):
    text = host.file("/etc/apt/sources.list.d/nvidia-cuda.sources").content_string
    assert "/cuda/repos/%s/x86_64/" % repo_of(host) in text
    assert "Suites: /" in text
    assert "Signed-By: /usr/share/keyrings/gpuhost-nvidia-cuda-keyring.asc" in text
    assert host.file("/usr/share/keyrings/gpuhost-nvidia-cuda-keyring.asc").content_string.startswith(
        "-----BEGIN PGP PUBLIC KEY BLOCK-----")
    assert not host.package("cuda-keyring").is_installed


def test_open_modules_from_nvidias_repository_installed_and_held(host):
    repo = REPOS[repo_of(host)]
    for name in repo["driver"]:
        out = host.check_output("dpkg-query -W -f '${Version} ${db:Status-Abbrev}' %s", name)
        assert out.strip() == VERSION + repo["revision"] + " hi", (name, out)
    for name in repo["absent"]:
        assert not host.package(name).is_installed, name
    out = host.check_output("apt-cache policy %s", repo["policy"])
    assert "Installed: %s%s" % (VERSION, repo["revision"]) in out
    assert "/cuda/repos/%s/x86_64" % repo_of(host) in out


def test_branch_held_by_the_pinning_package_and_gpuhosts_pin(host):
    repo = REPOS[repo_of(host)]
    out = host.check_output("dpkg-query -W -f '${Version} ${db:Status-Abbrev}' nvidia-driver-pinning-590")
    assert out.strip() == repo["pinning"] + " hi"
    assert "Pin: version 590.*" in host.file("/etc/apt/preferences.d/nvidia-driver-pin").content_string
    pin = host.file("/etc/apt/preferences.d/gpuhost-nvidia-driver.pref").content_string
    assert "Pin: version %s-*" % VERSION in pin
    # apt's candidate stays at the installed version although the repository has other versions
    assert "Candidate: %s%s" % (VERSION, repo["revision"]) in host.check_output("apt-cache policy %s", repo["dkms"])


def test_open_module_loaded_and_recorded(host):
    repo = REPOS[repo_of(host)]
    assert "Open Kernel Module for x86_64  %s " % VERSION in host.file("/proc/driver/nvidia/version").content_string
    data = json.loads(host.file("/etc/ansible/facts.d/gpuhost.fact").content_string)
    assert data["driver"]["version"] == VERSION
    assert data["driver"]["branch"] == 590
    assert data["driver"]["kernel_modules"] == "open"
    assert repo["dkms"] in data["driver"]["packages"]


def test_persistence_runs(host):
    assert host.service("nvidia-persistenced").is_running
    out = host.check_output("nvidia-smi --query-gpu=persistence_mode,driver_version --format=csv,noheader")
    assert out.strip() == "Enabled, %s" % VERSION
