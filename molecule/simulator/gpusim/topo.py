"""`nvidia-smi topo -m`: the GPU link matrix, as real drivers print it when stdout is not a terminal.

Format (tests/fixtures/nvidia_smi/062 8x H200 and 064 2x RTX 5090, 570+ drivers): a tab-separated matrix
whose header starts with a tab, " X " on the diagonal, then the CPU Affinity, NUMA Affinity and GPU NUMA ID
columns (an empty cell before GPU NUMA ID, as the captures show), a blank line and the Legend. On a
terminal the header is underlined (ESC[4m ... ESC[0m, fixture 058); piped, it is not.

Links: GPUs of a board with NVSwitches (state["nvswitches"]) reach each other through the switches with
the model's bonded NVLinks (NV18 on H100/H200 SXM, NV12 on A100 SXM4: fixtures 062, topo-m_8xA100-SXM4);
other GPUs go over PCIe: NODE within a NUMA node, SYS across (buses from 0x80 up sit on the second
socket, as on the two-socket boards of the captures). No NICs are simulated.
"""
import os

from . import catalogue

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def numa_node(gpu):
    """0 for buses below 0x80, 1 from there (the second socket's root ports)."""
    bus = int(gpu["pci_bus_id"].split(":")[1], 16)
    return 1 if bus >= 0x80 else 0


def _cpus(node, nodes, cpu_count):
    per = max(cpu_count // len(nodes), 1)
    first = nodes.index(node) * per
    return "%d-%d" % (first, first + per - 1)


def link(state, a, b):
    """The cell between two GPUs."""
    if state.get("nvswitches"):
        width = catalogue.get(a["model"]).get("nvlinks")
        if width and catalogue.get(b["model"]).get("nvlinks"):
            return "NV%d" % width
    return "NODE" if numa_node(a) == numa_node(b) else "SYS"


def render(state, gpus, cpu_count=None):
    """The matrix of `gpus` (the driven ones, in index order)."""
    cpu_count = cpu_count or os.cpu_count() or 2
    nodes = sorted(set(numa_node(g) for g in gpus))
    names = ["GPU%d" % i for i in range(len(gpus))]
    lines = ["\t" + "\t".join(names + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]
    for i, gpu in enumerate(gpus):
        cells = [" X " if i == j else link(state, gpu, other) for j, other in enumerate(gpus)]
        node = numa_node(gpu)
        lines.append("\t".join([names[i]] + cells + [_cpus(node, nodes, cpu_count), str(node), "", "N/A"]))
    return "\n".join(lines) + "\n" + LEGEND
