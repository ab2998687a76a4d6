"""One parser per version output, each used everywhere, tried on real outputs: the driver branch of a driver
version (gpu/host_parse.driver_branch), the nvidia-ctk version and the container engine's version
(containers/versions.py). Sources of the captures: the READMEs of tests/fixtures/host, cdi_versions, gpus_path,
nvidia_smi."""
import glob
import os

import pytest

from conftest import FIXTURES
from containers import cdi_spec, cuda_requirement, daemon_json, gpus_path, versions
from driver import branch_choice, driver_packages, driver_plan, driver_request
from gpu import gpu_facts, host_parse
from gpu.host_parse import driver_branch


def read(*parts):
    with open(os.path.join(FIXTURES, *parts), encoding="utf-8") as handle:
        return handle.read()


# --- the driver branch -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, branch", [
    ("proc-driver-nvidia-version_open_550.54.15.txt", 550),
    ("proc-driver-nvidia-version_open_aarch64_580.65.06.txt", 580),
    ("proc-driver-nvidia-version_proprietary_418.56.txt", 418),
    ("proc-driver-nvidia-version_proprietary_515.76.txt", 515),
    ("proc-driver-nvidia-version_tegra_aarch64_34.1.1.txt", None),   # Tegra's numbering has no branch
])
def test_branch_of_the_loaded_module(name, branch):
    assert driver_branch(host_parse.parse_proc_version(read("host", name))["version"]) == branch


def test_branch_of_nvidia_smi_driver_versions():
    seen = {}
    for path in sorted(glob.glob(os.path.join(FIXTURES, "nvidia_smi", "*.xml"))):
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if "<driver_version>" in line:
                    version = line.split("<driver_version>")[1].split("<")[0]
                    seen[version] = driver_branch(version)
    assert seen["590.44.01"] == 590 and seen["516.59"] == 516 and seen["510.47.03"] == 510
    assert all(branch == int(version.split(".")[0]) for version, branch in seen.items())


def test_branch_of_debian_and_ubuntu_package_versions():
    # dpkg-query -W (Debian 13), apt-cache madison (Debian's archive), dpkg -l (Ubuntu 24.04's -server packages)
    rows = [line.split("\t") for line in read("host", "dpkg-query-W_debian-trixie_nvidia-driver-580-held.txt")
            .splitlines()]
    assert {driver_branch(r[1]) for r in rows if r[0].startswith("nvidia-driver")} == {580}
    madison = [line.split(" | ")[1] for line in read("host", "apt-cache-madison_debian-trixie_nonfree+gpusim.txt")
               .splitlines() if line.startswith("nvidia-driver |")]
    assert [driver_branch(v) for v in madison] == [int(v[:3]) for v in madison]
    assert "550.163.01-2" in madison and driver_branch("550.163.01-2") == 550
    listing = read("host", "007_dpkg-l_550.127.08-server_ubuntu24.04_linux-modules-nvidia-signed_excerpt.txt")
    by_package = dict(line.split()[1:3] for line in listing.splitlines() if line.startswith("ii "))
    assert driver_branch(by_package["nvidia-compute-utils-550-server"]) == 550            # 550.127.08-0ubuntu0.24.04.1
    assert driver_branch(by_package["linux-modules-nvidia-550-server-6.8.0-51-generic"]) is None   # a kernel's


@pytest.mark.parametrize("text, branch", [
    ("1:580.95.05-0ubuntu0.24.04.1", 580),   # an epoch
    ("1000.12.01", 1000),                   # four digits
    (" 580.95.05\n", 580),
    ("1:0.9.7.6ubuntu3.2", None), ("580", None), ("12345.1", None), ("", None), (None, None), (580, None),
])
def test_branch_edges(text, branch):
    assert driver_branch(text) == branch


def test_one_branch_parser_everywhere():
    drivers = (branch_choice, driver_packages, driver_plan, driver_request)
    assert all(module.driver_branch is driver_branch for module in drivers)
    assert cuda_requirement.driver_branch is gpu_facts.driver_branch is driver_branch
    assert not any(hasattr(module, "version_branch") for module in drivers)


# --- nvidia-ctk --version --------------------------------------------------------------------------------

def test_ctk_version_real_output():
    text = read("cdi_versions", "ctk-version_1.12.0_nvidia-container-toolkit-50.txt")
    assert text.startswith("NVIDIA Container Toolkit CLI version 1.12.0\ncommit: ")
    assert versions.ctk_version(text) == "1.12.0"


@pytest.mark.parametrize("text, version", [
    ("NVIDIA Container Toolkit CLI version 1.19.0-rc.7\ncommit: 7a5e5a2\n", "1.19.0-rc.7"),
    ("\x1b[1mNVIDIA Container Toolkit CLI version 1.18.0\x1b[0m\r\ncommit: f8daa5e\r\n", "1.18.0"),
    ("1.17.8\n", "1.17.8"),
    ("", None), ("nvidia-ctk: command not found", None), (None, None),
])
def test_ctk_version_forms(text, version):
    assert versions.ctk_version(text) == version


# --- the container engine's version ----------------------------------------------------------------------

@pytest.mark.parametrize("folder, name, token, major", [
    ("cdi_versions", "containerd-version_containerd.io-1.7.27_ctrsploit-dqd.txt", "1.7.27", 1),
    ("cdi_versions", "containerd-version_ubuntu-1.5.5_kata-containers-3120.txt", "1.5.5-0ubuntu3~20.04.1", 1),
    ("cdi_versions", "containerd-version_v1.5.7_kata-containers-8781.txt", "1.5.7", 1),
    ("cdi_versions", "podman-version_4.9.3_ubuntu-24.04_podman-27070.txt", "4.9.3", 4),
])
def test_engine_version_real_outputs(folder, name, token, major):
    text = read(folder, name)
    assert versions.engine_version(text) == token and versions.engine_major(text) == major


@pytest.mark.parametrize("name, server", [
    ("docker-info_26.1.5+dfsg1_debian13_no-cdi.txt", "26.1.5+dfsg1"),
    ("docker-info_29.4.2_fedora44_cdi-devices.txt", "29.4.2"),
    ("docker-info_29.7.2_toolkit-1.20.0_nvidia-container-toolkit-1967_excerpt.txt", "29.7.2"),
])
def test_engine_version_of_docker_info(name, server):
    info = gpus_path.info_from_text(read("gpus_path", name))
    assert versions.engine_version(info["ServerVersion"]) == server
    assert gpus_path.engine_version(info) == versions.version_tuple(server)
    assert daemon_json.engine_accepts_bom(info["ServerVersion"]) is True        # docker >= 23


@pytest.mark.parametrize("text, token, accepts_bom", [
    ("Docker version 28.2.0, build 879ac3f", "28.2.0", True),          # dockerd --version
    ("Docker version 20.10.24+dfsg1, build 297e128", "20.10.24+dfsg1", False),
    ("26.1.5+dfsg1\n", "26.1.5+dfsg1", True),                            # docker version --format
    ("", None, None), ("Cannot connect to the Docker daemon at unix:///var/run/docker.sock", None, None),
])
def test_engine_version_forms(text, token, accepts_bom):
    assert versions.engine_version(text) == token
    assert daemon_json.engine_accepts_bom(text) is accepts_bom


def test_one_engine_and_ctk_parser_everywhere():
    import nvidia_cdi_spec  # library/: the module reads the toolkit's and the engines' versions
    assert nvidia_cdi_spec.ctk_version is versions.ctk_version
    assert nvidia_cdi_spec.engine_version is versions.engine_version
    assert cdi_spec.version_tuple is versions.version_tuple
    assert not hasattr(cdi_spec, "parse_version") and not hasattr(cdi_spec, "version_token")
