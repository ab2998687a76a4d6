"""gpu_topology: `nvidia-smi topo -m` and the Fabric block of `nvidia-smi -q`.

Inputs are real outputs: the corpus copies in tests/fixtures/nvidia_smi/ (055-067) and
tests/fixtures/fabric/ (sources in its README.md). Expected values were read off the files by eye.
"""
import pytest

from gpu import gpu_topology as gt
from conftest import read_fixture
from gpu.nvsmi_common import ParseError, TruncatedInput


H200 = read_fixture("nvidia_smi", "062_")
B200 = read_fixture("fabric", "topo-m_8xB200")
A100 = read_fixture("fabric", "topo-m_8xA100")
ADA = read_fixture("fabric", "topo-m_4xRTX6000Ada")


def test_hgx_h200_all_nv18_with_nics_and_affinity():
    topo = gt.parse_topo_matrix(H200)
    assert topo["gpus"] == ["GPU%d" % i for i in range(8)]
    assert topo["devices"][8:] == ["NIC%d" % i for i in range(10)]
    assert gt.link(topo, 0, 7) == "NV18" and gt.link(topo, "GPU3", "NIC0") == "PIX"
    assert topo["cpu_affinity"]["GPU0"] == "0-63,128-191"
    assert topo["numa_affinity"]["GPU4"] == "1"
    assert topo["gpu_numa_id"]["GPU7"] == "N/A"
    assert gt.nvlink_groups(topo, 4) == [["GPU0", "GPU1", "GPU2", "GPU3"], ["GPU4", "GPU5", "GPU6", "GPU7"]]
    check = gt.check_tensor_parallel(topo, range(8))
    assert check["all_nvlink"] and check["slowest_link"] == "NV18" and check["message"] is None
    # NVLink through NVSwitch spans both NUMA nodes: crossing them is a CPU-side fact, not a slow link
    assert check["numa_nodes"] == ["0", "1"]


def test_hgx_b200_tabs_without_nics():
    topo = gt.parse_topo_matrix(B200)
    assert topo["devices"] == topo["gpus"] and len(topo["gpus"]) == 8
    assert {gt.link(topo, 0, b) for b in range(1, 8)} == {"NV18"}
    assert topo["cpu_affinity"]["GPU4"] == "48-95,144-191"


def test_hgx_a100_nv12_old_layout_with_an_hca_column_and_no_gpu_numa_id():
    topo = gt.parse_topo_matrix(A100)
    assert topo["devices"][-1] == "mlx5_0"
    assert gt.nvlink_count(gt.link(topo, 2, 3)) == 12
    assert topo["numa_affinity"] == {"GPU0": "3", "GPU1": "3", "GPU2": "1", "GPU3": "1", "GPU4": "7",
                                     "GPU5": "7", "GPU6": "5", "GPU7": "5"}
    assert topo["gpu_numa_id"] == {}
    assert gt.nvlink_groups(topo, 8) == [topo["gpus"]]


def test_pcie_box_names_the_slowest_path_for_tensor_parallelism():
    topo = gt.parse_topo_matrix(ADA)
    assert gt.link(topo, 0, 1) == "NODE" and gt.link(topo, 1, 2) == "SYS"
    pair = gt.check_tensor_parallel(topo, [0, 1])
    assert pair["slowest_link"] == "NODE" and not pair["crosses_numa"] and not pair["all_nvlink"]
    assert "crosses NODE (PCIe)" in pair["message"]
    four = gt.check_tensor_parallel(topo, [0, 1, 2, 3])
    assert four["slowest_link"] == "SYS" and four["crosses_numa"]
    assert "SMP interconnect between NUMA nodes" in four["message"]
    assert gt.nvlink_groups(topo, 2) == []


@pytest.mark.parametrize("prefix, gpus, cell", [("063_", 8, "SYS"), ("064_", 2, "PHB")])
def test_consumer_pcie_boxes(prefix, gpus, cell):
    topo = gt.parse_topo_matrix(read_fixture("nvidia_smi", prefix))
    assert len(topo["gpus"]) == gpus
    assert gt.link(topo, 0, 1) == cell
    assert gt.check_tensor_parallel(topo, range(gpus))["slowest_link"] == cell


def test_one_gpu_vm_with_an_ansi_underlined_header():
    topo = gt.parse_topo_matrix(read_fixture("nvidia_smi", "058_"))
    assert topo["gpus"] == ["GPU0"] and topo["cpu_affinity"] == {"GPU0": "0-19"}
    check = gt.check_tensor_parallel(topo, [0])
    assert check["slowest_link"] is None and check["message"] is None


def test_cut_or_foreign_text_is_refused():
    with pytest.raises(ParseError):
        gt.parse_topo_matrix(read_fixture("nvidia_smi", "055_"))
    rows = H200.split("\n")
    cut = "\n".join(rows[:5] + [rows[5][:20]])
    with pytest.raises(TruncatedInput):
        gt.parse_topo_matrix(cut)
    with pytest.raises(ParseError):
        gt.check_tensor_parallel(gt.parse_topo_matrix(B200), [8])


def test_fabric_of_an_hgx_h100_is_ready_on_every_gpu():
    fabrics = gt.parse_fabric(read_fixture("nvidia_smi", "055_"))
    assert len(fabrics) == 8
    assert fabrics[0] == {"pci_bus_id": fabrics[0]["pci_bus_id"], "state": "Completed", "status": "Success",
                          "clique_id": "0", "cluster_uuid": "00000000-0000-0000-0000-000000000000",
                          "health_summary": None, "health": {"Bandwidth": "N/A"}}
    assert fabrics[1]["pci_bus_id"] == "00000000:2A:00.0"
    verdict = gt.fabric_verdict(fabrics)
    assert verdict["state"] == "ready" and len(verdict["gpus"]) == 8 and verdict["fix"] is None


def test_fabric_na_on_a_board_without_nvswitch():
    fabrics = gt.parse_fabric(read_fixture("nvidia_smi", "056_"))
    assert len(fabrics) == 4 and {f["state"] for f in fabrics} == {"N/A"}
    assert gt.fabric_verdict(fabrics)["state"] == "not_applicable"
    # a driver or excerpt without any Fabric block says nothing either way
    assert gt.fabric_verdict([])["state"] == "unknown"


def test_fabric_in_progress_means_802_until_the_fabric_manager_is_done():
    before = gt.parse_fabric(read_fixture("nvidia_smi", "059_"))
    assert before == [{"pci_bus_id": None, "state": "In Progress", "status": "N/A", "clique_id": None,
                       "cluster_uuid": None, "health_summary": None, "health": {}}]
    verdict = gt.fabric_verdict(before)
    assert verdict["state"] == "not_ready" and "802" in verdict["message"]
    assert "nvidia-fabricmanager" in verdict["fix"]
    assert gt.fabric_verdict(gt.parse_fabric(read_fixture("nvidia_smi", "060_")))["state"] == "ready"


def test_fabric_completed_without_success_or_unhealthy():
    failed = gt.parse_fabric(read_fixture("nvidia_smi", "067_"))
    assert failed[0]["status"] == "Insufficient Resources"
    verdict = gt.fabric_verdict(failed)
    assert verdict["state"] == "failed" and "Insufficient Resources" in verdict["message"]
    unhealthy = gt.parse_fabric(read_fixture("nvidia_smi", "066_"))
    assert unhealthy[0]["clique_id"] == "2" and unhealthy[0]["health"]["Bandwidth"] == "Full"
    assert gt.fabric_verdict(unhealthy)["state"] == "unhealthy"


def test_fabric_590_health_summary_na_is_ready():
    fabrics = gt.parse_fabric(read_fixture("nvidia_smi", "057_"))
    assert len(fabrics) == 1 and fabrics[0]["health_summary"] == "N/A"
    assert gt.fabric_verdict(fabrics)["state"] == "ready"


@pytest.mark.parametrize("prefix, gpus, health", [("022_", 1, False), ("039_", 1, False), ("043_", 1, True)])
def test_fabric_from_xml_is_na_on_hosts_without_nvswitch(prefix, gpus, health):
    fabrics = gt.parse_fabric_xml(read_fixture("nvidia_smi", prefix))
    assert len(fabrics) == gpus
    assert {(f["state"], f["status"]) for f in fabrics} == {("N/A", "N/A")}
    assert fabrics[0]["pci_bus_id"].startswith("0000")
    assert (fabrics[0]["health_summary"] == "N/A") is health
    assert gt.fabric_verdict(fabrics)["state"] == "not_applicable"
