# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Explain any error text from a GPU host: which layer broke, what the decisive line means, the fix.

Pure stdlib, Python >= 3.9 (shipped to hosts as module_utils).

One reader of the one error table (module_utils/diagnosis/error_catalogue.py): every line is cleaned of
terminal colours, CR, container and engine prefixes and log headers (vllm_log.clean_line), then
matched against the table's entries; kernel-log Xid lines are read with the table's Xid catalogue;
a vLLM startup log is also read whole by the startup report (module_utils/serving/vllm_log.py), which knows
failures no single line names (a negative KV share, a hard-wrapped error, blocks below one request).
Findings are ranked by layer, bottom up (a broken driver explains a failed container, not the
other way round), and each names its decisive line.
The Fabric blocks of a pasted `nvidia-smi -q` (whole, `grep -A` excerpts, `-q -x`) are read whole too, with the
verdict `gpuhost fabric` gives (gpu_topology.fabric_verdict): an NVSwitch fabric that the fabric manager has not set
up (State In Progress / Not Started), that it set up without success (Status), or whose Health is Unhealthy is a
fabric finding; no line of such a paste is an error on its own.
"""
import re

from ansible.module_utils.diagnosis import error_catalogue as catalogue
from ansible.module_utils.driver.fabric_manager import fabric_need, nvswitches
from ansible.module_utils.gpu.gpu_topology import fabric_verdict, parse_fabric, parse_fabric_xml
from ansible.module_utils.gpu.nvsmi_common import ParseError
from ansible.module_utils.gpu.nvsmi_parse import detect_form
from ansible.module_utils.layers.registry import CATALOGUE_ORDER
from ansible.module_utils.serving.vllm_log import RE as VLLM_RE, clean_line, parse as parse_vllm_log

MAX_INPUT_BYTES = 64 * 1024 * 1024
MAX_QUOTE = 300
NO_FINDING = "no known GPU-stack error in this text"
# vLLM's own INFO/DEBUG/WARNING lines mention errors in advice ("... out of memory ... consider"):
# the vLLM-start entries only read lines of other levels, as the startup report does.
_QUIET_LEVELS = ("INFO", "DEBUG", "WARNING", "WARN")


class ExplainError(ValueError):
    """Input that is not text to explain; the message is one line for an operator."""


def decode(data):
    """Text of `data` (str or bytes); binary input is refused."""
    if isinstance(data, str):
        text = data
    else:
        if len(data) > MAX_INPUT_BYTES:
            raise ExplainError("input is %d bytes, more than the %d read: pass the log's last part (tail)"
                               % (len(data), MAX_INPUT_BYTES))
        head = data[:65536]
        controls = sum(1 for b in head if b < 9 or 13 < b < 27 or 27 < b < 32)
        if b"\0" in head or (head and controls > len(head) // 10):
            raise ExplainError("input is binary, not text: pass a log, a terminal paste or an error message")
        text = data.decode("utf-8", "replace")
    if len(text) > MAX_INPUT_BYTES:
        raise ExplainError("input is more than %d characters: pass the log's last part (tail)" % MAX_INPUT_BYTES)
    return text


def _finding(entry, number, quote, kind=None):
    return {
        "layer": entry["layer"], "kind": kind or entry["kind"], "line": number,
        "quote": quote.strip()[:MAX_QUOTE], "meaning": entry["meaning"], "fix": entry["fix"],
        "gpuhost": entry["repair"], "count": 1,
    }


def _xid_finding(match, number, quote):
    pci, code = match.group(1), int(match.group(2))
    row = catalogue.XID_CATALOGUE.get(code)
    description, cause, bucket = (row.description, row.cause, row.action) if row else (
        "Xid %d (not in gpuhost's table: see NVIDIA's Xid catalogue)" % code, "unknown", catalogue.XID_UNKNOWN_ACTION)
    return {
        "layer": "hardware", "kind": "xid_%d" % code, "line": number, "quote": quote.strip()[:MAX_QUOTE],
        "meaning": "Xid %d on the GPU at PCI %s: %s (usually %s)" % (code, pci, description, cause),
        "fix": catalogue.XID_ACTIONS[bucket], "gpuhost": "playbooks/diagnose.yml (hardware layer)", "count": 1,
        "pci": pci,
    }


# A Fabric block of -q (`Fabric` alone on its line) or of -q -x (<fabric>): only then is the text read for one.
_FABRIC_BLOCK = re.compile(r"^[ \t]*Fabric[ \t]*$|<fabric>", re.M)
FABRIC_REPAIR = "site.yml --tags driver (fabric manager on HGX hosts); `gpuhost fabric` reads the same -q"
# The fabric verdicts that are findings, and the field whose value decides each (the decisive line shows it).
_FABRIC_FIELDS = {"not_ready": ("State", "state", "state"), "failed": ("Status", "status", "status"),
                  "unhealthy": ("Summary", "summary", "health_summary")}


def _fabric_finding(text, lines):
    """The finding `gpuhost fabric`'s verdict makes of the text's Fabric blocks (not_ready, failed, unhealthy),
    quoting the first line that shows it, or None."""
    if not _FABRIC_BLOCK.search(text):
        return None
    try:
        fabrics = parse_fabric_xml(text) if detect_form(text) == "xml" else parse_fabric(text)
    except ParseError:
        return None
    try:
        switches = nvswitches(text)  # an `lspci -nn` in the same paste names the NVSwitches
    except ValueError:
        switches = []
    verdict = fabric_verdict(fabrics)
    if verdict["state"] not in _FABRIC_FIELDS:
        return None
    key, tag, field = _FABRIC_FIELDS[verdict["state"]]
    names = [f["pci_bus_id"] or "GPU %d" % i for i, f in enumerate(fabrics)]
    value = fabrics[names.index(verdict["gpus"][0])][field] if verdict["gpus"][0] in names else None
    decisive = re.compile(r"^\s*%s\s*:\s*%s\s*$|<%s>\s*%s\s*</%s>" % (key, re.escape(value or ""), tag,
                                                                      re.escape(value or ""), tag))
    number = next((n for n, line in enumerate(lines, 1) if decisive.search(line.strip())), 1)
    needs = fabric_need(switches, (), fabrics)
    return {"layer": "fabric", "kind": "fabric_" + verdict["state"], "line": number,
            "quote": lines[number - 1].strip()[:MAX_QUOTE], "count": len(verdict["gpus"]),
            "meaning": "%s; the host needs %s: %s" % (
                verdict["message"], "the IMEX service, no fabric manager" if needs["imex"] else "the fabric manager",
                needs["reason"]),
            "fix": verdict["fix"], "gpuhost": FABRIC_REPAIR}


def _by_kind():
    out = {}
    for entry in catalogue.ENTRIES:
        out.setdefault(entry["kind"], entry)
    return out


_ENTRY_OF_KIND = _by_kind()
_VLLM_KINDS = dict(catalogue.in_scope("vllm"))


def explain(data):
    """{findings: [...], lines: N, summary: str} for any text; raises ExplainError on non-text."""
    text = decode(data)
    found = {}
    order = []
    lines = text.split("\n")

    def add(finding):
        key = (finding["kind"], finding.get("pci"))
        if key in found:
            first = found[key]
            first["count"] += 1
            # The exception line says it better than the source line a traceback quotes before it.
            if not VLLM_RE["exception"].search(first["quote"]) and VLLM_RE["exception"].search(finding["quote"]):
                first["quote"], first["line"] = finding["quote"], finding["line"]
            return
        found[key] = finding
        order.append(key)

    for number, physical in enumerate(lines, 1):
        for segment in physical.split("\r"):
            if not segment.strip():
                continue
            level, message, _proc, _rank = clean_line(segment)
            if not message:
                continue
            lower = message.lower()
            xid = catalogue.XID.search(message)
            if xid:
                add(_xid_finding(xid, number, message))
                continue
            for entry in catalogue.ENTRIES:
                if "vllm" in entry["scopes"] and level in _QUIET_LEVELS:
                    continue
                if catalogue.matches(entry, message, lower):
                    finding = _finding(entry, number, message)
                    finding["failed_start_only"] = entry["failed_start_only"]
                    add(finding)
                    break
    # What only the whole start shows (a negative KV share, a hard-wrapped error line).
    report = parse_vllm_log(text)
    failure = report.get("failure") or {}
    entry = _VLLM_KINDS.get(failure.get("kind"))
    if entry is not None and (entry["kind"], None) not in found:
        add(_finding(entry, failure.get("line"), failure.get("message") or ""))
    fabric = _fabric_finding(text, lines)
    if fabric is not None:
        add(fabric)
    started = report.get("started")
    rank = {layer: i for i, layer in enumerate(CATALOGUE_ORDER)}
    findings = [found[key] for key in order if not (started and found[key].pop("failed_start_only", False))]
    for finding in findings:
        finding.pop("failed_start_only", None)
    findings.sort(key=lambda f: (rank[f["layer"]], f["line"] or 0))
    return {"findings": findings, "lines": len(lines), "summary": summary(findings)}


def summary(findings):
    if not findings:
        return NO_FINDING
    top = findings[0]
    return "%s layer: %s (line %s)" % (top["layer"], top["kind"], top["line"])


def render_text(result):
    if not result["findings"]:
        return NO_FINDING + " (%d lines read)\n" % result["lines"]
    out = []
    for i, f in enumerate(result["findings"], 1):
        times = " (%d times)" % f["count"] if f["count"] > 1 else ""
        out.append("%d. [%s] %s - line %s%s" % (i, f["layer"], f["kind"], f["line"], times))
        out.append("   %s" % f["quote"])
        out.append("   means:   %s" % f["meaning"])
        out.append("   fix:     %s" % f["fix"])
        if f["gpuhost"] and f["gpuhost"] != "-":
            out.append("   gpuhost: %s" % f["gpuhost"])
    return "\n".join(out) + "\n"
