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
import json
import math
import os

try:
    from ansible.module_utils.safetensors_header import checkpoint_weight_bytes, SafetensorsError
except ImportError:  # plain import in unit tests and the CLI
    from safetensors_header import checkpoint_weight_bytes, SafetensorsError

GIB = 1024 ** 3
MIB = 1024 ** 2
BLOCK_SIZE = 16  # vLLM's default KV block: the pool is counted in whole blocks
MAX_UTILIZATION = 0.95  # highest value the utilisation remedy proposes
DEFAULT_NON_TORCH_GIB = 1.0
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048  # only matters for sliding-window layers
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


def text_config(config):
    """The language-model part of a config: multimodal configs nest it
    (Gemma3/Qwen-VL `text_config`, InternVL `llm_config`); nested keys win,
    top-level ones (torch_dtype, quantization_config) fill the gaps."""
    merged = dict(config)
    for key in NESTED_TEXT_CONFIGS:
        sub = config.get(key)
        if isinstance(sub, dict) and sub.get("num_hidden_layers"):
            merged.update(sub)
            break
    return merged


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


def default_activation_gib(weights_gib_per_rank):
    return max(1.0, 0.08 * weights_gib_per_rank)


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


def compute(spec):
    """One plan from a normalised spec (see build_spec).  Returns the plan dict."""
    total_mib = spec["gpu_memory_mib"]
    util = spec["gpu_memory_utilization"]
    tp = spec["tensor_parallel_size"]
    block = spec["block_size"]
    budget_gib = total_mib * util / 1024.0
    weights_rank = spec["weights_total_gib"] / tp
    activation = spec["activation_gib"]
    if activation is None:
        activation = default_activation_gib(weights_rank)
    non_torch = spec["non_torch_gib"]
    kv_gib = budget_gib - weights_rank - non_torch - activation

    arch = spec.get("arch")
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

    kv_bytes = kv_gib * GIB
    if kv_bytes > 0:
        tokens = int(kv_bytes // (per_token * block)) * block
        per_request = request_kv_bytes(layers, per_layer, spec["max_model_len"], block,
                                       spec["max_num_batched_tokens"])
        concurrency = tokens * per_token / float(per_request)
    else:
        tokens = 0
        concurrency = 0.0

    held = spec["held_mib"]
    plan = {
        "gpu_memory_mib": total_mib,
        "gpu_memory_gib": round(total_mib / 1024.0, 2),
        "gpu_memory_utilization": util,
        "budget_mib": int(round(total_mib * util)),
        "budget_gib": round(budget_gib, 3),
        "held_mib": held,
        "free_mib": total_mib - held,
        "tensor_parallel_size": tp,
        "weights_gib": round(weights_rank, 3),
        "weights_total_gib": round(spec["weights_total_gib"], 3),
        "weights_source": spec["weights_source"],
        "non_torch_gib": round(non_torch, 3),
        "activation_gib": round(activation, 3),
        "estimates": {
            "non_torch_gib": spec["non_torch_source"],
            "activation_gib": "given" if spec["activation_gib"] is not None else "default",
        },
        "kv_cache_gib": round(kv_gib, 3),
        "kv_cache_dtype": spec["kv_cache_dtype"],
        "kv_bytes_per_token": int(per_token),
        "kv_cache_tokens": tokens,
        "block_size": block,
        "max_model_len": spec["max_model_len"],
        "max_concurrency": round(concurrency, 2),
        "quantization": spec["quantization"],
    }
    if arch is not None:
        plan["model"] = {
            "num_hidden_layers": arch["num_hidden_layers"],
            "full_attention_layers": sum(1 for k, _ in layers if k == "full"),
            "sliding_window_layers": sum(1 for k, _ in layers if k == "sliding"),
            "num_key_value_heads": arch["num_key_value_heads"],
            "head_dim": arch["head_dim"],
            "mla": arch["mla"],
            "dtype": arch["dtype"],
        }
    verdict, reasons = judge(plan)
    plan["verdict"] = verdict
    plan["reasons"] = reasons
    return plan


def judge(plan):
    """Verdict and reasons of one plan (without the several-instances check)."""
    reasons = []
    budget = plan["budget_mib"]
    if plan["held_mib"] and budget > plan["free_mib"]:
        reasons.append({
            "code": "free_memory_below_budget",
            "message": ("budget %d MiB (%.2f x %d MiB) is more than the %d MiB free "
                        "(%d MiB held by other processes): vLLM stops at start with "
                        "'Free memory on device ... is less than desired GPU memory utilization'"
                        % (budget, plan["gpu_memory_utilization"], plan["gpu_memory_mib"],
                           plan["free_mib"], plan["held_mib"])),
        })
    if plan["kv_cache_gib"] <= 0:
        reasons.append({
            "code": "kv_share_not_positive",
            "message": ("KV share %.2f GiB = %.2f budget - %.2f weights - %.2f non-torch - "
                        "%.2f activation: nothing left for the KV cache ('No available memory "
                        "for the cache blocks')"
                        % (plan["kv_cache_gib"], plan["budget_gib"], plan["weights_gib"],
                           plan["non_torch_gib"], plan["activation_gib"])),
        })
    elif plan["max_concurrency"] < 1.0:
        reasons.append({
            "code": "concurrency_below_1",
            "message": ("%s KV tokens hold %.2fx of one %d-token request: the server may start "
                        "and then fail on the first full-length request"
                        % ("{:,}".format(plan["kv_cache_tokens"]), plan["max_concurrency"],
                           plan["max_model_len"])),
        })
    elif plan["max_concurrency"] < OK_CONCURRENCY:
        reasons.append({
            "code": "concurrency_below_4",
            "message": ("%s KV tokens hold %.2fx of %d-token requests: it fits, but there is "
                        "little or no batching (4x or more is meaningful)"
                        % ("{:,}".format(plan["kv_cache_tokens"]), plan["max_concurrency"],
                           plan["max_model_len"])),
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
    # Remedies keep the estimates of the original plan (activation does not shrink
    # with quantisation: the seed's FP8 run peaked at 4.41 vs 4.38 GiB).
    fixed["activation_gib"] = plan["activation_gib"]
    tp = spec["tensor_parallel_size"]
    bits = spec["weight_bits"]
    base_16bit = spec["weights_total_gib"] * 16.0 / bits if bits < 16 else spec["weights_total_gib"]

    if overflow is not None:
        room = 1.0 - overflow["held_mib"] / float(overflow["total_mib"])
        each = math.floor(room / len(overflow["names"]) * 100) / 100.0
        if each > 0:
            out.append(_remedy("share_gpu_evenly", "--gpu-memory-utilization %.2f on each of the %d "
                               "instances on GPU %d (sum %.2f <= %.2f)"
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
        alt = dict(fixed, tensor_parallel_size=2 * tp)
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
    total = spec["gpu_memory_mib"]
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
        # Nothing else fixes an over-committed GPU: the sharing remedy comes first.
        head, rest = out[:1], out[1:]
        rest.sort(key=lambda r: (score[r["verdict"]], r["max_concurrency"]), reverse=True)
        return head + rest
    out.sort(key=lambda r: (score[r["verdict"]], r["max_concurrency"]), reverse=True)
    return out


# ---------------------------------------------------------------- several instances

def check_instances(instances, gpu_memory_mib, held_mib=0):
    """Several vLLM instances on one GPU: time-slicing does not divide memory,
    so their budgets plus what is already held must fit the device.

    instances: [{name, gpu_memory_utilization, gpu_index}].  Returns one entry per
    GPU index: {gpu_index, names, sum_utilization, required_mib, total_mib, fits}.
    """
    by_gpu = {}
    for i, inst in enumerate(instances or []):
        if not isinstance(inst, dict):
            raise PlanError("instances[%d] is not a mapping" % i)
        util = _utilization(inst.get("gpu_memory_utilization"), "instances[%d].gpu_memory_utilization" % i)
        name = str(inst.get("name") or "instance-%d" % i)
        index = inst.get("gpu_index", 0)
        try:
            index = int(index)
        except (TypeError, ValueError):
            raise PlanError("instances[%d].gpu_index is not an integer: %r" % (i, index))
        by_gpu.setdefault(index, []).append((name, util))
    out = []
    for index in sorted(by_gpu):
        members = by_gpu[index]
        total_util = sum(u for _, u in members)
        required = total_util * gpu_memory_mib + held_mib
        out.append({
            "gpu_index": index,
            "names": [n for n, _ in members],
            "sum_utilization": round(total_util, 4),
            "required_mib": int(round(required)),
            "held_mib": held_mib,
            "total_mib": gpu_memory_mib,
            # A hair of tolerance so 4 x 0.25 on an idle GPU is not refused for a float.
            "fits": required <= gpu_memory_mib * (1 + 1e-9),
        })
    return out


def instances_reasons(checks):
    reasons = []
    for check in checks:
        if check["fits"]:
            continue
        held = (" + %d MiB held" % check["held_mib"]) if check["held_mib"] else ""
        reasons.append({
            "code": "instances_overflow",
            "message": ("GPU %d: %d instances (%s) budget %.2f x %d MiB%s = %d MiB > %d MiB; "
                        "time-slicing does not divide memory, so their gpu_memory_utilization "
                        "must sum to <= %.2f"
                        % (check["gpu_index"], len(check["names"]), ", ".join(check["names"]),
                           check["sum_utilization"], check["total_mib"], held,
                           check["required_mib"], check["total_mib"],
                           1.0 - check["held_mib"] / float(check["total_mib"]))),
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


def build_spec(gpu_memory_mib, gpu_memory_utilization=0.9, max_model_len=None, model_dir=None,
               weights_gib=None, kv_bytes_per_token=None, non_torch_gib=None, activation_gib=None,
               kv_cache_dtype="auto", tensor_parallel_size=1, held_mib=0, quantization=None,
               block_size=BLOCK_SIZE, max_num_batched_tokens=DEFAULT_MAX_NUM_BATCHED_TOKENS):
    """Validate inputs and read the model directory; returns the spec compute() takes.

    Explicit weights_gib / kv_bytes_per_token are for the whole model at its 16-bit
    KV dtype (a model dir gives both); both are divided by tensor_parallel_size.
    Given together with model_dir they override what the directory says.
    """
    spec = {
        "gpu_memory_mib": _number(gpu_memory_mib, "gpu_memory_mib", minimum=1, integer=True),
        "gpu_memory_utilization": _utilization(gpu_memory_utilization),
        "tensor_parallel_size": _number(tensor_parallel_size, "tensor_parallel_size", minimum=1, integer=True),
        "held_mib": _number(held_mib or 0, "held_mib", minimum=0, integer=True),
        "non_torch_gib": _number(non_torch_gib, "non_torch_gib", minimum=0, allow_none=True),
        "activation_gib": _number(activation_gib, "activation_gib", minimum=0, allow_none=True),
        "block_size": _number(block_size, "block_size", minimum=1, integer=True),
        "max_num_batched_tokens": _number(max_num_batched_tokens, "max_num_batched_tokens", minimum=1, integer=True),
        "kv_cache_dtype": str(kv_cache_dtype or "auto").lower(),
        "arch": None,
    }
    kv_dtype_bytes(spec["kv_cache_dtype"])  # validates the name
    if spec["held_mib"] >= spec["gpu_memory_mib"]:
        raise PlanError("held_mib %s is not less than the GPU's %s MiB" % (held_mib, gpu_memory_mib))
    spec["non_torch_source"] = "default" if spec["non_torch_gib"] is None else "given"
    if spec["non_torch_gib"] is None:
        spec["non_torch_gib"] = DEFAULT_NON_TORCH_GIB

    method, bits = quantization_of({}, quantization)
    arch = None
    if model_dir:
        if not os.path.isdir(model_dir):
            raise PlanError("model directory %s does not exist" % model_dir)
        config = load_config(model_dir)
        arch = model_arch(config, quantization)
        method, bits = arch["quantization"], arch["weight_bits"]
        spec["arch"] = arch
        if weights_gib is None:
            found = model_weight_bytes(model_dir)
            spec["weights_total_gib"] = found["bytes"] / float(GIB)
            spec["weights_source"] = found["source"]
        if max_model_len is None:
            max_model_len = arch["max_position_embeddings"]
    if weights_gib is not None:
        spec["weights_total_gib"] = _number(weights_gib, "weights_gib", minimum=0)
        spec["weights_source"] = "given"
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
    checks = check_instances(instances, spec["gpu_memory_mib"], spec["held_mib"]) if instances else []
    extra = instances_reasons(checks)
    if extra:
        result["reasons"] = extra + result["reasons"]
        result["verdict"] = "refuse"
    result["instances"] = checks
    mine = [c for c in checks if c["gpu_index"] == gpu_index]
    others = max(0.0, mine[0]["sum_utilization"] - spec["gpu_memory_utilization"]) if mine else 0.0
    overflow = next((c for c in checks if not c["fits"]), None)
    result["remedies"] = (remedies(spec, result, others, overflow)
                          if result["verdict"] != "ok" else [])
    return result


def refuse_message(result):
    """One line for fail_json: the layer, the numbers, the top remedy."""
    text = "vllm memory plan: refuse - " + "; ".join(r["message"] for r in result["reasons"])
    text += (" [budget %d MiB, weights %.2f GiB, KV %.2f GiB, %s tokens, %.2fx at max_model_len %d]"
             % (result["budget_mib"], result["weights_gib"], result["kv_cache_gib"],
                "{:,}".format(result["kv_cache_tokens"]), result["max_concurrency"], result["max_model_len"]))
    if result["remedies"]:
        top = result["remedies"][0]
        text += (" Top remedy: %s -> %s tokens, %.2fx (%s)"
                 % (top["description"], "{:,}".format(top["kv_cache_tokens"]),
                    top["max_concurrency"], top["verdict"]))
    return text


def render_text(result):
    """Readable plan for the CLI."""
    lines = [
        "vLLM memory plan: %s" % result["verdict"].upper(),
        "  GPU           %d MiB (%.2f GiB), %d MiB held by others" % (
            result["gpu_memory_mib"], result["gpu_memory_gib"], result["held_mib"]),
        "  budget        %.2f x %d MiB = %d MiB (%.2f GiB)" % (
            result["gpu_memory_utilization"], result["gpu_memory_mib"], result["budget_mib"], result["budget_gib"]),
        "  weights       %.2f GiB per GPU (TP %d, %s)" % (
            result["weights_gib"], result["tensor_parallel_size"], result["weights_source"]),
        "  non-torch     %.2f GiB (%s)" % (result["non_torch_gib"], result["estimates"]["non_torch_gib"]),
        "  activation    %.2f GiB (%s)" % (result["activation_gib"], result["estimates"]["activation_gib"]),
        "  KV share      %.2f GiB, %s B/token (kv_cache_dtype %s)" % (
            result["kv_cache_gib"], "{:,}".format(result["kv_bytes_per_token"]), result["kv_cache_dtype"]),
        "  KV tokens     %s -> %.2fx at %s tokens per request" % (
            "{:,}".format(result["kv_cache_tokens"]), result["max_concurrency"], "{:,}".format(result["max_model_len"])),
    ]
    for reason in result["reasons"]:
        lines.append("  - %s" % reason["message"])
    for check in result.get("instances") or []:
        lines.append("  GPU %d instances %s: sum %.2f -> %d of %d MiB (%s)" % (
            check["gpu_index"], ", ".join(check["names"]), check["sum_utilization"],
            check["required_mib"], check["total_mib"], "fits" if check["fits"] else "OVERFLOW"))
    if result["remedies"]:
        lines.append("  remedies (best first):")
        for rem in result["remedies"]:
            lines.append("    %-30s %s tokens, %.2fx, %s - %s" % (
                rem["name"], "{:,}".format(rem["kv_cache_tokens"]), rem["max_concurrency"],
                rem["verdict"], rem["description"]))
    return "\n".join(lines) + "\n"
