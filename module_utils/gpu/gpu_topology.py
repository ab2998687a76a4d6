# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How a host's GPUs are connected: `nvidia-smi topo -m`, and the Fabric section of `nvidia-smi -q`.

Pure stdlib (python >= 3.9), no Ansible imports, no host access.

    parse_topo_matrix(text)        `nvidia-smi topo -m`: links between devices, CPU and NUMA affinity
    check_tensor_parallel(topo, gpus)   the slowest link a tensor-parallel group would cross
    nvlink_groups(topo, size)      disjoint groups of `size` GPUs that are all NVLink-connected
    parse_fabric(text)             each GPU's Fabric block (State, Status, CliqueId, ClusterUUID, Health)
    parse_fabric_xml(text)         the same from `nvidia-smi -q -x` (<fabric> of each <gpu>)
    fabric_verdict(fabrics)        unknown / not_applicable / ready / not_ready / failed / unhealthy, and the fix

What the real outputs show (../shared/corpus/nvidia_smi/055-067, tests/fixtures/fabric/README.md):
- topo -m is a matrix separated by tabs (or by spaces where a page re-typed it), whose header may be
  underlined with ANSI codes. Device columns are GPU<n>, NIC<n> or an HCA name (mlx5_0) on older
  drivers; after them come "CPU Affinity", "NUMA Affinity" and, from about 535, "GPU NUMA ID". The
  GPU rows carry an empty cell between NUMA Affinity and GPU NUMA ID; NIC rows have no affinity.
  Cells: X (self), NV<n> (a bonded set of n NVLinks: NV12 on HGX A100, NV18 on HGX H100/H200/B200),
  PIX, PXB, PHB, NODE, SYS (PCIe paths, from the shortest to across the SMP interconnect).
- Fabric (per GPU, -q): State N/A on hosts without NVSwitch (PCIe boxes, 4-GPU A100 boards), "In
  Progress" until the fabric manager has set the fabric up (CUDA returns 802 "system not yet
  initialized" meanwhile), then "Completed" with a Status ("Success", "Insufficient Resources", ...).
  From about 570 a Health block follows; from 590 it has a Summary (Healthy / Unhealthy / N/A).
"""
import re
import xml.etree.ElementTree as ET

from ansible.module_utils.gpu.nvsmi_common import ParseError, TruncatedInput, clean_text
from ansible.module_utils.gpu.nvsmi_q import _Q_GPU, _q_tree
from ansible.module_utils.gpu.nvsmi_xml import _last_xml_document

# The columns after the devices, and the key each goes under.
AFFINITY_COLUMNS = {"CPU Affinity": "cpu_affinity", "NUMA Affinity": "numa_affinity", "GPU NUMA ID": "gpu_numa_id"}
# PCIe paths from the shortest to the longest (the topo -m legend's order, reversed).
PCIE_PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")
_NVLINK = re.compile(r"^NV(\d+)$")
_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+|\S+_\d+)$")


def parse_topo_matrix(data):
    """{devices, gpus, links: {dev: {dev: cell}}, cpu_affinity, numa_affinity, gpu_numa_id} from
    `nvidia-smi topo -m`. Raises ParseError when there is no matrix, TruncatedInput when a GPU row is cut."""
    lines = clean_text(data).split("\n")
    header_at = None
    for i, line in enumerate(lines):
        tokens = line.split()
        if len(tokens) > 1 and tokens[0] == "GPU0" and tokens[1] != "X":
            header_at = i
            break
    if header_at is None:
        raise ParseError("no `nvidia-smi topo -m` matrix (no header starting with GPU0)")
    header = lines[header_at]
    cut = min([header.find(name) for name in AFFINITY_COLUMNS if name in header] or [len(header)])
    devices = header[:cut].split()
    affinity = [name for name in AFFINITY_COLUMNS if name in header[cut:]]
    if not all(_DEVICE.match(d) for d in devices):
        raise ParseError("topo -m header has an unknown column: %s" % header.strip())
    topo = {"devices": devices, "gpus": [d for d in devices if d.startswith("GPU")], "links": {},
            "cpu_affinity": {}, "numa_affinity": {}, "gpu_numa_id": {}}
    for line in lines[header_at + 1:]:
        tokens = line.split()
        if not tokens or tokens[0] == "Legend:":
            break
        name = tokens[0]
        if name not in devices:
            raise ParseError("topo -m row %r names no device of the header" % name)
        cells = tokens[1:1 + len(devices)]
        if len(cells) < len(devices):
            raise TruncatedInput("topo -m row %s has %d of %d link cells (truncated?)" % (name, len(cells), len(devices)))
        topo["links"][name] = dict(zip(devices, cells))
        rest = tokens[1 + len(devices):]
        if name.startswith("GPU"):
            for column, value in zip(affinity, rest):
                topo[AFFINITY_COLUMNS[column]][name] = value
    missing = [g for g in topo["gpus"] if g not in topo["links"]]
    if missing:
        raise TruncatedInput("topo -m has no row for %s (truncated?)" % ", ".join(missing))
    return topo


def link(topo, a, b):
    """The cell between devices a and b ('NV18', 'SYS', ...); GPU indexes may be given as ints."""
    a, b = _gpu_name(a), _gpu_name(b)
    return topo["links"][a][b]


def nvlink_count(cell):
    """Bonded NVLinks of a topo cell: NV18 -> 18; a PCIe path or X -> 0."""
    match = _NVLINK.match(cell or "")
    return int(match.group(1)) if match else 0


def _gpu_name(gpu):
    return gpu if isinstance(gpu, str) else "GPU%d" % gpu


def _slowness(cell):
    """Orders links from the fastest: more NVLinks first, then the PCIe paths from PIX to SYS."""
    width = nvlink_count(cell)
    if width:
        return (0, -width)
    return (1, PCIE_PATHS.index(cell)) if cell in PCIE_PATHS else (2, 0)


def check_tensor_parallel(topo, gpus):
    """What a tensor-parallel group over `gpus` (names or indexes) would cross:
    {gpus, slowest_link, all_nvlink, numa_nodes, crosses_numa, message}."""
    names = [_gpu_name(g) for g in gpus]
    unknown = [n for n in names if n not in topo["gpus"]]
    if unknown:
        raise ParseError("%s not in topo -m (GPUs: %s)" % (", ".join(unknown), ", ".join(topo["gpus"])))
    pairs = [link(topo, a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    slowest = max(pairs, key=_slowness) if pairs else None
    numa = sorted({topo["numa_affinity"].get(n) for n in names if topo["numa_affinity"].get(n) not in (None, "N/A")})
    result = {"gpus": names, "slowest_link": slowest, "all_nvlink": all(nvlink_count(p) for p in pairs),
              "numa_nodes": numa, "crosses_numa": len(numa) > 1, "message": None}
    if pairs and not result["all_nvlink"]:
        result["message"] = (
            "tensor parallelism over %s crosses %s (%s) between some of them: every layer's all-reduce goes "
            "over that path; pick GPUs joined by NVLink, or use pipeline parallelism across the slow link"
            % (", ".join(names), slowest, "the SMP interconnect between NUMA nodes" if slowest == "SYS"
               else "PCIe" if slowest in PCIE_PATHS else "an unknown link"))
    return result


def nvlink_groups(topo, size):
    """Disjoint groups of `size` GPUs, every pair NVLink-connected, taken greedily in index order:
    where tensor-parallel instances of that size can go. [] when none."""
    free = list(topo["gpus"])
    groups = []
    while len(free) >= size:
        group = [free[0]]
        for candidate in free[1:]:
            if len(group) == size:
                break
            if all(nvlink_count(link(topo, member, candidate)) for member in group):
                group.append(candidate)
        if len(group) < size:
            free.pop(0)
            continue
        groups.append(group)
        free = [g for g in free if g not in group]
    return groups


def placement_warnings(topo, instances):
    """Tensor-parallel instances placed across a slow link while NVLink-joined GPUs are free: [{name, gpus,
    slowest_link, better, message}]. instances: [{name, gpu_indexes}] as the vllm role resolved them (one
    GPU each needs no link); "free" = used by no other instance. GPUs topo -m does not list are skipped."""
    out = []
    used = dict((inst["name"], set(_gpu_name(int(i)) for i in inst.get("gpu_indexes") or [])) for inst in instances)
    for inst in instances:
        names = [_gpu_name(int(i)) for i in inst.get("gpu_indexes") or []]
        if len(names) < 2 or any(n not in topo["gpus"] for n in names):
            continue
        tp = check_tensor_parallel(topo, names)
        if tp["all_nvlink"]:
            continue
        others = set().union(*[g for n, g in used.items() if n != inst["name"]]) if len(used) > 1 else set()
        free = dict(topo, gpus=[g for g in topo["gpus"] if g not in others])
        better = nvlink_groups(free, len(names))
        if not better:
            continue
        indexes = [int(g[3:]) for g in better[0]]
        out.append({"name": inst["name"], "gpus": names, "slowest_link": tp["slowest_link"], "better": indexes,
                    "message": "instance %s: %s; GPUs %s are joined by NVLink and no other instance uses them: "
                               "gpus: %s" % (inst["name"], tp["message"], ", ".join(better[0]), indexes)})
    return out

# ---------------------------------------------------------------------------------------------
# Fabric (NVSwitch) state per GPU, from nvidia-smi -q or a grep -A excerpt of it


def _fabric_of(node, bus_id):
    health = node.find("Health")
    return {
        "pci_bus_id": bus_id,
        "state": node.get("State"),
        "status": node.get("Status"),
        "clique_id": node.get("CliqueId"),
        "cluster_uuid": node.get("ClusterUUID"),
        "health_summary": health.get("Summary") if health is not None else None,
        "health": {child.key: child.value for child in health.children} if health is not None else {},
    }


def parse_fabric(data):
    """Each GPU's Fabric block as a dict (pci_bus_id None in an excerpt without GPU sections).
    [] when the text has no Fabric block (drivers before about 550 print none)."""
    root = _q_tree(clean_text(data))
    fabrics = []
    gpu_sections = [(child, _Q_GPU.match(child.key).group(1)) for child in root.children
                    if _Q_GPU.match(child.key) and child.value is None]
    if gpu_sections:
        for section, bus_id in gpu_sections:
            node = section.find("Fabric")
            if node is not None:
                fabrics.append(_fabric_of(node, bus_id))
        return fabrics
    for node in root.walk():
        if node.key == "Fabric" and node.value is None:
            fabrics.append(_fabric_of(node, None))
    return fabrics


def parse_fabric_xml(data):
    """Each <gpu>'s <fabric> of `nvidia-smi -q -x`, in parse_fabric's form ([] before about 535, whose
    documents have no <fabric>)."""
    doc = _last_xml_document(clean_text(data).strip())[0]
    try:
        root = ET.fromstring(doc)
    except ET.ParseError as exc:
        raise TruncatedInput("XML is not well-formed (truncated or cut short?): %s" % exc)
    fabrics = []
    for gpu in root.findall("gpu"):
        node = gpu.find("fabric")
        if node is None:
            continue
        health = node.find("health")

        def text(tag, parent=node):
            child = parent.find(tag) if parent is not None else None
            return child.text.strip() if child is not None and child.text else None
        fabrics.append({
            "pci_bus_id": gpu.get("id"), "state": text("state"), "status": text("status"),
            "clique_id": text("cliqueId"), "cluster_uuid": text("clusterUuid"),
            "health_summary": text("summary", health),
            "health": {child.tag: (child.text or "").strip() for child in health} if health is not None else {},
        })
    return fabrics


def fabric_verdict(fabrics):
    """{state, gpus, message, fix} over every GPU's Fabric block:
    unknown (no Fabric block at all), not_applicable (no NVSwitch: State N/A), ready (Completed, Success, Health not
    Unhealthy), not_ready (Not Started / In Progress: the fabric manager has not set the fabric up),
    failed (Completed with another Status), unhealthy (Completed, Success, Health Summary Unhealthy)."""
    def names(rows):
        return [f["pci_bus_id"] or "GPU %d" % i for i, f in rows]

    rows = list(enumerate(fabrics or []))
    if not rows:
        return {"state": "unknown", "gpus": [], "fix": "read `nvidia-smi -q` of a driver that prints the Fabric block "
                "(about 550 and later)", "message": "no Fabric block in the output: the fabric state cannot be told"}
    managed = [(i, f) for i, f in rows if (f["state"] or "N/A") != "N/A"]
    if not managed:
        return {"state": "not_applicable", "gpus": [], "fix": None,
                "message": "no NVSwitch fabric (Fabric State N/A): this host needs no fabric manager"}
    waiting = [(i, f) for i, f in managed if f["state"] != "Completed"]
    if waiting:
        return {"state": "not_ready", "gpus": names(waiting),
                "message": "the NVSwitch fabric is not set up (State %s on %d GPU(s)): every CUDA program fails "
                           "with error 802 (system not yet initialized) while nvidia-smi looks healthy"
                           % (waiting[0][1]["state"], len(waiting)),
                "fix": "start nvidia-fabricmanager at exactly the driver's version (systemctl enable --now "
                       "nvidia-fabricmanager) and wait for State Completed"}
    failed = [(i, f) for i, f in managed if f["status"] != "Success"]
    if failed:
        return {"state": "failed", "gpus": names(failed),
                "message": "the fabric manager finished but the fabric is not usable (Status %s on %d GPU(s))"
                           % (failed[0][1]["status"], len(failed)),
                "fix": "read journalctl -u nvidia-fabricmanager and /var/log/fabricmanager.log; a GPU or NVSwitch "
                       "may need a reset or service"}
    unhealthy = [(i, f) for i, f in managed if (f["health_summary"] or "").lower() == "unhealthy"]
    if unhealthy:
        return {"state": "unhealthy", "gpus": names(unhealthy),
                "message": "the fabric is up but its Health Summary is Unhealthy on %d GPU(s)" % len(unhealthy),
                "fix": "check the Health block (Bandwidth, Route Unhealthy) and NVLink errors (nvidia-smi nvlink -e); "
                       "drain the host if bandwidth is degraded"}
    return {"state": "ready", "gpus": names(managed), "fix": None,
            "message": "the NVSwitch fabric is up on %d GPU(s) (State Completed, Status Success)" % len(managed)}
