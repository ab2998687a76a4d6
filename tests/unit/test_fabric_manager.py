"""fabric_manager: whether a host needs the fabric manager.

Inputs are real outputs (tests/fixtures/host/, tests/fixtures/nvidia_smi/ 055/056/059); the NVSwitch PCI
id is the one docs/research/hgx-fabric-manager.md read in real lspci captures.
"""
import pytest

from driver import fabric_manager as fm
from gpu import gpu_topology as gt
from conftest import read_fixture
from gpu.host_parse import parse_lspci


@pytest.mark.parametrize("capture", ["lspci-n_A100_gcp.txt", "lspci-nn-D_GH200.txt",
                                     "lspci-nn-D_4xRTXPRO6000-server_rocky10.txt"])
def test_no_nvswitch_on_these_buses(capture):
    verdict = fm.needs_fabric_manager(parse_lspci(read_fixture("host", capture)))
    assert verdict["needed"] is False and verdict["nvswitches"] == []


def test_an_nvswitch_on_the_bus_needs_it():
    # The H100 NVSwitch's id as lspci -nn prints it on HGX H100 boards (research doc Q5).
    switch = {"pci_address": "0000:bd:00.0", "pci_id": "10de:22a3"}
    verdict = fm.needs_fabric_manager([switch])
    assert verdict["needed"] and verdict["nvswitches"] == ["0000:bd:00.0"]
    assert "NVSwitch gen3" in verdict["reason"]


def test_the_gpus_fabric_state_decides_where_no_switch_is_on_the_bus():
    hgx = gt.parse_fabric(read_fixture("nvidia_smi", "055_"))
    assert fm.needs_fabric_manager([], hgx)["needed"]
    assert "Completed" in fm.needs_fabric_manager([], hgx)["reason"]
    in_progress = gt.parse_fabric(read_fixture("nvidia_smi", "059_"))
    assert fm.needs_fabric_manager([], in_progress)["needed"]
    no_switch = gt.parse_fabric(read_fixture("nvidia_smi", "056_"))
    assert fm.needs_fabric_manager([], no_switch)["needed"] is False
