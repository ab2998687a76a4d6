"""NVIDIA's CUDA repository naming (module_utils/driver/cuda_repo.py) on real captures.

tests/fixtures/cuda_repo/README.md names the sources (NVIDIA's debian12 repository as apt printed it
on public hosts); docs/research/cuda-repo-packaging.md has the facts. The trixie madison capture in
tests/fixtures/host/ has Debian's own archive (deb.debian.org) next to the harness's simulated one.
"""
import os

import pytest

from driver import cuda_repo as cr
from driver import debian_version as dv
from driver import driver_packages as pk
from driver import driver_plan as dp
from driver import driver_request as rq
from driver import openpgp
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
    assert [dv.upstream_version(v) for v in versions] == ["580", "580"]


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


# ---------------------------------------------------------------------------------------------
# library/nvidia_driver_style.py: the decision on the GPUs of a real lspci capture


def _style_module():
    import ansible.module_utils
    from conftest import ROOT
    utils = os.path.join(ROOT, "module_utils")
    if utils not in ansible.module_utils.__path__:
        ansible.module_utils.__path__.append(utils)
    import nvidia_driver_style
    return nvidia_driver_style


def _blackwell_pci():
    from gpu import host_parse as hp
    text = load("lspci-nn-D_4xRTXPRO6000-server_rocky10.txt", os.path.join(FIXTURES, "host"))
    return hp.nvidia_gpus(hp.parse_lspci(text))


def test_style_module_picks_nvidia_for_blackwell_on_debians_archive():
    mod = _style_module()
    trixie = load("apt-cache-madison_debian-trixie_nonfree+gpusim.txt", os.path.join(FIXTURES, "host"))
    style, reason, floor = mod.decide("Debian", _blackwell_pci(), _debian_archive_only(trixie))
    assert (style, floor) == ("nvidia", 570) and "branch 550" in reason
    assert mod.decide("Debian", _blackwell_pci(), trixie)[0] == "debian"
    # the CUDA repository already on the host does not count as Debian's archive
    madison = load("debian12-madison-nvidia-driver.txt")
    assert mod.decide("Debian", _blackwell_pci(), madison, cuda_repo_url=DEBIAN12_URL)[0] == "nvidia"


def test_style_module_in_a_check_run_whose_sources_are_not_read_yet():
    mod = _style_module()
    style, reason, _ = mod.decide("Debian", _blackwell_pci(), "", sources_pending=True)
    assert style == "debian" and "check mode" in reason
    # what apt already reads decides even then
    trixie = load("apt-cache-madison_debian-trixie_nonfree+gpusim.txt", os.path.join(FIXTURES, "host"))
    assert mod.decide("Debian", _blackwell_pci(), _debian_archive_only(trixie), sources_pending=True)[0] == "nvidia"


def test_style_module_through_ansible():
    from conftest import run_ansible_module
    result = run_ansible_module("nvidia_driver_style", {"distribution": "Ubuntu", "pci_devices": _blackwell_pci(),
                                                        "distribution_version": "24.04"})
    assert result["style"] == "ubuntu" and result["min_branch"] == 570 and not result["changed"]
    assert result["repository"]["url"] == cr.DEFAULT_BASE_URL + "/ubuntu2404/x86_64/"
    assert result["repository"]["family"] == "ubuntu" and result["repository_error"] is None
    mirror = run_ansible_module("nvidia_driver_style", {"distribution": "Ubuntu", "pci_devices": [],
                                                        "distribution_version": "22.04",
                                                        "cuda_repo_url": "http://127.0.0.1:9/cuda"})
    assert mirror["repository"]["key_url"] == "http://127.0.0.1:9/cuda/3bf863cc.pub"
    old = run_ansible_module("nvidia_driver_style", {"distribution": "Ubuntu", "pci_devices": [],
                                                     "distribution_version": "20.04"})
    assert old["repository"] is None and "ubuntu2404" in old["repository_error"]
    result = run_ansible_module("nvidia_driver_style", {"distribution": "Rocky", "pci_devices": []})
    assert result["failed"] and "nvidia_driver_package_style" in result["msg"]


def test_no_branch_yet_names_the_newest():
    assert cr.driver_packages("ubuntu", None, "open") == ["nvidia-open"]
    assert cr.driver_packages("debian", 0, "open") == ["nvidia-driver", "nvidia-kernel-open-dkms"]
    assert cr.plan_packages("debian", None, "open") == ["nvidia-driver", "nvidia-kernel-open-dkms"]
    assert cr.plan_packages("debian", 590, "proprietary") == ["nvidia-driver", "nvidia-kernel-dkms",
                                                               "nvidia-driver-pinning-590"]
    assert cr.plan_packages("ubuntu", 580, "open") == ["nvidia-open-580", "nvidia-driver-pinning-580"]


def test_repository_of_a_host():
    repo = cr.repository("Debian", "12", "x86_64")
    assert repo["url"] == DEBIAN12_URL and repo["family"] == "debian"
    assert repo["key_url"] == DEBIAN12_URL + "3bf863cc.pub"
    trixie = cr.repository("Debian", "13", "x86_64", base_url="http://127.0.0.1:1/cuda/repos/")
    assert trixie["url"] == "http://127.0.0.1:1/cuda/repos/debian13/x86_64/"
    assert trixie["fingerprint"] == "02182E60104FCDC26EAE1B8597A5D4CB8793F200"
    assert cr.repository("Ubuntu", "24.04", "aarch64")["url"].endswith("/ubuntu2404/sbsa/")
    with pytest.raises(cr.CudaRepoError) as err:
        cr.repository("Debian", "11", "x86_64")
    assert "debian12" in str(err.value)


# ---------------------------------------------------------------------------------------------
# driver_plan.plan with nvidia_driver_package_style: nvidia


class _Query(object):
    def __init__(self, madison, dpkg=""):
        self.madison_text, self.dpkg_text = madison, dpkg

    def dpkg(self):
        return pk.parse_dpkg_query(self.dpkg_text)

    def smi_owner(self):
        return pk.parse_dpkg_search("")

    def madison(self, packages):
        return {p: v for p, v in pk.parse_madison(self.madison_text).items() if p in packages}

    def ubuntu_drivers(self):
        return None


def _request(**kw):
    base = {"style": "nvidia", "cuda_repo_family": "debian", "flavor": "server", "kernel_modules": "auto",
            "branch": "auto", "version": "", "upgrade": False, "extra_packages": []}
    base.update(kw)
    return base


def _a100():
    from gpu import host_parse as hp
    return rq.gpu_summary(hp.nvidia_gpus(hp.parse_lspci(load("lspci-n_A100_gcp.txt", os.path.join(FIXTURES, "host")))))


def test_plan_from_nvidias_debian_repository():
    madison = load("debian12-madison-nvidia-driver.txt")
    result = dp.plan(_request(), _a100(), _Query(madison))
    assert result["branch"] == 560 and result["kernel_modules"] == "proprietary"
    assert result["packages"] == ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-driver-pinning-560"]
    assert result["install"][0] == "nvidia-driver=560.35.03-1"
    # the pinning package by name: its own version is not the driver's
    assert result["install"][-1] == "nvidia-driver-pinning-560"
    older = dp.plan(_request(branch="555"), _a100(), _Query(madison))
    assert older["install"][0] == "nvidia-driver=555.42.06-1" and older["install"][-1] == "nvidia-driver-pinning-555"


def test_plan_refuses_a_repository_below_the_gpus_minimum():
    madison = load("debian12-madison-nvidia-driver.txt")
    gpus = rq.gpu_summary(_blackwell_pci())
    with pytest.raises(rq.DriverChoiceError) as err:
        dp.plan(_request(), gpus, _Query(madison))
    assert "570" in str(err.value) and "560" in str(err.value)


def test_plan_open_modules_for_blackwell_under_nvidias_name():
    # NVIDIA's repository as the simulated one serves it (names and versions of docs/research 2, 5)
    url = "http://127.0.0.1:8000/cuda/repos/debian12/x86_64  Packages"
    madison = "".join("%s | %s | %s\n" % (name, version, url)
                      for name in ("nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-kernel-dkms")
                      for version in ("590.48.01-1", "590.44.01-1", "580.126.09-1"))
    gpus = rq.gpu_summary(_blackwell_pci())
    result = dp.plan(_request(), gpus, _Query(madison))
    assert result["kernel_modules"] == "open"
    assert result["install"] == ["nvidia-driver=590.48.01-1", "nvidia-kernel-open-dkms=590.48.01-1",
                                 "nvidia-driver-pinning-590"]
    pinned = dp.plan(_request(branch="580"), gpus, _Query(madison))
    assert pinned["install"] == ["nvidia-driver=580.126.09-1", "nvidia-kernel-open-dkms=580.126.09-1",
                                 "nvidia-driver-pinning-580"]
    with pytest.raises(rq.DriverChoiceError) as err:
        dp.plan(_request(kernel_modules="proprietary"), gpus, _Query(madison))
    assert "open kernel modules" in str(err.value)


def test_ubuntu_family_names_in_the_plan():
    request = _request(cuda_repo_family="ubuntu")
    assert pk.top_packages(request, 580, "open") == ["nvidia-open-580", "nvidia-driver-pinning-580"]
    assert pk.top_packages(request, 590, "proprietary") == ["cuda-drivers", "nvidia-driver-pinning-590"]
    assert pk.top_packages(request, 0, "open")[0] == "nvidia-open"


def test_check_run_before_the_repository_is_read_predicts_the_gpus_branch():
    # Debian's own 535 is readable, NVIDIA's repository (added by the same check run) is not
    trixie = load("apt-cache-madison_debian-trixie_nonfree+gpusim.txt", os.path.join(FIXTURES, "host"))
    gpus = rq.gpu_summary(_blackwell_pci())
    result = dp.plan(_request(sources_pending=True), gpus, _Query(_debian_archive_only(trixie)))
    assert result["predicted"] and result["branch"] == 570
    assert result["install"] == ["nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-driver-pinning-570"]
    # without the pending sources the same host is refused: Debian's 550 is all apt has
    with pytest.raises(rq.DriverChoiceError):
        dp.plan(_request(), gpus, _Query(_debian_archive_only(trixie)))


def test_the_branchs_pinning_package_is_held_with_the_driver():
    dpkg = pk.parse_dpkg_query("".join("%s\t%s\tii \n" % nv for nv in (
        ("nvidia-driver", "590.48.01-1"), ("nvidia-kernel-open-dkms", "590.48.01-1"), ("nvidia-smi", "590.48.01-1"),
        ("nvidia-driver-pinning-590", "590-5"), ("nvidia-driver-pinning-580.105.08", "580.105.08-1"))))
    assert pk.driver_packages(dpkg, "590.48.01", 590) == [
        "nvidia-driver", "nvidia-driver-pinning-590", "nvidia-kernel-open-dkms", "nvidia-smi"]


def test_a_derivative_names_its_base_repository():
    # Linux Mint 22 is Ubuntu 24.04 underneath: its facts name no CUDA repository, its base does
    with pytest.raises(cr.CudaRepoError) as err:
        cr.repository("Linux Mint", "22", "x86_64")
    assert "nvidia_driver_cuda_repo_distro" in str(err.value)
    repo = cr.repository("Linux Mint", "22", "x86_64", distro="ubuntu2404")
    assert repo["url"] == cr.DEFAULT_BASE_URL + "/ubuntu2404/x86_64/" and repo["family"] == "ubuntu"
    assert repo["fingerprint"] == "EB693B3035CD5710E231E123A4B469963BF863CC"
    # the directory decides the key and the naming, not the facts
    assert cr.repository("Debian", "12", "x86_64", distro="debian13")["key_file"] == "8793F200.pub"
    with pytest.raises(cr.CudaRepoError) as err:
        cr.repository("Ubuntu", "24.04", "x86_64", distro="ubuntu2004")
    assert "ubuntu2004" in str(err.value) and "ubuntu2404" in str(err.value)


def test_style_module_takes_the_named_repository():
    from conftest import run_ansible_module
    result = run_ansible_module("nvidia_driver_style", {"distribution": "Linux Mint", "pci_devices": [],
                                                        "distribution_version": "22",
                                                        "cuda_repo_distro": "ubuntu2404"})
    assert result["repository"]["family"] == "ubuntu" and result["repository_error"] is None
    assert result["repository"]["key_url"] == cr.DEFAULT_BASE_URL + "/ubuntu2404/x86_64/3bf863cc.pub"
    assert result["style"] == "nvidia" and "ubuntu2404" in result["reason"]
    # a wrong name is refused, with the ones there are
    wrong = run_ansible_module("nvidia_driver_style", {"distribution": "Linux Mint", "pci_devices": [],
                                                       "distribution_version": "22", "cuda_repo_distro": "mint22"})
    assert wrong["failed"] and "'mint22'" in wrong["msg"] and "ubuntu2404" in wrong["msg"]


def _ubuntu_repo_madison(names_versions):
    url = "http://127.0.0.1:8000/cuda/repos/ubuntu2404/x86_64  Packages"
    return "".join("%s | %s | %s\n" % (name, version, url) for name, versions in names_versions
                   for version in versions)


def test_plan_on_nvidias_ubuntu_repository_across_the_590_rename():
    # nvidia-open-580 up to 580, nvidia-open (branch only in the version) from 590 (research 3)
    madison = _ubuntu_repo_madison([("nvidia-open-580", ["580.126.09-1ubuntu1"]),
                                    ("nvidia-open", ["590.48.01-0ubuntu1", "590.44.01-0ubuntu1"])])
    gpus = rq.gpu_summary(_blackwell_pci())
    fresh = dp.plan(_request(cuda_repo_family="ubuntu"), gpus, _Query(madison))
    assert fresh["branch"] == 590 and fresh["action"] == "install"
    assert fresh["install"] == ["nvidia-open=590.48.01-0ubuntu1", "nvidia-driver-pinning-590"]
    # a host on 580 (NVIDIA's suffixed names, nvidia-smi from nvidia-utils-580) asked for 590
    installed = "".join("%s\t%s\tii \n" % nv for nv in (
        ("nvidia-open-580", "580.126.09-1ubuntu1"), ("nvidia-driver-580-open", "580.126.09-1ubuntu1"),
        ("nvidia-dkms-580-open", "580.126.09-1ubuntu1"), ("nvidia-utils-580", "580.126.09-1ubuntu1"),
        ("libnvidia-compute-580", "580.126.09-1ubuntu1"), ("nvidia-driver-pinning-580", "580-2ubuntu1")))

    class _Host(_Query):
        def smi_owner(self):
            return "nvidia-utils-580"

    kept = dp.plan(_request(cuda_repo_family="ubuntu"), gpus, _Host(madison, installed))
    assert kept["branch"] == 580 and kept["action"] == "none" and kept["kernel_modules"] == "open"
    assert "nvidia-driver-pinning-580" in kept["installed"]["packages"]
    moved = dp.plan(_request(cuda_repo_family="ubuntu", branch="590"), gpus, _Host(madison, installed))
    assert moved["action"] == "change"
    assert moved["install"] == ["nvidia-open=590.48.01-0ubuntu1", "nvidia-driver-pinning-590"]


def test_kernel_modules_of_nvidias_unsuffixed_dkms_packages():
    def kind(*names):
        return pk.installed_kernel_modules(pk.parse_dpkg_query("".join("%s\t590.48.01-0ubuntu1\tii \n" % n
                                                                         for n in names)))
    assert kind("nvidia-dkms-open", "nvidia-driver-open") == "open"
    assert kind("nvidia-dkms", "nvidia-utils") == "proprietary"
    assert kind("nvidia-dkms-580-open") == "open" and kind("nvidia-dkms-580-server") == "proprietary"


def _p100():
    # the PCI id of corpus capture 023 (Tesla P100-PCIE-16GB, 0x15F8): Pascal, retired after branch 580
    return rq.gpu_summary([{"pci_id": "10de:15f8", "product": "Tesla P100-PCIE-16GB", "pci_address": "0000:00:04.0"}])


def test_auto_stays_at_the_last_branch_a_retired_gpu_runs():
    # NVIDIA: "The release 580 series will be the last to support GPUs based on the Maxwell, Pascal, and Volta
    # architectures" - the repository's newest (590) would find no GPU
    url = "http://127.0.0.1:8000/cuda/repos/debian12/x86_64  Packages"
    madison = "".join("%s | %s | %s\n" % (name, version, url)
                      for name in ("nvidia-driver", "nvidia-kernel-dkms", "nvidia-kernel-open-dkms")
                      for version in ("590.48.01-1", "590.44.01-1", "580.126.09-1"))
    result = dp.plan(_request(), _p100(), _Query(madison))
    assert result["branch"] == 580 and result["kernel_modules"] == "proprietary"
    assert result["install"] == ["nvidia-driver=580.126.09-1", "nvidia-kernel-dkms=580.126.09-1",
                                 "nvidia-driver-pinning-580"]
    assert "at most branch 580" in result["branch_source"]
    ubuntu = _ubuntu_repo_madison([("cuda-drivers", ["590.48.01-0ubuntu1", "580.126.09-1ubuntu1"]),
                                   ("cuda-drivers-580", ["580.126.09-1ubuntu1"])])
    result = dp.plan(_request(cuda_repo_family="ubuntu"), _p100(), _Query(ubuntu))
    assert result["install"] == ["cuda-drivers-580=580.126.09-1ubuntu1", "nvidia-driver-pinning-580"]


def test_a_branch_past_a_gpus_last_is_refused_before_any_change():
    with pytest.raises(rq.DriverChoiceError) as err:
        rq.precheck(_request(branch="590"), _p100())
    message = str(err.value)
    assert "Tesla P100-PCIE-16GB" in message and "branch 580 at most" in message and "Pascal" in message
    assert "nvidia_driver_branch: 580" in message
    assert rq.precheck(_request(branch="580"), _p100())["max_branch"] == 580
    # GPUs still supported have no last branch
    assert rq.precheck(_request(), _a100())["max_branch"] is None


def test_sources_with_only_branches_past_a_gpus_last_are_named_so():
    url = "http://127.0.0.1:8000/cuda/repos/debian12/x86_64  Packages"
    madison = "".join("%s | %s | %s\n" % (name, "590.48.01-1", url)
                      for name in ("nvidia-driver", "nvidia-kernel-dkms"))
    with pytest.raises(rq.DriverChoiceError) as err:
        dp.plan(_request(), _p100(), _Query(madison))
    message = str(err.value)
    assert "only past branch 580" in message and "Tesla P100-PCIE-16GB" in message and "590.48.01-1" in message


# ---------------------------------------------------------------------------------------------
# The fabric services from NVIDIA's repository: NVSwitch hosts, HGX B200 (NVLSM), GB200 trays (IMEX)

# NVSwitch functions as the research's real H100 HGX lspci shows them (10de:22a3).
NVSWITCHES = ["0000:bd:00.0", "0000:be:00.0", "0000:bf:00.0", "0000:c0:00.0"]
# Versions as NVIDIA's debian12 index names them (nvidia-fabricmanager_580.65.06-1_amd64.deb: research doc 1,
# corpus host/010), in madison's layout (debian12-madison-nvidia-driver.txt).
FABRIC_URL = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64  Packages"


def _fabric_madison(names, versions=("580.65.06-1", "570.172.08-1")):
    return "".join("%s | %s | %s\n" % (name, version, FABRIC_URL) for name in names for version in versions)


def _gpu(pci_id, product, address="0000:51:00.0"):
    return rq.gpu_summary([{"is_nvidia_gpu": True, "device_id": pci_id[5:], "pci_id": pci_id,
                            "pci_address": address, "product": product}])


def test_an_nvswitch_host_gets_the_fabric_manager_from_nvidias_repository_at_the_drivers_version():
    madison = _fabric_madison(("nvidia-driver", "nvidia-kernel-dkms", "nvidia-fabricmanager", "libnvidia-nscq",
                               "nvidia-fabricmanager-570", "libnvidia-nscq-570"))
    result = dp.plan(_request(branch="580", nvswitches=NVSWITCHES), _a100(), _Query(madison))
    assert result["fabric_manager"] is True and result["fabric_need"] == "fabric_manager"
    assert result["fabric_services"] == ["nvidia-fabricmanager"]
    # from 580 the unsuffixed names (nvidia-fabricmanager-580 is only virtual there: corpus host/010)
    assert result["install"] == ["nvidia-driver=580.65.06-1", "nvidia-kernel-dkms=580.65.06-1",
                                 "nvidia-driver-pinning-580", "nvidia-fabricmanager=580.65.06-1",
                                 "libnvidia-nscq=580.65.06-1"]
    older = dp.plan(_request(branch="570", nvswitches=NVSWITCHES), _a100(), _Query(madison))
    assert older["install"][-2:] == ["nvidia-fabricmanager-570=570.172.08-1", "libnvidia-nscq-570=570.172.08-1"]
    lacking = _fabric_madison(("nvidia-driver", "nvidia-kernel-dkms")) + _fabric_madison(
        ("nvidia-fabricmanager", "libnvidia-nscq"), ("570.172.08-1",))
    with pytest.raises(rq.DriverChoiceError) as err:
        dp.plan(_request(branch="580", nvswitches=NVSWITCHES), _a100(), _Query(lacking))
    assert "nvidia-fabricmanager 580.65.06 is not in the apt sources (they offer 570.172.08)" in str(err.value)


def test_an_hgx_b200_gets_nvlsm_beside_the_fabric_manager():
    """B200 by its PCI id (10de:2901, as the simllm 8x B200 capture's lspci shows it): no NVSwitch on the bus."""
    madison = _fabric_madison(("nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-fabricmanager",
                               "libnvidia-nscq")) + "nvlsm | 2025.10.14-1 | %s\n" % FABRIC_URL
    b200 = _gpu("10de:2901", "NVIDIA B200")
    result = dp.plan(_request(branch="580", machine="x86_64"), b200, _Query(madison))
    assert result["fabric_need"] == "fabric_manager+nvlsm" and result["fabric_manager"] is True
    assert result["install"][-5:] == ["nvidia-fabricmanager=580.65.06-1", "libnvidia-nscq=580.65.06-1",
                                      "nvlsm", "infiniband-diags", "libibumad3"]
    # Ubuntu's archive has no NVLSM: refused, naming NVIDIA's repository
    with pytest.raises(rq.DriverChoiceError) as err:
        rq.precheck(_request(style="ubuntu"), b200)
    assert "not NVLSM (package nvlsm)" in str(err.value) and "nvidia_driver_package_style: nvidia" in str(err.value)
    never = rq.precheck(_request(fabric_manager="never"), b200)
    assert never["fabric_services"] == [] and never["fabric_need"] == "fabric_manager+nvlsm"


def test_a_gb200_tray_gets_imex_and_no_fabric_manager():
    madison = _fabric_madison(("nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-imex"))
    gb200 = _gpu("10de:2941", "NVIDIA GB200", "0008:01:00.0")
    result = dp.plan(_request(branch="580", machine="aarch64"), gb200, _Query(madison))
    assert result["fabric_need"] == "imex" and result["fabric_manager"] is False
    assert result["fabric_services"] == ["nvidia-imex"]
    assert result["install"][-1] == "nvidia-imex=580.65.06-1"
    assert not [p for p in result["packages"] if "fabricmanager" in p]
    with pytest.raises(rq.DriverChoiceError, match="NV_WARN_NOTHING_TO_DO"):
        rq.precheck(_request(fabric_manager="always"), gb200)
    with pytest.raises(rq.DriverChoiceError) as err:
        rq.precheck(_request(style="debian"), gb200)
    assert "Debian's archive does not carry the IMEX service (nvidia-imex)" in str(err.value)
