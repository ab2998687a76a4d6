"""The simulated `nvidia-smi topo -m`, read back by the product's parser (gpu_topology) and compared with the
real captures' layout (tests/fixtures/nvidia_smi/062 8x H200 NV18, 064 2x RTX 5090)."""
from gpu import gpu_topology
from simhelpers import corpus, make_state, run_smi


def test_hgx_board_is_nv18_everywhere_like_the_real_h200_board(tmp_path):
    path = tmp_path / "state.json"
    make_state(path, models=["h100"] * 8, nvswitches=[{"pci_bus_id": "00000000:BD:00.0"}])
    out, rc = run_smi(path, "topo", "-m")
    assert rc == 0
    mine = gpu_topology.parse_topo_matrix(out)
    real = gpu_topology.parse_topo_matrix(corpus("062_topo-m_8xH200_NV18_10xNIC-mlx5.txt"))
    assert mine["gpus"] == real["gpus"]
    assert [mine["links"][a][b] for a in mine["gpus"] for b in mine["gpus"]] == \
        [real["links"][a][b] for a in real["gpus"] for b in real["gpus"]]
    assert mine["numa_affinity"]["GPU0"] == "0" and mine["gpu_numa_id"]["GPU0"] == "N/A"


def test_pcie_box_and_the_legend_of_the_real_output(tmp_path):
    path = tmp_path / "state.json"
    make_state(path)
    out, rc = run_smi(path, "topo", "-m")
    real = corpus("064_topo-m_2xRTX5090_pcie-PHB.txt")
    assert rc == 0 and out.splitlines()[-8:] == real.splitlines()[-8:]
    header = out.splitlines()[0]
    assert header == "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    assert out.splitlines()[1].endswith("\t0\t\tN/A")


def test_two_sockets_without_nvswitch_cross_sys(tmp_path):
    path = tmp_path / "state.json"
    s = make_state(path, models=["h100", "h100"])
    s["gpus"][1]["pci_bus_id"] = "00000000:9A:00.0"
    import gpusim.state as st
    st.save(s, str(path))
    topo = gpu_topology.parse_topo_matrix(run_smi(path, "topo", "-m")[0])
    assert topo["links"]["GPU0"]["GPU1"] == "SYS" and topo["numa_affinity"] == {"GPU0": "0", "GPU1": "1"}


def test_other_topo_options_are_refused(tmp_path):
    path = tmp_path / "state.json"
    make_state(path)
    out, rc = run_smi(path, "topo", "-p2p", "r")
    assert rc != 0 and out == run_smi(path, "--bogus")[0]
