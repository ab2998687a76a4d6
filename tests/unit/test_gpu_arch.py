"""The architecture table: ids and names from NVIDIA's compute capability page and pci.ids."""
import pytest

from gpu.gpu_arch import datacenter_class, lookup, normalise_device_id


@pytest.mark.parametrize("device_id, family, arch, cc, branch, open_required", [
    ("0x2BB1", "RTX PRO 6000 Blackwell Workstation Edition", "Blackwell", "12.0", 570, True),
    ("0x2BB4", "RTX PRO 6000 Blackwell Max-Q Workstation Edition", "Blackwell", "12.0", 570, True),
    ("0x2BB5", "RTX PRO 6000 Blackwell Server Edition", "Blackwell", "12.0", 570, True),
    ("0x2901", "B200 / B100", "Blackwell", "10.0", 570, True),
    ("0x2941", "GB200", "Blackwell", "10.0", 570, True),
    ("0x2e12", "GB10 (DGX Spark)", "Blackwell", "12.1", 580, True),
    ("0x2342", "GH200", "Hopper", "9.0", 535, True),
    ("0x2335", "H200", "Hopper", "9.0", 535, False),
    ("0x2330", "H100 / H800 / H20", "Hopper", "9.0", 520, False),
    ("0x27B8", "L4 / L40 / L40S", "Ada Lovelace", "8.9", 520, False),
    ("0x26B9", "L4 / L40 / L40S", "Ada Lovelace", "8.9", 520, False),
    ("0x2684", "RTX Ada / GeForce RTX 40 series", "Ada Lovelace", "8.9", 520, False),
    ("0x20B0", "A100 / A30", "Ampere", "8.0", 450, False),
    ("0x20B7", "A100 / A30", "Ampere", "8.0", 450, False),
    ("0x2237", "A10 / A10G / A40 / A16 / A2", "Ampere", "8.6", 455, False),
    ("0x1EB8", "T4 / T4G", "Turing", "7.5", 410, False),
    ("0x1DB1", "V100 / TITAN V", "Volta", "7.0", 384, False),
    ("0x15F8", "P100", "Pascal", "6.0", 367, False),
])
def test_lookup_by_device_id(device_id, family, arch, cc, branch, open_required):
    entry = lookup(pci_device_id=device_id)
    assert (entry["family"], entry["architecture"], entry["compute_capability"]) == (family, arch, cc)
    assert entry["min_driver_branch"] == branch
    assert entry["open_kernel_modules_required"] is open_required
    assert entry["matched_by"] == "pci_device_id"


@pytest.mark.parametrize("name, cc", [
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0"),
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "12.0"),
    ("NVIDIA GeForce RTX 5090", "12.0"),
    ("NVIDIA B200", "10.0"), ("NVIDIA GB200", "10.0"), ("NVIDIA B300", "10.3"), ("NVIDIA GB10", "12.1"),
    ("NVIDIA GH200 480GB", "9.0"), ("NVIDIA H200", "9.0"), ("NVIDIA H100 80GB HBM3", "9.0"),
    ("NVIDIA H100 PCIe", "9.0"), ("NVIDIA L4", "8.9"), ("NVIDIA L40", "8.9"), ("NVIDIA L40S", "8.9"),
    ("NVIDIA GeForce RTX 4090", "8.9"), ("NVIDIA GeForce RTX 4080 ...", "8.9"),
    ("NVIDIA RTX 6000 Ada Generation", "8.9"),
    ("NVIDIA A100-SXM4-40GB", "8.0"), ("A100-PCIE-40GB", "8.0"), ("NVIDIA A30", "8.0"),
    ("NVIDIA A10", "8.6"), ("NVIDIA A10G", "8.6"), ("NVIDIA A40", "8.6"),
    ("NVIDIA GeForce RTX 3060 Laptop GPU", "8.6"), ("NVIDIA RTX A6000", "8.6"),
    ("Tesla T4", "7.5"), ("NVIDIA T4G", "7.5"), ("NVIDIA GeForce RTX 2080 SUPER", "7.5"),
    ("Quadro RTX 6000", "7.5"), ("Tesla V100-SXM2-16GB", "7.0"), ("Tesla P100-PCIE-16GB", "6.0"),
    ("GRID P4-1Q", "6.1"), ("GeForce GTX 108...", "6.1"), ("GeForce GTX 1070 Ti", "6.1"),
    ("GRID K520", "3.0"),
])
def test_lookup_by_name(name, cc):
    entry = lookup(name=name)
    assert entry is not None, name
    assert entry["compute_capability"] == cc


def test_device_id_wins_over_name_and_masked_ids_fall_back_to_the_name():
    # 043's card: id says Max-Q even if the name were generic
    assert lookup("2BB410DE", "NVIDIA RTX PRO 6000")["family"].endswith("Max-Q Workstation Edition")
    # 041's capture masks the id as 000000DE
    entry = lookup("000000DE", "NVIDIA A10G")
    assert entry["matched_by"] == "name" and entry["compute_capability"] == "8.6"


def test_blackwell_workstation_and_datacenter_capabilities_differ():
    # sm_120 kernels are not sm_100 kernels (domain notes, section 3)
    assert lookup("0x2bb5")["compute_capability"] != lookup("0x2901")["compute_capability"]


def test_unknown_returns_none():
    assert lookup() is None
    assert lookup("0xffff") is None
    assert lookup(name="Radeon RX 7900") is None
    assert lookup(pci_device_id=12345) is None


def test_pre_turing_cannot_use_open_modules():
    assert lookup("0x1db1")["open_kernel_modules_supported"] is False
    assert lookup("0x1eb8")["open_kernel_modules_supported"] is True


@pytest.mark.parametrize("raw, dev", [
    ("0x2330", "2330"), ("2330", "2330"), ("0x233010DE", "2330"), ("233010DE", "2330"),
    ("10de:2bb5", "2bb5"), ("8086:1237", None), ("000000DE", None), ("xyz", None), ("", None),
])
def test_normalise_device_id(raw, dev):
    assert normalise_device_id(raw) == dev


def test_lookup_returns_a_fresh_dict():
    first = lookup("0x2330")
    first["compute_capability"] = "0.0"
    assert lookup("0x2330")["compute_capability"] == "9.0"


# Datacenter class (CUDA forward compatibility runs only on datacenter GPUs): NVIDIA's compute capability pages
# list each GPU under "Data Center" or "Workstation/Consumer"; nvidia-smi's Product Brand as the captures print it.
@pytest.mark.parametrize("device_id, name, brand, datacenter", [
    ("268410DE", "NVIDIA GeForce RTX 4090", "GeForce", False),            # nvidia_smi/022
    (None, "NVIDIA GeForce RTX 2080 SUPER", "GeForce", False),            # nvidia_smi/016
    (None, "GeForce GTX 1070 Ti", None, False),                           # nvidia_smi/044: no brand element
    (None, "NVIDIA GeForce RTX 5090", None, False),
    (None, "NVIDIA TITAN V", None, False),                                # Volta row, consumer name
    (None, "NVIDIA TITAN RTX", "Titan", False),
    ("20B210DE", "NVIDIA A100-SXM4-80GB", "NVIDIA", True),                # nvidia_smi/039
    ("000000DE", "NVIDIA A10G", "NVIDIA", True),                          # nvidia_smi/041: masked id, by name
    ("233010DE", "NVIDIA H100 80GB HBM3", "NVIDIA", True),
    (None, "NVIDIA L40S", None, True),
    (None, "NVIDIA GB10", None, True),                                    # "Data Center" column, 12.1
    ("15F810DE", "Tesla P100-PCIE-16GB", "Tesla", True),                  # nvidia_smi/023
    (None, "Tesla V100-SXM2-16GB", None, True),
    (None, "GRID P4-1Q", "NVIDIA RTX Virtual Workstation", True),         # nvidia_smi/045: a vGPU of a P4
    ("0x2bb5", "NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA RTX", True),
    ("2BB410DE", "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "NVIDIA RTX", None),  # 043
    (None, "NVIDIA RTX 6000 Ada Generation", "NVIDIA RTX", None),
    (None, "NVIDIA RTX A6000", "NVIDIA RTX", None),
    (None, "Quadro RTX 6000", "Quadro", None),
    (None, "Quadro GV100", None, None),                                   # Volta row, workstation name
    (None, "Quadro GP100", None, None),                                   # P100 row, workstation name
    (None, "Radeon RX 7900", None, None),
    (None, None, None, None),
])
def test_datacenter_class(device_id, name, brand, datacenter):
    assert datacenter_class(device_id, name, brand) is datacenter


def test_lookup_reports_the_datacenter_flag():
    assert lookup("0x2330")["datacenter"] is True
    assert lookup("0x2684")["datacenter"] is None      # the RTX Ada / GeForce RTX 40 row mixes both
