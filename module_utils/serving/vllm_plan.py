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
"""
import hashlib
import json
import math
import os
import re

from ansible.module_utils.serving.safetensors_header import checkpoint_weight_bytes, SafetensorsError
from ansible.module_utils.gpu import gpu_memory
from ansible.module_utils.serving import vllm_overheads as vo
from ansible.module_utils.gpu.nvsmi_parse import merge_mig_listing
# arg_values: callers import it from here.
from ansible.module_utils.serving.vllm_args import arg_values, read as read_args  # noqa: F401  # pylint: disable=unused-import

GIB = 1024 ** 3
MIB = 1024 ** 2
BLOCK_SIZE = 16  # vLLM's default KV block: the pool is counted in whole blocks
MAX_UTILIZATION = 0.95  # highest value the utilisation remedy proposes

# What one vLLM process holds beyond its budget (CUDA context and allocations made before vLLM's
# memory snapshot): seed 003's EngineCore held 9,184 MiB at 0.40 of an L4's 22,600 MiB CUDA total
# (budget 9,040), 144 MiB more; at 0.20 it held 4,648 MiB for 4,520 (128).  The larger is kept.
OUTSIDE_BUDGET_MIB = 144
# The band (see band_of): the worst |error| of the predicted KV tokens on the table of real
# startup logs (tests/unit/test_vllm_plan_corpus.py prints it), rounded up.
BAND_SHARE = 0.03
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

# Bytes per element of the model dtype names found in config.json.  float32
# checkpoints run in 16-bit under vLLM's dtype=auto, so their KV is 2 bytes.
MODEL_DTYPE_BYTES = {
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    "float32": 2, "float": 2, "fp32": 2,
}
# --kv-cache-dtype values; None = "same as the model" (auto).
KV_CACHE_DTYPE_BYTES = {
    "auto": None, "bfloat16": 2, "float16": 2, "half": 2, "float32": 4,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1,
}
# Weight bits of checkpoint quantisation methods (config quantization_config.quant_method
# or --quantization); 16 = not quantised.
QUANT_BITS = {
    None: 16, "": 16, "none": 16,
    "fp8": 8, "fbgemm_fp8": 8, "ptpc_fp8": 8, "fp8_e4m3": 8, "modelopt": 8, "experts_int8": 8,
    "int8": 8, "w8a8": 8,
    "awq": 4, "awq_marlin": 4, "gptq": 4, "gptq_marlin": 4, "auto-round": 4, "auto_round": 4,
    "mxfp4": 4, "nvfp4": 4, "modelopt_fp4": 4, "bitsandbytes": 4, "gguf": 4, "hqq": 4,
    "compressed-tensors": None,  # depends on its config_groups; read below
}
# Weight size of a quantised copy relative to 16-bit: FP8 halves; 4-bit is about a
# quarter plus group scales and the embeddings/lm_head that stay 16-bit.
FP8_WEIGHT_FACTOR = 0.5
INT4_WEIGHT_FACTOR = 0.28
NESTED_TEXT_CONFIGS = ("text_config", "llm_config", "language_config")
FULL_LAYER_TYPES = ("full_attention", "attention", "global_attention", "full")
SLIDING_LAYER_TYPES = ("sliding_attention", "sliding_window_attention", "local_attention",
                       "chunked_attention", "sliding")


class PlanError(ValueError):
    """Bad input to the plan; the message is one line meant for an operator."""


# ---------------------------------------------------------------- model config

def load_config(model_dir):
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path) as handle:
            config = json.load(handle)
    except OSError as exc:
        raise PlanError("cannot read %s: %s" % (path, exc.strerror or exc))
    except ValueError as exc:
        raise PlanError("%s is not JSON: %s" % (path, exc))
    if not isinstance(config, dict):
        raise PlanError("%s is not a JSON object" % path)
    return config


# What transformers fills in when a config leaves a field out (the defaults of its
# configuration class): LLaVA checkpoints give only a few text_config keys and rely on
# these (llava-hf/llava-1.5-7b-hf: model_type llama, vocab_size, max_position_embeddings).
# Sources: transformers LlamaConfig, MistralConfig, Qwen2Config, CLIPVisionConfig __init__.
LIBRARY_DEFAULTS = {
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, max_position_embeddings=2048),
    "mistral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096 * 32,
                    sliding_window=4096),
    "qwen2": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=32768),
    "clip_vision_model": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                              num_attention_heads=12, image_size=224, patch_size=32),
}


def _with_defaults(sub):
    defaults = LIBRARY_DEFAULTS.get(str(sub.get("model_type") or ""), {})
    filled = dict(defaults)
    filled.update({k: v for k, v in sub.items() if v is not None})
    return filled


def text_config(config):
    """The language-model part of a config: multimodal configs nest it
    (Gemma3/Qwen-VL/LLaVA `text_config`, InternVL `llm_config`); nested keys win,
    top-level ones (torch_dtype, quantization_config) fill the gaps, and what neither
    says comes from the library's defaults for the nested model_type."""
    merged = dict(config)
    for key in NESTED_TEXT_CONFIGS:
        sub = config.get(key)
        if isinstance(sub, dict) and (sub.get("num_hidden_layers") or sub.get("model_type") in LIBRARY_DEFAULTS):
            merged.update(_with_defaults(sub))
            break
    return merged


def _vision_tower(config):
    """Vision tower sizes for the encoder profiling run, or None for a text-only model."""
    vision = config.get("vision_config")
    if not isinstance(vision, dict):
        return None
    vision = _with_defaults(vision)
    hidden = vision.get("hidden_size") or vision.get("embed_dim")
    if not hidden:
        return None
    # Qwen-VL towers merge 2x2 patches into one LLM token (spatial_merge_size, default 2).
    kind = str(config.get("model_type") or "")
    merge = vision.get("spatial_merge_size") or (2 if "qwen" in kind and "vl" in kind else 1)
    return {
        "hidden_size": int(hidden),
        "intermediate_size": int(vision.get("intermediate_size") or 4 * int(hidden)),
        "merge": int(merge),
    }


def _positive_int(cfg, key, default=None):
    value = cfg.get(key, default)
    if value is None:
        return None
    try:
        value = int(value)
    except (TypeError, ValueError):
        raise PlanError("config.json: %s is not an integer: %r" % (key, value))
    if value <= 0:
        raise PlanError("config.json: %s must be positive, got %d" % (key, value))
    return value


def _count(cfg, key):
    """A size that may be zero or absent (shared experts): 0 then."""
    value = cfg.get(key)
    if value in (None, 0):
        return 0
    return _positive_int(cfg, key)


def quantization_of(config, override=None):
    """(method, weight bits) of the checkpoint, or of --quantization when given."""
    if override:
        method = str(override).lower()
        bits = QUANT_BITS.get(method)
        return method, (bits if bits is not None else 16)
    qc = config.get("quantization_config")
    if not isinstance(qc, dict):
        return None, 16
    method = str(qc.get("quant_method") or qc.get("quant_algo") or "").lower() or None
    bits = QUANT_BITS.get(method)
    if bits is None:
        # compressed-tensors and unknown methods: take the weight bit width they state.
        bits = qc.get("bits") or qc.get("w_bit")
        for group in (qc.get("config_groups") or {}).values():
            weights = (group or {}).get("weights") or {}
            if weights.get("num_bits"):
                bits = weights["num_bits"]
                break
        try:
            bits = int(bits) if bits else 16
        except (TypeError, ValueError):
            bits = 16
    return method, bits


def attention_layers(cfg):
    """List of (kind, window) for the layers that keep a per-token KV cache.

    kind is 'full' or 'sliding'.  Linear-attention/Mamba layers keep a fixed-size
    state, not a per-token cache, and are left out (vLLM sizes them separately).
    """
    layers = _positive_int(cfg, "num_hidden_layers")
    if layers is None:
        raise PlanError("config.json has no num_hidden_layers")
    window = cfg.get("sliding_window")
    window = int(window) if isinstance(window, (int, float)) and window > 0 else None
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        out = []
        for kind in types[:layers]:
            kind = str(kind).lower()
            if kind in FULL_LAYER_TYPES:
                out.append(("full", None))
            elif kind in SLIDING_LAYER_TYPES:
                span = window if kind != "chunked_attention" else cfg.get("attention_chunk_size")
                out.append(("sliding", span) if span else ("full", None))
        return out
    if window is None or cfg.get("use_sliding_window") is False:
        return [("full", None)] * layers
    pattern = cfg.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 1:
        # Gemma 3: every pattern-th layer is global, the others local.
        return [("full", None) if (i + 1) % pattern == 0 else ("sliding", window) for i in range(layers)]
    if str(cfg.get("model_type")) == "gemma2":
        return [("sliding", window) if i % 2 == 0 else ("full", None) for i in range(layers)]
    # Mistral-v0.1 style: one window for every layer.
    return [("sliding", window)] * layers


def model_arch(config, quantization=None):
    """What the KV arithmetic needs from config.json (text part of a multimodal one)."""
    cfg = text_config(config)
    heads = _positive_int(cfg, "num_attention_heads")
    if heads is None:
        raise PlanError("config.json has no num_attention_heads")
    kv_heads = _positive_int(cfg, "num_key_value_heads") or _positive_int(cfg, "num_kv_heads")
    if kv_heads is None:
        kv_heads = 1 if cfg.get("multi_query") else heads
    head_dim = _positive_int(cfg, "head_dim")
    if head_dim is None:
        hidden = _positive_int(cfg, "hidden_size")
        if hidden is None:
            raise PlanError("config.json has neither head_dim nor hidden_size")
        head_dim = hidden // heads
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or config.get("torch_dtype")
                or config.get("dtype") or "bfloat16").replace("torch.", "").lower()
    if dtype not in MODEL_DTYPE_BYTES:
        raise PlanError("config.json: unsupported dtype %r" % dtype)
    method, bits = quantization_of(config if "quantization_config" in config else cfg, quantization)
    kv_lora_rank = _positive_int(cfg, "kv_lora_rank")
    hidden = _positive_int(cfg, "hidden_size") or heads * head_dim
    experts = (_positive_int(cfg, "num_experts") or _positive_int(cfg, "num_local_experts")
               or _positive_int(cfg, "n_routed_experts"))
    topk = (_positive_int(cfg, "num_experts_per_tok") or _positive_int(cfg, "num_experts_per_token")
            or _positive_int(cfg, "moe_topk"))
    moe_inter = _positive_int(cfg, "moe_intermediate_size") or _positive_int(cfg, "intermediate_size")
    shared = _count(cfg, "shared_expert_intermediate_size")
    if not shared and _count(cfg, "n_shared_experts") and moe_inter:
        shared = _count(cfg, "n_shared_experts") * moe_inter
    return {
        "num_hidden_layers": _positive_int(cfg, "num_hidden_layers"),
        "layers": attention_layers(cfg),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        # DeepSeek MLA caches one compressed latent + the rope part per token and layer.
        "mla": bool(kv_lora_rank),
        "kv_lora_rank": kv_lora_rank,
        "qk_rope_head_dim": _positive_int(cfg, "qk_rope_head_dim", 64) if kv_lora_rank else None,
        "dtype": dtype,
        "dtype_bytes": MODEL_DTYPE_BYTES[dtype],
        "quantization": method,
        "weight_bits": bits,
        "max_position_embeddings": _positive_int(cfg, "max_position_embeddings"),
        # What the profiling run's activations scale with (vllm_overheads.estimate).
        "hidden_size": hidden,
        # A config without it (hand-trimmed) gets the common 4 x hidden; dense models only.
        "intermediate_size": _positive_int(cfg, "intermediate_size") or 4 * hidden,
        "vocab_size": _positive_int(cfg, "vocab_size") or _positive_int(config, "vocab_size") or 32000,
        "num_experts": experts if (experts and topk) else 0,
        "experts_per_token": topk or 0,
        "moe_intermediate_size": moe_inter if experts else None,
        "shared_expert_intermediate_size": shared,
        "first_dense_layers": _count(cfg, "first_k_dense_replace"),
        "vision": _vision_tower(config),
    }


def kv_dtype_bytes(kv_cache_dtype, model_dtype_bytes=2):
    key = str(kv_cache_dtype or "auto").lower()
    if key not in KV_CACHE_DTYPE_BYTES:
        raise PlanError("unknown kv_cache_dtype %r (one of: %s)" % (kv_cache_dtype, ", ".join(KV_CACHE_DTYPE_BYTES)))
    size = KV_CACHE_DTYPE_BYTES[key]
    return model_dtype_bytes if size is None else size


def kv_heads_per_rank(kv_heads, tp):
    # vLLM splits KV heads over ranks and replicates them when there are fewer heads than ranks.
    return max(1, kv_heads // tp)


def layer_kv_bytes(arch, kv_bytes, tp):
    """KV bytes per token of one attention layer on one rank."""
    if arch["mla"]:
        # The latent is shared by all heads, so tensor parallelism does not split it.
        return (arch["kv_lora_rank"] + arch["qk_rope_head_dim"]) * kv_bytes
    return 2 * kv_heads_per_rank(arch["num_key_value_heads"], tp) * arch["head_dim"] * kv_bytes


def kv_bytes_per_token(arch, kv_cache_dtype="auto", tp=1):
    """KV bytes per token on one rank, all attention layers together
    (this is what vLLM divides the KV share by for `GPU KV cache size`)."""
    per_layer = layer_kv_bytes(arch, kv_dtype_bytes(kv_cache_dtype, arch["dtype_bytes"]), tp)
    return per_layer * len(arch["layers"])


def model_weight_bytes(model_dir):
    try:
        return checkpoint_weight_bytes(model_dir)
    except (SafetensorsError, OSError) as exc:
        raise PlanError("weights of %s: %s (give weights_gib instead)" % (model_dir, exc))


# ---------------------------------------------------------------- the plan

def _cdiv(a, b):
    return -(-a // b)


def request_kv_bytes(layers, per_layer_bytes, max_model_len, block_size, max_num_batched_tokens):
    """KV bytes one max-length request needs (vLLM's max_memory_usage_bytes):
    full layers hold every token, sliding ones only their window plus one
    scheduling step, rounded up to blocks."""
    total = 0
    for kind, window in layers:
        if kind == "sliding" and window:
            tokens = min(window - 1 + max_num_batched_tokens, max_model_len)
            blocks = _cdiv(tokens, block_size) + 1
        else:
            blocks = _cdiv(max_model_len, block_size)
        total += blocks * block_size * per_layer_bytes
    return total


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


def band_of(spec, kv_gib, device):
    """The plan's own uncertainty in GiB of KV share: the worst error of the model on the
    table of real logs (BAND_SHARE of the KV share, at least BAND_FLOOR_GIB), doubled where
    a term rests on a single log or no config, plus the spread of the driver's reservation
    when the host did not report it.  A plan from this host's own measurement only carries
    the logs' rounding."""
    if spec.get("measured") is not None and spec.get("activation_gib") is None:
        share, floor, source = MEASURED_BAND_SHARE, MEASURED_BAND_FLOOR_GIB, "measured on this host"
    else:
        share, floor, source = BAND_SHARE, BAND_FLOOR_GIB, "model error on real startup logs"
        if spec.get("arch") is None or spec["expert_parallel"] or device["unified_memory"]:
            share, floor = 2 * share, 2 * floor
            source += " (doubled: a term fitted on one log, or no config.json)"
    gib = max(floor, share * abs(kv_gib))
    if device["reserved_source"] != "facts" and spec.get("measured") is None:
        gib += RESERVED_SPREAD_MIB * spec["gpu_memory_utilization"] / 1024.0
        source += "; driver reservation not reported by the host (+-%d MiB)" % RESERVED_SPREAD_MIB
    return {"share": share, "gib": gib, "source": source}


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


# ---------------------------------------------------------------- several instances

def check_instances(instances, gpu_memory_mib, held_mib=0, per_instance_mib=0):
    """Several vLLM instances on one GPU: time-slicing does not divide memory,
    so their budgets plus what is already held must fit the device.

    instances: [{name, gpu_memory_utilization, gpu_index}].  per_instance_mib: what each
    process holds beyond its budget (plan() and `gpuhost plan --manifest` pass OUTSIDE_BUDGET_MIB).  Returns
    one entry per GPU index: {gpu_index, names, sum_utilization, required_mib, held_mib,
    per_instance_mib, total_mib, fits}.
    """
    by_gpu = {}
    for i, inst in enumerate(instances or []):
        if not isinstance(inst, dict):
            raise PlanError("instances[%d] is not a mapping" % i)
        util = _utilization(inst.get("gpu_memory_utilization"), "instances[%d].gpu_memory_utilization" % i)
        name = str(inst.get("name") or "instance-%d" % i)
        index = inst.get("gpu_index", 0)
        if not (isinstance(index, str) and _MIG_REF.match(index)):   # a MIG device "GPU:device" is its own device
            try:
                index = int(index)
            except (TypeError, ValueError):
                raise PlanError("instances[%d].gpu_index is not an integer: %r" % (i, index))
        by_gpu.setdefault(index, []).append((name, util))
    out = []
    for index in sorted(by_gpu, key=lambda k: (isinstance(k, str), k)):
        members = by_gpu[index]
        total_util = sum(member[1] for member in members)
        required = total_util * gpu_memory_mib + held_mib + per_instance_mib * len(members)
        out.append({
            "gpu_index": index,
            "names": [member[0] for member in members],
            "sum_utilization": round(total_util, 4),
            "required_mib": int(round(required)),
            "held_mib": held_mib,
            "per_instance_mib": per_instance_mib,
            "total_mib": gpu_memory_mib,
            # A hair of tolerance so budgets that fill the room exactly are not refused for a float.
            "fits": required <= gpu_memory_mib * (1 + 1e-9),
        })
    return out


def budget_room(check):
    """The share of the GPU left for budgets: what is neither held nor outside the budgets."""
    outside = check["held_mib"] + check.get("per_instance_mib", 0) * len(check["names"])
    return 1.0 - outside / float(check["total_mib"])


def even_share(check):
    """The largest --gpu-memory-utilization each instance of a check may have, all alike,
    floored to two decimals (the epsilon keeps 0.29 x 100 = 28.999... at 0.29)."""
    return math.floor(budget_room(check) / len(check["names"]) * 100 + 1e-9) / 100.0


def instances_reasons(checks):
    reasons = []
    for check in checks:
        if check["fits"]:
            continue
        held = (" + %d MiB held" % check["held_mib"]) if check["held_mib"] else ""
        if check.get("per_instance_mib"):
            held += " + %d x %d MiB outside the budgets" % (len(check["names"]), check["per_instance_mib"])
        reasons.append({
            "code": "instances_overflow",
            "message": ("GPU %s: %d instances (%s) budget %.2f x %d MiB%s = %d MiB > %d MiB; "
                        "time-slicing does not divide memory, so their gpu_memory_utilization "
                        "must sum to <= %.2f"
                        % (check["gpu_index"], len(check["names"]), ", ".join(check["names"]),
                           check["sum_utilization"], check["total_mib"], held,
                           check["required_mib"], check["total_mib"], budget_room(check))),
        })
    return reasons


# ---------------------------------------------------------------- inputs

def _number(value, name, minimum=None, integer=False, allow_none=False):
    if value is None:
        if allow_none:
            return None
        raise PlanError("%s is required" % name)
    if isinstance(value, bool):
        raise PlanError("%s must be a number, got %r" % (name, value))
    try:
        number = float(str(value).replace(",", "").replace("_", ""))
    except (TypeError, ValueError):
        raise PlanError("%s must be a number, got %r" % (name, value))
    if math.isnan(number) or math.isinf(number):
        raise PlanError("%s must be finite, got %r" % (name, value))
    if integer:
        if number != int(number):
            raise PlanError("%s must be a whole number, got %r" % (name, value))
        number = int(number)
    if minimum is not None and number < minimum:
        raise PlanError("%s must be >= %s, got %r" % (name, minimum, value))
    return number


def _utilization(value, name="gpu_memory_utilization"):
    util = _number(value, name)
    if not 0 < util <= 1:
        raise PlanError("%s must be in (0, 1], got %r (a share of the whole device)" % (name, value))
    return util


def _flag(value, name):
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "1", "on"):
        return True
    if text in ("false", "no", "0", "off"):
        return False
    if text in ("auto", ""):
        return None
    raise PlanError("%s must be true, false or auto, got %r" % (name, value))


def resolve_version(vllm_version=None, image=None):
    """(version tuple or None, text, source) from --vllm-version or the image's tag."""
    if vllm_version:
        version = vo.parse_version(vllm_version)
        if version is None:
            raise PlanError("vllm_version %r is not a version like 0.11.0" % vllm_version)
        return version, str(vllm_version), "given"
    if image:
        text = vo.version_of_image(image)
        if text:
            return vo.parse_version(text), text, "image tag %s" % image
        return None, None, "image %s names no version: newest known rules" % image
    return None, None, "not given: newest known rules"


def build_spec(gpu_memory_mib=None, gpu_memory_utilization=None, max_model_len=None, model_dir=None,
               weights_gib=None, kv_bytes_per_token=None, non_torch_gib=None, activation_gib=None,
               cuda_graph_gib=None, kv_cache_dtype="auto", tensor_parallel_size=1, held_mib=0,
               quantization=None, block_size=None, max_num_batched_tokens=None, max_num_seqs=None,
               gpu_name=None, gpu_reserved_mib=None, vllm_version=None, image=None, enforce_eager=False,
               flashinfer=None, cuda_graph_profiling=None, pooling=False, expert_parallel=False,
               measured=None):
    """Validate inputs and read the model directory; returns the spec compute() takes.

    gpu_memory_mib is nvidia-smi's Total; with gpu_reserved_mib (nvidia-smi -q: FB Memory
    Usage -> Reserved) it gives the total CUDA reports, which the utilisation applies to.
    Either may come from the catalogue by gpu_name.  Explicit weights_gib /
    kv_bytes_per_token are for the whole model at its 16-bit KV dtype (a model dir gives
    both); both are divided by tensor_parallel_size.  Given together with model_dir they
    override what the directory says.  measured: this host's figures for the same image
    and arguments (measured_entry), used instead of the model's estimates.
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
        "flashinfer": _flag(flashinfer, "flashinfer"),
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


# ---------------------------------------------------------------- a host's instances

def engine_flags(extra_args):
    """The engine arguments in extra_args that change what vLLM reserves (read with vllm_args' table)."""
    flags = {}
    values = read_args(extra_args)
    for key in ("max_num_batched_tokens", "max_num_seqs", "block_size"):
        if values.get(key):
            flags[key] = values[key]
    if "enforce_eager" in values:
        flags["enforce_eager"] = True
    if "enable_expert_parallel" in values:
        flags["expert_parallel"] = True
    if values.get("runner") == "pooling" or values.get("task") in ("embed", "embedding", "classify", "score"):
        flags["pooling"] = True
    return flags


def held_by_others(processes, cgroups, own_ids):
    """MiB held on each GPU index by processes that are not this role's containers.

    processes: facts [{pid, gpu_index, used_mib}]; cgroups: {pid: text of /proc/PID/cgroup}
    (missing: a process that ended, counted as held); own_ids: container ids."""
    held = {}
    for proc in processes or []:
        text = cgroups.get(proc.get("pid")) or ""
        if any(cid and cid in text for cid in own_ids or []):
            continue
        index = int(proc.get("gpu_index") or 0)
        held[index] = held.get(index, 0) + int(proc.get("used_mib") or 0)
    return held


_MIG_REF = re.compile(r"^(\d+):(\d+)$")


def _gpu_named(ref, gpus):
    """The GPU fact an instance's `gpus` entry names (index, GPU UUID, GPU:device, MIG UUID), None if not here."""
    ref = str(ref).strip()
    match = _MIG_REF.match(ref)
    if ref.isdigit() or match:
        index = int(match.group(1)) if match else int(ref)
        return next((g for g in gpus or [] if int(g["index"]) == index), None)
    if ref.startswith("MIG-"):
        index = next((d.get("gpu_index", g["index"]) for g in gpus or [] for d in g.get("mig_devices") or []
                      if d.get("uuid") == ref), None)
        return None if index is None else _gpu_named(str(index), gpus)
    return next((g for g in gpus or [] if g.get("uuid") == ref), None)


def gpu_indexes(gpu_ids, gpus):
    """The GPU indexes an instance's `gpus` name, each once; an entry this host lacks adds none, so the caller
    compares the counts (the vllm role's validation, which lists what the host has)."""
    return sorted(set(int(gpu["index"]) for gpu in (_gpu_named(ref, gpus) for ref in gpu_ids or []) if gpu))


def resolve_gpus(gpu_ids, gpus, listing=None):
    """An instance's `gpus` (GPU indexes, GPU UUIDs, or one MIG device as `GPU:device` or `MIG-<uuid>`) against the
    GPU facts -> {gpu_indexes, mig_device}. PlanError with the reason for what cannot be served.

    gpus: facts (index, name, uuid, mig_mode, mig_devices [{index, memory_total_mib, profile, uuid, ...}]: the
    module's facts carry -L's profile names and UUIDs, -q / -q -x alone has neither);
    listing: `nvidia-smi -L` text, for facts without them.
    The MIG device index is the `Device N` of `nvidia-smi -L` (the -q MIG device index, and the toolkit's CDI name
    nvidia.com/gpu=GPU:N). mig_device: {gpu_index, index, ref, uuid, profile, memory_total_mib, gpu_name,
    visible_devices (NVIDIA_VISIBLE_DEVICES), cdi_device}."""
    if listing:
        gpus = merge_mig_listing({"gpus": gpus or []}, listing)["gpus"]
    by_index = dict((int(g["index"]), g) for g in gpus or [])
    listed = dict(((int(g["index"]), d["index"]), d) for g in gpus or [] for d in g.get("mig_devices") or []
                  if d.get("uuid"))
    ids = [str(i).strip() for i in gpu_ids or []]
    if not ids:
        raise PlanError("gpus is empty: name GPU indexes, GPU UUIDs or one MIG device (GPU:device or MIG-<uuid>)")
    migs = [i for i in ids if _MIG_REF.match(i) or i.startswith("MIG-")]
    if migs and len(ids) > 1:
        raise PlanError("gpus %s: a MIG device is served alone (CUDA gives a process one MIG device; no tensor "
                        "parallelism across MIG devices)" % ", ".join(ids))
    if migs:
        ref = migs[0]
        match = _MIG_REF.match(ref)
        if match:
            key = (int(match.group(1)), int(match.group(2)))
        else:
            key = next((k for k, dev in listed.items() if dev["uuid"] == ref), None)
            if key is None:
                raise PlanError("MIG device %s is not on this host (nvidia-smi -L lists %s)"
                                % (ref, ", ".join(d["uuid"] for d in listed.values()) or "no MIG device"))
        gpu = by_index.get(key[0])
        if gpu is None:
            raise PlanError("MIG device %s: this host has no GPU %d" % (ref, key[0]))
        fact = next((d for d in gpu.get("mig_devices") or [] if d.get("index") == key[1]), None)
        if fact is None or not fact.get("memory_total_mib"):
            raise PlanError("MIG device %s: GPU %d has no MIG device %d (MIG devices: %s)"
                            % (ref, key[0], key[1], ", ".join("%d:%d" % (key[0], d["index"])
                                                              for d in gpu.get("mig_devices") or []) or "none"))
        seen = listed.get(key) or {}
        profile = seen.get("profile")
        return {"gpu_indexes": [key[0]], "mig_device": {
            "gpu_index": key[0], "index": key[1], "ref": "%d:%d" % key, "uuid": seen.get("uuid"), "profile": profile,
            "memory_total_mib": fact["memory_total_mib"],
            # without -L's profile name, the slice's size (stable whatever its device index)
            "gpu_name": "%s MIG %s" % (gpu.get("name"), profile or "%d MiB %s SMs" % (
                fact["memory_total_mib"], fact.get("multiprocessor_count") or "?")),
            "visible_devices": seen.get("uuid") or "%d:%d" % key,
            "cdi_device": "nvidia.com/gpu=%d:%d" % key}}
    indexes = []
    for ref in ids:
        gpu = _gpu_named(ref, gpus)
        if gpu is None:
            raise PlanError("gpus %s: %s is not a GPU of this host (GPUs %s)"
                            % (", ".join(ids), ref, ", ".join(str(i) for i in sorted(by_index)) or "none"))
        if gpu.get("mig_mode") is True:
            raise PlanError("GPU %s is given whole, but MIG is enabled there: CUDA sees only MIG devices on such a "
                            "GPU, so vLLM would find no device. Give the instance one MIG device (%s) or turn MIG off "
                            "on GPU %s" % (gpu["index"], ", ".join("%s:%s" % (gpu["index"], d["index"])
                                                                   for d in gpu.get("mig_devices") or [])
                                           or "none exists yet: declare nvidia_mig_layout", gpu["index"]))
        indexes.append(int(gpu["index"]))
    return {"gpu_indexes": sorted(set(indexes)), "mig_device": None}


def _device_of(inst, by_index):
    """What an instance's plan is made against: its MIG device, else the smallest of its GPUs."""
    mig = inst.get("mig_device")
    if mig:
        # The MIG device's Total is what CUDA there can have; -q shows its Reserved as 0 MiB (corpus 003).
        return {"name": mig["gpu_name"], "memory_total_mib": mig["memory_total_mib"], "memory_reserved_mib": 0}
    return min((by_index[int(i)] for i in inst["gpu_indexes"]), key=lambda g: g["memory_total_mib"])


def _device_keys(inst):
    mig = inst.get("mig_device")
    return ["%d:%d" % (mig["gpu_index"], mig["index"])] if mig else list(inst["gpu_indexes"])


def _with_mig_devices(instances, gpus):
    """An instance whose gpu_ids name a MIG device (GPU:device) is planned against that device (resolve_gpus)."""
    return [dict(inst, mig_device=resolve_gpus(inst.get("gpu_ids"), gpus)["mig_device"])
            if not inst.get("mig_device") and any(_MIG_REF.match(str(i)) for i in inst.get("gpu_ids") or [])
            else inst for inst in instances]


def plan_host(instances, gpus, models_dir, held=None, measurements=None):
    """Plan every instance of a host: {plans: {name: plan}, lines: [...], refused: [names],
    message: the failure text or None}.

    instances: as the vllm role resolved them (name, image, model, gpu_indexes,
    gpu_memory_utilization, max_model_len, tensor_parallel_size, kv_cache_dtype,
    quantization, max_num_seqs, extra_args, non_torch_gib, activation_gib);
    gpus: facts (index, name, memory_total_mib, memory_reserved_mib)."""
    by_index = {int(g["index"]): g for g in gpus or []}
    held = held or {}
    measurements = measurements or {}
    instances = _with_mig_devices(instances, gpus)
    sharing = [{"name": inst["name"], "gpu_memory_utilization": inst["gpu_memory_utilization"], "gpu_index": i}
               for inst in instances for i in _device_keys(inst)]
    plans, lines, refused = {}, [], []
    for inst in instances:
        smallest = _device_of(inst, by_index)
        devices = _device_keys(inst)
        key = measurement_key(inst, smallest.get("name"))[0]
        flags = engine_flags(inst.get("extra_args"))
        result = plan(
            instances=[s for s in sharing if s["gpu_index"] in devices],
            gpu_index=devices[0],
            gpu_memory_mib=smallest["memory_total_mib"],
            gpu_reserved_mib=smallest.get("memory_reserved_mib"),
            gpu_name=smallest.get("name"),
            gpu_memory_utilization=inst["gpu_memory_utilization"],
            max_model_len=inst.get("max_model_len"),
            model_dir=os.path.join(models_dir, inst["model"]),
            quantization=inst.get("quantization"),
            kv_cache_dtype=inst.get("kv_cache_dtype") or "auto",
            tensor_parallel_size=inst.get("tensor_parallel_size") or len(inst["gpu_indexes"]),
            max_num_seqs=inst.get("max_num_seqs") or flags.get("max_num_seqs"),
            max_num_batched_tokens=flags.get("max_num_batched_tokens"),
            block_size=flags.get("block_size"),
            enforce_eager=flags.get("enforce_eager", False),
            expert_parallel=flags.get("expert_parallel", False),
            pooling=flags.get("pooling", False),
            non_torch_gib=inst.get("non_torch_gib"),
            activation_gib=inst.get("activation_gib"),
            image=inst.get("image"),
            vllm_version=inst.get("vllm_version"),
            # held: MiB per GPU index, or per MIG device ("GPU:device") where the caller knows it.
            held_mib=max(held.get(i if isinstance(i, str) else int(i), 0) for i in devices),
            measured=measurements.get(key),
        )
        # Tensor parallelism needs that many GPUs at least as large as this one (none across MIG devices).
        room = 1 if inst.get("mig_device") else sum(
            1 for g in by_index.values() if g["memory_total_mib"] >= smallest["memory_total_mib"])
        result["remedies"] = [r for r in result["remedies"] if r["tensor_parallel_size"] <= room]
        result["measurement_key"] = key
        plans[inst["name"]] = result
        lines.extend(instance_lines(inst, result))
        if result["verdict"] == "refuse":
            refused.append(inst["name"])
    message = None
    if refused:
        message = " ".join(refuse_message(plans[name], name) for name in refused) + " No container was started."
    return {"plans": plans, "lines": lines, "refused": refused, "message": message}


def instance_lines(inst, result):
    """The plan of one instance as the role prints it."""
    held = " (%d MiB held by others)" % result["held_mib"] if result["held_mib"] else ""
    engine = result["engine"]
    low, high = result["band"]["max_concurrency"]
    lines = [
        "vllm plan %s: %s - GPU %s %d MiB CUDA total x %s = budget %d MiB%s; weights %s GiB, activation %s, "
        "non-torch %s, CUDA graphs %s GiB (%s) -> KV %s GiB = %s tokens, %sx (band %.2f-%.2fx) at max_model_len %s"
        % (inst["name"], result["verdict"].upper(),
           ("%s (%s)" % (inst["mig_device"]["ref"], inst["mig_device"]["gpu_name"]) if inst.get("mig_device")
            else ",".join(str(i) for i in inst["gpu_indexes"])),
           result["cuda_total_mib"], result["gpu_memory_utilization"], result["budget_mib"], held,
           result["weights_gib"], result["activation_gib"], result["non_torch_gib"], result["cuda_graph_gib"],
           result["estimates"]["activation_gib"], result["kv_cache_gib"], "{:,}".format(result["kv_cache_tokens"]),
           result["max_concurrency"], low, high, "{:,}".format(result["max_model_len"])),
        "  vLLM %s (%s), rules %s" % (engine["vllm_version"] or "unknown", engine["version_source"], engine["rules"]),
    ]
    lines.extend("  reason: %s" % r["message"] for r in result["reasons"])
    if result["remedies"]:
        lines.append("  remedies (best first):")
    lines.extend("    %s: %s tokens, %sx (%s) - %s" % (r["name"], "{:,}".format(r["kv_cache_tokens"]),
                                                       r["max_concurrency"], r["verdict"], r["description"])
                 for r in result["remedies"])
    return lines


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
