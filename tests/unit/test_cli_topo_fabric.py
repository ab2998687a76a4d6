"""`gpuhost topo` and `gpuhost fabric` through the real entry point, on real captures
(tests/fixtures/nvidia_smi 043/055/056/059/062/063, tests/fixtures/fabric)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT, fixture_path

GPUHOST = os.path.join(ROOT, "bin", "gpuhost")


def gpuhost(*args, stdin=None):
    return subprocess.run([sys.executable, GPUHOST] + list(args), capture_output=True, text=True, input=stdin,
                          timeout=60)


def test_topo_places_tensor_parallel_groups_on_nvlink():
    proc = gpuhost("topo", "--json", "--tp", "4", fixture_path("nvidia_smi", "062_"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["all_nvlink"] is True
    assert out["tp"]["nvlink_groups"] == [["GPU0", "GPU1", "GPU2", "GPU3"], ["GPU4", "GPU5", "GPU6", "GPU7"]]
    assert out["gpus"][4]["numa_affinity"] == "1"


def test_topo_on_a_pcie_box_names_the_slow_link_and_exits_1():
    proc = gpuhost("topo", "--tp", "8", fixture_path("nvidia_smi", "063_"))
    assert proc.returncode == 1
    assert "no 8 GPUs are all on NVLink" in proc.stdout and "crosses SYS" in proc.stdout
    assert "every GPU pair on NVLink: no" in proc.stdout


def test_topo_reads_stdin_and_refuses_what_is_not_a_matrix():
    with open(fixture_path("fabric", "topo-m_8xA100"), encoding="utf-8") as fh:
        proc = gpuhost("topo", "-", stdin=fh.read())
    assert proc.returncode == 0 and "GPU7" in proc.stdout and "every GPU pair on NVLink: yes" in proc.stdout
    bad = gpuhost("topo", "--json", fixture_path("nvidia_smi", "055_"))
    assert bad.returncode == 2 and json.loads(bad.stdout)["error"].startswith("gpuhost topo: no `nvidia-smi topo -m`")
    assert gpuhost("topo", "--tp", "0", fixture_path("nvidia_smi", "062_")).returncode == 2


@pytest.mark.parametrize("prefix, verdict, need, rc", [
    ("055_", "ready", "fabric_manager", 0),
    ("059_", "not_ready", "fabric_manager", 1),
    ("056_", "not_applicable", "none", 0),
    ("043_", "not_applicable", "none", 0),   # -q -x of a single RTX PRO 6000
    ("067_", "failed", "fabric_manager", 1),
    ("066_", "unhealthy", "imex", 1),        # CliqueId 2 with a ClusterUUID: a multi-node NVLink tray
])
def test_fabric_verdicts(prefix, verdict, need, rc):
    proc = gpuhost("fabric", "--json", fixture_path("nvidia_smi", prefix))
    assert proc.returncode == rc, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["verdict"] == verdict and out["need"] == need
    assert out["needs_fabric_manager"] is need.startswith("fabric_manager")


def test_fabric_names_the_packages_at_the_drivers_version():
    # 055: a whole -q of 8x H100 SXM at 565.57.01: the fabric manager's packages in each style
    out = json.loads(gpuhost("fabric", "--json", fixture_path("nvidia_smi", "055_")).stdout)
    assert out["driver_version"] == "565.57.01" and out["services"] == ["nvidia-fabricmanager"]
    assert out["packages"]["NVIDIA's CUDA repository"] == ["nvidia-fabricmanager-565=565.57.01-*",
                                                           "libnvidia-nscq-565=565.57.01-*"]
    assert out["packages"]["Debian's archive"].endswith("for the driver and the fabric manager together")


def test_fabric_of_an_hgx_b200_and_a_gb200_tray_from_the_gpus_names():
    """The GPUs' names from --gpus: 8x B200 (`nvidia-smi -L`) and 2x GB200 (`nvidia-smi nvlink -info`)."""
    b200 = gpuhost("fabric", "--gpus", fixture_path("fabric", "L_8xB200"), fixture_path("nvidia_smi", "059_"))
    assert "needs: fabric_manager+nvlsm (8 x NVIDIA B200, NVLink 5" in b200.stdout
    assert "service: nvidia-fabricmanager" in b200.stdout and "modprobe ib_umad" in b200.stdout
    tray = json.loads(gpuhost("fabric", "--json", "--gpus", fixture_path("fabric", "nvlink-info_2xGB200"),
                              fixture_path("nvidia_smi", "059_")).stdout)
    assert tray["need"] == "imex" and tray["services"] == ["nvidia-imex"] and tray["needs_fabric_manager"] is False
    assert tray["fix"].startswith("this host runs no fabric manager (a GB200/GB300 compute tray)")


def test_fabric_text_names_the_fix_and_missing_blocks_say_unknown():
    proc = gpuhost("fabric", fixture_path("nvidia_smi", "059_"))
    assert "fabric: not_ready" in proc.stdout and "fix: start nvidia-fabricmanager" in proc.stdout
    older = gpuhost("fabric", "--json", fixture_path("nvidia_smi", "041_"))  # 515.105.01 A10G -q -x: no <fabric>
    assert older.returncode == 1 and json.loads(older.stdout)["verdict"] == "unknown"


def test_fabric_with_the_hosts_lspci():
    # an A100 host on GCP: no NVSwitch on its bus; 056's 4-GPU A100 board reports State N/A
    proc = gpuhost("fabric", "--json", "--lspci", os.path.join(FIXTURES, "host", "lspci-n_A100_gcp.txt"),
                   fixture_path("nvidia_smi", "056_"))
    assert proc.returncode == 0 and json.loads(proc.stdout)["needs_fabric_manager"] is False
