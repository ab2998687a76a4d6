# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVIDIA GPU architecture table: PCI device id / product name -> architecture facts.

Pure stdlib, no Ansible imports (runs inside AnsiballZ and as a plain module).

Sources (checked while writing this table):
- Compute capability: NVIDIA "CUDA GPU Compute Capability" (https://developer.nvidia.com/cuda-gpus)
  and "Legacy CUDA GPU Compute Capability" (https://developer.nvidia.com/cuda-legacy-gpus):
  12.1 GB10 (DGX Spark); 12.0 RTX PRO 6000 Blackwell Server/Workstation/Max-Q, RTX 50xx;
  10.3 B300/GB300; 10.0 B200/GB200; 9.0 H100/H200/GH200; 8.9 L4/L40/L40S/RTX 40xx/RTX Ada;
  8.6 A40/A10/A16/A2/RTX A-series/RTX 30xx; 8.0 A100/A30; 7.5 T4/RTX 20xx/Quadro RTX;
  7.0 V100; 6.1 P4/P40/GTX 10xx; 6.0 P100; 5.2 M60/M40/GTX 9xx; 3.7 K80; 3.0 K520/K10.
- PCI device ids: the PCI ID database (https://pci-ids.ucw.cz), as quoted in real `lspci -nn`
  outputs (e.g. "GB202GL [RTX PRO 6000 Blackwell Server Edition] [10de:2bb5]",
  "GB202GL [RTX PRO 6000 Blackwell Workstation Edition] [10de:2bb1]", "GH100 [GH200 480GB]
  [10de:2342]", GB10 "[10de:2e12]") and the open-gpu-kernel-modules README "Compatible GPUs"
  table. Ids also confirmed by this repo's fixtures: 0x2330 (003/004 H100 80GB HBM3), 0x20B0
  (019 A100-SXM4-40GB), 0x20B2 (039 A100-SXM4-80GB), 0x2684 (022/033 RTX 4090), 0x15F8 (023
  P100-PCIE-16GB), 0x1E87 (020 RTX 2080), 0x1E81 (016 RTX 2080 SUPER), 0x2520 (021 RTX 3060
  Laptop), 0x1BB3 (045 Tesla P4 / GRID P4), 0x2BB4 (043 RTX PRO 6000 Blackwell Max-Q).
- Open kernel modules: NVIDIA's "Transitions Fully Towards Open-Source GPU Kernel Modules"
  (R560) and the open-gpu-kernel-modules README: Grace Hopper and Blackwell *must* use the open
  modules (proprietary unsupported; the kernel logs "requires use of the NVIDIA open kernel
  modules"); Turing..Hopper may use either (open recommended); Maxwell/Pascal/Volta cannot
  use them (no GSP).
- min_driver_branch: the first driver branch whose CUDA release added the compute
  capability (CUDA toolkit release notes, "CUDA Toolkit and Corresponding Driver Versions",
  whole table: cuda_requirement.CUDA_MIN_DRIVER): CUDA 12.9 >= 575.51, 12.8 >= 570.26,
  11.8 >= 520.61.05, 11.1 >= 455.23, 11.0 >= 450.36,
  10.0 >= 410.48, 9.0 >= 384.81, 8.0 >= 367.48, 7.5 >= 352.31, 6.5 >= 340.29), raised where a
  product needs more: GH200 >= 535 (open), H200 535 (shipped with R535; not re-verified
  here), GB10 580 (DGX OS 7 ships R580). The domain notes say "Blackwell needs >= 570".
  NOTE: Google COS once required the 575 new-feature branch for RTX PRO 6000; that is a
  platform policy, not a driver limit, so the table keeps 570.
- max_driver_branch: the last branch that drives the GPU (None: still supported). NVIDIA's Unix graphics
  feature deprecation schedule: "The release 580 series will be the last to support GPUs based on the Maxwell,
  Pascal, and Volta architectures" (590 release notes: removed); branch 470 was the last for Kepler.
- datacenter (datacenter_class): the "Data Center" column of NVIDIA's compute capability pages above (H100,
  L4, A10, T4, V100, P4, M60, K80, GB10, RTX PRO 6000 Blackwell Server Edition, ...) against their
  "Workstation/Consumer" column (GeForce, TITAN, RTX Ada, RTX A-series, Quadro). It decides CUDA forward
  compatibility: "Forward Compatibility is applicable only for systems with NVIDIA Data Center GPUs, select
  NGC Server Ready SKUs of RTX cards, Jetson boards" (CUDA Compatibility guide, Forward Compatibility); on
  other GPUs CUDA fails with error 804. A row is flagged datacenter=True only where every id and name it
  matches is a datacenter part once GeForce/TITAN (consumer) and Quadro (workstation) names are set aside.
"""
import re

# One row per product family. device_ids are lower-case 4-hex-digit PCI device ids
# (vendor 10de implied). name_patterns are regexes matched case-insensitively against
# the nvidia-smi / NVML product name (or the lspci bracket name).
_ROWS = (
    # --- Blackwell (open kernel modules required) ---
    dict(family="RTX PRO 6000 Blackwell Workstation Edition", architecture="Blackwell",
         compute_capability="12.0", min_driver_branch=570, open_kernel_modules_required=True,
         device_ids=("2bb1",), name_patterns=(r"RTX PRO 6000 Blackwell Workstation",)),
    dict(family="RTX PRO 6000 Blackwell Max-Q Workstation Edition", architecture="Blackwell",
         compute_capability="12.0", min_driver_branch=570, open_kernel_modules_required=True,
         device_ids=("2bb4",), name_patterns=(r"RTX PRO 6000 Blackwell Max-Q",)),
    dict(family="RTX PRO 6000 Blackwell Server Edition", datacenter=True, architecture="Blackwell",
         compute_capability="12.0", min_driver_branch=570, open_kernel_modules_required=True,
         device_ids=("2bb5",), name_patterns=(r"RTX PRO 6000 Blackwell Server", r"RTX PRO 6000 Blackwell DC")),
    dict(family="RTX PRO Blackwell", architecture="Blackwell",
         compute_capability="12.0", min_driver_branch=570, open_kernel_modules_required=True,
         # The RTX PRO brand started with Blackwell; the bare pattern also catches the table's
         # truncated "NVIDIA RTX PRO 6000 Blac...".
         device_ids=(), name_patterns=(r"RTX PRO \d{4}\b.*Blackwell", r"\bRTX PRO \d{4}\b")),
    dict(family="GeForce RTX 50 series", architecture="Blackwell",
         compute_capability="12.0", min_driver_branch=570, open_kernel_modules_required=True,
         device_ids=(), name_patterns=(r"GeForce RTX 50\d0",)),
    dict(family="GB10 (DGX Spark)", datacenter=True, architecture="Blackwell",
         compute_capability="12.1", min_driver_branch=580, open_kernel_modules_required=True,
         device_ids=("2e12",), name_patterns=(r"\bGB10\b", r"DGX Spark")),
    dict(family="B300 / GB300", datacenter=True, architecture="Blackwell",
         compute_capability="10.3", min_driver_branch=575, open_kernel_modules_required=True,
         device_ids=("31c2", "31c3"), name_patterns=(r"\bG?B300\b",)),
    dict(family="GB200", datacenter=True, architecture="Blackwell",
         compute_capability="10.0", min_driver_branch=570, open_kernel_modules_required=True,
         device_ids=("2941",), name_patterns=(r"\bGB200\b",)),
    dict(family="B200 / B100", datacenter=True, architecture="Blackwell",
         compute_capability="10.0", min_driver_branch=570, open_kernel_modules_required=True,
         device_ids=("2901", "29bc"), name_patterns=(r"\bB[12]00\b",)),
    # --- Hopper ---
    dict(family="GH200", datacenter=True, architecture="Hopper",
         compute_capability="9.0", min_driver_branch=535, open_kernel_modules_required=True,
         device_ids=("2342",), name_patterns=(r"\bGH200\b",)),
    dict(family="H200", datacenter=True, architecture="Hopper",
         compute_capability="9.0", min_driver_branch=535, open_kernel_modules_required=False,
         device_ids=("2335", "233b"), name_patterns=(r"\bH200\b",)),
    dict(family="H100 / H800 / H20", datacenter=True, architecture="Hopper",
         compute_capability="9.0", min_driver_branch=520, open_kernel_modules_required=False,
         device_ids=("2330", "2331", "2321", "2322", "2324", "2329"),
         name_patterns=(r"\bH100\b", r"\bH800\b", r"\bH20\b")),
    # --- Ada Lovelace ---
    dict(family="L4 / L40 / L40S", datacenter=True, architecture="Ada Lovelace",
         compute_capability="8.9", min_driver_branch=520, open_kernel_modules_required=False,
         device_ids=("27b8", "26b5", "26b9"), name_patterns=(r"\bL40S?\b", r"\bL4\b")),
    dict(family="RTX Ada / GeForce RTX 40 series", architecture="Ada Lovelace",
         compute_capability="8.9", min_driver_branch=520, open_kernel_modules_required=False,
         device_ids=("2684", "26b1"),
         name_patterns=(r"GeForce RTX 40\d0", r"RTX \d{4}\b.*Ada")),
    # --- Ampere ---
    dict(family="A100 / A30", datacenter=True, architecture="Ampere",
         compute_capability="8.0", min_driver_branch=450, open_kernel_modules_required=False,
         device_ids=("20b0", "20b1", "20b2", "20b5", "20b7", "20b8", "20f1"),
         name_patterns=(r"\bA100\b", r"\bA800\b", r"\bA30\b")),
    dict(family="A10 / A10G / A40 / A16 / A2", datacenter=True, architecture="Ampere",
         compute_capability="8.6", min_driver_branch=455, open_kernel_modules_required=False,
         device_ids=("2236", "2237", "2235", "25b6", "25b9"),
         name_patterns=(r"\bA10G?\b", r"\bA40\b", r"\bA16\b", r"\bA2\b")),
    dict(family="RTX A-series / GeForce RTX 30 series", architecture="Ampere",
         compute_capability="8.6", min_driver_branch=455, open_kernel_modules_required=False,
         device_ids=("2230", "2231", "2204", "2206", "2520"),
         name_patterns=(r"GeForce RTX 30\d0", r"\bRTX A\d{4}\b")),
    # --- Turing ---
    dict(family="T4 / T4G", datacenter=True, architecture="Turing",
         compute_capability="7.5", min_driver_branch=410, open_kernel_modules_required=False,
         device_ids=("1eb8",), name_patterns=(r"\bT4G?\b",)),
    dict(family="Quadro RTX / TITAN RTX / GeForce RTX 20 series / GTX 16 series", architecture="Turing",
         compute_capability="7.5", min_driver_branch=410, open_kernel_modules_required=False,
         device_ids=("1e02", "1e04", "1e07", "1e30", "1e36", "1e81", "1e82", "1e84", "1e87",
                     "1e89", "1eb0", "1eb1", "1f02", "1f08"),
         name_patterns=(r"GeForce RTX 20\d0", r"Quadro RTX", r"TITAN RTX", r"GeForce GTX 16\d0",
                        r"\bT[46]00\b", r"\bT1000\b")),
    # --- Volta (no GSP: open modules unsupported) ---
    dict(family="V100 / TITAN V", datacenter=True, architecture="Volta",
         compute_capability="7.0", min_driver_branch=384, max_driver_branch=580, open_kernel_modules_required=False,
         open_kernel_modules_supported=False,
         device_ids=("1db1", "1db4", "1db5", "1db6", "1db8"),
         name_patterns=(r"\bV100\b", r"TITAN V\b", r"Quadro GV100")),
    # --- Pascal ---
    dict(family="P100", datacenter=True, architecture="Pascal",
         compute_capability="6.0", min_driver_branch=367, max_driver_branch=580, open_kernel_modules_required=False,
         open_kernel_modules_supported=False,
         device_ids=("15f7", "15f8", "15f9"), name_patterns=(r"\bP100\b", r"Quadro GP100")),
    dict(family="P4 / P40 / GeForce GTX 10 series / Quadro P", datacenter=True, architecture="Pascal",
         compute_capability="6.1", min_driver_branch=367, max_driver_branch=580, open_kernel_modules_required=False,
         open_kernel_modules_supported=False,
         device_ids=("1bb3", "1b38", "1b06", "1b80", "1b81", "1b82"),
         name_patterns=(r"\bP4\b", r"\bP40\b", r"GRID P\d", r"GeForce GTX 10\d0", r"GTX 108",
                        r"Quadro P\d{3,4}", r"TITAN Xp?\b")),
    # --- Maxwell / Kepler (legacy; listed so old hosts are named, never served) ---
    dict(family="M60 / M40 / GeForce GTX 9 series", datacenter=True, architecture="Maxwell",
         compute_capability="5.2", min_driver_branch=352, max_driver_branch=580, open_kernel_modules_required=False,
         open_kernel_modules_supported=False,
         device_ids=("13f2", "17fd"), name_patterns=(r"\bM60\b", r"\bM40\b", r"GeForce GTX 9\d0")),
    dict(family="K80", datacenter=True, architecture="Kepler",
         compute_capability="3.7", min_driver_branch=340, max_driver_branch=470, open_kernel_modules_required=False,
         open_kernel_modules_supported=False,
         device_ids=("102d",), name_patterns=(r"\bK80\b",)),
    dict(family="GRID K520 / K10", datacenter=True, architecture="Kepler",
         compute_capability="3.0", min_driver_branch=340, max_driver_branch=470, open_kernel_modules_required=False,
         open_kernel_modules_supported=False,
         device_ids=("118a",), name_patterns=(r"GRID K520", r"\bK10\b")),
)

_PUBLIC_KEYS = ("family", "architecture", "compute_capability", "min_driver_branch", "max_driver_branch",
                "open_kernel_modules_required", "open_kernel_modules_supported", "datacenter")


def _entry(row):
    result = {key: row.get(key) for key in _PUBLIC_KEYS}
    if result["open_kernel_modules_supported"] is None:
        # Turing and later carry a GSP and can run the open modules.
        result["open_kernel_modules_supported"] = True
    return result


_BY_DEVICE_ID = {}
for _row in _ROWS:
    for _dev in _row["device_ids"]:
        _BY_DEVICE_ID[_dev] = _row
_NAME_RULES = tuple((re.compile(p, re.IGNORECASE), row) for row in _ROWS for p in row["name_patterns"])

_HEX4 = re.compile(r"^[0-9a-f]{4}$")


def normalise_device_id(value):
    """'0x2330', '2330', '0x233010DE', '233010DE', '10de:2330' -> '2330'; anything else -> None.

    nvidia-smi prints device id and vendor id together (0x233010DE: device 2330, vendor
    10DE); lspci prints vendor:device.
    """
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    if ":" in text:
        vendor, _sep, text = text.partition(":")
        if vendor.strip() != "10de":
            return None
        text = text.strip()
    if text.startswith("0x"):
        text = text[2:]
    if len(text) == 8 and re.match(r"^[0-9a-f]{8}$", text):
        if text[4:] != "10de":
            return None
        text = text[:4]
    return text if _HEX4.match(text) else None


def lookup(pci_device_id=None, name=None):
    """Architecture facts for an NVIDIA GPU, by PCI device id first, then by product name.

    Returns a new dict (family, architecture, compute_capability, min_driver_branch,
    open_kernel_modules_required, open_kernel_modules_supported, matched_by) or None.
    Masked ids (e.g. '000000DE' in some captures) fall through to the name.
    """
    dev = normalise_device_id(pci_device_id) if pci_device_id is not None else None
    if dev and dev in _BY_DEVICE_ID:
        result = _entry(_BY_DEVICE_ID[dev])
        result["matched_by"] = "pci_device_id"
        return result
    if isinstance(name, str) and name.strip():
        for pattern, row in _NAME_RULES:
            if pattern.search(name):
                result = _entry(row)
                result["matched_by"] = "name"
                return result
    return None


# nvidia-smi's "Product Brand" values (lower-case, spaces removed, as NVIDIA's images spell them in brand=
# terms) and product names of consumer cards: never datacenter parts.
CONSUMER_BRANDS = ("geforce", "geforcertx", "titan", "titanrtx")
_CONSUMER_NAME = re.compile(r"\bGeForce\b|\bTITAN\b", re.IGNORECASE)
# Workstation cards: forward compatibility only on "select NGC Server Ready SKUs", which no id or name tells.
_WORKSTATION_BRANDS = ("quadro", "quadrortx")
_WORKSTATION_NAME = re.compile(r"\bQuadro\b", re.IGNORECASE)
# Tesla was NVIDIA's datacenter brand (nvidia-smi "Product Brand: Tesla", names "Tesla P100-PCIE-16GB").
_DATACENTER_BRANDS = ("tesla",)
_DATACENTER_NAME = re.compile(r"^\s*(?:NVIDIA\s+)?Tesla\b", re.IGNORECASE)


def brand_token(brand):
    """nvidia-smi's Product Brand -> lower-case without spaces ('NVIDIA RTX' -> 'nvidiartx', 'GeForce' -> 'geforce')."""
    return "".join((brand or "").lower().split())


def datacenter_class(pci_device_id=None, name=None, brand=None):
    """Whether a GPU is a datacenter part: True, False (a GeForce or TITAN consumer card) or None (not known:
    a workstation card, or a GPU the table does not know). From nvidia-smi's product brand and name, then the
    table (by PCI device id, then name). CUDA forward compatibility works only on datacenter parts.
    """
    token = brand_token(brand)
    if token in CONSUMER_BRANDS or (isinstance(name, str) and _CONSUMER_NAME.search(name)):
        return False
    if token in _DATACENTER_BRANDS or (isinstance(name, str) and _DATACENTER_NAME.search(name)):
        return True
    if token in _WORKSTATION_BRANDS or (isinstance(name, str) and _WORKSTATION_NAME.search(name)):
        return None
    entry = lookup(pci_device_id, name)
    return True if entry and entry["datacenter"] else None
