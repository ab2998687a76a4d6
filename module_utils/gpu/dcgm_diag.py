# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What `dcgmi diag -r N -j` (DCGM's GPU diagnostic) says: per GPU and test, its status, DCGM's warnings with their
error ids, and the run's verdict with dcgmi's exit code (issue 40's health gates; docs/research/dcgm-diag.md).

DCGM 4's document (NVIDIA/DCGM testing/python3/dcgm_diag_schema.json, 4.0 to 4.6; real ones in
tests/fixtures/dcgm_diag/): {"DCGM Diagnostic": {"test_categories": [{category, tests: [{name, results: [{entity_group,
entity_group_id, entity_id, status, warnings: [{error_category, error_id, error_severity, warning}], info}],
test_summary}]}]}, "runtime_error"?}, with "entity_groups" and "metadata" ({"version", "Driver Version Detected"}) beside
it. DCGM 3 names its top key "DCGM GPU Diagnostic" and its results by gpu_id: no real 3.x document was found, so it is
named, not read.

dcgmi exits with its negative dcgmReturn_t's low byte (dcgmi/main_dcgmi.cpp; dcgmlib/dcgm_structs.h): 0 all passed,
226 a test failed (DCGM_ST_NVVS_ERROR), 205 a failure that calls for isolating the GPU (DCGM_ST_NVVS_ISOLATE_ERROR,
which dcgmi's Diag::GetFailureResult puts first), 242 no data (DCGM_ST_NO_DATA), 221 an empty group (a MIG GPU with
several GPU instances). A failing run prints its whole document before it exits.

Pure functions, stdlib only (shipped to hosts as module_utils).
"""
import json

DCGM4_KEY = "DCGM Diagnostic"
DCGM3_KEY = "DCGM GPU Diagnostic"
EXIT_CODES = {
    0: ("pass", "every test passed"),
    226: ("fail", "a test failed on a GPU (DCGM_ST_NVVS_ERROR)"),
    205: ("isolate", "a failure that calls for isolating the GPU (DCGM_ST_NVVS_ISOLATE_ERROR)"),
    242: ("no_data", "the diagnostic returned no results (DCGM_ST_NO_DATA)"),
    221: ("empty_group", "the group to test is empty (DCGM_ST_GROUP_IS_EMPTY), as on a GPU split into MIG instances"),
}
# DCGM's words for a test's outcome, as its documents spell them.
STATUSES = {"pass": "pass", "fail": "fail", "skip": "skip", "warn": "warn", "not run": "not_run"}


class DcgmDiagError(ValueError):
    """The text is not a DCGM 4 diagnostic document; the message says what it is instead."""


def _status(word):
    return STATUSES.get(str(word or "").strip().lower(), "unknown")


def _warnings(items):
    out = []
    for item in items or []:
        if isinstance(item, dict):
            out.append({"error_id": item.get("error_id"), "category": item.get("error_category"),
                        "severity": item.get("error_severity"), "text": (item.get("warning") or "").strip()})
        elif item:
            out.append({"error_id": None, "category": None, "severity": None, "text": str(item).strip()})
    return out


def parse(text):
    """The document of `dcgmi diag -j`: {version, driver_version, runtime_error, gpus: {entity id: {device_id,
    serial}}, tests: [{category, name, status (the summary's), results: [{entity_group, entity_id, status,
    warnings, info}]}]}. Raises DcgmDiagError where the text is no DCGM 4 document."""
    start = (text or "").find("{")
    if start < 0:
        raise DcgmDiagError("no JSON document in the output (dcgmi diag without -j prints a table)")
    try:
        doc = json.loads(text[start:])
    except ValueError as exc:
        raise DcgmDiagError("the output is not JSON: %s" % exc)
    if not isinstance(doc, dict):
        raise DcgmDiagError("the JSON is not a DCGM diagnostic document")
    if DCGM3_KEY in doc and DCGM4_KEY not in doc:
        raise DcgmDiagError("a DCGM 3 document (%r): gpuhost reads DCGM 4's (datacenter-gpu-manager-4)" % DCGM3_KEY)
    body = doc.get(DCGM4_KEY)
    if not isinstance(body, dict):
        raise DcgmDiagError("no %r key: not the output of DCGM 4's dcgmi diag -j" % DCGM4_KEY)
    meta = doc.get("metadata") or body.get("metadata") or {}
    gpus = {}
    for group in doc.get("entity_groups") or []:
        if (group or {}).get("entity_group") != "GPU":
            continue
        for entity in group.get("entities") or []:
            gpus[entity.get("entity_id")] = {"device_id": entity.get("device_id"), "serial": entity.get("serial_num")}
    tests = []
    for category in body.get("test_categories") or []:
        for test in (category or {}).get("tests") or []:
            results = [{"entity_group": r.get("entity_group"), "entity_id": r.get("entity_id"),
                        "status": _status(r.get("status")), "warnings": _warnings(r.get("warnings")),
                        "info": list(r.get("info") or [])}
                       for r in test.get("results") or [] if isinstance(r, dict)]
            summary = test.get("test_summary") or {}
            tests.append({"category": category.get("category"), "name": test.get("name"),
                          "status": _status(summary.get("status")) if summary.get("status") else None,
                          "results": results})
    return {"version": meta.get("version"), "driver_version": meta.get("Driver Version Detected"),
            "runtime_error": body.get("runtime_error") or doc.get("runtime_error"), "gpus": gpus, "tests": tests}


def verdict(parsed, rc=None):
    """The run's verdict from its document and dcgmi's exit code: {status: pass | fail | isolate | error, exit: the
    code's meaning, failed: [{gpu, test, category, warnings}], skipped: [{gpu, test}], messages: [...]}. A skipped
    test is said, never counted as a pass. rc None (a pasted document): the document alone decides."""
    if rc is None:
        kind, meaning = "pass", None
    else:
        kind, meaning = EXIT_CODES.get(rc, ("error", "dcgmi exited %s" % rc))
    failed, skipped, messages = [], [], []
    for test in parsed.get("tests") or []:
        for result in test["results"]:
            where = "GPU %s" % result["entity_id"] if result["entity_group"] in (None, "GPU") \
                else "%s %s" % (result["entity_group"], result["entity_id"])
            if result["status"] == "fail":
                failed.append({"gpu": result["entity_id"], "test": test["name"], "category": test["category"],
                               "warnings": result["warnings"]})
                said = "; ".join("%s (DCGM error %s)" % (w["text"], w["error_id"]) if w["error_id"] is not None
                                 else w["text"] for w in result["warnings"]) or "no reason given"
                messages.append("%s: %s (%s) failed: %s" % (where, test["name"], test["category"], said))
            elif result["status"] in ("skip", "not_run"):
                skipped.append({"gpu": result["entity_id"], "test": test["name"]})
                messages.append("%s: %s (%s) was skipped: not proven" % (where, test["name"], test["category"]))
    if parsed.get("runtime_error"):
        messages.insert(0, "dcgmi diag could not run: %s" % parsed["runtime_error"])
    if kind == "isolate":
        status = "isolate"
    elif failed or kind == "fail":
        status = "fail"
    elif kind == "pass" and not parsed.get("runtime_error"):
        status = "pass"
    else:
        status = "error"
    return {"status": status, "exit": meaning, "failed": failed, "skipped": skipped, "messages": messages}


# A run whose GPU failed a test (isolate: DCGM asks to take the GPU out as well).
FAILED = ("fail", "isolate")


def tested_gpus(parsed):
    """The GPU ids a parsed document has results for, in order."""
    return sorted(set(r["entity_id"] for t in (parsed or {}).get("tests") or [] for r in t["results"]
                      if r["entity_group"] in (None, "GPU")), key=str)


def diag_argv(dcgmi, level):
    """`dcgmi diag -r LEVEL -j`: the run at a level (1 software, 2 adds memory and PCIe, 3 and 4 stress)."""
    return [dcgmi, "diag", "-r", str(level), "-j"]


def run_diag(io, level, gpu=None):
    """`dcgmi diag -r LEVEL -j [-i GPU]` through the host's io (host/runner.py): (argv, its output, read_run's result),
    or (None, None, None) where dcgmi is not installed."""
    dcgmi = io.which("dcgmi")
    if not dcgmi:
        return None, None, None
    argv = diag_argv(dcgmi, level) + (["-i", str(gpu)] if gpu is not None else [])
    output = io.run(argv)
    return argv, output, read_run(*output)


def read_run(rc, stdout, stderr=""):
    """One run of diag_argv(): {rc, status (pass | fail | isolate | error), verdict (or None), parsed (or None),
    error: what dcgmi said where it printed no document (the host engine down, a missing plugin)}."""
    text = stdout or ""
    try:
        parsed = parse(text)
    except DcgmDiagError as exc:
        said = [line.strip() for line in (text + "\n" + (stderr or "")).splitlines() if line.strip()]
        return {"rc": rc, "status": "error", "verdict": None, "parsed": None,
                "error": "; ".join(said[:3]) or "dcgmi exited %s without output (%s)" % (rc, exc)}
    found = verdict(parsed, rc)
    return {"rc": rc, "status": found["status"], "verdict": found, "parsed": parsed, "error": None}


def summary(run, level):
    """One line a person reads for read_run()'s result."""
    if run["verdict"] is None:
        return "dcgmi diag -r %s did not run: %s" % (level, run["error"])
    found = run["verdict"]
    if found["status"] == "pass":
        gpus = tested_gpus(run["parsed"])
        skipped = len(found["skipped"])
        return "dcgmi diag -r %s passed on GPU %s%s" % (
            level, ", ".join(str(g) for g in gpus) or "(none named)",
            " (%d test(s) skipped: not proven)" % skipped if skipped else "")
    first = [m for m in found["messages"] if "skipped" not in m] or found["messages"] or [found["exit"] or "failed"]
    return "dcgmi diag -r %s: %s" % (level, first[0])
