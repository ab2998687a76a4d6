# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""vLLM memory plan: will this model, at this length and budget, fit before we start it?

Pure functions, stdlib only, Python >= 3.9 (shipped to hosts as module_utils).

The arithmetic is vLLM's own (docs/domain.md §5-6):

    budget      = total GPU memory x gpu_memory_utilization   (a share of the whole
                  device, not of free memory)
    KV share    = budget - weights - non-torch - activation peak
    KV tokens   = KV share / KV bytes per token, floored to whole 16-token blocks
    concurrency = KV tokens / max_model_len   (how many full-length requests fit)

Everything is per GPU (per tensor-parallel rank): weights and KV heads are split
across ranks, so a plan for TP=N is the plan of one rank.

Estimates (the two figures vLLM only learns by profiling; both overridable):
  non_torch_gib   default 1.0 GiB: CUDA context, cuBLAS/NCCL workspaces.  Logs show
                  0.35-0.91 GiB (seed 0.85-0.91, corpus 008/014 0.36-0.73), so 1.0 is a
                  slight over-estimate on purpose.
  activation_gib  default max(1.0, 0.08 x weights per rank): the dummy forward's
                  peak.  The seed's 27B model (54.12 GiB weights) peaked at 4.38 GiB
                  = 0.081 x weights; small models stay near 0.6-1.2 GiB.  Multimodal
                  encoders and very long max_num_batched_tokens can need more (corpus
                  014: 15.7 GiB for a 78B VLM) - pass the measured figure then.
  Both stay fixed when a remedy is recomputed (the seed's FP8 run kept 4.41 GiB).

The plan's parts, one module each: its inputs and PlanError (vllm_plan_inputs), the model's
config and KV bytes (vllm_model), several instances on one GPU (vllm_sharing), the GPUs an
instance names (vllm_gpus), what a start measured (vllm_measured), a host's instances
(vllm_host_plan).  This module: the plan of one instance - its overheads, KV share and
band, verdict and remedies.
"""
import math
import os
import re

from ansible.module_utils.gpu import gpu_memory
from ansible.module_utils.serving import vllm_overheads as vo
from ansible.module_utils.serving.vllm_model import (
    kv_dtype_bytes, kv_heads_per_rank, layer_kv_bytes, load_config, model_arch, model_weight_bytes, quantization_of,
    request_kv_bytes)
from ansible.module_utils.serving.vllm_plan_inputs import PlanError, _flag, _number, _utilization, resolve_version
from ansible.module_utils.serving.vllm_sharing import (
    OUTSIDE_BUDGET_MIB, budget_room, check_instances, even_share, instances_reasons)

GIB = 1024 ** 3
MIB = 1024 ** 2
BLOCK_SIZE = 16  # vLLM's default KV block: the pool is counted in whole blocks
MAX_UTILIZATION = 0.95  # highest value the utilisation remedy proposes

# The band (see band_of), per configuration family: the leave-one-out error of the predicted KV
# tokens on the calibration table of real startup logs (tests/unit/test_vllm_plan_corpus.py
# recomputes it: each log predicted with the constants it set refitted without it,
# vllm_overheads.FITTED), its worst |error| in the family rounded up to half a percent, not
# under the default family's; a family of fewer than FEW_LOGS logs takes the default share on top.
FEW_LOGS = 3
BANDS = {
    "default": (0.03, "leave-one-out worst 2.52 % over 12 logs (calibration 009, L40S FP8)"),
    "v0": (0.13, "leave-one-out 9.68 % on its 1 log (corpus 041, its CUDA context), + 0.03 for few logs"),
    "v0_tensor_parallel": (0.06, "leave-one-out worst 0.29 % over 2 logs (corpus 008/009), + 0.03 for few logs"),
    "moe_consumer": (0.11, "leave-one-out 7.86 % on its 1 log (calibration 008, RTX 3090), + 0.03 for few logs"),
    "multimodal": (0.06, "leave-one-out worst 0.17 % over 2 logs (corpus 005, calibration 013), + 0.03 for "
                         "few logs"),
    "expert_parallel": (0.09, "leave-one-out 5.63 % on its 1 log (corpus 021), + 0.03 for few logs"),
    "unified_memory": (0.185, "leave-one-out 15.06 % on its 1 log (corpus 045, GB10), + 0.03 for few logs"),
    "no_config": (0.06, "no log: twice the default"),
}
BAND_SHARE = BANDS["default"][0]
# GeForce cards (RTX 2080-5090): consumer boards, MoE on them is a family of its own.
_CONSUMER = re.compile(r"geforce|\brtx[- ]?[2-5]0[5-9]0\b", re.I)
# Never narrower than this many GiB of KV share: the logs print GiB to two decimals and
# the profiling run's small allocations vary by that much.
BAND_FLOOR_GIB = 0.05
MEASURED_BAND_SHARE = 0.005
MEASURED_BAND_FLOOR_GIB = 0.01
# Driver reservations of one card differ by up to ~150 MiB between branches (H100: 454-551,
# H200: 614-700, L40S: 479-609 MiB; tests/fixtures/nvidia_smi_memory/SOURCES.tsv).
RESERVED_SPREAD_MIB = 150
# Activation of a plan given only weights and KV bytes per token (no shapes to model).
NO_CONFIG_ACTIVATION_SHARE = 0.08
OK_CONCURRENCY = 4.0  # from here batching is meaningful (domain.md §5)

# Weight size of a quantised copy relative to 16-bit: FP8 halves; 4-bit is about a
# quarter plus group scales and the embeddings/lm_head that stay 16-bit.
FP8_WEIGHT_FACTOR = 0.5
INT4_WEIGHT_FACTOR = 0.28


# ---------------------------------------------------------------- the plan

def _overhead_model(arch, tp):
    model = dict(arch)
    model["kv_heads_per_rank"] = kv_heads_per_rank(arch["num_key_value_heads"], tp)
    return model


def overheads(spec, rules, batched, seqs):
    """{activation_gib, non_torch_gib, cuda_graph_gib, sources, parts}: given figures win,
    then what this host measured for the same image and arguments, then the model."""
    arch = spec.get("arch")
    tp = spec["tensor_parallel_size"]
    measured = spec.get("measured")
    if arch is not None:
        est = vo.estimate(_overhead_model(arch, tp), rules, tp, batched, seqs,
                          enforce_eager=spec["enforce_eager"], flashinfer=spec["flashinfer"],
                          graphs=spec["cuda_graph_profiling"], pooling=spec["pooling"],
                          unified_memory=spec["device"]["unified_memory"],
                          expert_parallel=spec["expert_parallel"], version=spec["version"])
    else:
        # Explicit figures without a config: no shapes to model the profiling run with.
        est = {"activation_gib": max(1.0, NO_CONFIG_ACTIVATION_SHARE * spec["weights_total_gib"] / tp),
               "non_torch_gib": vo.NON_TORCH_BASE_GIB + (vo.NCCL_GIB if tp > 1 else 0.0),
               "cuda_graph_gib": 0.0, "parts": {}}
    out = {"parts": est["parts"], "sources": {}}
    for key in ("activation_gib", "non_torch_gib", "cuda_graph_gib"):
        if spec.get(key) is not None:
            out[key], out["sources"][key] = spec[key], "given"
        elif measured is not None:
            out[key], out["sources"][key] = measured[key], "measured on this host"
        else:
            out[key], out["sources"][key] = est[key], "model" if arch is not None else "rough (no config.json)"
    return out


def compute(spec):
    """One plan from a normalised spec (see build_spec).  Returns the plan dict."""
    device = spec["device"]
    cuda_total = device["cuda_total_mib"]
    util = spec["gpu_memory_utilization"]
    tp = spec["tensor_parallel_size"]
    rules_name, rules = vo.generation(spec["version"])
    block = spec["block_size"] or BLOCK_SIZE
    arch = spec.get("arch")
    batched, seqs = vo.batch_defaults(
        rules, spec["version"], cuda_total / 1024.0, device["card"] or spec["gpu_name"], spec["max_model_len"],
        multimodal=bool(arch and arch.get("vision")), pooling=spec["pooling"],
        sliding_window=bool(arch and any(layer[0] == "sliding" for layer in arch["layers"])),
        max_num_seqs=spec["max_num_seqs"], max_num_batched_tokens=spec["max_num_batched_tokens"])
    over = overheads(spec, rules, batched, seqs)
    budget_gib = cuda_total * util / 1024.0
    weights_rank = spec["weights_total_gib"] / tp
    activation, non_torch, graphs = over["activation_gib"], over["non_torch_gib"], over["cuda_graph_gib"]
    kv_gib = budget_gib - weights_rank - non_torch - activation - graphs

    if arch is not None:
        kv_size = kv_dtype_bytes(spec["kv_cache_dtype"], arch["dtype_bytes"])
        per_layer = layer_kv_bytes(arch, kv_size, tp)
        layers = arch["layers"]
        per_token = per_layer * len(layers)
    else:
        # Explicit figures: whole model at 16-bit, uniform full attention.
        scale = kv_dtype_bytes(spec["kv_cache_dtype"], 2) / 2.0
        per_token = spec["kv_bytes_per_token_total"] * scale / tp
        layers = [("full", None)]
        per_layer = per_token
    if per_token <= 0:
        raise PlanError("the model has no per-token KV cache (attention-free): nothing to plan")
    per_request = request_kv_bytes(layers, per_layer, spec["max_model_len"], block, batched)

    def pool(gib):
        """(tokens, concurrency) of a KV share, counted as this vLLM counts them."""
        if gib <= 0:
            return 0, 0.0
        blocks = int(gib * GIB // (per_token * block))
        concurrency = blocks * block * per_token / float(per_request)
        if rules["tokens"] == "concurrency":
            return int(concurrency * spec["max_model_len"]), concurrency
        return blocks * block, concurrency

    tokens, concurrency = pool(kv_gib)
    band = band_of(spec, kv_gib, device)
    low_tokens, low_concurrency = pool(kv_gib - band["gib"])
    high_tokens, high_concurrency = pool(kv_gib + band["gib"])

    held = spec["held_mib"]
    plan = {
        "gpu_memory_mib": device["total_mib"],
        "gpu_memory_gib": round(device["total_mib"] / 1024.0, 2),
        "gpu_reserved_mib": device["reserved_mib"],
        "gpu_reserved_source": device["reserved_source"],
        "cuda_total_mib": cuda_total,
        "gpu_memory_utilization": util,
        "budget_mib": int(round(cuda_total * util)),
        "budget_gib": round(budget_gib, 3),
        "held_mib": held,
        "free_mib": cuda_total - held,
        "tensor_parallel_size": tp,
        "weights_gib": round(weights_rank, 3),
        "weights_total_gib": round(spec["weights_total_gib"], 3),
        "weights_source": spec["weights_source"],
        "non_torch_gib": round(non_torch, 3),
        "activation_gib": round(activation, 3),
        "cuda_graph_gib": round(graphs, 3),
        "estimates": over["sources"],
        "overhead_parts": over["parts"],
        "engine": {
            "vllm_version": spec["version_text"],
            "version_source": spec["version_source"],
            "rules": rules_name,
            "max_num_batched_tokens": batched,
            "max_num_seqs": seqs,
            "sampler": over["parts"].get("sampler_path"),
        },
        "kv_cache_gib": round(kv_gib, 3),
        "kv_cache_dtype": spec["kv_cache_dtype"],
        "kv_bytes_per_token": int(per_token),
        "kv_cache_tokens": tokens,
        "block_size": block,
        "max_model_len": spec["max_model_len"],
        "max_concurrency": round(concurrency, 2),
        "band": {
            "share": band["share"],
            "family": band["family"],
            "gib": round(band["gib"], 3),
            "source": band["source"],
            "kv_cache_tokens": [low_tokens, high_tokens],
            "max_concurrency": [round(low_concurrency, 2), round(high_concurrency, 2)],
        },
        "quantization": spec["quantization"],
    }
    if spec.get("measured"):
        plan["measured"] = {k: spec["measured"][k] for k in ("recorded", "vllm_version") if k in spec["measured"]}
    if arch is not None:
        plan["model"] = {
            "num_hidden_layers": arch["num_hidden_layers"],
            "full_attention_layers": sum(1 for layer in layers if layer[0] == "full"),
            "sliding_window_layers": sum(1 for layer in layers if layer[0] == "sliding"),
            "num_key_value_heads": arch["num_key_value_heads"],
            "head_dim": arch["head_dim"],
            "mla": arch["mla"],
            "dtype": arch["dtype"],
            "vision": bool(arch.get("vision")),
            "experts": arch["num_experts"],
        }
    verdict, reasons = judge(plan)
    plan["verdict"] = verdict
    plan["reasons"] = reasons
    return plan


def band_family(spec):
    """The configuration family whose leave-one-out error is this plan's band (BANDS)."""
    arch = spec.get("arch")
    if arch is None:
        return "no_config"
    if spec["device"]["unified_memory"]:
        return "unified_memory"
    if spec["expert_parallel"]:
        return "expert_parallel"
    if vo.generation(spec["version"])[1]["engine"] == "V0":
        return "v0_tensor_parallel" if spec["tensor_parallel_size"] > 1 else "v0"
    if arch.get("vision") or spec["pooling"]:
        return "multimodal"
    if arch.get("num_experts") and _CONSUMER.search(str(spec["device"]["card"] or spec.get("gpu_name") or "")):
        return "moe_consumer"
    return "default"


def band_of(spec, kv_gib, device):
    """The plan's own uncertainty in GiB of KV share: its family's leave-one-out error on the
    table of real logs (BANDS: a share of the KV share, at least BAND_FLOOR_GIB, twice that
    floor outside the default family), plus the spread of the driver's reservation when the
    host did not report it.  A plan from this host's own measurement only carries the logs'
    rounding."""
    family = band_family(spec)
    if spec.get("measured") is not None and spec.get("activation_gib") is None:
        share, floor, source = MEASURED_BAND_SHARE, MEASURED_BAND_FLOOR_GIB, "measured on this host"
    else:
        share, why = BANDS[family]
        floor = BAND_FLOOR_GIB if family == "default" else 2 * BAND_FLOOR_GIB
        source = "model error on real startup logs, %s: %s" % (family.replace("_", " "), why)
    gib = max(floor, share * abs(kv_gib))
    if device["reserved_source"] != "facts" and spec.get("measured") is None:
        gib += RESERVED_SPREAD_MIB * spec["gpu_memory_utilization"] / 1024.0
        source += "; driver reservation not reported by the host (+-%d MiB)" % RESERVED_SPREAD_MIB
    return {"share": share, "gib": gib, "source": source, "family": family}


def _band_text(plan, key="max_concurrency"):
    low, high = plan["band"][key]
    return "%.2f-%.2fx" % (low, high)


def judge(plan):
    """Verdict and reasons of one plan (without the several-instances check).

    refuse only where the plan is sure: vLLM's own free-memory check, or even the
    optimistic end of the band below one full-length request; inside the band the
    verdict is warn, naming the band; below 4x it is warn (domain.md §5)."""
    reasons = []
    budget = plan["budget_mib"]
    low, high = plan["band"]["max_concurrency"]
    if plan["held_mib"] and budget > plan["free_mib"]:
        reasons.append({
            "code": "free_memory_below_budget",
            "message": ("budget %d MiB (%.2f x %d MiB CUDA total) is more than the %d MiB free "
                        "(%d MiB held by other processes): vLLM stops at start with "
                        "'Free memory on device ... is less than desired GPU memory utilization'"
                        % (budget, plan["gpu_memory_utilization"], plan["cuda_total_mib"],
                           plan["free_mib"], plan["held_mib"])),
        })
    share = ("KV share %.2f GiB = %.2f budget - %.2f weights - %.2f non-torch - %.2f activation"
             % (plan["kv_cache_gib"], plan["budget_gib"], plan["weights_gib"], plan["non_torch_gib"],
                plan["activation_gib"]))
    if plan["cuda_graph_gib"]:
        share += " - %.2f CUDA graphs" % plan["cuda_graph_gib"]
    if high <= 0:
        reasons.append({
            "code": "kv_share_not_positive",
            "message": "%s: nothing left for the KV cache ('No available memory for the cache blocks')" % share,
        })
    elif high < 1.0:
        reasons.append({
            "code": "concurrency_below_1",
            "message": ("%s KV tokens hold %.2fx (band %s) of one %d-token request: the server "
                        "refuses to start or fails on the first full-length request"
                        % ("{:,}".format(plan["kv_cache_tokens"]), plan["max_concurrency"],
                           _band_text(plan), plan["max_model_len"])),
        })
    elif low < 1.0:
        reasons.append({
            "code": "concurrency_near_1",
            "message": ("%s KV tokens hold %.2fx of one %d-token request, within this plan's band "
                        "%s: it may or may not fit one full-length request" % (
                            "{:,}".format(plan["kv_cache_tokens"]), plan["max_concurrency"],
                            plan["max_model_len"], _band_text(plan))),
        })
    elif plan["max_concurrency"] < OK_CONCURRENCY:
        reasons.append({
            "code": "concurrency_below_4",
            "message": ("%s KV tokens hold %.2fx (band %s) of %d-token requests: it fits, but there "
                        "is little or no batching (4x or more is meaningful)"
                        % ("{:,}".format(plan["kv_cache_tokens"]), plan["max_concurrency"],
                           _band_text(plan), plan["max_model_len"])),
        })
    refuse = {"free_memory_below_budget", "kv_share_not_positive", "concurrency_below_1"}
    codes = {r["code"] for r in reasons}
    if codes & refuse:
        return "refuse", reasons
    if codes:
        return "warn", reasons
    return "ok", reasons


# ---------------------------------------------------------------- remedies

def _max_len_candidates(current):
    """Power-of-two-ish lengths below current: 2^k and 1.5 x 2^k, from 512 up."""
    out = set()
    k = 9
    while 2 ** k < current:
        out.add(2 ** k)
        if 3 * 2 ** (k - 1) < current:
            out.add(3 * 2 ** (k - 1))
        k += 1
    return sorted(out, reverse=True)


def _remedy(name, description, change, plan):
    keys = ("weights_gib", "kv_cache_gib", "kv_bytes_per_token", "kv_cache_tokens",
            "max_model_len", "max_concurrency", "gpu_memory_utilization",
            "tensor_parallel_size", "verdict")
    entry = {"name": name, "description": description, "change": change}
    entry.update({key: plan[key] for key in keys})
    return entry


def remedies(spec, plan, others_utilization=0.0, overflow=None):
    """Changes that would help, each with the plan it would give, best first.

    others_utilization: summed utilisation of the other instances on this GPU
    (limits how far this one may grow); overflow: the failing instances check,
    if any, which adds the one remedy that fixes it (share the GPU evenly).
    """
    out = []
    fixed = dict(spec)
    # Remedies keep the overheads of the original plan (activation does not shrink
    # with quantisation: the seed's FP8 run peaked at 4.41 vs 4.38 GiB); only a
    # tensor-parallel change is estimated again (each rank's share changes).
    for key in ("activation_gib", "non_torch_gib", "cuda_graph_gib"):
        fixed[key] = plan[key]
    tp = spec["tensor_parallel_size"]
    bits = spec["weight_bits"]
    base_16bit = spec["weights_total_gib"] * 16.0 / bits if bits < 16 else spec["weights_total_gib"]

    if overflow is not None:
        room = budget_room(overflow)
        each = even_share(overflow)
        if each > 0:
            out.append(_remedy("share_gpu_evenly", "--gpu-memory-utilization %.2f on each of the %d "
                               "instances on GPU %s (sum %.2f <= %.2f)"
                               % (each, len(overflow["names"]), overflow["gpu_index"],
                                  each * len(overflow["names"]), room),
                               {"gpu_memory_utilization": each},
                               compute(dict(fixed, gpu_memory_utilization=each))))
    if bits > 8:
        alt = dict(fixed, weights_total_gib=base_16bit * FP8_WEIGHT_FACTOR, weight_bits=8)
        out.append(_remedy("quantize_weights_fp8", "serve an FP8 checkpoint (or --quantization fp8): "
                           "weights %.2f -> %.2f GiB per GPU"
                           % (plan["weights_gib"], alt["weights_total_gib"] / tp),
                           {"quantization": "fp8"}, compute(alt)))
    if bits > 4:
        alt = dict(fixed, weights_total_gib=base_16bit * INT4_WEIGHT_FACTOR, weight_bits=4)
        out.append(_remedy("quantize_weights_int4", "serve a 4-bit AWQ/GPTQ checkpoint: weights "
                           "%.2f -> %.2f GiB per GPU" % (plan["weights_gib"], alt["weights_total_gib"] / tp),
                           {"quantization": "awq"}, compute(alt)))
    if kv_dtype_bytes(spec["kv_cache_dtype"], 2) > 1:
        alt = dict(fixed, kv_cache_dtype="fp8")
        out.append(_remedy("kv_cache_fp8", "--kv-cache-dtype fp8: half the bytes per KV token",
                           {"kv_cache_dtype": "fp8"}, compute(alt)))
    arch = spec.get("arch")
    if arch is None or arch["num_attention_heads"] % (2 * tp) == 0:
        alt = dict(fixed, tensor_parallel_size=2 * tp, activation_gib=spec["activation_gib"],
                   non_torch_gib=spec["non_torch_gib"], cuda_graph_gib=spec["cuda_graph_gib"], measured=None)
        out.append(_remedy("tensor_parallel", "--tensor-parallel-size %d: weights and KV heads split "
                           "over %d GPUs" % (2 * tp, 2 * tp),
                           {"tensor_parallel_size": 2 * tp}, compute(alt)))
    if plan["max_concurrency"] < OK_CONCURRENCY and plan["kv_cache_gib"] > 0:
        chosen = None
        for goal in (OK_CONCURRENCY, 1.0):
            for length in _max_len_candidates(spec["max_model_len"]):
                alt_plan = compute(dict(fixed, max_model_len=length))
                if alt_plan["max_concurrency"] >= goal:
                    chosen = (length, alt_plan)
                    break
            if chosen:
                break
        if chosen:
            out.append(_remedy("lower_max_model_len", "--max-model-len %d (from %d): shorter "
                               "requests, more of them at once" % (chosen[0], spec["max_model_len"]),
                               {"max_model_len": chosen[0]}, chosen[1]))
    total = spec["device"]["cuda_total_mib"]
    util = spec["gpu_memory_utilization"]
    # What this instance may take: the device minus memory held by other
    # processes minus the budgets of the other instances on the GPU.
    room = (total - spec["held_mib"]) / float(total) - others_utilization
    if util > room + 1e-9 and overflow is None:
        lower = math.floor(room * 100) / 100.0
        if lower > 0:
            out.append(_remedy("lower_gpu_memory_utilization", "--gpu-memory-utilization %.2f: "
                               "fit the memory that is actually free" % lower,
                               {"gpu_memory_utilization": lower},
                               compute(dict(fixed, gpu_memory_utilization=lower))))
    elif overflow is None:
        higher = min(MAX_UTILIZATION, math.floor(room * 100) / 100.0)
        if higher > util + 1e-9:
            out.append(_remedy("raise_gpu_memory_utilization", "--gpu-memory-utilization %.2f "
                               "(from %.2f): +%.2f GiB for the KV cache"
                               % (higher, util, (higher - util) * total / 1024.0),
                               {"gpu_memory_utilization": higher},
                               compute(dict(fixed, gpu_memory_utilization=higher))))
    score = {"ok": 2, "warn": 1, "refuse": 0}
    if overflow is not None:
        # Nothing else fixes an over-committed GPU: the sharing remedy comes first, and the others are
        # judged against the whole GPU, where they leave the summed budgets as they were.
        head = [r for r in out if r["name"] == "share_gpu_evenly"]
        rest = [gpu_rejudged(r, spec, overflow) for r in out if r["name"] != "share_gpu_evenly"]
        rest.sort(key=lambda r: (score[r["verdict"]], r["max_concurrency"]), reverse=True)
        return head + rest
    out.sort(key=lambda r: (score[r["verdict"]], r["max_concurrency"]), reverse=True)
    return out


def gpu_rejudged(remedy, spec, overflow):
    """A remedy of one instance judged against the GPU its instances over-commit: unless it lowers
    the summed utilisation to what fits, it fixes nothing there and is refused, saying so.
    (overflow["includes_plan"] false: the over-committed GPU is another one, which no change of this
    instance relieves.)"""
    room = budget_room(overflow)
    summed = overflow["sum_utilization"]
    if overflow.get("includes_plan", True):
        summed += remedy["gpu_memory_utilization"] - spec["gpu_memory_utilization"]
    if summed <= room + 1e-9:
        return dict(remedy, fits_gpu=True)
    return dict(remedy, verdict="refuse", fits_gpu=False,
                description="%s - does not fix GPU %s: the budgets of its %d instances still sum to %.2f "
                            "(room %.2f)" % (remedy["description"], overflow["gpu_index"], len(overflow["names"]),
                                             summed, room))


def build_spec(gpu_memory_mib=None, gpu_memory_utilization=None, max_model_len=None, model_dir=None,
               weights_gib=None, kv_bytes_per_token=None, non_torch_gib=None, activation_gib=None,
               cuda_graph_gib=None, kv_cache_dtype="auto", tensor_parallel_size=1, held_mib=0,
               quantization=None, block_size=None, max_num_batched_tokens=None, max_num_seqs=None,
               gpu_name=None, gpu_reserved_mib=None, vllm_version=None, image=None, enforce_eager=False,
               sampler="auto", cuda_graph_profiling=None, pooling=False, expert_parallel=False,
               measured=None):
    """Validate inputs and read the model directory; returns the spec compute() takes.

    gpu_memory_mib is nvidia-smi's Total; with gpu_reserved_mib (nvidia-smi -q: FB Memory
    Usage -> Reserved) it gives the total CUDA reports, which the utilisation applies to.
    Either may come from the catalogue by gpu_name.  Explicit weights_gib /
    kv_bytes_per_token are for the whole model at its 16-bit KV dtype (a model dir gives
    both); both are divided by tensor_parallel_size.  Given together with model_dir they
    override what the directory says.  measured: this host's figures for the same image
    and arguments (measured_entry), used instead of the model's estimates.  sampler: the
    top-k/top-p path of the install ("auto": derived from the image and version,
    vllm_overheads.flashinfer_installed; "flashinfer" or "native" as the operator knows it).
    """
    total = _number(gpu_memory_mib, "gpu_memory_mib", minimum=1, integer=True, allow_none=True)
    reserved = _number(gpu_reserved_mib, "gpu_reserved_mib", minimum=0, integer=True, allow_none=True)
    device = gpu_memory.device_memory(gpu_name, total, reserved)
    if device is None:
        raise PlanError("give gpu_memory_mib or a GPU the catalogue knows (one of: %s)"
                        % ", ".join(gpu_memory.names()))
    if device["cuda_total_mib"] <= 0:
        raise PlanError("gpu_reserved_mib %s is not less than the GPU's %s MiB" % (reserved, device["total_mib"]))
    version, version_text, version_source = resolve_version(vllm_version, image)
    rules = vo.generation(version)[1]
    if gpu_memory_utilization is None:
        gpu_memory_utilization = rules["default_utilization"]
    spec = {
        "device": device,
        "gpu_name": gpu_name,
        "gpu_memory_utilization": _utilization(gpu_memory_utilization),
        "tensor_parallel_size": _number(tensor_parallel_size, "tensor_parallel_size", minimum=1, integer=True),
        "held_mib": _number(held_mib or 0, "held_mib", minimum=0, integer=True),
        "non_torch_gib": _number(non_torch_gib, "non_torch_gib", minimum=0, allow_none=True),
        "activation_gib": _number(activation_gib, "activation_gib", minimum=0, allow_none=True),
        "cuda_graph_gib": _number(cuda_graph_gib, "cuda_graph_gib", minimum=0, allow_none=True),
        "block_size": _number(block_size, "block_size", minimum=1, integer=True, allow_none=True),
        "max_num_batched_tokens": _number(max_num_batched_tokens, "max_num_batched_tokens", minimum=1,
                                          integer=True, allow_none=True),
        "max_num_seqs": _number(max_num_seqs, "max_num_seqs", minimum=1, integer=True, allow_none=True),
        "kv_cache_dtype": str(kv_cache_dtype or "auto").lower(),
        "version": version,
        "version_text": version_text,
        "version_source": version_source,
        "enforce_eager": bool(_flag(enforce_eager, "enforce_eager")),
        "flashinfer": _sampler(version, image, sampler),
        "cuda_graph_profiling": _flag(cuda_graph_profiling, "cuda_graph_profiling"),
        "pooling": bool(_flag(pooling, "pooling")),
        "expert_parallel": bool(_flag(expert_parallel, "expert_parallel")),
        "measured": measured or None,
        "arch": None,
    }
    kv_dtype_bytes(spec["kv_cache_dtype"])  # validates the name
    if spec["held_mib"] >= device["cuda_total_mib"]:
        raise PlanError("held_mib %s is not less than the GPU's %s MiB" % (held_mib, device["cuda_total_mib"]))

    method, bits = quantization_of({}, quantization)
    arch = None
    if model_dir:
        if not os.path.isdir(model_dir):
            raise PlanError("model directory %s does not exist" % model_dir)
        config = load_config(model_dir)
        arch = model_arch(config, quantization)
        method, bits = arch["quantization"], arch["weight_bits"]
        spec["arch"] = arch
        if weights_gib is None and not (measured and measured.get("weights_gib") is not None):
            found = model_weight_bytes(model_dir)
            spec["weights_total_gib"] = found["bytes"] / float(GIB)
            spec["weights_source"] = found["source"]
        if max_model_len is None:
            max_model_len = arch["max_position_embeddings"]
    if weights_gib is not None:
        spec["weights_total_gib"] = _number(weights_gib, "weights_gib", minimum=0)
        spec["weights_source"] = "given"
    elif measured and measured.get("weights_gib") is not None:
        spec["weights_total_gib"] = measured["weights_gib"] * spec["tensor_parallel_size"]
        spec["weights_source"] = "measured on this host"
    if "weights_total_gib" not in spec:
        raise PlanError("give either a model directory or weights_gib with kv_bytes_per_token")
    if kv_bytes_per_token is not None:
        # An explicit figure wins over the architecture (uniform full attention).
        spec["kv_bytes_per_token_total"] = _number(kv_bytes_per_token, "kv_bytes_per_token", minimum=1)
        spec["arch"] = None
    elif arch is None:
        raise PlanError("kv_bytes_per_token is required without a model directory")
    spec["max_model_len"] = _number(max_model_len, "max_model_len", minimum=1, integer=True)
    spec["quantization"] = method
    spec["weight_bits"] = bits
    return spec


def _sampler(version, image, sampler):
    try:
        return vo.flashinfer_installed(version, image, sampler)
    except ValueError as exc:
        raise PlanError(str(exc))


def plan(instances=None, gpu_index=0, **inputs):
    """The full plan: compute, several-instances check, remedies.

    inputs are build_spec's arguments.  instances ({name, gpu_memory_utilization,
    gpu_index}) are all the instances of the host, this plan's own included; the
    plan's instance is taken to run on gpu_index.
    """
    spec = build_spec(**inputs)
    result = compute(spec)
    # vLLM's budget is a share of the CUDA total, and each process holds a little beyond it: one rule
    # with `gpuhost plan --manifest` (k8s_plan), so 4 x 0.25 on one GPU is refused by both.
    checks = (check_instances(instances, spec["device"]["cuda_total_mib"], spec["held_mib"], OUTSIDE_BUDGET_MIB)
              if instances else [])
    extra = instances_reasons(checks)
    if extra:
        result["reasons"] = extra + result["reasons"]
        result["verdict"] = "refuse"
    result["instances"] = checks
    mine = [c for c in checks if c["gpu_index"] == gpu_index]
    others = max(0.0, mine[0]["sum_utilization"] - spec["gpu_memory_utilization"]) if mine else 0.0
    overflow = next((dict(c, includes_plan=True) for c in mine if not c["fits"]), None) or next(
        (dict(c, includes_plan=False) for c in checks if not c["fits"]), None)
    result["remedies"] = (remedies(spec, result, others, overflow)
                          if result["verdict"] != "ok" else [])
    return result


def refuse_message(result, name=None):
    """One line for a failure: the layer, the numbers, the remedies best first."""
    text = "vllm memory plan: refuse%s - " % (" " + name if name else "")
    text += "; ".join(r["message"] for r in result["reasons"])
    text += (" [budget %d MiB, weights %.2f GiB, KV %.2f GiB, %s tokens, %.2fx at max_model_len %d]."
             % (result["budget_mib"], result["weights_gib"], result["kv_cache_gib"],
                "{:,}".format(result["kv_cache_tokens"]), result["max_concurrency"], result["max_model_len"]))
    if result["remedies"]:
        text += " Remedies, best first: " + "; ".join(
            "%s (%s: %s tokens, %.2fx, %s)" % (r["name"], r["description"], "{:,}".format(r["kv_cache_tokens"]),
                                               r["max_concurrency"], r["verdict"])
            for r in result["remedies"]) + "."
    return text


def render_text(result):
    """Readable plan for the CLI."""
    engine = result["engine"]
    band = result["band"]
    lines = [
        "vLLM memory plan: %s" % result["verdict"].upper(),
        "  vLLM          %s (%s); rules %s; max_num_batched_tokens %d, max_num_seqs %d" % (
            engine["vllm_version"] or "unknown", engine["version_source"], engine["rules"],
            engine["max_num_batched_tokens"], engine["max_num_seqs"]),
        "  GPU           %d MiB - %d MiB reserved (%s) = %d MiB CUDA total, %d MiB held by others" % (
            result["gpu_memory_mib"], result["gpu_reserved_mib"], result["gpu_reserved_source"],
            result["cuda_total_mib"], result["held_mib"]),
        "  budget        %.2f x %d MiB = %d MiB (%.2f GiB)" % (
            result["gpu_memory_utilization"], result["cuda_total_mib"], result["budget_mib"], result["budget_gib"]),
        "  weights       %.2f GiB per GPU (TP %d, %s)" % (
            result["weights_gib"], result["tensor_parallel_size"], result["weights_source"]),
        "  activation    %.2f GiB (%s)" % (result["activation_gib"], result["estimates"]["activation_gib"]),
        "  non-torch     %.2f GiB (%s)" % (result["non_torch_gib"], result["estimates"]["non_torch_gib"]),
        "  CUDA graphs   %.2f GiB (%s)" % (result["cuda_graph_gib"], result["estimates"]["cuda_graph_gib"]),
        "  KV share      %.2f GiB, %s B/token (kv_cache_dtype %s)" % (
            result["kv_cache_gib"], "{:,}".format(result["kv_bytes_per_token"]), result["kv_cache_dtype"]),
        "  KV tokens     %s -> %.2fx at %s tokens per request" % (
            "{:,}".format(result["kv_cache_tokens"]), result["max_concurrency"], "{:,}".format(result["max_model_len"])),
        "  band          %s-%s tokens, %.2f-%.2fx (+-%.2f GiB: %s)" % (
            "{:,}".format(band["kv_cache_tokens"][0]), "{:,}".format(band["kv_cache_tokens"][1]),
            band["max_concurrency"][0], band["max_concurrency"][1], band["gib"], band["source"]),
    ]
    for reason in result["reasons"]:
        lines.append("  - %s" % reason["message"])
    for check in result.get("instances") or []:
        lines.append("  GPU %s instances %s: sum %.2f -> %d of %d MiB (%s)" % (
            check["gpu_index"], ", ".join(check["names"]), check["sum_utilization"],
            check["required_mib"], check["total_mib"], "fits" if check["fits"] else "OVERFLOW"))
    if result["remedies"]:
        lines.append("  remedies (best first):")
        for rem in result["remedies"]:
            lines.append("    %-30s %s tokens, %.2fx, %s - %s" % (
                rem["name"], "{:,}".format(rem["kv_cache_tokens"]), rem["max_concurrency"],
                rem["verdict"], rem["description"]))
    return "\n".join(lines) + "\n"
