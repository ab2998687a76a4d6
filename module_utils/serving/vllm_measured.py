# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a start measured, against the plan it was started with (library/vllm_plan_measurement): the settings
a measurement holds for, the figures of a startup log (vllm_log's report) that the next plan of the same
settings uses instead of the model's estimates, the store of them, and the operator's warnings.

Pure functions, stdlib only, Python >= 3.9 (shipped to hosts as module_utils).
"""
import hashlib
import json

from ansible.module_utils.serving.vllm_gpus import _device_of, _with_mig_devices
from ansible.module_utils.serving.vllm_plan_inputs import PlanError


# ---------------------------------------------------------------- measured on this host

MEASUREMENT_KEYS = ("image", "model", "max_model_len", "gpu_memory_utilization", "tensor_parallel_size",
                    "kv_cache_dtype", "quantization", "max_num_seqs", "extra_args", "env", "gpu_name")


def measurement_key(instance, gpu_name=None):
    """The settings a measurement holds for: image (its vLLM), model, engine arguments and
    the GPU model.  Any change falls back to the model's estimates."""
    fields = {key: instance.get(key) for key in MEASUREMENT_KEYS if key != "gpu_name"}
    fields["extra_args"] = list(fields.get("extra_args") or [])
    # The environment can change the engine too (VLLM_USE_FLASHINFER_SAMPLER, ...).
    fields["env"] = dict(fields.get("env") or {})
    fields["gpu_name"] = gpu_name
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16], fields


def measured_entry(plan_result, report):
    """What a successful start measured, per GPU: the weights and the overheads that make
    the logged KV share exact (budget - weights - KV), split as the log prints them where
    it does (activation, non-torch, CUDA-graph estimate), else as the plan split them.
    None when the log lacks the figures."""
    weights, kv = report.get("weights_gib"), report.get("kv_cache_gib")
    if weights is None or kv is None or not report.get("started"):
        return None
    overhead = plan_result["budget_gib"] - weights - kv
    profile = report.get("profile") or {}
    graphs = plan_result["cuda_graph_gib"]
    if profile.get("cuda_graph_estimate_gib") is not None:
        graphs = profile["cuda_graph_estimate_gib"] if profile.get("cuda_graph_profiling") else 0.0
    activation = profile.get("activation_gib")
    if activation is None:
        activation = plan_result["activation_gib"]
    non_torch = overhead - activation - graphs
    if non_torch < 0:  # the log's rounding, or a split the plan did not foresee: keep the sum exact
        activation, non_torch = max(0.0, activation + non_torch), 0.0
    return {
        "weights_gib": round(weights, 4),
        "activation_gib": round(activation, 4),
        "non_torch_gib": round(non_torch, 4),
        "cuda_graph_gib": round(graphs, 4),
        "kv_cache_gib": round(kv, 4),
        "kv_cache_tokens": report.get("kv_cache_tokens"),
        "vllm_version": report.get("vllm_version"),
        "budget_gib": plan_result["budget_gib"],
    }


def load_measurements(text):
    """The store's entries by key from its JSON text (None or '' for no store)."""
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PlanError("measured overheads file is not JSON (%s): remove it, the next deploy records it again" % exc)
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        raise PlanError("measured overheads file has no 'entries' mapping: remove it, the next deploy records it again")
    return entries


# ---------------------------------------------------------------- after the start

def plan_summary(result):
    """What the record keeps of the plan an instance was started with."""
    return {
        "verdict": result["verdict"],
        "budget_mib": result["budget_mib"],
        "weights_gib": result["weights_gib"],
        "kv_cache_tokens": result["kv_cache_tokens"],
        "max_concurrency": result["max_concurrency"],
        "band": result["band"]["max_concurrency"],
        "estimates": result["estimates"]["activation_gib"],
        "vllm_rules": result["engine"]["rules"],
        "reasons": [r["message"] for r in result["reasons"]],
    }


def startup_warnings(name, summary, report, tolerance):
    """The operator's warnings for one start: its log's KV figures against the plan it was
    started with (beyond `tolerance`, a share), the log's own warnings, a warn plan."""
    out = []
    pct = tolerance * 100
    for key, label in (("kv_cache_tokens", "KV cache tokens"), ("max_concurrency", "maximum concurrency")):
        planned, logged = summary.get(key), report.get(key)
        if logged is None:
            out.append("vllm: WARNING %s: the startup log prints no %s (the plan's: %s)" % (name, label, planned))
        elif planned and abs(float(logged) - planned) / float(planned) > tolerance:
            out.append("vllm: WARNING %s: %s %s in the startup log, %s in the plan (%+.1f %%, tolerance %s %%) - "
                       "the plan's estimates (%s) were off; the next plan of this image and arguments uses "
                       "what this start measured" % (name, label, logged, planned,
                                                     (float(logged) - planned) / planned * 100,
                                                     round(pct, 2), summary.get("estimates")))
    for warning in report.get("warning_details") or []:
        out.append("vllm: WARNING %s: startup log %s: %s" % (name, warning["kind"], warning["message"]))
    if summary.get("verdict") == "warn" and summary.get("reasons"):
        out.append("vllm: WARNING %s: memory plan %s" % (name, "; ".join(summary["reasons"])))
    return out


def after_starts(instances, plans, reports, deployed, previous, gpus, entries, tolerance):
    """Compare every start with the plan it was started with and record what it measured.

    A container this run did not (re)create keeps the plan it was deployed with (the
    record's, `previous`): the plan of this run may already use what that start measured.
    Returns {entries (the store's, updated), warnings {name: [...]}, plans {name: summary}}."""
    by_index = {int(g["index"]): g for g in gpus or []}
    instances = _with_mig_devices(instances, gpus)
    entries = dict(entries or {})
    warnings, summaries = {}, {}
    for inst in instances:
        name = inst["name"]
        result, report = plans[name], reports.get(name) or {}
        summary = plan_summary(result)
        if name not in deployed and isinstance((previous.get(name) or {}).get("plan"), dict):
            summary = previous[name]["plan"]
        summaries[name] = summary
        warnings[name] = startup_warnings(name, summary, report, tolerance)
        smallest = _device_of(inst, by_index)
        key, fields = measurement_key(inst, smallest.get("name"))
        entry = measured_entry(result, report)
        if entry is not None and result["estimates"]["activation_gib"] != "given":
            entry["settings"] = fields
            entries[key] = entry
    return {"entries": entries, "warnings": warnings, "plans": summaries}
