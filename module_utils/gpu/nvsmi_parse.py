# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Form detection, and normalised GPU facts from every form of nvidia-smi output.

Pure stdlib (python >= 3.9), no Ansible imports: used by the nvidia_gpu_facts module (inside
AnsiballZ) and by `gpuhost smi`. Both reach the facts through facts_from_output() /
normalise(), so they agree on the same input.

Every public parser either returns a dict or raises ParseError (or a subclass); nothing else
escapes for any input (property-tested).

What an operator pastes is often less than a whole output: `head`, `grep -A`, one GPU of eight, a table
cut by the terminal. The module refuses such captures (TruncatedInput: a cut capture must not read as a
host with fewer GPUs), while `partial=True` (facts_from_output, parse_output and the form parsers;
`gpuhost smi`) reads what is there and says so: facts["partial"] is True and a warning names what is
missing.

The parser of each form has its own module: nvsmi_xml (-q -x), nvsmi_q (-q), nvsmi_table (the default
table), nvsmi_csv (--query-gpu / --query-compute-apps), nvsmi_list (-L, --version), nvsmi_error (error
texts), nvsmi_dmon (dmon, pmon), over nvsmi_common (the errors, value helpers and result shapes).
"""
import re

from ansible.module_utils.gpu.gpu_arch import datacenter_class, lookup as arch_lookup
from ansible.module_utils.gpu.nvsmi_common import ParseError, UnsupportedForm, clean_text, pci_address
from ansible.module_utils.gpu.nvsmi_csv import (
    COMPUTE_APPS_FIELDS, GPU_QUERY_FIELDS, GPU_QUERY_FIELDS_EXTENDED, csv_header_kind, parse_compute_apps_csv,
    parse_query_gpu_csv)
from ansible.module_utils.gpu.nvsmi_dmon import _DMON, _PMON, parse_dmon, parse_pmon
from ansible.module_utils.gpu.nvsmi_error import classify_error, parse_error
from ansible.module_utils.gpu.nvsmi_list import parse_list, parse_version
from ansible.module_utils.gpu.nvsmi_q import parse_q
from ansible.module_utils.gpu.nvsmi_table import _TABLE_HEADER, parse_table
from ansible.module_utils.gpu.nvsmi_xml import _XML_EXCERPT, parse_xml


STATES = ("ok", "no_gpu", "no_driver", "driver_not_loaded", "version_mismatch", "error")

FORMS = ("xml", "q", "table", "csv_query_gpu", "csv_compute_apps", "list", "version", "error",
         "dmon", "pmon", "csv_headerless")


# Other nvidia-smi outputs without device facts, named in the refusal instead of "not recognised"
# (detect_form still answers None for them; nothing is parsed).
_NO_FACTS = (
    (re.compile(r"^[ \t]*GPU0[ \t]+X(?:[ \t]|$)", re.M),
     "nvidia-smi topo output (a GPU/NIC connection matrix) has no device facts; "
     "capture 'nvidia-smi -q -x' for facts"),
    (re.compile(r"^\|[ \t]*(?:GPU|Compute) instance(?: profile)?s:[ \t]*\|", re.I | re.M),
     "nvidia-smi mig instance listing (-lgip/-lgi/-lcip/-lci) has no device facts; "
     "capture 'nvidia-smi -q -x' for facts"),
    (re.compile(r"^[ \t]*Fabric[ \t]*\n[ \t]+State[ \t]+:", re.M),
     "an excerpt of nvidia-smi -q (a 'Fabric' section without its 'GPU <bus id>' section): "
     "no device facts"),
)


# ---------------------------------------------------------------------------------------------
# form detection and normalisation


def detect_form(data):
    """Which nvidia-smi form the text is (one of FORMS), or None.

    Order matters: structured forms first, error texts last (a table may quote no error, but an
    error paste may contain a shell prompt).
    """
    text = clean_text(data)
    head = text.lstrip()[:2048]
    if head.startswith("<?xml") or "<nvidia_smi_log" in text[:4096] or _XML_EXCERPT.search(head):
        return "xml"
    if _TABLE_HEADER.search(text):
        return "table"
    if "NVSMI LOG" in text or re.search(r"^Attached GPUs\s+:", text, re.M):
        return "q"
    if _PMON.search(head):
        return "pmon"
    if _DMON.search(head):
        return "dmon"
    first = next((line for line in text.split("\n") if line.strip()), "")
    kind = csv_header_kind(first)
    if kind == "gpu":
        return "csv_query_gpu"
    if kind == "apps":
        return "csv_compute_apps"
    if _headerless_fields(first) is not None:
        return "csv_query_gpu" if _headerless_fields(first) == GPU_QUERY_FIELDS else "csv_compute_apps"
    if re.search(r"^GPU \d+: .*\(UUID: ", text, re.M):
        return "list"
    if re.search(r"^[ \t]*NVIDIA-SMI version\s*:", head, re.M | re.I):
        return "version"
    if classify_error(text) is not None:
        return "error"
    if _looks_like_headerless_csv(text):
        return "csv_headerless"
    if re.search(r"^[ \t]*Clocks (?:Event|Throttle) Reasons[ \t]*$", text, re.M):
        return "q"  # an excerpt: parse_q refuses it with a clear reason
    return None


def _looks_like_headerless_csv(text):
    lines = [line for line in text.split("\n") if line.strip()][:20]
    commas = set(line.count(",") for line in lines)
    return bool(lines) and len(commas) == 1 and commas.pop() >= 1


def _headerless_fields(first_line):
    """The module's own field list when a header-less CSV line matches it, else None."""
    cells = [c.strip() for c in first_line.split(",")]
    if len(cells) == len(GPU_QUERY_FIELDS) and cells[0].isdigit() and cells[2].startswith("GPU-"):
        return GPU_QUERY_FIELDS
    if len(cells) == len(GPU_QUERY_FIELDS_EXTENDED) and cells[0].isdigit() and cells[2].startswith("GPU-"):
        return GPU_QUERY_FIELDS_EXTENDED
    if len(cells) == len(COMPUTE_APPS_FIELDS) and re.match(r"^(GPU|MIG)-", cells[0]) and cells[2].isdigit():
        return COMPUTE_APPS_FIELDS
    return None


def _parse_csv_auto(text, kind, partial=False):
    first = next((line for line in text.split("\n") if line.strip()), "")
    fields = None if csv_header_kind(first) else _headerless_fields(first)
    if kind == "csv_query_gpu":
        return parse_query_gpu_csv(text, fields, partial)
    return parse_compute_apps_csv(text, fields, partial)


def _embedded_csv(text):
    """(line number, the CSV) of a --query-gpu / --query-compute-apps CSV inside a paste whose first line is
    something else (a shell prompt, another command's output), or None. The CSV runs from its header line
    to the first line with another number of commas that is not a repeated header."""
    lines = text.split("\n")
    for number, line in enumerate(lines):
        if not csv_header_kind(line.strip()):
            continue
        block = [line]
        for row in lines[number + 1:]:
            if not row.strip() or row.count(",") != line.count(","):
                break
            block.append(row)
        if len(block) > 1:
            return number + 1, "\n".join(block) + "\n"
    return None


def parse_output(data, partial=False):
    """Detect the form and parse it into a raw facts dict; ParseError for anything else.
    partial=True: an excerpt or a capture cut short is read as far as it goes (facts["partial"])."""
    text = clean_text(data)
    if not text.strip():
        raise ParseError("empty input")
    form = detect_form(text)
    if form is None and partial:
        found = _embedded_csv(text)
        if found is not None:
            number, block = found
            result = _parse_csv_auto(clean_text(block), "csv_query_gpu" if csv_header_kind(
                block.split("\n", 1)[0].strip()) == "gpu" else "csv_compute_apps", partial)
            result["warnings"].append("the CSV starts at line %d of the paste; the lines around it were not read"
                                      % number)
            return result
    if form is None:
        for regex, reason in _NO_FACTS:
            if regex.search(text):
                raise UnsupportedForm(reason)
        raise ParseError("not a recognised nvidia-smi output")
    if form == "csv_headerless":
        raise UnsupportedForm("CSV without a header line and not the module's field list: the columns "
                              "are unknown (capture with --format=csv, without noheader)")
    if form == "dmon":
        return parse_dmon(text)
    if form == "pmon":
        return parse_pmon(text)
    if form == "xml":
        return parse_xml(text, partial)
    if form == "table":
        return parse_table(text, partial)
    if form == "q":
        return parse_q(text, partial)
    if form in ("csv_query_gpu", "csv_compute_apps"):
        return _parse_csv_auto(text, form, partial)
    if form == "list":
        return parse_list(text)
    if form == "version":
        return parse_version(text)
    return parse_error(text)


def _join_processes(result):
    """Fill each process's gpu_index / pci_bus_id / gpu_uuid from the GPU it runs on."""
    by_index = {g["index"]: g for g in result["gpus"] if g["index"] is not None}
    by_bus = {pci_address(g["pci_bus_id"]): g for g in result["gpus"] if g["pci_bus_id"]}
    by_uuid = {g["uuid"]: g for g in result["gpus"] if g["uuid"]}
    for proc in result["processes"]:
        gpu = None
        if proc["gpu_uuid"] and proc["gpu_uuid"] in by_uuid and len(by_uuid) == len(result["gpus"]):
            gpu = by_uuid[proc["gpu_uuid"]]
        if gpu is None and proc["pci_bus_id"]:
            gpu = by_bus.get(pci_address(proc["pci_bus_id"]))
        if gpu is None and proc["gpu_index"] is not None:
            gpu = by_index.get(proc["gpu_index"])
        if gpu is None:
            continue
        if proc["gpu_index"] is None:
            proc["gpu_index"] = gpu["index"]
        proc["pci_bus_id"] = proc["pci_bus_id"] or gpu["pci_bus_id"]
        proc["gpu_uuid"] = proc["gpu_uuid"] or gpu["uuid"]


def _memory_warnings(result):
    # Forms that never carry a process list cannot show a blind one.
    if result["form"] in ("list", "version", "error", "csv_compute_apps", "csv_query_gpu", "dmon") \
            and not result.get("processes_merged"):
        return
    if result.get("partial") and not result["processes"]:
        return  # an excerpt may stop before its process list
    used = [g["memory_used_mib"] for g in result["gpus"] if g["memory_used_mib"] is not None]
    held = sum(used)
    attributed = sum(p["used_mib"] or 0 for p in result["processes"])
    # ~4 MiB per GPU is driver-only; far more with nothing listed means the list is blind
    # (a container's PID namespace) or a process died holding memory (zombie).
    if held > 256 * max(1, len(used)) and not result["processes"]:
        result["warnings"].append(
            "GPUs hold %d MiB but no process is listed (container PID namespace, or a zombie holder)" % held)
    elif result["processes"] and attributed == 0 and held > 256 * max(1, len(used)) and \
            any(p["used_mib"] == 0 for p in result["processes"]):
        result["warnings"].append(
            "processes show 0 MiB while GPUs hold %d MiB: per-process memory is unreliable here "
            "(container PID namespace)" % held)


def normalise(raw):
    """Raw parser output -> normalised facts: architecture filled in, processes joined to GPUs.

    The single normalisation step shared by the module and the CLI.
    """
    result = dict(raw)
    result["gpus"] = [dict(g) for g in raw.get("gpus", [])]
    result["processes"] = [dict(p) for p in raw.get("processes", [])]
    result["warnings"] = list(raw.get("warnings", []))
    for gpu in result["gpus"]:
        if gpu["pci_bus_id"]:
            gpu["pci_address"] = pci_address(gpu["pci_bus_id"])
        if gpu["pci_device_id"]:
            gpu["pci_id"] = "10de:" + gpu["pci_device_id"][2:]
        arch = arch_lookup(gpu["pci_device_id"], gpu["name"])
        if arch:
            gpu["architecture"] = gpu["architecture"] or arch["architecture"]
            gpu["compute_capability"] = gpu["compute_capability"] or arch["compute_capability"]
            gpu["min_driver_branch"] = arch["min_driver_branch"]
            gpu["open_kernel_modules_required"] = arch["open_kernel_modules_required"]
        # CUDA forward compatibility works only on datacenter parts (gpu_arch.datacenter_class).
        gpu["datacenter"] = datacenter_class(gpu["pci_device_id"], gpu["name"], gpu.get("product_brand"))
    for gpu in result["gpus"]:
        if gpu["driver_model"] == "WDDM":
            result["warnings"].append(
                "GPU %s runs the Windows WDDM driver model: no persistence mode, per-process "
                "memory not reported" % gpu["index"])
    _join_processes(result)
    _memory_warnings(result)
    if result["state"] == "ok" and not result["gpus"] and result["form"] not in ("version", "csv_compute_apps") \
            and not result.get("partial"):
        result["state"] = "error"
        result["message"] = "nvidia-smi listed no GPUs"
    return result


def facts_from_output(data, partial=False):
    """Detect, parse and normalise one nvidia-smi output. Raises ParseError. partial=True: read an excerpt or a
    capture cut short as far as it goes (facts["partial"], a warning says what is missing)."""
    return normalise(parse_output(data, partial))


def merge_mig_listing(facts, listing):
    """The MIG devices' profile names and UUIDs from `nvidia-smi -L` (listing: its text or parse_list's result) put
    on the facts' MIG devices (from -q / -q -x, which have neither), each matched by GPU index and MIG device index
    (`Device N`); every MIG device also gets its GPU's index (`gpu_index`). Returns new facts."""
    listed = parse_list(listing) if isinstance(listing, str) else listing
    names = dict(((gpu["index"], dev["index"]), dev) for gpu in listed.get("gpus", []) for dev in gpu["mig_devices"])
    merged = dict(facts)
    merged["gpus"] = []
    for gpu in facts.get("gpus", []):
        devices = []
        for dev in gpu.get("mig_devices") or []:
            seen = names.get((gpu["index"], dev["index"])) or {}
            devices.append(dict(dev, gpu_index=gpu["index"], profile=dev.get("profile") or seen.get("profile"),
                                uuid=dev.get("uuid") or seen.get("uuid")))
        merged["gpus"].append(dict(gpu, mig_devices=devices))
    return merged


def merge_processes(facts, apps_facts):
    """Attach processes from a --query-compute-apps capture to query-gpu facts (module CSV path)."""
    merged = dict(facts)
    merged["processes"] = [dict(p) for p in apps_facts.get("processes", [])]
    merged["warnings"] = list(facts.get("warnings", []))
    merged["processes_merged"] = True
    _join_processes(merged)
    _memory_warnings(merged)
    return merged
