# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a model's config.json and checkpoint give the vLLM memory plan (vllm_plan): the architecture (the
text part of a multimodal config, the layers that keep a per-token KV cache, the quantisation), the KV bytes
per token and per max-length request, and the size of the weights.

Pure functions, stdlib only, Python >= 3.9 (shipped to hosts as module_utils).
"""
import json
import os

from ansible.module_utils.serving.safetensors_header import checkpoint_weight_bytes, SafetensorsError
from ansible.module_utils.serving.vllm_plan_inputs import PlanError

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
NESTED_TEXT_CONFIGS = ("text_config", "llm_config", "language_config")
FULL_LAYER_TYPES = ("full_attention", "attention", "global_attention", "full")
SLIDING_LAYER_TYPES = ("sliding_attention", "sliding_window_attention", "local_attention",
                       "chunked_attention", "sliding")


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
