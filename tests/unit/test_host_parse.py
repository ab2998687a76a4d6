"""Host evidence parsers on real outputs (tests/fixtures/host/README.md names the sources)."""
import os

import pytest

from gpu import host_parse as h
from conftest import FIXTURES

HOST = os.path.join(FIXTURES, "host")


def load(name):
    with open(os.path.join(HOST, name), encoding="utf-8") as handle:
        return handle.read()


@pytest.mark.parametrize("name, version, flavor, arch", [
    ("proc-driver-nvidia-version_open_550.54.15.txt", "550.54.15", "open", "x86_64"),
    ("proc-driver-nvidia-version_open_aarch64_580.65.06.txt", "580.65.06", "open", "aarch64"),
    ("proc-driver-nvidia-version_proprietary_418.56.txt", "418.56", "proprietary", "x86_64"),
    ("proc-driver-nvidia-version_proprietary_515.76.txt", "515.76", "proprietary", "x86_64"),
    ("proc-driver-nvidia-version_tegra_aarch64_34.1.1.txt", "34.1.1", "proprietary", "aarch64"),
])
def test_proc_version(name, version, flavor, arch):
    info = h.parse_proc_version(load(name))
    assert (info["version"], info["flavor"], info["arch"]) == (version, flavor, arch)
    assert info["nvrm_line"].startswith("NVRM version:")


def test_proc_version_gcc_line():
    info = h.parse_proc_version(load("proc-driver-nvidia-version_open_550.54.15.txt"))
    assert info["gcc"] == "gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)"


def test_proc_version_rejects_other_text():
    with pytest.raises(h.HostParseError):
        h.parse_proc_version("GCC version: gcc\n")


def test_driver_branch():
    assert h.driver_branch("580.95.05") == 580
    assert h.driver_branch("34.1.1") is None
    assert h.driver_branch(None) is None


def test_lspci_four_server_cards_and_the_bmc():
    devices = h.parse_lspci(load("lspci-nn-D_4xRTXPRO6000-server_rocky10.txt"))
    assert len(devices) == 5
    gpus = h.nvidia_gpus(devices)
    assert [g["pci_address"] for g in gpus] == ["0000:38:00.0", "0000:49:00.0", "0000:98:00.0", "0000:b8:00.0"]
    assert {g["pci_id"] for g in gpus} == {"10de:2bb5"}
    assert gpus[0]["class_code"] == "0302" and gpus[0]["class_name"] == "3D controller"
    assert gpus[0]["product"] == "RTX PRO 6000 Blackwell Server Edition"
    assert gpus[0]["compute_capability"] == "12.0" and gpus[0]["open_kernel_modules_required"] is True
    assert devices[0]["vendor_id"] == "1a03" and not devices[0]["is_nvidia_gpu"]  # ASPEED VGA


def test_lspci_vga_class_and_audio_function():
    devices = h.parse_lspci(load("lspci-nn_2xRTXPRO6000-workstation_vm_no-driver.txt"))
    gpus = h.nvidia_gpus(devices)
    assert [(g["pci_address"], g["class_code"], g["device_id"]) for g in gpus] == [
        ("0000:01:00.0", "0300", "2bb1"), ("0000:02:00.0", "0300", "2bb1")]
    audio = [d for d in devices if d["class_code"] == "0403"]
    assert len(audio) == 2 and all(d["vendor_id"] == "10de" and not d["is_nvidia_gpu"] for d in audio)
    assert gpus[0]["revision"] == "a1" and gpus[0]["architecture"] == "Blackwell"


def test_lspci_domains_gh200_and_gb10():
    gh200 = h.nvidia_gpus(h.parse_lspci(load("lspci-nn-D_GH200.txt")))
    assert gh200[0]["pci_address"] == "0009:01:00.0" and gh200[0]["product"] == "GH200 480GB"
    assert gh200[0]["open_kernel_modules_required"] is True
    gb10 = h.nvidia_gpus(h.parse_lspci(load("lspci-nn-D_GB10-dgx-spark.txt")))
    assert [(g["pci_address"], g["compute_capability"]) for g in gb10] == [("000f:01:00.0", "12.1")]


def test_lspci_numeric_form():
    gpus = h.nvidia_gpus(h.parse_lspci(load("lspci-n_A100_gcp.txt")))
    assert [(g["pci_address"], g["pci_id"], g["class_code"]) for g in gpus] == [("0000:00:04.0", "10de:20b0", "0302")]
    assert gpus[0]["architecture"] == "Ampere"


def test_lspci_kernel_driver_lines():
    text = load("lspci-nn-D_GH200.txt") + "\tKernel driver in use: nvidia\n\tKernel modules: nvidiafb, nouveau, nvidia\n"
    gpu = h.parse_lspci(text)[0]
    assert gpu["kernel_driver"] == "nvidia" and gpu["kernel_modules"] == "nvidiafb, nouveau, nvidia"


def test_lspci_empty_and_wrong():
    assert h.parse_lspci("") == []
    with pytest.raises(h.HostParseError):
        h.parse_lspci("lspci: command not found\n")


def test_sysfs_device():
    dev = h.pci_device_from_sysfs("0000:38:00.0", "0x10de\n", "0x2bb5\n", "0x030200\n")
    assert dev["is_nvidia_gpu"] and dev["pci_id"] == "10de:2bb5" and dev["class_code"] == "0302"
    assert h.pci_device_from_sysfs("0000:00:1f.3", "0x8086", "0xa348", "0x040300")["is_nvidia_gpu"] is False
    assert h.pci_device_from_sysfs("x", "junk", "0x1", "0x0") is None


def test_ubuntu_drivers_devices_aws_t4():
    (dev,) = h.parse_ubuntu_drivers_devices(load("ubuntu-drivers-devices_TeslaT4_aws.txt"))
    assert dev["sysfs_path"] == "/sys/devices/pci0000:00/0000:00:1e.0"
    assert (dev["vendor_id"], dev["device_id"]) == ("10de", "1eb8")
    assert dev["vendor"] == "NVIDIA Corporation" and dev["model"] == "TU104GL [Tesla T4]"
    assert dev["recommended"] == "nvidia-driver-595-open"
    assert len(dev["drivers"]) == 11
    nouveau = dev["drivers"][-1]
    assert nouveau["package"] == "xserver-xorg-video-nouveau" and nouveau["free"] and nouveau["builtin"]
    server_open = next(d for d in dev["drivers"] if d["package"] == "nvidia-driver-580-server-open")
    assert (server_open["branch"], server_open["server"], server_open["open"]) == (580, True, True)
    assert server_open["source"] == "distro" and not server_open["free"]


def test_ubuntu_drivers_devices_noise_and_manual_install():
    (p2200,) = h.parse_ubuntu_drivers_devices(load("ubuntu-drivers-devices_QuadroP2200_aplay-noise.txt"))
    assert p2200["recommended"] == "nvidia-driver-535" and p2200["device_id"] == "1c31"
    (gtx960,) = h.parse_ubuntu_drivers_devices(load("ubuntu-drivers-devices_GTX960_manual-install.txt"))
    assert gtx960["manual_install"] is True and len(gtx960["drivers"]) == 9


def test_ubuntu_drivers_devices_without_header():
    (dev,) = h.parse_ubuntu_drivers_devices(load("ubuntu-drivers-devices_GTX1080_no-header_old.txt"))
    assert dev["sysfs_path"] is None and dev["device_id"] == "1b80"
    assert dev["recommended"] == "nvidia-384"
    assert next(d for d in dev["drivers"] if d["package"] == "nvidia-384")["branch"] == 384


