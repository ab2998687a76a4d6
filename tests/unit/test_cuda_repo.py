"""NVIDIA's CUDA repository naming (module_utils/cuda_repo.py) on real captures.

tests/fixtures/cuda_repo/README.md names the sources (NVIDIA's debian12 repository as apt printed it
on public hosts); docs/research/cuda-repo-packaging.md has the facts. The trixie madison capture in
tests/fixtures/host/ has Debian's own archive (deb.debian.org) next to the harness's simulated one.
"""
import os

import pytest

import cuda_repo as cr
import driver_choice as dc
import openpgp
from conftest import FIXTURES

CUDA = os.path.join(FIXTURES, "cuda_repo")
DEBIAN12_URL = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"


def load(name, folder=CUDA):
    with open(os.path.join(folder, name), encoding="utf-8") as handle:
        return handle.read()


def test_distro_and_arch_directories():
    assert cr.repo_distro("Debian", "12") == "debian12"
    assert cr.repo_distro("Debian", "13.2") == "debian13"
    assert cr.repo_distro("Ubuntu", "24.04") == "ubuntu2404"
    assert cr.repo_distro("Ubuntu", "22.04") == "ubuntu2204"
    assert cr.repo_distro("Debian", "11") is None  # no key known here: the role refuses it
    assert cr.repo_distro("Rocky", "10") is None
    assert cr.repo_arch("x86_64") == "x86_64"
    assert cr.repo_arch("aarch64") == "sbsa"
    with pytest.raises(cr.CudaRepoError):
        cr.repo_arch("ppc64le")


def test_repo_url_is_the_one_apt_printed():
    # madison prints the URL without its trailing slash, then two blanks and "Packages"
    line = load("debian12-madison-nvidia-driver.txt").splitlines()[0]
    printed = line.split("|")[2].split()[0]
    assert cr.repo_url(cr.DEFAULT_BASE_URL, "debian12", "x86_64").rstrip("/") == printed


def test_debian13_has_its_own_key():
    assert cr.signing_key("debian12") == {"file": "3bf863cc.pub",
                                          "fingerprint": "EB693B3035CD5710E231E123A4B469963BF863CC"}
    assert cr.signing_key("ubuntu2404")["file"] == "3bf863cc.pub"
    trixie = cr.signing_key("debian13")
    assert trixie["file"] == "8793F200.pub"
    # the short ids NVIDIA names the files by are the fingerprints' last 8 hex digits
    for distro in cr.KEYS:
        key = cr.signing_key(distro)
        assert key["fingerprint"].endswith(key["file"].split(".")[0].upper())
        assert len(key["fingerprint"]) == 40
    with pytest.raises(cr.CudaRepoError):
        cr.signing_key("debian11")


def test_fingerprints_are_in_the_form_openpgp_key_info_compares():
    for distro in cr.KEYS:
        fpr = cr.signing_key(distro)["fingerprint"]
        assert openpgp.normalise(fpr) == fpr


def test_debian_names_are_the_ones_nvidias_nvidia_driver_depends_on():
    text = load("debian12-apt-install-nvidia-driver-unmet.txt")
    for modules in ("open", "proprietary"):
        main, kernel = cr.driver_packages("debian", 580, modules)
        assert main == "nvidia-driver"
        assert " %s : Depends:" % main in text
        assert "%s (= 550.90.12-1)" % kernel in text
    # not Debian's archive name for the open modules
    assert cr.driver_packages("debian", 590, "open")[1] == "nvidia-kernel-open-dkms"
    assert "nvidia-open-kernel-dkms" not in text


def test_debian_names_do_not_change_at_590():
    assert cr.driver_packages("debian", 580, "open") == cr.driver_packages("debian", 590, "open")


def test_ubuntu_branch_suffix_up_to_580_then_unsuffixed():
    assert cr.driver_packages("ubuntu", 570, "open") == ["nvidia-open-570"]
    assert cr.driver_packages("ubuntu", 580, "open") == ["nvidia-open-580"]
    assert cr.driver_packages("ubuntu", 580, "proprietary") == ["cuda-drivers-580"]
    assert cr.driver_packages("ubuntu", 590, "open") == ["nvidia-open"]
    assert cr.driver_packages("ubuntu", 610, "proprietary") == ["cuda-drivers"]
    # the 580 meta of NVIDIA's Ubuntu repository names the branch-suffixed open DKMS package
    assert "nvidia-dkms-580-open" in load("ubuntu2404-show-nvlink5-580.txt")
    with pytest.raises(cr.CudaRepoError):
        cr.driver_packages("ubuntu", 580, "auto")
    with pytest.raises(cr.CudaRepoError):
        cr.driver_packages("rhel", 580, "open")


def test_pinning_packages_offered():
    found = cr.parse_pinning(load("debian-apt-cache-search-pinning.txt"))
    assert found["branches"] == [570, 580]
    assert found["versions"] == ["570.211.01", "580.105.08", "580.126.09", "580.126.16"]
    assert cr.pinning_package(580) in load("debian-apt-cache-search-pinning.txt")


def test_pinning_package_version_is_not_the_drivers():
    # the role installs it by name: "=<driver version>" would name no version apt has
    policy = load("debian12-policy-pinning-580.txt")
    versions = [line.split()[-2] for line in policy.splitlines() if line.strip().startswith(("***", "580-"))]
    assert versions == ["580-5", "580-1"]
    # no driver version in it: the upstream part is the bare branch
    assert [dc.upstream_version(v) for v in versions] == ["580", "580"]


def test_archive_branches_leave_out_the_cuda_repository():
    madison = load("debian12-madison-nvidia-driver.txt")
    assert cr.archive_branches(madison) == [550, 555, 560]
    assert cr.archive_branches(madison, exclude_url=DEBIAN12_URL) == []


def _debian_archive_only(text):
    return "\n".join(line for line in text.splitlines() if "deb.debian.org" in line)


def test_auto_picks_the_cuda_repository_on_real_debian_for_blackwell():
    trixie = load("apt-cache-madison_debian-trixie_nonfree+gpusim.txt", os.path.join(FIXTURES, "host"))
    archive = _debian_archive_only(trixie)
    style, reason = cr.auto_style("Debian", 570, archive)
    assert style == "nvidia"
    assert "branch 550" in reason and "570" in reason and "nvidia_driver_package_style: nvidia" in reason
    # a GPU Debian's 550 drives (e.g. an A100, minimum 450) keeps Debian's archive
    assert cr.auto_style("Debian", 450, archive)[0] == "debian"


def test_auto_keeps_debian_when_a_source_reaches_the_minimum():
    # the harness's simulated Debian archive carries 570/580 (other scenarios rely on it)
    trixie = load("apt-cache-madison_debian-trixie_nonfree+gpusim.txt", os.path.join(FIXTURES, "host"))
    style, reason = cr.auto_style("Debian", 570, trixie)
    assert style == "debian" and "580" in reason


def test_auto_does_not_count_the_cuda_repository_as_the_archive():
    madison = load("debian12-madison-nvidia-driver.txt")
    assert cr.auto_style("Debian", 555, madison)[0] == "debian"
    style, reason = cr.auto_style("Debian", 555, madison, cuda_repo_url=DEBIAN12_URL)
    assert style == "nvidia" and "in no branch" in reason


def test_auto_on_ubuntu_and_elsewhere():
    assert cr.auto_style("Ubuntu", 570, "")[0] == "ubuntu"
    assert cr.auto_style("Debian", None, "")[0] == "debian"
    with pytest.raises(cr.CudaRepoError):
        cr.auto_style("Rocky", 570, "")
