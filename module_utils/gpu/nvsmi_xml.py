# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""`nvidia-smi -q -x` (XML, nvsmi_device_v10 .. v13) -> raw facts dict, whole documents and (partial=True)
excerpts or documents cut short. Pure stdlib (python >= 3.9), no Ansible imports.
"""
import html
import re
import xml.etree.ElementTree as ET

from ansible.module_utils.gpu.nvsmi_common import (
    ParseError, TruncatedInput, _active, _cut_short, _int, _mib, _new_gpu, _new_process, _new_result,
    _strip_deprecation, _value, clean_text, pci_ids, read_scalars)

# Where a <gpu> element holds each of the GPU_SCALARS (paths below it, the first with a value counts), and
# the power facts below its <gpu_power_readings> (<power_readings> before v12).
_XML_PLACES = {
    "minor_number": ("minor_number",), "architecture": ("product_architecture",),
    "memory_total_mib": ("fb_memory_usage/total",), "memory_used_mib": ("fb_memory_usage/used",),
    "memory_free_mib": ("fb_memory_usage/free",), "memory_reserved_mib": ("fb_memory_usage/reserved",),
    "persistence_mode": ("persistence_mode",), "driver_model": ("driver_model/current_dm",),
    "compute_mode": ("compute_mode",), "mig_mode": ("mig_mode/current_mig",),
    "mig_mode_pending": ("mig_mode/pending_mig",), "utilization_gpu": ("utilization/gpu_util",),
    "utilization_memory": ("utilization/memory_util",), "temperature_c": ("temperature/gpu_temp",),
    "fan_speed_pct": ("fan_speed",), "performance_state": ("performance_state",),
}
_XML_POWER_PLACES = {
    "power_draw_w": ("power_draw", "average_power_draw", "instant_power_draw"),
    "power_limit_w": ("current_power_limit", "enforced_power_limit", "power_limit"),
}


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
    read_scalars(gpu, _XML_PLACES, lambda *paths: _xtext(node, *paths))
    power = node.find("gpu_power_readings")
    if power is None:
        power = node.find("power_readings")
    read_scalars(gpu, _XML_POWER_PLACES, lambda *paths: _xtext(power, *paths))
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
