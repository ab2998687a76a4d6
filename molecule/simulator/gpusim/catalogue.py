"""GPU models the simulator can put on the PCI bus.

Contract (DESIGN.md): MODELS[key] has at least name, memory_total_mib, pci_device_id (int, e.g. 0x2BB5),
pci_subsystem_id (int, 0xSSSS of subsystem vendor pci_subsystem_vendor, default 0x10DE), architecture,
compute_capability ("12.0"), power_limit_w, needs_open_modules, min_branch. The other keys are what the renderers
need.

Sources (checked while writing; all public):
- names, memory, power limits as nvidia-smi prints them: corpus nvidia_smi/ 001, 018 (H100 80GB HBM3,
  81559 MiB, 700 W, 0x233010DE / 0x16C110DE in 003), 010 (H200, 143771 MiB), 051 (L4, 23034 MiB, 72 W),
  039 (A100-SXM4-80GB, 81920 MiB, 0x20B210DE / 0x147F10DE, 400 W), 043 (RTX PRO 6000 Blackwell v13 XML,
  97887 MiB; that one is the Max-Q Workstation 2BB4/204C, Blackwell, product_brand "NVIDIA RTX").
- RTX PRO 6000 Blackwell Server Edition: "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887 MiB,
  compute_cap 12.0 (many public nvidia-smi captures); PCI 2BB5 with subsystem 10DE 204E (NVIDIA driver
  README, "Appendix A. Supported NVIDIA GPU Products"); 600 W; open kernel modules required
  ("NVRM: The NVIDIA GPU 0000:05:00.0 (PCI ID: 10de:2bb5) installed in this system requires use of the
  NVIDIA open kernel modules."); first supported in the 570 branch.
- pci.ids device names: "GB202GL [RTX PRO 6000 Blackwell Server Edition]" (lspci -nn captures
  `3D controller [0302]: NVIDIA Corporation GB202GL [RTX PRO 6000 Blackwell Server Edition] [10de:2bb5] (rev a1)`),
  "GH100 [H100 SXM5 80GB]" (2330), "GH100 [H200 SXM 141GB]" (2335), "AD104GL [L4]" (27b8),
  "GA100 [A100 SXM4 80GB]" (20b2).
- H200 subsystem 0x18BE10DE (H200 SXM), L4 subsystem 0x16CA10DE (public -q -x / -q captures).
- GeForce RTX 4090 ("rtx-4090"): corpus nvidia_smi/022 (-q -x, Linux 535.86.05, a Gigabyte board): name "NVIDIA
  GeForce RTX 4090", product_brand "GeForce", "Ada Lovelace", 268410DE with subsystem 40BF1458 (subsystem vendor
  1458, Gigabyte: the key pci_subsystem_vendor), fb total 24564 / reserved 346 / used 2 MiB idle, BAR1 256 MiB
  (no resizable BAR; 033 on Windows shows 32768), ECC Disabled (GeForce has none), fan "0 %", P8 idle at
  26.84 W, power limit 450 W (min 10, max 600; 033's board says min 150), vbios 95.02.18.80.5F, board part N/A,
  GPU part 2684-300-A1, idle clocks 210/210/405/1185 MHz, max 3120/3120/10501/2415 MHz, T.Limit 43 C at 40 C,
  max_device_link_gen 4 (PCIe 4.0; that host's slot is gen 3), MIG N/A. 033 (-q, 537.13) the same name, part
  number and clocks; nvidia_smi_memory/RTX-4090_535.154.05 (reserved 346) and _550.127.05 (reserved 354).
  lspci: "VGA compatible controller [0300]: NVIDIA Corporation AD102 [GeForce RTX 4090] [10de:2684] (rev a1)"
  (public lspci -nn captures; pci.ids "2684  AD102 [GeForce RTX 4090]"). Compute capability 8.9 (NVIDIA's CUDA
  GPU list, "GeForce RTX 4090"); min_branch 520 (CUDA 11.8 / 520.61.05 added 8.9; module_utils/gpu/gpu_arch.py
  row "RTX Ada / GeForce RTX 40 series"); proprietary or open modules (Ada: either).
- Memory temperature (`memory_temp`): only the HBM boards report one (-q `Memory Current Temp` 58 C on the H100 of
  003, 36 C on 055's H100s, 43 C on 056's A100-SXM4-80GB; dmon `mtemp` on 006/017); GDDR boards say N/A (022 RTX 4090,
  033, 041 A10G, 043 RTX PRO 6000) and dmon prints `-` (nvidia_smi_dmon/ RTX PRO 6000 Max-Q).
"""

MODELS = {
    "rtx-pro-6000-bse": {
        "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "brand": "NVIDIA RTX",
        "architecture": "Blackwell",
        "compute_capability": "12.0",
        "memory_total_mib": 97887,
        "memory_reserved_mib": 637,        # 043 (same GB202 board family)
        "memory_overhead_mib": 4,          # idle driver-only use, domain.md §3
        "bar1_total_mib": 131072,
        "pci_device_id": 0x2BB5,
        "pci_subsystem_id": 0x204E,
        "pci_name": "GB202GL [RTX PRO 6000 Blackwell Server Edition]",
        "pci_class": "0302",               # 3D controller (a headless server board)
        "pci_rev": "a1",
        "power_limit_w": 600.0,
        "power_min_w": 400.0,
        "power_max_w": 600.0,
        "power_idle_w": 30.0,
        "needs_open_modules": True,
        "min_branch": 570,
        "mig_capable": True,
        "ecc_default": True,
        "vbios": "98.02.8D.00.01",
        "board_part_number": "900-2G153-0000-000",
        "gpu_part_number": "2BB5-885-A1",
        "pcie_gen_max": 5,
        "clocks_idle": (180, 180, 405, 600),       # graphics, sm, memory, video (MHz), 043
        "clocks_max": (3090, 3090, 14001, 3090),   # 043
        "temp_tlimit_c": 68,
        "fan": False,
    },
    "h100": {
        "name": "NVIDIA H100 80GB HBM3",
        "brand": "NVIDIA",
        "architecture": "Hopper",
        "nvlinks": 18,                     # bonded NVLinks to the NVSwitches (topo -m NV18)
        "compute_capability": "9.0",
        "memory_total_mib": 81559,
        "memory_reserved_mib": 479,        # 003
        "bar1_total_mib": 131072,
        "pci_device_id": 0x2330,
        "pci_subsystem_id": 0x16C1,
        "pci_name": "GH100 [H100 SXM5 80GB]",
        "pci_class": "0302",
        "pci_rev": "a1",
        "power_limit_w": 700.0,
        "power_min_w": 200.0,
        "power_max_w": 700.0,
        "power_idle_w": 69.0,              # 018
        "needs_open_modules": False,
        "min_branch": 525,
        "mig_capable": True,
        "ecc_default": True,
        "vbios": "96.00.A5.00.01",
        "board_part_number": "692-2G520-0200-000",
        "gpu_part_number": "2330-885-A1",
        "pcie_gen_max": 5,
        "clocks_idle": (345, 345, 2619, 765),
        "clocks_max": (1980, 1980, 2619, 1545),    # 003
        "temp_tlimit_c": 44,
        "memory_temp": True,               # HBM: -q Memory Current Temp (003, 055, 056), dmon mtemp
        "fan": False,
    },
    "h200": {
        "name": "NVIDIA H200",
        "brand": "NVIDIA",
        "architecture": "Hopper",
        "nvlinks": 18,                     # bonded NVLinks to the NVSwitches (topo -m NV18)
        "compute_capability": "9.0",
        "memory_total_mib": 143771,
        "memory_reserved_mib": 551,
        "bar1_total_mib": 262144,
        "pci_device_id": 0x2335,
        "pci_subsystem_id": 0x18BE,
        "pci_name": "GH100 [H200 SXM 141GB]",
        "pci_class": "0302",
        "pci_rev": "a1",
        "power_limit_w": 700.0,
        "power_min_w": 200.0,
        "power_max_w": 700.0,
        "power_idle_w": 76.0,
        "needs_open_modules": False,
        "min_branch": 550,
        "mig_capable": True,
        "ecc_default": True,
        "vbios": "96.00.AF.00.01",
        "board_part_number": "692-2G520-0280-000",
        "gpu_part_number": "2335-885-A1",
        "pcie_gen_max": 5,
        "clocks_idle": (345, 345, 3201, 765),
        "clocks_max": (1980, 1980, 3201, 1545),
        "temp_tlimit_c": 48,
        "memory_temp": True,               # HBM: -q Memory Current Temp (003, 055, 056), dmon mtemp
        "fan": False,
    },
    "l4": {
        "name": "NVIDIA L4",
        "brand": "NVIDIA",
        "architecture": "Ada Lovelace",
        "compute_capability": "8.9",
        "memory_total_mib": 23034,
        "memory_reserved_mib": 434,
        "bar1_total_mib": 32768,
        "pci_device_id": 0x27B8,
        "pci_subsystem_id": 0x16CA,
        "pci_name": "AD104GL [L4]",
        "pci_class": "0302",
        "pci_rev": "a1",
        "power_limit_w": 72.0,
        "power_min_w": 40.0,
        "power_max_w": 72.0,
        "power_idle_w": 16.0,
        "needs_open_modules": False,
        "min_branch": 525,
        "mig_capable": False,
        "ecc_default": True,
        "vbios": "95.04.29.00.06",
        "board_part_number": "900-2G193-0000-001",
        "gpu_part_number": "27B8-895-A1",
        "pcie_gen_max": 4,
        "clocks_idle": (210, 210, 405, 765),
        "clocks_max": (2040, 2040, 6251, 1770),
        "temp_tlimit_c": 51,
        "fan": False,
    },
    "a100-80gb": {
        "name": "NVIDIA A100-SXM4-80GB",
        "brand": "NVIDIA",
        "architecture": "Ampere",
        "nvlinks": 12,                     # bonded NVLinks to the NVSwitches (topo -m NV12)
        "compute_capability": "8.0",
        "memory_total_mib": 81920,
        "memory_reserved_mib": 569,
        "bar1_total_mib": 131072,
        "pci_device_id": 0x20B2,
        "pci_subsystem_id": 0x147F,
        "pci_name": "GA100 [A100 SXM4 80GB]",
        "pci_class": "0302",
        "pci_rev": "a1",
        "power_limit_w": 400.0,
        "power_min_w": 100.0,
        "power_max_w": 400.0,
        "power_idle_w": 60.0,
        "needs_open_modules": False,
        "min_branch": 450,
        "mig_capable": True,
        "ecc_default": True,
        "vbios": "92.00.36.00.02",
        "board_part_number": "692-2G506-0210-002",
        "gpu_part_number": "20B2-895-A1",
        "pcie_gen_max": 4,
        "clocks_idle": (210, 210, 1593, 795),
        "clocks_max": (1410, 1410, 1593, 1290),
        "temp_tlimit_c": 50,
        "memory_temp": True,               # HBM: -q Memory Current Temp (003, 055, 056), dmon mtemp
        "fan": False,
    },
    "rtx-4090": {
        "name": "NVIDIA GeForce RTX 4090",
        "brand": "GeForce",
        "architecture": "Ada Lovelace",
        "compute_capability": "8.9",
        "memory_total_mib": 24564,         # 022 (and 033, RTX-4090_535.154.05/_550.127.05)
        "memory_reserved_mib": 346,        # 022 (535); 354 on 550.127.05
        "memory_overhead_mib": 2,          # 022: 2 MiB used, no process
        "bar1_total_mib": 256,             # 022
        "pci_device_id": 0x2684,
        "pci_subsystem_id": 0x40BF,        # 022: 40BF1458 (a Gigabyte board; no NVIDIA-made 4090 capture here)
        "pci_subsystem_vendor": 0x1458,
        "pci_name": "AD102 [GeForce RTX 4090]",
        "pci_class": "0300",               # VGA compatible controller (a card with display outputs)
        "pci_rev": "a1",
        "power_limit_w": 450.0,            # 022
        "power_min_w": 10.0,               # 022
        "power_max_w": 600.0,              # 022
        "power_idle_w": 26.84,             # 022, P8
        "needs_open_modules": False,
        "min_branch": 520,
        "mig_capable": False,
        "ecc_default": False,              # 022: ecc_mode Disabled
        "vbios": "95.02.18.80.5F",         # 022
        "board_part_number": "N/A",        # 022
        "gpu_part_number": "2684-300-A1",  # 022, 033
        "pcie_gen_max": 4,                 # 022 max_device_link_gen
        "clocks_idle": (210, 210, 405, 1185),      # 022 (P8)
        "clocks_max": (3120, 3120, 10501, 2415),   # 022 max_clocks (033 the same)
        "temp_tlimit_c": 49,               # 022: T.Limit 43 C at 40 C (the renderer shows this + 34 - temp)
        "fan": True,                       # 022: fan_speed 0 %
    },
}

# Short names accepted by `gpusim init --gpus`.
ALIASES = {
    "rtx-pro-6000": "rtx-pro-6000-bse",
    "rtxpro6000": "rtx-pro-6000-bse",
    "h100-80gb": "h100",
    "h100-sxm": "h100",
    "h200-sxm": "h200",
    "a100": "a100-80gb",
    "rtx4090": "rtx-4090",
    "4090": "rtx-4090",
}

# HGX boards: eight SXM GPUs and their NVSwitches (docs/research/hgx-fabric-manager.md Q5: six gen2 on HGX
# A100, 10de:1af1, which older pci.ids name only "Device"; four gen3 on HGX H100/H200, 10de:22a3). An HGX
# B200's NVSwitches are no NVIDIA PCI function (NOT FOUND as one): no B200 board here.
# `sname`: the subsystem's pci.ids name (real `lspci -vvnn` of an H100 board: `Subsystem: NVIDIA Corporation GH100
# [H100 NVSwitch] [10de:1796]`); `buses`: where the real captures have them (gen3 bd, be, bf, c0; gen2 b7..bc).
NVSWITCH_GENERATIONS = {
    "gen2": {"device": "1af1", "name": "Device", "sdevice": "1af1", "sname": None,
             "buses": ["b7", "b8", "b9", "ba", "bb", "bc"]},
    "gen3": {"device": "22a3", "name": "GH100 [H100 NVSwitch]", "sdevice": "1796", "sname": "GH100 [H100 NVSwitch]",
             "buses": ["bd", "be", "bf", "c0", "c1", "c2"]},
}
BOARDS = {
    "hgx-a100": {"gpus": ["a100-80gb"] * 8, "nvswitches": 6, "nvswitch_generation": "gen2"},
    "hgx-h100": {"gpus": ["h100"] * 8, "nvswitches": 4, "nvswitch_generation": "gen3"},
    "hgx-h200": {"gpus": ["h200"] * 8, "nvswitches": 4, "nvswitch_generation": "gen3"},
}


def nvswitch_generation(models):
    """gen2 on an A100 board, gen3 otherwise (H100/H200)."""
    return "gen2" if models and all(resolve(m) == "a100-80gb" for m in models) else "gen3"


# CUDA version the driver branch reports (nvidia-smi "CUDA Version"); corpus 001 (570 -> 12.8),
# 018 (590 -> 13.1), 035 (550 -> 12.4), 580.x -> 13.0 (public 580.95.05 captures).
CUDA_BY_BRANCH = {
    "535": "12.2", "550": "12.4", "560": "12.6", "565": "12.7", "570": "12.8", "575": "12.9",
    "580": "13.0", "590": "13.1", "595": "13.2", "610": "13.3",   # 610: corpus 026
}


def resolve(key):
    key = str(key).strip().lower()   # `gpusim set gpus.0.model 4090` stores the number 4090
    key = ALIASES.get(key, key)
    if key not in MODELS:
        raise KeyError("unknown GPU model %r (known: %s)" % (key, ", ".join(sorted(MODELS))))
    return key


def get(key):
    return MODELS[resolve(key)]


def cuda_version(driver_version):
    branch = str(driver_version).split(".")[0]
    return CUDA_BY_BRANCH.get(branch, "13.0")
