"""What converge leaves on a Debian 12 host with a Blackwell GPU: the driver from NVIDIA's CUDA repository.

Expected names and shapes come from docs/research/cuda-repo-packaging.md (NVIDIA's Debian repository keeps
Debian's unsuffixed names, the open DKMS package is nvidia-kernel-open-dkms, the branch is held by
nvidia-driver-pinning-<B>), not from the role's output.
"""
import json

VERSION = "590.48.01"
DRIVER = ["firmware-nvidia-gsp", "libcuda1", "libnvidia-ml1", "libnvidia-ptxjitcompiler1", "nvidia-driver",
          "nvidia-kernel-open-dkms", "nvidia-persistenced", "nvidia-smi"]


def test_debians_archive_is_below_blackwell(host):
    # the reason auto took NVIDIA's repository: Debian 12's own nvidia-driver is branch 535
    out = host.check_output("apt-cache madison nvidia-driver")
    debian = [line for line in out.splitlines() if "/cuda/repos/" not in line]
    assert debian and all(line.split("|")[1].strip().startswith("535.") for line in debian), out


def test_cuda_repository_source_with_the_checked_key(host):
    text = host.file("/etc/apt/sources.list.d/nvidia-cuda.sources").content_string
    assert "/cuda/repos/debian12/x86_64/" in text
    assert "Suites: /" in text
    assert "Signed-By: /usr/share/keyrings/gpuhost-nvidia-cuda-keyring.asc" in text
    assert host.file("/usr/share/keyrings/gpuhost-nvidia-cuda-keyring.asc").content_string.startswith(
        "-----BEGIN PGP PUBLIC KEY BLOCK-----")
    assert not host.package("cuda-keyring").is_installed


def test_open_modules_from_nvidias_repository_installed_and_held(host):
    for name in DRIVER:
        out = host.check_output("dpkg-query -W -f '${Version} ${db:Status-Abbrev}' %s", name)
        assert out.strip() == VERSION + "-1 hi", (name, out)
    # NVIDIA's name of the open modules, not Debian's; no proprietary modules
    assert not host.package("nvidia-open-kernel-dkms").is_installed
    assert not host.package("nvidia-kernel-dkms").is_installed
    out = host.check_output("apt-cache policy nvidia-driver")
    assert "Installed: %s-1" % VERSION in out and "/cuda/repos/debian12/x86_64" in out


def test_branch_held_by_the_pinning_package_and_gpuhosts_pin(host):
    out = host.check_output("dpkg-query -W -f '${Version} ${db:Status-Abbrev}' nvidia-driver-pinning-590")
    assert out.strip() == "590-5 hi"
    assert "Pin: version 590.*" in host.file("/etc/apt/preferences.d/nvidia-driver-pin").content_string
    pin = host.file("/etc/apt/preferences.d/gpuhost-nvidia-driver.pref").content_string
    assert "Pin: version %s-*" % VERSION in pin
    # apt's candidate stays at the installed version although the repository has other versions
    assert "Candidate: %s-1" % VERSION in host.check_output("apt-cache policy nvidia-kernel-open-dkms")


def test_open_module_loaded_and_recorded(host):
    assert "Open Kernel Module for x86_64  %s " % VERSION in host.file("/proc/driver/nvidia/version").content_string
    data = json.loads(host.file("/etc/ansible/facts.d/gpuhost.fact").content_string)
    assert data["driver"]["version"] == VERSION
    assert data["driver"]["branch"] == 590
    assert data["driver"]["kernel_modules"] == "open"
    assert "nvidia-kernel-open-dkms" in data["driver"]["packages"]


def test_persistence_runs(host):
    assert host.service("nvidia-persistenced").is_running
    out = host.check_output("nvidia-smi --query-gpu=persistence_mode,driver_version --format=csv,noheader")
    assert out.strip() == "Enabled, %s" % VERSION
