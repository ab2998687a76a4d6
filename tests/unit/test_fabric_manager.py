"""fabric_manager: what a host's NVLink fabric needs (fabric manager, with NVLSM on NVLink 5, or IMEX on GB200/GB300
trays), and under which package names each style installs it.

Inputs are real outputs: tests/fixtures/host/ (lspci), tests/fixtures/nvidia_smi/ 055/056/059/066 (Fabric blocks),
tests/fixtures/fabric/ (8x B200 `nvidia-smi -L`, 2x GB200 `nvidia-smi nvlink -info`; the README names the sources),
tests/fixtures/corpus/host/010 (the CUDA repository's 580 names). The NVSwitch PCI id and the package names are the
ones docs/research/hgx-fabric-manager.md and fabric-manager-cuda-repo-b200-gb200.md read.
"""
import pytest

from driver import fabric_manager as fm
from gpu import gpu_topology as gt
from gpu.nvsmi_parse import facts_from_output
from conftest import read_fixture
from gpu.host_parse import parse_lspci


def named(folder, prefix):
    """The GPUs an nvidia-smi output names (nvidia-smi -L, nvlink -info)."""
    return facts_from_output(read_fixture(folder, prefix), partial=True)["gpus"]


@pytest.mark.parametrize("capture", ["lspci-n_A100_gcp.txt", "lspci-nn-D_GH200.txt",
                                     "lspci-nn-D_4xRTXPRO6000-server_rocky10.txt"])
def test_no_nvswitch_on_these_buses(capture):
    devices = parse_lspci(read_fixture("host", capture))
    verdict = fm.fabric_need(devices, [d for d in devices if d.get("is_nvidia_gpu")])
    assert verdict["need"] == "none" and verdict["needed"] is False and verdict["nvswitches"] == []
    assert verdict["services"] == []


def test_an_nvswitch_on_the_bus_needs_the_fabric_manager():
    # The H100 NVSwitch's id as lspci -nn prints it on HGX H100 boards (research doc Q5).
    switch = {"pci_address": "0000:bd:00.0", "pci_id": "10de:22a3"}
    verdict = fm.fabric_need([switch])
    assert verdict["need"] == "fabric_manager" and verdict["nvswitches"] == ["0000:bd:00.0"]
    assert "NVSwitch gen3" in verdict["reason"] and verdict["services"] == ["nvidia-fabricmanager"]
    # nvidia_gpu_facts' nvswitches: the addresses alone
    assert fm.fabric_need(["0000:bd:00.0"])["need"] == "fabric_manager"


def test_the_gpus_fabric_state_decides_where_no_switch_is_on_the_bus():
    hgx = gt.parse_fabric(read_fixture("nvidia_smi", "055_"))  # 8x H100 SXM, CliqueId 0, zero ClusterUUID
    assert fm.fabric_need([], [], hgx)["need"] == "fabric_manager"
    assert "Completed" in fm.fabric_need([], [], hgx)["reason"]
    in_progress = gt.parse_fabric(read_fixture("nvidia_smi", "059_"))
    assert fm.fabric_need([], [], in_progress)["needed"]
    no_switch = gt.parse_fabric(read_fixture("nvidia_smi", "056_"))
    assert fm.fabric_need([], [], no_switch)["need"] == "none"


def test_hgx_b200_needs_the_fabric_manager_with_nvlsm():
    """8x B200 (HGX, no NVSwitch PCI function: the capture's PROVENANCE says so), named by nvidia-smi -L."""
    b200 = named("fabric", "L_8xB200")
    verdict = fm.fabric_need([], b200)
    assert verdict["need"] == "fabric_manager+nvlsm" and verdict["nvlsm"] and verdict["fabric_manager"]
    assert verdict["reason"].startswith("8 x NVIDIA B200, NVLink 5: an HGX B200/B300/B100 board")
    assert verdict["services"] == ["nvidia-fabricmanager"]  # its unit starts NVLSM: no unit of its own
    # by PCI id alone (lspci: "NVIDIA Corporation Device 2901" in the same capture's lspci -tv)
    assert fm.fabric_need([], [{"pci_id": "10de:2901"}])["need"] == "fabric_manager+nvlsm"
    # a ConnectX bridge whose VPD says SW_MNG is the other sign (NVIDIA's _assert_nvlink5_system)
    assert fm.fabric_need([], [], nvlink5_bridges=["mlx5_0"])["need"] == "fabric_manager+nvlsm"


def test_gb200_trays_need_imex_and_no_fabric_manager():
    gb200 = named("fabric", "nvlink-info_2xGB200")
    verdict = fm.fabric_need([], gb200, machine="aarch64")
    assert verdict["need"] == "imex" and verdict["fabric_manager"] is False and verdict["needed"] is False
    assert verdict["services"] == ["nvidia-imex"] and "no fabric manager here" in verdict["reason"]
    # an unnamed GPU whose Fabric block names a clique (dra-driver#626, a ComputeDomain node)
    clique = gt.parse_fabric(read_fixture("nvidia_smi", "066_"))
    verdict = fm.fabric_need([], [], clique)
    assert verdict["need"] == "imex" and "clique 2 of cluster dc6e40c4-d722-4357-9ba6-5291dd461278" in verdict["reason"]
    # CliqueId 0 with a zero ClusterUUID is a single HGX board, not a clique (055, 067)
    assert fm.fabric_need([], [], gt.parse_fabric(read_fixture("nvidia_smi", "067_")))["need"] == "fabric_manager"


def test_b300_and_gb300_share_their_ids_so_the_name_or_the_cpu_decides():
    assert fm.gpu_board({"pci_id": "10de:31c2"}, "aarch64") == "nvl_tray"
    assert fm.gpu_board({"pci_id": "10de:31c2"}, "x86_64") == "hgx_nvlink5"
    assert fm.gpu_board({"pci_id": "10de:31c2", "name": "NVIDIA GB300"}, "x86_64") == "nvl_tray"
    assert fm.gpu_board({"name": "NVIDIA H100 80GB HBM3"}) is None


def test_cuda_repository_names_per_branch():
    # up to 575 with the branch, from 580 without (the 580 name is only virtual there: corpus host/010)
    assert "provided by:\n nvidia-fabricmanager 580.65.06-1" in read_fixture("corpus/host", "010_")
    assert fm.fabric_packages("fabric_manager", "nvidia", 570) == {
        "pinned": ["nvidia-fabricmanager-570", "libnvidia-nscq-570"], "unpinned": [], "refusal": None}
    assert fm.fabric_packages("fabric_manager", "nvidia", 580)["pinned"] == ["nvidia-fabricmanager", "libnvidia-nscq"]
    assert fm.fabric_packages("fabric_manager", "nvidia", 595)["pinned"] == ["nvidia-fabricmanager", "libnvidia-nscq"]
    nvl5 = fm.fabric_packages("fabric_manager+nvlsm", "nvidia", 580)
    assert nvl5["pinned"] == ["nvidia-fabricmanager", "libnvidia-nscq"]
    assert nvl5["unpinned"] == ["nvlsm", "infiniband-diags", "libibumad3"]
    assert fm.fabric_packages("imex", "nvidia", 570)["pinned"] == ["nvidia-imex-570"]
    assert fm.fabric_packages("imex", "nvidia", 580)["pinned"] == ["nvidia-imex"]
    assert fm.fabric_packages("none", "nvidia", 580) == {"pinned": [], "unpinned": [], "refusal": None}


def test_ubuntu_archive_names_and_what_each_style_refuses():
    assert fm.fabric_packages("fabric_manager", "ubuntu", 580)["pinned"] == ["nvidia-fabricmanager-580",
                                                                             "libnvidia-nscq-580"]
    assert fm.fabric_packages("imex", "ubuntu", 595)["pinned"] == ["nvidia-imex-595"]
    nvl5 = fm.fabric_packages("fabric_manager+nvlsm", "ubuntu", 580)
    assert nvl5["pinned"] == [] and "not NVLSM (package nvlsm)" in nvl5["refusal"]
    assert "nvidia_driver_package_style: nvidia" in nvl5["refusal"]
    for need in ("fabric_manager", "fabric_manager+nvlsm", "imex"):
        refusal = fm.fabric_packages(need, "debian", 580)["refusal"]
        assert refusal.endswith("Fix: nvidia_driver_package_style: nvidia, i.e. NVIDIA's CUDA repository, for the "
                                "driver and the fabric manager together")
    with pytest.raises(ValueError):
        fm.fabric_packages("nvswitch", "nvidia", 580)
