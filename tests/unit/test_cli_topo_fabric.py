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


@pytest.mark.parametrize("prefix, verdict, needed, rc", [
    ("055_", "ready", True, 0),
    ("059_", "not_ready", True, 1),
    ("056_", "not_applicable", False, 0),
    ("043_", "not_applicable", False, 0),   # -q -x of a single RTX PRO 6000
    ("067_", "failed", True, 1),
    ("066_", "unhealthy", True, 1),
])
def test_fabric_verdicts(prefix, verdict, needed, rc):
    proc = gpuhost("fabric", "--json", fixture_path("nvidia_smi", prefix))
    assert proc.returncode == rc, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["verdict"] == verdict and out["needs_fabric_manager"] is needed


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
