# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parsers for every form of nvidia-smi output, form detection, and normalised GPU facts.

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
"""
import csv
import html
import re
import xml.etree.ElementTree as ET

from ansible.module_utils.diagnosis import error_catalogue as catalogue
from ansible.module_utils.gpu.gpu_arch import datacenter_class, lookup as arch_lookup, normalise_device_id


class ParseError(ValueError):
    """The input is not a complete nvidia-smi output that these parsers understand."""


class UnsupportedForm(ParseError):
    """A recognised nvidia-smi form that carries no device facts (dmon, pmon, -q excerpts, topo, mig)."""


class TruncatedInput(ParseError):
    """A recognised form that stops before its end (a capture cut short)."""


STATES = ("ok", "no_gpu", "no_driver", "driver_not_loaded", "version_mismatch", "error")

FORMS = ("xml", "q", "table", "csv_query_gpu", "csv_compute_apps", "list", "version", "error",
         "dmon", "pmon", "csv_headerless")

# Field lists the module asks for in its CSV fallback; the CLI recognises headerless CSV
# only when it has exactly these columns.
GPU_QUERY_FIELDS = (
    "index", "name", "uuid", "pci.bus_id", "pci.device_id", "driver_version",
    "persistence_mode", "compute_mode", "memory.total", "memory.used", "memory.free",
    "utilization.gpu", "power.draw", "power.limit", "temperature.gpu",
)
GPU_QUERY_FIELDS_EXTENDED = GPU_QUERY_FIELDS + ("mig.mode.current", "compute_cap")
COMPUTE_APPS_FIELDS = ("gpu_uuid", "gpu_bus_id", "pid", "process_name", "used_memory")

# nvidia-smi's clocks (throttle|event) reasons, canonical names. "Clocks Throttle Reasons"
# became "Clocks Event Reasons" in 535; both spellings map here.
CLOCK_REASONS = (
    "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
    "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
    "display_clocks_setting",
)
# NVML nvmlClocksEventReason* bit values, in the order of CLOCK_REASONS (0x1 .. 0x100).
_CLOCK_REASON_BITS = tuple((1 << i, name) for i, name in enumerate(CLOCK_REASONS))
_Q_REASON_LABELS = {
    "idle": "gpu_idle",
    "gpu idle": "gpu_idle",
    "applications clocks setting": "applications_clocks_setting",
    "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown",
    "hw thermal slowdown": "hw_thermal_slowdown",
    "hw power brake slowdown": "hw_power_brake_slowdown",
    "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal_slowdown",
    "display clock setting": "display_clocks_setting",
    "display clocks setting": "display_clocks_setting",
}

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_BUS_ID = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"
_BUS_ID_RE = re.compile(r"^" + _BUS_ID + r"$")
_NA_VALUES = frozenset((
    "", "n/a", "na", "none", "not supported", "unknown error", "unknown", "insufficient permissions",
    "requested functionality has been deprecated", "not available in wddm driver model",
    "gpu is lost", "-", "not found",
))


# ---------------------------------------------------------------------------------------------
# small value helpers


class _CleanText(str):
    """A str clean_text() already produced, so the next parser in the chain skips the work."""


def clean_text(data):
    """Text from bytes or str: UTF-8 (invalid bytes replaced), no BOM, no ANSI colour, LF only."""
    if isinstance(data, _CleanText):
        return data
    if isinstance(data, (bytes, bytearray)):
        data = bytes(data).decode("utf-8", "replace")
    if not isinstance(data, str):
        raise ParseError("input is not text")
    text = data
    if "\r" in text:  # membership tests are far cheaper than no-op replaces on a 1 MB capture
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "\x00" in text:
        text = text.replace("\x00", "")
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return _CleanText(text)


def _value(raw):
    """Stripped value, or None for nvidia-smi's many spellings of 'no value'."""
    if raw is None:
        return None
    text = " ".join(str(raw).split())
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1].strip()
    if text.lower() in _NA_VALUES or text.lower().startswith("not available"):
        return None
    return text


def _strip_deprecation(raw):
    """'610.62 [Deprecated; will be removed ...]' -> '610.62' (driver 610+ -q header)."""
    text = _value(raw)
    if text is None:
        return None
    text = re.sub(r"\s*\[[^\]]*\]\s*$", "", text).strip()
    if not text or text.lower().startswith("deprecated"):
        return None
    return text


_NUMBER = re.compile(r"^[-+]?\d+(?:\.\d+)?")


def _number(raw):
    text = _value(raw)
    if text is None:
        return None
    match = _NUMBER.match(text.replace(",", ""))
    if not match:
        return None
    try:
        return float(match.group(0))
    except ValueError:
        return None


def _int(raw):
    num = _number(raw)
    return None if num is None else int(num)


def _float(raw):
    num = _number(raw)
    return None if num is None else round(num, 2)


def _mib(raw):
    """'81559 MiB' / '81559MiB' / '81559' / '1.5 GiB' -> MiB as int; None when not a size."""
    text = _value(raw)
    if text is None:
        return None
    num = _number(text)
    if num is None:
        return None
    unit = text.replace(",", "")[len(_NUMBER.match(text.replace(",", "")).group(0)):].strip().lower()
    scale = {"": 1, "mib": 1, "mb": 1, "gib": 1024, "gb": 1024, "kib": 1.0 / 1024, "kb": 1.0 / 1024}
    if unit not in scale:
        return None
    return int(round(num * scale[unit]))


def _mode(raw):
    """Enabled/On/Yes -> True, Disabled/Off/No -> False, else None."""
    text = _value(raw)
    if text is None:
        return None
    low = text.lower()
    if low in ("enabled", "enable", "on", "yes", "true", "1"):
        return True
    if low in ("disabled", "disable", "off", "no", "false", "0"):
        return False
    return None


def _active(raw):
    text = _value(raw)
    if text is None:
        return None
    low = text.lower()
    if low == "active":
        return True
    if low == "not active":
        return False
    return None


_COMPUTE_MODES = {
    "default": "Default", "exclusive_process": "Exclusive_Process", "e. process": "Exclusive_Process",
    "exclusive_thread": "Exclusive_Thread", "e. thread": "Exclusive_Thread",
    "prohibited": "Prohibited",
}


def _compute_mode(raw):
    text = _value(raw)
    if text is None:
        return None
    return _COMPUTE_MODES.get(text.lower(), text)


def pci_ids(raw):
    """nvidia-smi 'pci.device_id' ('0x233010DE' / '2BB410DE') -> ('0x2330', '0x10de') or (None, None)."""
    text = _value(raw)
    if text is None:
        return None, None
    dev = normalise_device_id(text)
    if dev is None:
        return None, None
    return "0x" + dev, "0x10de"


def pci_address(bus_id):
    """nvidia-smi bus id '00000000:61:00.0' -> sysfs/lspci -D form '0000:61:00.0' (lower case)."""
    if not isinstance(bus_id, str):
        return None
    text = bus_id.strip()
    match = re.match(r"^(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])$", text)
    if not match:
        return None
    domain = int(match.group(1) or "0", 16)
    return "%04x:%s:%s.%s" % (domain, match.group(2).lower(), match.group(3).lower(), match.group(4))


def _new_gpu(index):
    """Every GPU dict has every key, so consumers never need .get()."""
    return {
        "index": index, "name": None, "product_brand": None, "datacenter": None, "uuid": None,
        "pci_bus_id": None, "pci_address": None,
        "pci_device_id": None, "pci_vendor_id": None, "pci_id": None, "minor_number": None,
        "architecture": None, "compute_capability": None, "min_driver_branch": None,
        "open_kernel_modules_required": None,
        "memory_total_mib": None, "memory_used_mib": None, "memory_free_mib": None,
        "memory_reserved_mib": None, "persistence_mode": None, "driver_model": None,
        "compute_mode": None, "mig_mode": None, "mig_mode_pending": None, "mig_devices": [],
        "utilization_gpu": None,
        "utilization_memory": None, "power_draw_w": None, "power_limit_w": None,
        "temperature_c": None, "fan_speed_pct": None, "performance_state": None,
        "clocks_event_reasons_active": None,
    }


def _new_process():
    return {"pid": None, "name": None, "used_mib": None, "type": None, "gpu_index": None,
            "pci_bus_id": None, "gpu_uuid": None, "gpu_instance_id": None,
            "compute_instance_id": None}


def _new_result(form):
    return {"form": form, "schema": None, "state": "ok", "message": None,
            "driver_version": None, "cuda_driver_version": None, "nvml_version": None,
            "attached_gpus": None, "samples": 1, "gpus": [], "processes": [], "warnings": [],
            "partial": False}


def _cut_short(result, partial, message):
    """A capture that stops early (or an excerpt): TruncatedInput, or with partial=True a note on the
    facts read so far (result["partial"], and a warning naming what is missing)."""
    if not partial:
        raise TruncatedInput(message)
    result["partial"] = True
    result["warnings"].append("partial capture: %s; the facts cover only what was pasted"
                              % message.replace(" (truncated?)", "").replace("; truncated?", ""))


def _decode_reason_mask(raw):
    text = _value(raw)
    if text is None:
        return None
    try:
        mask = int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None
    return [name for bit, name in _CLOCK_REASON_BITS if mask & bit]


# ---------------------------------------------------------------------------------------------
# -q -x (XML, nvsmi_device_v10 .. v13)


def _xtext(node, *paths):
    """First non-N/A text among child paths ('fb_memory_usage/total'), stripped."""
    if node is None:
        return None
    for path in paths:
        child = node.find(path)
        if child is not None:
            value = _value(child.text)
            if value is not None:
                return value
    return None


def _xml_reasons(gpu_node):
    for tag, prefix in (("clocks_event_reasons", "clocks_event_reason_"),
                        ("clocks_throttle_reasons", "clocks_throttle_reason_")):
        node = gpu_node.find(tag)
        if node is None:
            continue
        active = []
        for child in node:
            name = child.tag[len(prefix):] if child.tag.startswith(prefix) else child.tag
            if name == "display_clock_setting":
                name = "display_clocks_setting"
            if _active(child.text):
                active.append(name)
        return active
    return None


def _xml_gpu(node, index, warnings):
    gpu = _new_gpu(index)
    gpu["name"] = _xtext(node, "product_name")
    gpu["product_brand"] = _xtext(node, "product_brand")
    gpu["uuid"] = _xtext(node, "uuid")
    gpu["pci_bus_id"] = _xtext(node, "pci/pci_bus_id") or _value(node.get("id"))
    raw_dev = _xtext(node, "pci/pci_device_id")
    gpu["pci_device_id"], gpu["pci_vendor_id"] = pci_ids(raw_dev)
    if raw_dev is not None and gpu["pci_device_id"] is None:
        warnings.append("GPU %d: PCI device id %r is not an NVIDIA id (masked capture?)" % (index, raw_dev))
    gpu["minor_number"] = _int(_xtext(node, "minor_number"))
    gpu["architecture"] = _xtext(node, "product_architecture")
    gpu["memory_total_mib"] = _mib(_xtext(node, "fb_memory_usage/total"))
    gpu["memory_used_mib"] = _mib(_xtext(node, "fb_memory_usage/used"))
    gpu["memory_free_mib"] = _mib(_xtext(node, "fb_memory_usage/free"))
    gpu["memory_reserved_mib"] = _mib(_xtext(node, "fb_memory_usage/reserved"))
    gpu["persistence_mode"] = _mode(_xtext(node, "persistence_mode"))
    gpu["driver_model"] = _xtext(node, "driver_model/current_dm")
    gpu["compute_mode"] = _compute_mode(_xtext(node, "compute_mode"))
    gpu["mig_mode"] = _mode(_xtext(node, "mig_mode/current_mig"))
    gpu["mig_mode_pending"] = _mode(_xtext(node, "mig_mode/pending_mig"))
    gpu["utilization_gpu"] = _int(_xtext(node, "utilization/gpu_util"))
    gpu["utilization_memory"] = _int(_xtext(node, "utilization/memory_util"))
    power = node.find("gpu_power_readings")
    if power is None:
        power = node.find("power_readings")
    gpu["power_draw_w"] = _float(_xtext(power, "power_draw", "average_power_draw", "instant_power_draw"))
    gpu["power_limit_w"] = _float(_xtext(power, "current_power_limit", "enforced_power_limit", "power_limit"))
    gpu["temperature_c"] = _int(_xtext(node, "temperature/gpu_temp"))
    gpu["fan_speed_pct"] = _int(_xtext(node, "fan_speed"))
    gpu["performance_state"] = _xtext(node, "performance_state")
    gpu["clocks_event_reasons_active"] = _xml_reasons(node)
    migs = node.find("mig_devices")
    if migs is not None:
        for mig in migs.findall("mig_device"):
            gpu["mig_devices"].append({
                "index": _int(_xtext(mig, "index")),
                "gpu_instance_id": _int(_xtext(mig, "gpu_instance_id")),
                "compute_instance_id": _int(_xtext(mig, "compute_instance_id")),
                "profile": None, "uuid": None,
                "multiprocessor_count": _int(_xtext(mig, "device_attributes/shared/multiprocessor_count")),
                "memory_total_mib": _mib(_xtext(mig, "fb_memory_usage/total")),
                "memory_used_mib": _mib(_xtext(mig, "fb_memory_usage/used")),
            })
    processes = []
    procs = node.find("processes")
    if procs is not None:
        for info in procs.findall("process_info"):
            proc = _new_process()
            proc["pid"] = _int(_xtext(info, "pid"))
            proc["name"] = _xtext(info, "process_name")
            proc["used_mib"] = _mib(_xtext(info, "used_memory"))
            proc["type"] = _xtext(info, "type")
            proc["gpu_instance_id"] = _int(_xtext(info, "gpu_instance_id"))
            proc["compute_instance_id"] = _int(_xtext(info, "compute_instance_id"))
            proc["gpu_index"] = index
            proc["pci_bus_id"] = gpu["pci_bus_id"]
            proc["gpu_uuid"] = gpu["uuid"]
            processes.append(proc)
    return gpu, processes


def _last_xml_document(text):
    """Two captures appended in one file: keep the last complete <nvidia_smi_log> document."""
    first, last = text.find("<?xml"), text.rfind("<?xml")
    if last > first >= 0:
        return text[last:], text.count("<?xml")
    return text, 1


# Sections no fact comes from. <supported_clocks> alone is ~90 % of a v13 document (fixture
# 043: 1700 of 2000 lines); cutting it before expat makes an 8-GPU parse ~7x faster.
_UNUSED_XML_SECTIONS = ("supported_clocks",)


def _drop_unused_sections(doc):
    for tag in _UNUSED_XML_SECTIONS:
        opening, closing = "<%s>" % tag, "</%s>" % tag
        if opening not in doc:
            continue
        parts, pos = [], 0
        while True:
            start = doc.find(opening, pos)
            end = doc.find(closing, start) if start >= 0 else -1
            if start < 0 or end < 0:
                break  # an unclosed section stays, so expat still reports the truncation
            parts.append(doc[pos:start])
            pos = end + len(closing)
        parts.append(doc[pos:])
        doc = "".join(parts)
    return doc


_XML_TOKEN = re.compile(r"<!--.*?-->|<\?.*?\?>|<![^>]*>|"
                        r"<(/?)([A-Za-z_][\w.:-]*)((?:\s+[\w.:-]+\s*=\s*\"[^\"]*\")*)\s*(/?)>", re.S)
_XML_ATTRIBUTE = re.compile(r"([\w.:-]+)\s*=\s*\"([^\"]*)\"")
# Tags whose presence tells an excerpt of `-q -x` (the header, a <gpu> block) without its document.
_XML_EXCERPT = re.compile(r"^[ \t]*<(?:gpu id=\"|driver_version>|cuda_version>|attached_gpus>|product_name>|"
                          r"fb_memory_usage>)", re.M)


def _lenient_xml_root(doc):
    """An <nvidia_smi_log> element from the tags there are: an excerpt without its root, or a document cut
    short (every element still open at the end is closed there; a stray closing tag is skipped)."""
    root = ET.Element("nvidia_smi_log")
    stack, pos = [root], 0
    for match in _XML_TOKEN.finditer(doc):
        between = doc[pos:match.start()]
        pos = match.end()
        if between.strip() and len(stack) > 1:
            node = stack[-1]
            node.text = (node.text or "") + html.unescape(between)
        closing, tag, attributes, empty = match.group(1), match.group(2), match.group(3), match.group(4)
        if not tag:
            continue
        if closing:
            for depth in range(len(stack) - 1, 0, -1):
                if stack[depth].tag == tag:
                    del stack[depth:]
                    break
            continue
        if tag == "nvidia_smi_log" and len(stack) == 1:
            continue
        node = ET.SubElement(stack[-1], tag, dict((k, html.unescape(v)) for k, v in
                                                  _XML_ATTRIBUTE.findall(attributes or "")))
        if not empty:
            stack.append(node)
    return root


def parse_xml(data, partial=False):
    """`nvidia-smi -q -x` (DTD nvsmi_device_v10..v13) -> raw facts dict. partial=True: an excerpt of the
    document (no root) or a document cut short is read as far as it goes."""
    text = clean_text(data).strip()
    doc, samples = _last_xml_document(text)
    cut = None
    try:
        root = ET.fromstring(_drop_unused_sections(doc))
    except ET.ParseError as exc:
        if not partial:
            raise TruncatedInput("XML is not well-formed (truncated or cut short?): %s" % exc)
        root, cut = _lenient_xml_root(_drop_unused_sections(doc)), "the XML is an excerpt or cut short (%s)" % exc
    except Exception as exc:  # expat can also raise ValueError/LookupError on odd declarations
        raise ParseError("XML could not be read: %s" % exc)
    if root.tag != "nvidia_smi_log":
        if not partial:
            raise ParseError("XML root is <%s>, not <nvidia_smi_log>" % root.tag[:40])
        excerpt = ET.Element("nvidia_smi_log")
        excerpt.append(root)
        root, cut = excerpt, "the XML is an excerpt (its root is <%s>)" % root.tag[:40]
    result = _new_result("xml")
    if cut:
        _cut_short(result, partial, cut)
    result["samples"] = samples
    schema = re.search(r"nvsmi_device_(v\d+)\.dtd", doc[:400])
    result["schema"] = schema.group(1) if schema else None
    result["driver_version"] = _strip_deprecation(_xtext(root, "kmd_version")) or \
        _strip_deprecation(_xtext(root, "driver_version"))
    result["cuda_driver_version"] = _strip_deprecation(_xtext(root, "cuda_umd_version")) or \
        _strip_deprecation(_xtext(root, "cuda_version"))
    result["attached_gpus"] = _int(_xtext(root, "attached_gpus"))
    for index, node in enumerate(root.findall("gpu")):
        gpu, processes = _xml_gpu(node, index, result["warnings"])
        result["gpus"].append(gpu)
        result["processes"].extend(processes)
    if result["attached_gpus"] is not None and result["attached_gpus"] != len(result["gpus"]):
        result["warnings"].append(
            "attached_gpus says %s but the document has %d <gpu> element(s) (trimmed capture?)"
            % (result["attached_gpus"], len(result["gpus"])))
    return result


# ---------------------------------------------------------------------------------------------
# -q (text)

_Q_SEPARATOR = re.compile(r"\s:(?= |$)")  # "Key<spaces>: value"; keys never contain " :"
_Q_GPU = re.compile(r"^GPU (" + _BUS_ID + r")$")


class _QNode(object):
    __slots__ = ("key", "value", "children", "indent")

    def __init__(self, key, value, indent):
        self.key, self.value, self.indent, self.children = key, value, indent, []

    def find(self, *keys):
        """First child whose key equals one of keys (case-insensitive)."""
        wanted = [k.lower() for k in keys]
        for key in wanted:
            for child in self.children:
                if child.key.lower() == key:
                    return child
        return None

    def get(self, *path):
        node = self
        for key in path:
            node = node.find(key) if node is not None else None
        return None if node is None else node.value

    def walk(self):
        """All descendants, depth first; iterative so deep indentation cannot overflow the stack."""
        stack = list(reversed(self.children))
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))


def _q_tree(text):
    root = _QNode("", None, -1)
    stack = [root]
    for line in text.split("\n"):
        if not line.strip() or line.strip().startswith("=====") and "NVSMI LOG" in line:
            continue
        line = line.expandtabs(4).rstrip()
        body = line.lstrip(" ")
        indent = len(line) - len(body)
        # Linear split (a regex with two free-width parts backtracks badly on long lines).
        sep = _Q_SEPARATOR.search(body)
        if sep and body[:sep.start()].strip():
            key, value = body[:sep.start()].strip(), body[sep.end():].strip()
        else:
            key, value = body.strip(), None
        if not key:
            continue
        node = _QNode(key, value, indent)
        while len(stack) > 1 and stack[-1].indent >= indent:
            stack.pop()
        stack[-1].children.append(node)
        stack.append(node)
    return root


def _q_reasons(section):
    if section is None:
        return None
    active = []
    for node in section.walk():
        name = _Q_REASON_LABELS.get(node.key.lower())
        if name and _active(node.value):
            active.append(name)
    return active


def _q_gpu(section, index, bus_id):
    gpu = _new_gpu(index)
    gpu["name"] = _value(section.get("Product Name"))
    gpu["product_brand"] = _value(section.get("Product Brand"))
    gpu["uuid"] = _value(section.get("GPU UUID"))
    gpu["pci_bus_id"] = _value(section.get("PCI", "Bus Id")) or bus_id
    gpu["pci_device_id"], gpu["pci_vendor_id"] = pci_ids(section.get("PCI", "Device Id"))
    gpu["minor_number"] = _int(section.get("Minor Number"))
    gpu["architecture"] = _value(section.get("Product Architecture"))
    gpu["memory_total_mib"] = _mib(section.get("FB Memory Usage", "Total"))
    gpu["memory_used_mib"] = _mib(section.get("FB Memory Usage", "Used"))
    gpu["memory_free_mib"] = _mib(section.get("FB Memory Usage", "Free"))
    gpu["memory_reserved_mib"] = _mib(section.get("FB Memory Usage", "Reserved"))
    gpu["persistence_mode"] = _mode(section.get("Persistence Mode"))
    gpu["driver_model"] = _value(section.get("Driver Model", "Current"))
    gpu["compute_mode"] = _compute_mode(section.get("Compute Mode"))
    gpu["mig_mode"] = _mode(section.get("MIG Mode", "Current"))
    gpu["mig_mode_pending"] = _mode(section.get("MIG Mode", "Pending"))
    gpu["utilization_gpu"] = _int(section.get("Utilization", "GPU"))
    gpu["utilization_memory"] = _int(section.get("Utilization", "Memory"))
    power = section.find("GPU Power Readings", "Power Readings")
    if power is not None:
        draws, limits = {}, {}
        for node in power.walk():
            key = node.key.lower()
            if key in ("power draw", "average power draw", "instantaneous power draw"):
                draws.setdefault(key, node.value)
            elif key in ("current power limit", "enforced power limit", "power limit"):
                limits.setdefault(key, node.value)
        gpu["power_draw_w"] = _float(draws.get("power draw") or draws.get("average power draw")
                                     or draws.get("instantaneous power draw"))
        gpu["power_limit_w"] = _float(limits.get("current power limit") or limits.get("enforced power limit")
                                      or limits.get("power limit"))
    gpu["temperature_c"] = _int(section.get("Temperature", "GPU Current Temp"))
    gpu["fan_speed_pct"] = _int(section.get("Fan Speed"))
    gpu["performance_state"] = _value(section.get("Performance State"))
    gpu["clocks_event_reasons_active"] = _q_reasons(
        section.find("Clocks Event Reasons", "Clocks Throttle Reasons"))
    for child in section.children:
        if child.key.lower() != "mig device":
            continue
        gpu["mig_devices"].append({
            "index": _int(child.get("Index")),
            "gpu_instance_id": _int(child.get("GPU Instance ID")),
            "compute_instance_id": _int(child.get("Compute Instance ID")),
            "profile": None, "uuid": None,
            "multiprocessor_count": _int(child.get("Device Attributes", "Shared", "Multiprocessor count")),
            "memory_total_mib": _mib(child.get("Shared FB Memory Usage", "Total") or child.get("FB Memory Usage", "Total")),
            "memory_used_mib": _mib(child.get("Shared FB Memory Usage", "Used") or child.get("FB Memory Usage", "Used")),
        })
    processes = []
    section_procs = section.find("Processes")
    pending = {}
    for child in (section_procs.children if section_procs is not None else ()):
        key = child.key.lower()
        if key == "gpu instance id":
            pending["gpu_instance_id"] = _int(child.value)
        elif key == "compute instance id":
            pending["compute_instance_id"] = _int(child.value)
        elif key == "process id":
            proc = _new_process()
            proc.update(pending)
            pending = {}
            proc["pid"] = _int(child.value)
            proc["type"] = _value(child.get("Type"))
            proc["name"] = _value(child.get("Name"))
            proc["used_mib"] = _mib(child.get("Used GPU Memory"))
            proc["gpu_index"], proc["pci_bus_id"], proc["gpu_uuid"] = index, gpu["pci_bus_id"], gpu["uuid"]
            processes.append(proc)
    return gpu, processes, section_procs is not None


def _has_facts(gpu):
    return any(value not in (None, []) for key, value in gpu.items() if key != "index")


def parse_q(data, partial=False):
    """`nvidia-smi -q` text -> raw facts dict. partial=True: an excerpt (`grep -A`, `-d MEMORY` cut, one GPU
    section of several, a section without its end) is read as far as it goes; an excerpt without any
    'GPU <bus id>' line reads as one GPU whose index is unknown."""
    text = clean_text(data)
    root = _q_tree(text)
    result = _new_result("q")
    result["driver_version"] = _strip_deprecation(root.get("KMD Version")) or \
        _strip_deprecation(root.get("Driver Version"))
    result["cuda_driver_version"] = _strip_deprecation(root.get("CUDA UMD Version")) or \
        _strip_deprecation(root.get("CUDA Version"))
    result["attached_gpus"] = _int(root.get("Attached GPUs"))
    sections = []
    for child in root.children:
        match = _Q_GPU.match(child.key)
        if match and child.value is None:
            sections.append((child, match.group(1)))
    if not sections:
        if result["attached_gpus"] == 0:
            return result
        if "NVSMI LOG" not in text and result["driver_version"] is None:
            if not partial:
                raise UnsupportedForm("an excerpt of nvidia-smi -q (no 'GPU <bus id>' section): no device facts")
            gpu, processes, _has_processes = _q_gpu(root, None, None)
            if _has_facts(gpu):
                result["gpus"].append(gpu)
                result["processes"].extend(processes)
            _cut_short(result, partial, "an excerpt of nvidia-smi -q without its 'GPU <bus id>' line: which GPU "
                                        "it shows is not known")
            return result
        _cut_short(result, partial, "-q text has no 'GPU <bus id>' section (truncated?)")
        return result
    last_has_processes = True
    for index, (section, bus_id) in enumerate(sections):
        gpu, processes, last_has_processes = _q_gpu(section, index, bus_id)
        result["gpus"].append(gpu)
        result["processes"].extend(processes)
    if result["attached_gpus"] is not None and result["attached_gpus"] > len(sections):
        _cut_short(result, partial, "-q text says %s attached GPUs but has %d GPU section(s) (truncated?)"
                   % (result["attached_gpus"], len(sections)))
    if not last_has_processes or result["gpus"][-1]["memory_total_mib"] is None:
        _cut_short(result, partial, "-q text ends inside the last GPU section (no Processes entry; truncated?)")
    return result


# ---------------------------------------------------------------------------------------------
# default table (79- and 89-column layouts, MIG sub-table, driver 610+ KMD header)

_TABLE_HEADER = re.compile(r"\|\s*NVIDIA-SMI\s+(\S+)")
_RE_DRIVER = re.compile(r"Driver Version:\s*(\S+)")
_RE_KMD = re.compile(r"KMD Version:\s*(\S+)")
_RE_CUDA = re.compile(r"(?<!UMD )CUDA Version:\s*(\S+)")
_RE_CUDA_UMD = re.compile(r"CUDA UMD Version:\s*(\S+)")
_GPU_ROW1 = re.compile(r"^\s*(\d+)\s+(.*?)\s+(On|Off|WDDM|TCC|MCDM|N/A)\s*$")
_GPU_ROW1_BUS = re.compile(r"^\s*(" + _BUS_ID + r")\s+(\S+)\s*$")
_GPU_ROW2_LEFT = re.compile(r"^\s*(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*/\s*(\S+)\s*$")
_MEM_PAIR = re.compile(r"(\d+)\s*MiB\s*/\s*(\d+)\s*MiB")
_MIG_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$")
_PROC_WITH_GI = re.compile(r"^\s*(\d+)\s+(\S+)\s+(\S+)\s+(\d+|N/A)\s+(\S+)\s+(.*?)\s*(\d+MiB|N/A)\s*$")
_PROC_OLD = re.compile(r"^\s*(\d+)\s+(\d+|N/A)\s+(\S+)\s+(.*?)\s*(\d+MiB|N/A)\s*$")


def _cells(line):
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|"):
        body = body[:-1]
    return body.split("|")


def _is_rule(line):
    stripped = line.strip()
    return len(stripped) > 2 and stripped[0] in "+|" and set(stripped) <= set("+|-=")


def _table_snapshots(lines):
    """Start line of each table (the '+---' above its 'NVIDIA-SMI' header)."""
    starts = []
    for i, line in enumerate(lines):
        if _TABLE_HEADER.search(line):
            starts.append(i - 1 if i > 0 and _is_rule(lines[i - 1]) else i)
    return starts


def _table_gpu_blocks(lines, start):
    """Yield lists of GPU rows (2 or 3 lines each) from the GPU box that begins after '|===|'."""
    i = start
    blocks, block = [], []
    while i < len(lines):
        line = lines[i]
        if _is_rule(line):
            if block:
                blocks.append(block)
                block = []
            if line.strip().startswith("+") or line.strip().startswith("|-"):
                # '+---' closes a GPU block; a blank or a non-table line after it ends the box.
                nxt = lines[i + 1] if i + 1 < len(lines) else ""
                if not nxt.strip().startswith("|") or "=" in nxt or "MIG devices" in nxt or "Processes" in nxt:
                    return blocks, i + 1, True
        elif line.strip().startswith("|"):
            block.append(line)
        else:
            break
        i += 1
    if block:
        blocks.append(block)
    return blocks, i, False


def _table_gpu(block, index_hint, windows):
    row1 = _cells(block[0])
    if len(row1) < 3 or len(block) < 2:
        raise TruncatedInput("table GPU block is incomplete (truncated?)")
    m1 = _GPU_ROW1.match(row1[0])
    mbus = _GPU_ROW1_BUS.match(row1[1])
    if not m1 or not mbus:
        raise ParseError("unrecognised table GPU row: %r" % block[0].strip()[:80])
    gpu = _new_gpu(int(m1.group(1)))
    gpu["name"] = m1.group(2).strip()
    token = m1.group(3)
    if windows or token in ("WDDM", "TCC", "MCDM"):
        gpu["driver_model"] = _value(token)
    else:
        gpu["persistence_mode"] = _mode(token)
    gpu["pci_bus_id"] = mbus.group(1)
    row2 = _cells(block[1])
    if len(row2) < 3:
        raise TruncatedInput("table GPU block is incomplete (truncated?)")
    m2 = _GPU_ROW2_LEFT.match(row2[0])
    if m2:
        gpu["fan_speed_pct"] = _int(m2.group(1))
        gpu["temperature_c"] = _int(m2.group(2))
        gpu["performance_state"] = _value(m2.group(3))
        gpu["power_draw_w"] = _float(m2.group(4))
        gpu["power_limit_w"] = _float(m2.group(5))
    mem = _MEM_PAIR.search(row2[1])
    if mem:
        gpu["memory_used_mib"], gpu["memory_total_mib"] = int(mem.group(1)), int(mem.group(2))
        gpu["memory_free_mib"] = None  # the table shows no free/reserved split
    util = row2[2].split()
    if util:
        gpu["utilization_gpu"] = _int(util[0])
        gpu["compute_mode"] = _compute_mode(" ".join(util[1:])) if len(util) > 1 else None
    if len(block) >= 3:
        row3 = _cells(block[2])
        if len(row3) >= 3 and not row3[0].strip() and not row3[1].strip():
            gpu["mig_mode"] = _mode(row3[2])
    return gpu


def _table_mig(lines, start, gpus_by_index):
    """Parse the 'MIG devices:' box starting at start; return the next line index."""
    i = start
    seen_rule = False
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped:
            break
        if "=" in stripped and _is_rule(line):
            seen_rule = True
        elif seen_rule and stripped.startswith("|") and not _is_rule(line):
            cells = _cells(line)
            match = _MIG_ROW.match(cells[0]) if cells else None
            if match:
                mem = _MEM_PAIR.search(cells[1]) if len(cells) > 1 else None
                sm = cells[2].split() if len(cells) > 2 else []
                gpu = gpus_by_index.get(int(match.group(1)))
                if gpu is not None:
                    gpu["mig_devices"].append({
                        "index": int(match.group(4)),
                        "gpu_instance_id": int(match.group(2)),
                        "compute_instance_id": int(match.group(3)),
                        "profile": None, "uuid": None,
                        "multiprocessor_count": _int(sm[0]) if sm else None,
                        "memory_total_mib": int(mem.group(2)) if mem else None,
                        "memory_used_mib": int(mem.group(1)) if mem else None,
                    })
        i += 1
    return i


def _table_processes(lines, start, result):
    """Parse the 'Processes:' box; return True when it is closed by its '+---' rule."""
    with_gi = False
    seen_rule = False
    for line in lines[start:]:
        stripped = line.strip()
        if not stripped:
            continue
        if not seen_rule:
            if "PID" in stripped and "GI" in stripped:
                with_gi = True
            if "=" in stripped and _is_rule(line):
                seen_rule = True
            continue
        if _is_rule(line):
            return True
        if not stripped.startswith("|"):
            return False
        body = _cells(line)[0]
        if "no running processes found" in body.lower():
            continue
        match = (_PROC_WITH_GI if with_gi else _PROC_OLD).match(body)
        if not match:
            result["warnings"].append("unrecognised process row: %r" % stripped[:80])
            continue
        proc = _new_process()
        proc["gpu_index"] = int(match.group(1))
        if with_gi:
            proc["gpu_instance_id"], proc["compute_instance_id"] = _int(match.group(2)), _int(match.group(3))
            pid, ptype, name, mem = match.group(4), match.group(5), match.group(6), match.group(7)
        else:
            pid, ptype, name, mem = match.group(2), match.group(3), match.group(4), match.group(5)
        proc["pid"], proc["type"] = _int(pid), _value(ptype)
        proc["name"], proc["used_mib"] = _value(name), _mib(mem)
        result["processes"].append(proc)
    return False


def parse_table(data, partial=False):
    """The default `nvidia-smi` table -> raw facts dict (the last table when several are appended).
    partial=True: a table cut short (`| head`, a terminal's height) gives the GPU rows it has."""
    text = clean_text(data)
    lines = [line.strip() for line in text.split("\n")]
    starts = _table_snapshots(lines)
    if not starts:
        raise ParseError("no 'NVIDIA-SMI' table header")
    lines = lines[starts[-1]:]
    result = _new_result("table")
    result["samples"] = len(starts)
    header = next(line for line in lines if _TABLE_HEADER.search(line))
    for regex, key in ((_RE_KMD, "driver_version"), (_RE_DRIVER, "driver_version"),
                       (_RE_CUDA_UMD, "cuda_driver_version"), (_RE_CUDA, "cuda_driver_version")):
        match = regex.search(header)
        if match and result[key] is None:
            result[key] = _value(match.group(1).rstrip("|"))
    windows = any("Driver-Model" in line for line in lines[:12])
    head_end = next((i for i, line in enumerate(lines) if _is_rule(line) and "=" in line), None)
    if head_end is None:
        _cut_short(result, partial, "table ends before its GPU rows (truncated?)")
        return result
    blocks, pos, closed = _table_gpu_blocks(lines, head_end + 1)
    if not blocks:
        _cut_short(result, partial, "table has no GPU rows (truncated?)")
        return result
    if not closed:
        _cut_short(result, partial, "table ends inside the GPU section (truncated?)")
    for n, block in enumerate(blocks):
        try:
            result["gpus"].append(_table_gpu(block, n, windows))
        except ParseError:
            if not partial or closed or n + 1 < len(blocks):
                raise  # only the last GPU row of a table cut inside its GPU box may be cut
    if not closed:
        return result
    by_index = {gpu["index"]: gpu for gpu in result["gpus"]}
    procs_at = None
    i = pos
    while i < len(lines):
        if "MIG devices:" in lines[i]:
            i = _table_mig(lines, i + 1, by_index)
            continue
        if re.search(r"\|\s*Processes:", lines[i]):
            procs_at = i
            break
        i += 1
    if procs_at is None:
        _cut_short(result, partial, "table ends before the Processes section (truncated?)")
        return result
    if not _table_processes(lines, procs_at + 1, result):
        result["warnings"].append("the Processes box is not closed: the process list may be cut short")
    return result


# ---------------------------------------------------------------------------------------------
# --query-gpu / --query-compute-apps CSV

_CSV_FIELD = re.compile(r"^[a-z][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*(?: \[[^\]]+\])?$")
_GPU_FIELD_HINTS = frozenset(("index", "name", "uuid", "pci.bus_id", "memory.total", "memory.used",
                              "driver_version", "serial", "utilization.gpu", "count", "gpu_name"))
_APPS_FIELD_HINTS = frozenset(("pid", "process_name", "used_gpu_memory", "used_memory"))


def _csv_rows(text):
    lines = [line for line in text.split("\n") if line.strip()]
    try:
        return [[cell.strip() for cell in row] for row in csv.reader(lines, skipinitialspace=True)]
    except csv.Error as exc:
        raise ParseError("CSV could not be read: %s" % exc)


def _field_name(header_cell):
    return re.sub(r"\s*\[[^\]]*\]\s*$", "", header_cell.strip()).strip()


def csv_header_kind(line):
    """'gpu' / 'apps' when line is a --query-* CSV header, else None."""
    cells = [c.strip() for c in line.split(",")]
    if not cells or not all(_CSV_FIELD.match(c) for c in cells):
        return None
    names = set(_field_name(c) for c in cells)
    if names & _APPS_FIELD_HINTS and "pid" in names:
        return "apps"
    if names & _GPU_FIELD_HINTS:
        return "gpu"
    return None


def _split_header(rows, fields, result=None, partial=False):
    """(field names, data rows): header given, or the first row, repeated headers dropped. A row with
    another number of fields is a cut capture: TruncatedInput, or with partial=True skipped (noted)."""
    if fields is not None:
        names = [_field_name(f) for f in fields]
        data = rows
    else:
        if not rows:
            raise ParseError("empty CSV")
        header = rows[0]
        names = [_field_name(c) for c in header]
        data = [row for row in rows[1:] if row != header]
    for n, row in enumerate(data):
        if len(row) != len(names):
            _cut_short(result if result is not None else _new_result("csv"), partial,
                       "CSV row %d has %d fields, the header %d (truncated?)" % (n + 1, len(row), len(names)))
    return names, [row for row in data if len(row) == len(names)]


def _first(record, *names):
    for name in names:
        if name in record:
            value = _value(record[name])
            if value is not None:
                return value
    return None


def _csv_reasons(record):
    active, seen = [], False
    for prefix in ("clocks_event_reasons.", "clocks_throttle_reasons."):
        for name in CLOCK_REASONS:
            key = prefix + name
            alt = key.replace("display_clocks_setting", "display_clock_setting")
            for candidate in (key, alt):
                if candidate in record:
                    seen = True
                    if _active(record[candidate]):
                        active.append(name)
    if seen:
        return sorted(set(active), key=CLOCK_REASONS.index)
    mask = _first(record, "clocks_event_reasons.active", "clocks_throttle_reasons.active")
    return _decode_reason_mask(mask) if mask is not None else None


def _csv_gpu(record, position):
    index = _int(_first(record, "index"))
    gpu = _new_gpu(position if index is None else index)
    gpu["name"] = _first(record, "name", "gpu_name")
    gpu["uuid"] = _first(record, "uuid", "gpu_uuid")
    gpu["pci_bus_id"] = _first(record, "pci.bus_id", "gpu_bus_id")
    gpu["pci_device_id"], gpu["pci_vendor_id"] = pci_ids(_first(record, "pci.device_id"))
    gpu["memory_total_mib"] = _mib(_first(record, "memory.total"))
    gpu["memory_used_mib"] = _mib(_first(record, "memory.used"))
    gpu["memory_free_mib"] = _mib(_first(record, "memory.free"))
    gpu["memory_reserved_mib"] = _mib(_first(record, "memory.reserved"))
    gpu["persistence_mode"] = _mode(_first(record, "persistence_mode"))
    gpu["driver_model"] = _first(record, "driver_model.current")
    gpu["compute_mode"] = _compute_mode(_first(record, "compute_mode"))
    gpu["mig_mode"] = _mode(_first(record, "mig.mode.current"))
    gpu["mig_mode_pending"] = _mode(_first(record, "mig.mode.pending"))
    gpu["compute_capability"] = _first(record, "compute_cap")
    gpu["utilization_gpu"] = _int(_first(record, "utilization.gpu"))
    gpu["utilization_memory"] = _int(_first(record, "utilization.memory"))
    gpu["power_draw_w"] = _float(_first(record, "power.draw", "power.draw.average", "power.draw.instant"))
    gpu["power_limit_w"] = _float(_first(record, "power.limit", "enforced.power.limit"))
    gpu["temperature_c"] = _int(_first(record, "temperature.gpu"))
    gpu["fan_speed_pct"] = _int(_first(record, "fan.speed"))
    gpu["performance_state"] = _first(record, "pstate")
    gpu["clocks_event_reasons_active"] = _csv_reasons(record)
    return gpu


def parse_query_gpu_csv(data, fields=None, partial=False):
    """`--query-gpu=... --format=csv[,noheader][,nounits]` -> raw facts dict.

    With fields=None the first line is the header (repeated headers from a sampling loop are
    dropped). Repeated samples of the same GPU collapse to the latest one.
    """
    text = clean_text(data)
    result = _new_result("csv_query_gpu")
    names, data_rows = _split_header(_csv_rows(text), fields, result, partial)
    latest, order = {}, []
    for position, row in enumerate(data_rows):
        record = dict(zip(names, row))
        key = _first(record, "index", "uuid", "pci.bus_id")
        key = ("row", position) if key is None else key
        if key not in latest:
            order.append(key)
        latest[key] = (position, record)
        version = _first(record, "driver_version")
        if version:
            result["driver_version"] = version
    result["samples"] = max(1, len(data_rows) // max(1, len(order)))
    for n, key in enumerate(order):
        result["gpus"].append(_csv_gpu(latest[key][1], n))
    if not result["gpus"]:
        raise ParseError("CSV has a header but no GPU rows")
    if result["samples"] > 1:
        result["warnings"].append("%d samples per GPU; the latest is reported" % result["samples"])
    return result


def parse_compute_apps_csv(data, fields=None, partial=False):
    """`--query-compute-apps=... --format=csv[,noheader][,nounits]` -> raw facts dict (processes only)."""
    text = clean_text(data)
    rows = _csv_rows(text)
    result = _new_result("csv_compute_apps")
    if not rows:
        return result  # noheader output with no processes is empty
    if fields is None and rows and "no running" in ",".join(rows[0]).lower():
        return result
    names, data_rows = _split_header(rows, fields, result, partial)
    for row in data_rows:
        record = dict(zip(names, row))
        if "no running" in " ".join(row).lower():
            continue
        proc = _new_process()
        proc["pid"] = _int(_first(record, "pid"))
        proc["name"] = _first(record, "process_name", "name")
        proc["used_mib"] = _mib(_first(record, "used_gpu_memory", "used_memory"))
        proc["pci_bus_id"] = _first(record, "gpu_bus_id", "pci.bus_id")
        proc["gpu_uuid"] = _first(record, "gpu_uuid", "uuid")
        proc["type"] = "C"  # compute-apps lists compute contexts only
        result["processes"].append(proc)
    return result


# ---------------------------------------------------------------------------------------------
# -L, --version, dmon/pmon, error texts

_LIST_GPU = re.compile(r"^GPU (\d+): (.*?) \(UUID: ([^)\s]+)\)\s*$")
_LIST_MIG = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: ([^)\s]+)\)\s*$")
# Drivers before 470 name a MIG device by its GPU and its GPU/compute instance ids:
# MIG-GPU-<gpu uuid>/<gi>/<ci>; later ones print an opaque MIG-<uuid> (no ids in it).
_LIST_MIG_OLD_UUID = re.compile(r"^MIG-(GPU-[0-9A-Fa-f-]+)/(\d+)/(\d+)$")


def parse_list(data):
    """`nvidia-smi -L` -> raw facts dict (names, UUIDs, MIG profiles)."""
    text = clean_text(data)
    result = _new_result("list")
    for line in text.split("\n"):
        match = _LIST_GPU.match(line.strip())
        if match:
            gpu = _new_gpu(int(match.group(1)))
            gpu["name"], gpu["uuid"] = match.group(2).strip(), match.group(3)
            result["gpus"].append(gpu)
            continue
        match = _LIST_MIG.match(line)
        if match and result["gpus"]:
            old = _LIST_MIG_OLD_UUID.match(match.group(3))
            result["gpus"][-1]["mig_devices"].append({
                "index": int(match.group(2)),
                "gpu_instance_id": int(old.group(2)) if old else None,
                "compute_instance_id": int(old.group(3)) if old else None,
                "profile": match.group(1), "uuid": match.group(3), "multiprocessor_count": None,
                "memory_total_mib": None, "memory_used_mib": None})
    if not result["gpus"]:
        raise ParseError("no 'GPU N: <name> (UUID: ...)' line")
    for gpu in result["gpus"]:
        if gpu["mig_devices"]:
            gpu["mig_mode"] = True
    return result


_VERSION_LINE = re.compile(r"^(NVIDIA-SMI|NVML|DRIVER|CUDA|KMD|CUDA UMD) version\s*:\s*(.*)$", re.IGNORECASE)


def parse_version(data):
    """`nvidia-smi --version` -> raw facts dict (driver facts only, no GPU list)."""
    values = {}
    for line in clean_text(data).split("\n"):
        match = _VERSION_LINE.match(line.strip())
        if match:
            values[match.group(1).upper()] = _strip_deprecation(match.group(2))
    if "NVIDIA-SMI" not in values:
        raise ParseError("no 'NVIDIA-SMI version :' line")
    result = _new_result("version")
    result["driver_version"] = values.get("KMD") or values.get("DRIVER")
    result["cuda_driver_version"] = values.get("CUDA UMD") or values.get("CUDA")
    result["nvml_version"] = values.get("NVML")
    result["message"] = "nvidia-smi --version: driver facts only, no GPU list"
    return result


def classify_error(data):
    """(state, message, nvml_library_version) for an nvidia-smi error text, or None."""
    text = " ".join(clean_text(data).split())
    lower = text.lower()
    for state, entry in catalogue.in_scope("smi"):
        match = catalogue.matches(entry, text, lower)
        if not match:
            continue
        nvml = re.search(r"NVML library version:\s*([0-9][0-9.]*[0-9])", text)
        message = entry["meaning"]
        if state == "error" and entry["regex"].groups:
            message = "%s: %s" % (message, match.group(0)[:160])
        return state, message, nvml.group(1) if nvml else None
    return None


def parse_error(data):
    """An nvidia-smi error text -> raw facts dict with its state."""
    found = classify_error(data)
    if found is None:
        raise ParseError("not a known nvidia-smi error text")
    result = _new_result("error")
    result["state"], result["message"], nvml = found
    if nvml:
        # The mismatch message names the userspace (NVML) library version, not the module's.
        result["driver_version"] = nvml
        result["nvml_version"] = nvml
    return result


_DMON = re.compile(r"^#\s*gpu\s+(?:pwr|sm|gtemp|temp)\b", re.I | re.M)
_PMON = re.compile(r"^#\s*gpu\s+pid\s+type\b", re.I | re.M)

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


# dmon / pmon: a header line "# gpu pwr gtemp ..." (with -o DT: "#Date Time gpu ..."), a units line
# "# Idx W C ...", then one row per GPU (pmon: per process) and sample; nvidia-smi repeats both header
# lines every screenful. "-" is a value the GPU does not report (under MIG, sm and mem).
# dmon column -> (GPU fact, converter); the other columns (mtemp, enc, dec, jpg, ofa, mclk, pclk, pviol,
# tviol, bar1, sbecc, dbecc, pci, rxpci, txpci) have no GPU fact.
_DMON_COLUMNS = {"pwr": ("power_draw_w", "float"), "gtemp": ("temperature_c", "int"),
                 "temp": ("temperature_c", "int"), "sm": ("utilization_gpu", "int"),
                 "mem": ("utilization_memory", "int"), "fb": ("memory_used_mib", "mib")}


def _sampled_rows(text):
    """(column names of the first '#' header line, data rows as token lists) of a dmon/pmon output."""
    columns, rows = None, []
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            if columns is None:
                columns = [name.lower() for name in stripped.lstrip("#").split()]
            continue
        if columns is not None:
            rows.append(stripped.split())
    if not columns or "gpu" not in columns:
        raise ParseError("no '# gpu ...' header line of nvidia-smi dmon/pmon")
    return columns, rows


def _convert(kind, raw):
    return {"float": _float, "int": _int, "mib": _mib}[kind](raw)


def parse_dmon(data):
    """`nvidia-smi dmon` -> raw facts dict: one GPU per index with its latest sample (power, temperature,
    SM and memory utilisation, framebuffer used); samples = the most rows of one GPU. A time series names
    no GPU model, UUID or memory total."""
    columns, rows = _sampled_rows(clean_text(data))
    result = _new_result("dmon")
    latest, counts, skipped = {}, {}, 0
    for tokens in rows:
        record = dict(zip(columns, tokens))
        index = _int(record.get("gpu")) if len(tokens) == len(columns) else None
        if index is None:
            skipped += 1
            continue
        latest[index] = record
        counts[index] = counts.get(index, 0) + 1
    if not latest:
        raise TruncatedInput("nvidia-smi dmon output has no sample row (truncated?)")
    for index, record in latest.items():
        gpu = _new_gpu(index)
        for column, (key, kind) in _DMON_COLUMNS.items():
            if column in record and gpu[key] is None:
                gpu[key] = _convert(kind, record[column])
        result["gpus"].append(gpu)
    result["samples"] = max(counts.values())
    result["warnings"].append("nvidia-smi dmon: %d sample(s) per GPU, the latest reported; a time series names no "
                              "GPU model, UUID or memory total (capture 'nvidia-smi -q -x' for those)"
                              % result["samples"])
    if skipped:
        result["warnings"].append("%d dmon row(s) do not fit the header's %d columns and were skipped"
                                  % (skipped, len(columns)))
    return result


def parse_pmon(data):
    """`nvidia-smi pmon` -> raw facts dict: the GPUs by index and the processes each runs (pid, type, the
    command name pmon prints, and framebuffer MiB with `-s m`), each with its latest sample."""
    columns, rows = _sampled_rows(clean_text(data))
    if "pid" not in columns:
        raise ParseError("no 'pid' column: not nvidia-smi pmon output")
    result = _new_result("pmon")
    gpus, procs, counts, skipped = {}, {}, {}, 0
    for tokens in rows:
        if len(tokens) < len(columns):
            skipped += 1
            continue
        # the command is the last column and may hold spaces
        tokens = tokens[:len(columns) - 1] + [" ".join(tokens[len(columns) - 1:])]
        record = dict(zip(columns, tokens))
        index = _int(record.get("gpu"))
        if index is None:
            skipped += 1
            continue
        gpus.setdefault(index, _new_gpu(index))
        pid = _int(record.get("pid"))
        if pid is None:
            continue  # "-": no process on this GPU in this sample
        proc = procs.get((index, pid)) or _new_process()
        proc["gpu_index"], proc["pid"] = index, pid
        proc["type"] = _value(record.get("type"))
        proc["name"] = _value(record.get("command"))
        proc["used_mib"] = _mib(record.get("fb"))
        procs[(index, pid)] = proc
        counts[(index, pid)] = counts.get((index, pid), 0) + 1
    if not gpus:
        raise TruncatedInput("nvidia-smi pmon output has no sample row (truncated?)")
    result["gpus"] = list(gpus.values())
    result["processes"] = list(procs.values())
    result["samples"] = max(counts.values()) if counts else 1
    result["warnings"].append("nvidia-smi pmon: %d sample(s), the latest per process reported; pmon names no GPU "
                              "model and truncates command names" % result["samples"])
    if skipped:
        result["warnings"].append("%d pmon row(s) do not fit the header's %d columns and were skipped"
                                  % (skipped, len(columns)))
    return result


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
