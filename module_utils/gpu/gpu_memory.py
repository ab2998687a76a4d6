# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU memory as vLLM sees it: nvidia-smi's total minus the driver's reservation.

Pure stdlib, Python >= 3.9 (shipped to hosts as module_utils).

vLLM applies --gpu-memory-utilization to the total that CUDA reports
(torch.cuda.mem_get_info), not to nvidia-smi's.  CUDA's total is nvidia-smi's
"FB Memory Usage -> Total" minus "Reserved", to within 1 MiB on every card where one
capture has both (tests/fixtures/nvidia_smi_memory/SOURCES.tsv: 13 cards with a
deviceQuery beside the -q output).  The reservation depends on the driver branch
(H100 80GB HBM3: 551 MiB on 535, 454 on 565, 479 on 590), so a host's own facts win
over this catalogue; the catalogue serves the CLI (`gpuhost plan --gpu NAME`) and
hosts whose facts lack the figure.

Notes from the captures:
  - ECC on GDDR cards takes 1/16 of the memory, already out of Total (T4, L4, A10,
    L40S, RTX A6000 rows are ECC on).
  - Drivers before ~510 print Total with the reservation already removed
    (corpus nvidia_smi/038: A100-PCIE-40GB as 40536 MiB).
  - GB10 (DGX Spark) has no framebuffer: nvidia-smi prints N/A, NVML says
    NOT_SUPPORTED, and CUDA's total is the system's MemTotal (121.69 GiB).
"""
import re

FIXTURES = "tests/fixtures/nvidia_smi_memory/"

# key, aliases, nvidia-smi product-name regex, Total MiB, Reserved MiB, driver of that
# capture, source (a fixture file, or how the figure was derived).  One row per SKU.
_ROWS = (
    ("L4", ("l4",), r"\bL4\b", 23034, 434, "555.42.06", FIXTURES + "L4_555.42.06.txt"),
    ("T4", ("t4", "tesla-t4"), r"\bT4\b", 15360, 388, "515.105.01", FIXTURES + "T4_515.105.01.txt"),
    ("A10", ("a10",), r"\bA10\b(?!G)", 23028, 526, "550.127.05", FIXTURES + "A10_550.127.05.txt"),
    ("A10G", ("a10g",), r"\bA10G\b", 23028, 435, "515.105.01",
     "corpus nvidia_smi/041_qx_515.105.01_A10G.xml"),
    ("L40S", ("l40s",), r"\bL40S\b", 46068, 609, "595.80", FIXTURES + "L40S_595.80.txt"),
    ("A100-40GB", ("a100-40gb", "a100-sxm4-40gb", "a100-pcie-40gb", "a100-40g"), r"A100.*40\s?GB", 40960, 605,
     "510.47.03", "corpus nvidia_smi/019_qx_A100-SXM4-MIG.xml (SXM4; the PCIe card prints the same Total)"),
    ("A100-80GB", ("a100-80gb", "a100-sxm4-80gb", "a100-80g"), r"A100-SXM4-80GB", 81920, 763,
     "555.42.02", "corpus nvidia_smi/056_q_555.42.02_4xA100-SXM4-80GB_fabric-NA_no-nvswitch.txt"),
    ("A100-80GB-PCIe", ("a100-80gb-pcie", "a100-pcie-80gb"), r"A100 80GB PCIe", 81920, 835, "525 (CUDA 12.0)",
     FIXTURES + "A100-80GB-PCIe_htcondor-CUDAGlobalMemoryMb.txt (CUDA total 81085 MiB; Total from "
     + FIXTURES + "A100-80GB-PCIe_550.90.12_table.txt)"),
    ("H100-SXM", ("h100-sxm", "h100", "h100-80gb-hbm3", "h100-sxm5"), r"H100 80GB HBM3", 81559, 479, "590.48.01",
     "corpus nvidia_smi/003_q_590.48.01_H100-MIG_load.txt (551 on 535.x: " + FIXTURES
     + "H100-80GB-HBM3_535.161.08.txt)"),
    ("H100-PCIe", ("h100-pcie",), r"H100 PCIe", 81559, 551, "535",
     "Total from table captures; Reserved as the SXM part on 535 (no -q capture of the PCIe card found)"),
    ("H100-NVL", ("h100-nvl", "h100nvl"), r"H100 NVL", 95830, 594, "550.54.14", FIXTURES + "H100-NVL_550.54.14.txt"),
    ("H200", ("h200", "h200-sxm"), r"\bH200\b", 143771, 614, "590.48.01", FIXTURES + "H200_590.48.01.txt"),
    ("GH200", ("gh200",), r"\bGH200\b", 97871, 1103, "550.127.05", FIXTURES + "GH200-480GB_550.127.05.txt"),
    ("B200", ("b200",), r"\bB200\b", 183359, 729, "(OOM message)",
     FIXTURES + "B200_cuda-oom.txt (CUDA total 178.35 GiB; Total from table captures)"),
    ("RTX-3090", ("rtx-3090", "rtx3090", "3090"), r"RTX 3090(?! Ti)", 24576, 422, "560.35.03",
     FIXTURES + "RTX-3090_560.35.03.txt"),
    ("RTX-4090", ("rtx-4090", "rtx4090", "4090"), r"RTX 4090", 24564, 354, "550.127.05",
     FIXTURES + "RTX-4090_550.127.05.txt"),
    ("RTX-5090", ("rtx-5090", "rtx5090", "5090"), r"RTX 5090", 32607, 487, "570.124.06",
     FIXTURES + "RTX-5090_570.124.06.txt"),
    ("RTX-A6000", ("rtx-a6000", "a6000"), r"RTX A6000", 46068, 450, "550.127.05",
     FIXTURES + "RTX-A6000_550.127.05.txt (ECC on)"),
    ("RTX-6000-Ada", ("rtx-6000-ada", "6000-ada"), r"RTX 6000 Ada", 49140, 500, "550.127.05",
     FIXTURES + "RTX-6000-Ada_550.127.05.txt"),
    ("RTX-PRO-6000", ("rtx-pro-6000", "rtx-pro-6000-blackwell", "pro6000"), r"RTX PRO 6000", 97887, 637,
     "590.44.01", "corpus nvidia_smi/043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml (Max-Q; seed 000's "
     "95.00 GiB in vLLM = 607 MiB reserved on its driver)"),
    # Unified memory: no framebuffer; CUDA's total is the system's MemTotal.
    ("GB10", ("gb10", "dgx-spark"), r"\bGB10\b", 124610, 0, "580.173.02",
     FIXTURES + "GB10_580.173.02.txt (MemTotal 127600748 kB; nvidia-smi prints N/A)"),
)

CATALOGUE = tuple(
    {"key": key, "aliases": aliases, "pattern": re.compile(pattern, re.I), "total_mib": total,
     "reserved_mib": reserved, "driver": driver, "source": source}
    for key, aliases, pattern, total, reserved, driver, source in _ROWS
)
# Unknown card, unknown driver: the reservations above span 316-1103 MiB; this is
# their middle, and the plan's band carries the rest.
DEFAULT_RESERVED_MIB = 500
UNIFIED_MEMORY_KEYS = ("GB10",)


def _norm(name):
    return re.sub(r"[\s_]+", "-", str(name or "").strip().lower())


def lookup(name):
    """The catalogue row for a --gpu NAME (key or alias) or an nvidia-smi product name; None."""
    wanted = _norm(name)
    for row in CATALOGUE:
        if wanted == row["key"].lower() or wanted in row["aliases"]:
            return row
    for row in CATALOGUE:
        if row["pattern"].search(str(name or "")):
            return row
    return None


def names():
    return [row["key"] for row in CATALOGUE]


def cuda_total_mib(total_mib, reserved_mib):
    """What torch.cuda.mem_get_info reports as total: nvidia-smi's Total - Reserved."""
    return int(total_mib) - int(reserved_mib or 0)


def device_memory(name=None, total_mib=None, reserved_mib=None):
    """{total_mib, reserved_mib, cuda_total_mib, reserved_source, card} from what is known.

    The host's figures win; a missing reservation comes from the catalogue row of the
    card (same driver family assumed), else DEFAULT_RESERVED_MIB.  A missing total comes
    from the catalogue; None when neither says.
    """
    row = lookup(name) if name else None
    if total_mib is None and row is not None:
        total_mib = row["total_mib"]
    if total_mib is None:
        return None
    if reserved_mib is not None:
        source = "facts"
    elif row is not None:
        reserved_mib, source = row["reserved_mib"], "catalogue %s (driver %s)" % (row["key"], row["driver"])
    else:
        reserved_mib, source = DEFAULT_RESERVED_MIB, "default (card not in the catalogue)"
    return {
        "card": row["key"] if row else None,
        "total_mib": int(total_mib),
        "reserved_mib": int(reserved_mib),
        "cuda_total_mib": cuda_total_mib(total_mib, reserved_mib),
        "reserved_source": source,
        "unified_memory": bool(row and row["key"] in UNIFIED_MEMORY_KEYS),
    }
