"""build_repo.py's NVIDIA CUDA-repository-style archive (cuda/repos/debian12/x86_64, specs/cuda.*.json).

The real names and dependency shapes are in docs/research/cuda-repo-packaging.md (and the captures in
tests/fixtures/cuda_repo/): Debian's unsuffixed names for every branch, nvidia-kernel-open-dkms for the
open modules, nvidia-driver-pinning-<B> (version <B>-5, one at a time) holding a branch. apt resolves the
archive offline as in test_packages.py.
"""
import os
import re
import subprocess

import pytest

from test_packages import KVER, apt, build_repo, built_repo, installs, packages_file  # noqa: F401 (fixtures' helpers)

pytestmark = pytest.mark.skipif(any(__import__("shutil").which(t) is None
                                    for t in ("dpkg-deb", "apt-ftparchive", "gpg", "gpgv")),
                                reason="needs dpkg-deb, apt-ftparchive, gpg, gpgv")

CUDA = "cuda/repos/debian12/x86_64"
FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "fixtures",
                        "cuda_repo")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return built_repo(tmp_path_factory)


def stanzas(repo):
    return {(p["Package"], p["Version"]): p for p in packages_file(os.path.join(repo, CUDA, "Packages"))}


def sources(repo):
    key = os.path.join(repo, "keys", "gpusim-archive-keyring.gpg")
    return "Types: deb\nURIs: file:%s/%s/\nSuites: /\nSigned-By: %s\n" % (repo, CUDA, key)


def test_flat_archive_named_and_signed_as_nvidias(repo):
    release = open(os.path.join(repo, CUDA, "Release")).read()
    assert "Origin: NVIDIA\n" in release and "Label: NVIDIA CUDA\n" in release
    assert os.path.isfile(os.path.join(repo, CUDA, "InRelease"))
    got = stanzas(repo)
    names = {n for n, _ in got}
    # Debian's names, unsuffixed in every branch; NVIDIA's name of the open DKMS package
    assert {"nvidia-driver", "nvidia-kernel-dkms", "nvidia-kernel-open-dkms", "libcuda1", "libnvidia-ml1",
            "firmware-nvidia-gsp", "nvidia-smi", "nvidia-persistenced"} <= names
    assert "nvidia-open-kernel-dkms" not in names
    assert not any(n.startswith("nvidia-driver-5") for n in names)
    assert {v for n, v in got if n == "nvidia-driver"} == {"580.126.09-1", "590.44.01-1", "590.48.01-1"}


def test_nvidia_driver_depends_as_the_real_one():
    real = open(os.path.join(FIXTURES, "debian12-apt-install-nvidia-driver-unmet.txt")).read()
    # the real alternatives, in the real order: proprietary DKMS | a virtual per-version kernel | open DKMS
    assert real.index("nvidia-kernel-dkms (=") < real.index("nvidia-kernel-545.23.08") < real.index(
        "nvidia-kernel-open-dkms (=")


def test_generated_depends_follow_that_order(repo):
    drv = stanzas(repo)[("nvidia-driver", "590.48.01-1")]
    assert drv["Depends"].startswith("nvidia-kernel-dkms (= 590.48.01-1) | nvidia-kernel-590.48.01 | "
                                     "nvidia-kernel-open-dkms (= 590.48.01-1)")
    assert drv["Maintainer"] == "cudatools <cudatools@nvidia.com>"


def test_pinning_packages(repo):
    got = stanzas(repo)
    real = open(os.path.join(FIXTURES, "debian-apt-cache-search-pinning.txt")).read()
    for branch in ("580", "590"):
        pin = got[("nvidia-driver-pinning-" + branch, branch + "-5")]
        assert pin["Provides"] == pin["Conflicts"] == pin["Replaces"] == "nvidia-driver-pinning"
        assert pin["Section"] == "NVIDIA" and pin["Architecture"] == "all"
        title = pin["Description"]
        assert title == "APT driver pinning file for driver branch %s." % branch
        if branch == "580":
            assert "nvidia-driver-pinning-580 - " + title.rstrip(".") in real


def _pin_file(repo, tmp_path, branch):
    deb = os.path.join(repo, CUDA, "nvidia-driver-pinning-%s_%s-5_all.deb" % (branch, branch))
    root = tmp_path / ("pin-" + branch)
    subprocess.run(["dpkg-deb", "-x", deb, str(root)], check=True)
    return (root / "etc" / "apt" / "preferences.d" / "nvidia-driver-pin").read_text()


def test_apt_takes_the_newest_branch_unless_the_pinning_package_holds_one(repo, tmp_path):
    src = sources(repo)
    res = apt(repo, tmp_path, src, "update")
    assert res.returncode == 0 and "W:" not in res.stderr and "E:" not in res.stderr, res.stdout + res.stderr
    res = apt(repo, tmp_path, src, "-s", "install", "nvidia-driver", "nvidia-kernel-open-dkms")
    got = installs(res)
    assert res.returncode == 0 and got["nvidia-driver"] == "590.48.01-1", res.stdout + res.stderr
    assert got["nvidia-kernel-open-dkms"] == "590.48.01-1" and "nvidia-kernel-dkms" not in got
    # what nvidia-driver-pinning-580 installs, in apt's preferences: the same request stays in 580
    (tmp_path / "apt" / "etc" / "preferences.d" / "nvidia-driver-pin").write_text(
        _pin_file(repo, tmp_path, "580"))
    res = apt(repo, tmp_path, src, "-s", "install", "nvidia-driver", "nvidia-kernel-open-dkms")
    got = installs(res)
    assert res.returncode == 0, res.stdout + res.stderr
    assert set(got.values()) == {"580.126.09-1"} and "nvidia-kernel-dkms" not in got
    # the proprietary modules are the first alternative when none is named
    res = apt(repo, tmp_path, src, "-s", "install", "nvidia-driver")
    assert installs(res)["nvidia-kernel-dkms"] == "580.126.09-1"


# NVIDIA's Ubuntu repository (cuda/repos/ubuntu2404/x86_64, specs/cuda-ubuntu.*.json): the branch in the package
# names up to 580, only in the version from 590 (research 3), revisions 1ubuntu1 / 0ubuntu1 as third-party listings
# show them; pinning packages versioned <B>-2ubuntu1 (research 4).
UBUNTU = "cuda/repos/ubuntu2404/x86_64"


def ubuntu_stanzas(repo):
    return {(p["Package"], p["Version"]): p for p in packages_file(os.path.join(repo, UBUNTU, "Packages"))}


def test_ubuntu_names_carry_the_branch_up_to_580_only(repo):
    release = open(os.path.join(repo, UBUNTU, "Release")).read()
    assert "Origin: NVIDIA\n" in release and "Label: NVIDIA CUDA\n" in release
    got = ubuntu_stanzas(repo)
    assert {v for n, v in got if n == "nvidia-open-580"} == {"580.126.09-1ubuntu1"}
    assert {v for n, v in got if n == "nvidia-open"} == {"590.44.01-0ubuntu1", "590.48.01-0ubuntu1"}
    # NVIDIA's rename table: nvidia-dkms-580-open -> nvidia-dkms-open, libnvidia-compute-580 -> libnvidia-compute
    assert {v for n, v in got if n == "nvidia-dkms-580-open"} == {"580.126.09-1ubuntu1"}
    assert {v for n, v in got if n == "libnvidia-compute"} == {"590.44.01-0ubuntu1", "590.48.01-0ubuntu1"}
    assert not any(n.startswith("nvidia-open-59") or (n.endswith("-590") and "pinning" not in n) for n, _ in got)
    # the package matrix's Depends of nvidia-open-<B> and of nvidia-open
    assert got[("nvidia-open-580", "580.126.09-1ubuntu1")]["Depends"] == (
        "nvidia-driver-580-open | nvidia-driver-580-server-open")
    assert got[("nvidia-open", "590.48.01-0ubuntu1")]["Depends"] == "nvidia-driver-open (>= 590.48.01)"
    pin = got[("nvidia-driver-pinning-590", "590-2ubuntu1")]
    assert pin["Provides"] == pin["Conflicts"] == pin["Replaces"] == "nvidia-driver-pinning"


def test_ubuntu_repository_resolves_one_branchs_set(repo, tmp_path):
    key = os.path.join(repo, "keys", "gpusim-archive-keyring.gpg")
    src = "Types: deb\nURIs: file:%s/%s/\nSuites: /\nSigned-By: %s\n" % (repo, UBUNTU, key)
    res = apt(repo, tmp_path, src, "update")
    assert res.returncode == 0 and "E:" not in res.stderr, res.stdout + res.stderr
    res = apt(repo, tmp_path, src, "-s", "install", "nvidia-open")
    got = installs(res)
    assert res.returncode == 0, res.stdout + res.stderr
    assert {n for n in got if "nvidia" in n} >= {"nvidia-open", "nvidia-driver-open", "nvidia-dkms-open",
                                                 "nvidia-utils", "libnvidia-compute", "nvidia-compute-utils"}
    assert set(v for n, v in got.items() if "nvidia" in n) == {"590.48.01-0ubuntu1"}
    res = apt(repo, tmp_path, src, "-s", "install", "nvidia-open-580")
    got = installs(res)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not any(n.endswith("-open") and "580" not in n for n in got), got
    assert {"nvidia-driver-580-open", "nvidia-dkms-580-open", "nvidia-utils-580"} <= set(got)
    assert set(v for n, v in got.items() if "nvidia" in n) == {"580.126.09-1ubuntu1"}


def test_ubuntu_nvidia_open_takes_the_newest_driver_unless_gpuhosts_pin_holds_the_version(repo, tmp_path):
    # nvidia-open=<V> Depends nvidia-driver-open (>= V): apt satisfies it with the newest (the trap a third-party
    # switch script describes, research 3); gpuhost's pin (templates/apt-pin.pref.j2: every driver package at
    # one version, priority 1001) lands the whole set on the version asked for.
    key = os.path.join(repo, "keys", "gpusim-archive-keyring.gpg")
    src = "Types: deb\nURIs: file:%s/%s/\nSuites: /\nSigned-By: %s\n" % (repo, UBUNTU, key)
    assert apt(repo, tmp_path, src, "update").returncode == 0
    res = apt(repo, tmp_path, src, "-s", "install", "nvidia-open=590.44.01-0ubuntu1")
    got = installs(res)
    assert got["nvidia-open"] == "590.44.01-0ubuntu1" and got["nvidia-driver-open"] == "590.48.01-0ubuntu1", got
    import jinja2
    template = os.path.join(os.path.dirname(FIXTURES), "..", "..", "roles", "nvidia_driver", "templates",
                            "apt-pin.pref.j2")
    pin = jinja2.Template(open(template).read()).render(
        ansible_managed="test", nvidia_driver_plan={"version": "590.44.01", "branch": 590})
    (tmp_path / "apt" / "etc" / "preferences.d" / "gpuhost-nvidia-driver.pref").write_text(pin)
    res = apt(repo, tmp_path, src, "-s", "install", "nvidia-open=590.44.01-0ubuntu1")
    got = installs(res)
    assert res.returncode == 0, res.stdout + res.stderr
    assert set(v for n, v in got.items() if "nvidia" in n) == {"590.44.01-0ubuntu1"}, got


UBUNTU_580 = ["nvidia-open-580", "nvidia-driver-580-open", "nvidia-dkms-580-open", "nvidia-kernel-common-580",
              "nvidia-kernel-source-580-open", "libnvidia-compute-580", "nvidia-utils-580", "nvidia-compute-utils-580"]
UBUNTU_590 = ["nvidia-open", "nvidia-driver-open", "nvidia-dkms-open", "nvidia-kernel-common",
              "nvidia-kernel-source-open", "libnvidia-compute", "nvidia-utils", "nvidia-compute-utils"]


def _installed(repo, tmp_path, names, version):
    """apt's status file with one branch's set installed, as the repository's stanzas describe it."""
    status = tmp_path / "apt" / "status"
    text = status.read_text()
    for para in open(os.path.join(repo, UBUNTU, "Packages")).read().strip().split("\n\n"):
        fields = [line for line in para.splitlines() if not line.startswith(" ")]
        head = dict(line.split(": ", 1) for line in fields)
        if head["Package"] in names and head["Version"] == version:
            keep = [line for line in fields if line.split(":")[0] in (
                "Version", "Architecture", "Depends", "Provides", "Conflicts", "Replaces")]
            text += "Package: %s\nStatus: install ok installed\n%s\nDescription: x\n\n" % (head["Package"],
                                                                                         "\n".join(keep))
    status.write_text(text)


@pytest.mark.parametrize("installed, version, request_", [
    (UBUNTU_580, "580.126.09-1ubuntu1", "nvidia-open=590.48.01-0ubuntu1"),
    (UBUNTU_590, "590.48.01-0ubuntu1", "nvidia-open-580=580.126.09-1ubuntu1")])
def test_ubuntu_branch_change_swaps_the_named_sets(repo, tmp_path, installed, version, request_):
    key = os.path.join(repo, "keys", "gpusim-archive-keyring.gpg")
    src = "Types: deb\nURIs: file:%s/%s/\nSuites: /\nSigned-By: %s\n" % (repo, UBUNTU, key)
    assert apt(repo, tmp_path, src, "update").returncode == 0
    _installed(repo, tmp_path, installed, version)
    res = apt(repo, tmp_path, src, "-s", "install", request_)
    assert res.returncode == 0, res.stdout + res.stderr
    removed = set(re.findall(r"^Remv (\S+) ", res.stdout, re.M))
    assert removed == set(installed), res.stdout
    wanted = UBUNTU_590 if installed is UBUNTU_580 else UBUNTU_580
    assert set(installs(res)) == set(wanted), res.stdout
