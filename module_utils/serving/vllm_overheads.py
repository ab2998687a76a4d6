# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What vLLM reserves besides the weights and the KV cache, per engine generation.

Pure stdlib, Python >= 3.9 (shipped to hosts as module_utils).

vLLM sizes the KV cache at start by profiling (docs/domain.md §5, §8):

    KV = total_cuda x gpu_memory_utilization - weights - activation peak
         - non-torch memory [- estimated CUDA-graph memory, from 0.20]

and each term is measured differently by each engine generation.  The rules below
were read in vLLM's released sources (PyPI wheels 0.5.5 to 0.34.0;
vllm/worker/worker.py, vllm/v1/worker/gpu_worker.py, gpu_model_runner.py,
engine/arg_utils.py, v1/sample/): the file and function are named at each rule.
The activation peak is modelled from what the profiling run allocates; the few
constants that no source gives (bytes per sampler element, MoE scratch factor, the
non-torch base) were fitted on real startup logs (tests/unit/test_vllm_plan_corpus.py
holds the table, one row per log; FITTED names which); the plan's band is their
leave-one-out error (vllm_plan.BANDS).
"""
import re

from ansible.module_utils.containers.registry_image import RegistryImageError, parse_reference

GIB = 1024 ** 3

# ---------------------------------------------------------------- versions

# NGC containers name their release, not vLLM's: nvcr.io/nvidia/vllm:26.01-py3 prints
# "vLLM API server version 0.13.0+faa43dbf.nv26.01" (corpus vllm_logs/045).
NGC_RELEASES = {"26.01": "0.13.0"}
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def parse_version(text):
    """(major, minor, patch) of '0.11.0', 'v0.10.1.1', '0.19.2rc1.dev206+g95995bbef'; None."""
    m = _VERSION.search(str(text or ""))
    if not m:
        return None
    return tuple(int(g or 0) for g in m.groups()[:3])


def version_of_image(image):
    """vLLM version from an image reference: the tag of vllm/vllm-openai:v0.11.0
    (suffixes like -cu128 allowed), an NGC release tag, or None (digest, nightly)."""
    ref = str(image or "").strip()
    last = ref.rsplit("/", 1)[-1]
    if "@" in last or ":" not in last:
        return None
    tag = last.split(":", 1)[1]
    if "nvidia/vllm" in ref:
        release = re.match(r"(\d\d\.\d\d)", tag)
        return NGC_RELEASES.get(release.group(1)) if release else None
    m = re.match(r"v?(\d+\.\d+(?:\.\d+){0,2}(?:(?:rc|\.post|post|\.dev)\d+)*)", tag)
    return m.group(1) if m else None


# ---------------------------------------------------------------- generations
#
# non_torch: what the profiler charges beyond torch's allocations
#   device         all memory the device reports used minus torch's allocations: the CUDA
#                  context, NCCL, workspaces (V0 worker.py determine_num_available_blocks
#                  <= 0.6.5; V1 gpu_worker.py determine_available_memory 0.8.x-0.9.0)
#   since_context  growth since a snapshot taken after the CUDA context but before NCCL
#                  (V0 0.6.6 memory_profiling; V1 0.9.1-0.10.x init_device)
#   since_nccl     growth since a snapshot taken after NCCL init (V1 0.11+: "Initialize
#                  the distributed environment BEFORE taking memory snapshot")
# sampler: the profiling run samples max_num_seqs rows of the whole vocabulary
#   v0          V0 sampler: float32 logits, full sort for top-k/top-p, logprobs
#   flashinfer  V1, FlashInfer top-k/top-p when installed (default 0.8.5-0.11.0 and 0.21+;
#               the official images carry it), else "sort"
#   sort        V1 PyTorch-native apply_top_k_top_p: sort values + int64 indices
#               (0.11.2-0.16: FlashInfer opt-in only)
#   triton      V1 apply_top_k_top_p_triton (0.17-0.20)
# graphs: the estimated CUDA-graph memory is subtracted before the KV cache
#   (gpu_worker.py, VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default "1" from 0.20.0;
#   opt-in in 0.18/0.19).
# tokens: how "GPU KV cache size" is counted: blocks x block_size (<= 0.20), or
#   int(max_concurrency x max_model_len) (0.21+, kv_cache_utils.py).
GENERATIONS = (
    ((0, 0, 0), "V0 <= 0.6.5", dict(engine="V0", non_torch="device", sampler="v0", graphs=False,
                                    default_utilization=0.90, chunk_tokens=512, tokens="blocks")),
    ((0, 6, 6), "V0 0.6.6-0.7", dict(engine="V0", non_torch="since_context", sampler="v0", graphs=False,
                                     default_utilization=0.90, chunk_tokens=2048, tokens="blocks")),
    ((0, 8, 0), "V1 0.8-0.9.0", dict(engine="V1", non_torch="device", sampler="flashinfer", graphs=False,
                                     default_utilization=0.90, tokens="blocks")),
    ((0, 9, 1), "V1 0.9.1-0.10", dict(engine="V1", non_torch="since_context", sampler="flashinfer",
                                      graphs=False, default_utilization=0.90, tokens="blocks")),
    ((0, 11, 0), "V1 0.11.0", dict(engine="V1", non_torch="since_nccl", sampler="flashinfer", graphs=False,
                                   default_utilization=0.90, tokens="blocks")),
    ((0, 11, 2), "V1 0.11.2-0.16", dict(engine="V1", non_torch="since_nccl", sampler="sort", graphs=False,
                                        default_utilization=0.90, tokens="blocks")),
    ((0, 17, 0), "V1 0.17-0.19", dict(engine="V1", non_torch="since_nccl", sampler="triton", graphs=False,
                                      default_utilization=0.90, tokens="blocks")),
    ((0, 20, 0), "V1 0.20", dict(engine="V1", non_torch="since_nccl", sampler="triton", graphs=True,
                                 default_utilization=0.92, tokens="blocks")),
    ((0, 21, 0), "V1 0.21-0.33", dict(engine="V1", non_torch="since_nccl", sampler="flashinfer", graphs=True,
                                      native="triton", default_utilization=0.92, tokens="concurrency")),
)
NEWEST_KNOWN = (0, 33, 99)


def generation(version):
    """(name, rules) for a version tuple; None means 'unknown': the newest rules."""
    chosen = GENERATIONS[-1]
    if version is not None:
        for row in GENERATIONS:
            if tuple(version) >= row[0]:
                chosen = row
    return chosen[1], dict(chosen[2])


# ---------------------------------------------------------------- batch defaults

def batch_defaults(rules, version, cuda_total_gib, gpu_name, max_model_len, multimodal=False,
                   pooling=False, sliding_window=False, max_num_seqs=None, max_num_batched_tokens=None):
    """(max_num_batched_tokens, max_num_seqs) as `vllm serve` resolves them.

    V0 (config.py SchedulerConfig, arg_utils.create_engine_config): 256 sequences;
    chunked prefill on by itself above a 32K context (not for multimodal models from
    0.6.4, not with a sliding window), then 512 (<= 0.6.5) or 2048 tokens, else
    max(max_model_len, 2048) (multimodal >= 5120, pooling >= 32768).
    V1 (arg_utils get_batch_defaults, OpenAI API server): 8192 tokens / 1024 sequences on
    a device of >= 70 GiB that is not an A100 (A100 excluded from 0.9.0, PR #17885),
    else 2048 / 256; >= 160 GiB from 0.28: 16384 / 1024.  From 0.11.0 the sequences are
    capped by the tokens, from 0.11.2 the default tokens by max_num_seqs x max_model_len.
    GB10 (unified memory) stays on the small tier (corpus 045 prints 2048).
    """
    version = tuple(version or NEWEST_KNOWN)
    if rules["engine"] == "V0":
        seqs = max_num_seqs or 256
        if max_num_batched_tokens:
            return int(max_num_batched_tokens), int(seqs)
        chunked = max_model_len > 32768 and not sliding_window and not (multimodal and version >= (0, 6, 4))
        if chunked:
            return rules["chunk_tokens"], int(seqs)
        tokens = max(max_model_len, 2048)
        if multimodal and version >= (0, 6, 4):
            tokens = max(tokens, 5120)
        if pooling:
            tokens = max(tokens, 32768)
        return int(tokens), int(seqs)
    name = str(gpu_name or "").lower()
    big = cuda_total_gib >= 70 and "gb10" not in name and not ("a100" in name and version >= (0, 9, 0))
    if big and version >= (0, 28, 0) and cuda_total_gib >= 160:
        tokens, seqs = 16384, 1024
    elif big:
        tokens, seqs = 8192, 1024
    else:
        tokens, seqs = 2048, 256
    if pooling and not max_num_batched_tokens:
        tokens = max(tokens, max_model_len)  # pooling runs without chunked prefill
    given_tokens = int(max_num_batched_tokens) if max_num_batched_tokens else None
    given_seqs = int(max_num_seqs) if max_num_seqs else None
    tokens = given_tokens or tokens
    seqs = given_seqs or seqs
    if given_tokens is None and version >= (0, 11, 2):
        tokens = min(seqs * max_model_len, tokens)
    if given_seqs is None and version >= (0, 11, 0):
        seqs = min(seqs, tokens)
    return int(tokens), int(seqs)


def cudagraph_sizes(max_num_seqs, max_num_batched_tokens, version=None, speculative_tokens=0):
    """(piecewise sizes, full sizes) captured by default (config VllmConfig._set_cudagraph_sizes,
    0.12+: max = min(max_num_seqs x decode_len x 2, 512, max_num_batched_tokens); sizes
    1, 2, 4, 8..248 by 8, 256..max by 16; FULL graphs for sizes <= decode_len x max_num_seqs)."""
    decode_len = 1 + int(speculative_tokens or 0)
    top = min(max_num_seqs * decode_len * 2, 512, max_num_batched_tokens)
    sizes = [s for s in (1, 2, 4) if s <= top]
    sizes += list(range(8, min(top + 1, 256), 8)) + list(range(256, top + 1, 16))
    if version is not None and tuple(version) >= (0, 21, 0) and max_num_batched_tokens < top:
        sizes.append(max_num_batched_tokens)
    full = [s for s in sizes if s <= decode_len * max_num_seqs]
    return sizes, full


# ---------------------------------------------------------------- the estimate

# Fitted on the table of real startup logs (see the module docstring); each names the
# data that pins it.
SAMPLER_BYTES = {
    # V0 sampler, rank 0 of corpus 008/009: 1.19/1.18 GiB for 256 x 128,256 elements.
    "v0": 39.0,
    # sort values (4) + int64 indices (8) + float32 logits (4) + the model-dtype logits (2)
    # + the scatter's output (4) + sort scratch: corpus 015 (H200, 1024 x 128,256) and
    # calibration 008 (RTX 3090, 256 x 151,936).
    "sort": 36.0,
    # float32 logits + probabilities + the model-dtype logits: calibration 002/003 (A100,
    # 256 x 152,064), 010 (triton path, 256 x 128,256).
    "flashinfer": 14.0,
    "triton": 14.0,
}
# Per token: residual, normed input and the layer's output (3 x hidden) + gate_up (2 x I)
# + its activation (I): corpus 041 (V0, 29,000 tokens: 2.99 GiB), 051 (V1, 8,192 tokens:
# 0.59 GiB), calibration 005 (2,048 tokens: 0.17 GiB).
DENSE_TOKEN_ELEMENTS = (3, 3)
# fused_moe keeps topk x (2 x moe_intermediate + hidden) per token in its caches, with
# scratch on top: calibration 004 (0.23 GiB at 2,048 tokens), 015 and 017.
MOE_SCRATCH_FACTOR = 1.5
# Small allocations every profiling run makes (positions, metadata, sampler tensors).
ACTIVATION_FIXED_GIB = 0.03
# Non-torch memory of one GPU:
NON_TORCH_BASE_GIB = 0.05        # cuBLAS/cuDNN workspaces (corpus 051: 0.06; calibration 005/013: 0.02)
CUDA_CONTEXT_GIB = 0.30          # charged only by the "device" generations (corpus 041: 0.35 in all)
NCCL_GIB = 0.38                  # NCCL + custom all-reduce buffers, TP > 1 (corpus 008/009: 0.73/0.71)
NCCL_AFTER_SNAPSHOT_GIB = 0.35   # 0.11+, graphs captured: calibration 017 (~0.4); eager 014: ~0
# Expert parallelism's all-to-all buffers (one log: corpus 021, TP 8 + EP).
EXPERT_PARALLEL_GIB = 2.0
# FP8 weights (w8a8: activations quantised per token, scaled-mm workspaces): calibration 009
# (dense, L40S: ~0.3 GiB more than the bf16 model explains) and 015 (MoE, H100: ~0.15).
FP8_WEIGHTS_GIB = 0.2
# Unified memory (GB10): the profiler reads the system's available memory, so host-side
# allocations during profiling count as non-torch (corpus 045; 001 and 004 show 2.8-4.3 GiB
# of overheads with models whose configs are not public).
UNIFIED_NON_TORCH_GIB = 2.0
# Estimated CUDA-graph memory per captured graph (0.20+): corpus 001/035, calibration 004/015/016.
GRAPH_GIB_PER_GRAPH = 0.008
# Vision encoder: patches (encoder budget x merge^2) x (3 x hidden + 2 x intermediate) of the
# vision tower, scaled: corpus 005 (Qwen3-VL, 8,192-token budget on a T4), calibration 013 (LLaVA).
VISION_SCRATCH_FACTOR = 1.9

# The constants above that were set by hand from named logs of the calibration table
# (tests/unit/test_vllm_plan_corpus.py), for its leave-one-out check: constant -> (the table's
# logs that set it, by name prefix; the value the vLLM sources alone give, without any log:
# 0 for an overhead no source sizes, 1 for a scratch factor, the tensors' own bytes for a
# sampler).  Each log is predicted with every constant it set refitted on the other logs that
# set it (minimax), or at that source-only value where it was the only one.  Not here, as no
# log sets them: DENSE_TOKEN_ELEMENTS (the tensors the source allocates), ACTIVATION_FIXED_GIB.
FITTED = {
    "SAMPLER_BYTES.v0": (("vllm_logs/008_", "vllm_logs/009_"), 24.0),        # logits, probs, logprobs, sort
    "SAMPLER_BYTES.sort": (("vllm_logs/015_", "vllm_logs_calibration/008_"), 22.0),  # no sort scratch
    "SAMPLER_BYTES.triton": (("vllm_logs_calibration/010_",), 10.0),          # fp32 logits + probs + logits
    "MOE_SCRATCH_FACTOR": (("vllm_logs_calibration/004_", "vllm_logs_calibration/015_",
                            "vllm_logs_calibration/017_"), 1.0),
    "NON_TORCH_BASE_GIB": (("vllm_logs/051_", "vllm_logs_calibration/005_", "vllm_logs_calibration/013_"), 0.0),
    "CUDA_CONTEXT_GIB": (("vllm_logs/041_",), 0.0),
    "NCCL_GIB": (("vllm_logs/008_", "vllm_logs/009_"), 0.0),
    "NCCL_AFTER_SNAPSHOT_GIB": (("vllm_logs_calibration/017_",), 0.0),
    "EXPERT_PARALLEL_GIB": (("vllm_logs/021_",), 0.0),
    "FP8_WEIGHTS_GIB": (("vllm_logs_calibration/009_", "vllm_logs_calibration/015_"), 0.0),
    "UNIFIED_NON_TORCH_GIB": (("vllm_logs/045_",), 0.0),
    "GRAPH_GIB_PER_GRAPH": (("vllm_logs_calibration/004_", "vllm_logs_calibration/015_"), 0.0),
    "VISION_SCRATCH_FACTOR": (("vllm_logs/005_", "vllm_logs_calibration/013_"), 1.0),
}


# ---------------------------------------------------------------- the sampler path
#
# Where the rules say "flashinfer", V1 samples with FlashInfer when the flashinfer package
# imports (topk_topp_sampler.py: "Using FlashInfer for top-p & top-k sampling"), else with
# PyTorch's sort ("FlashInfer is not available. Falling back to the PyTorch-native ...").
# Whether it imports follows from how vLLM was installed:
#   - the official image (vllm/vllm-openai) has carried FlashInfer since 0.5.1 (vLLM PR #6172;
#     "installed by default in the docker image for a long time", PR #21389);
#   - the PyPI wheel requires flashinfer-python from 0.11.1 (PR #26443); before, it was an
#     opt-in extra (vllm[flashinfer], PR #21959) that pip installs do not pull.
# Every V1 0.8-0.11.0 log of the calibration table is a pip install and prints "not
# available"; the 0.22/0.26 ones print "Using FlashInfer".  An image built some other way is
# not known: SAMPLERS lets the operator say (role: instance key sampler; CLI: --sampler).
SAMPLERS = ("auto", "flashinfer", "native")
OFFICIAL_IMAGE = "vllm/vllm-openai"
FLASHINFER_IN_WHEEL = (0, 11, 1)


def official_image(image):
    """True for vllm/vllm-openai (any registry or mirror path before it, any tag or digest)."""
    try:
        repository = parse_reference(str(image or ""))["repository"]
    except RegistryImageError:
        return False
    return repository == OFFICIAL_IMAGE or repository.endswith("/" + OFFICIAL_IMAGE)


def flashinfer_installed(version, image=None, sampler="auto"):
    """Whether FlashInfer's sampler is there for this install: sampler "flashinfer"/"native" as the
    operator says; "auto": the official image, or a wheel that requires it (>= 0.11.1; unknown
    version: the newest).  Only matters where the rules' sampler is "flashinfer"."""
    choice = str(sampler or "auto").lower()
    if choice not in SAMPLERS:
        raise ValueError("sampler must be one of %s, got %r" % (", ".join(SAMPLERS), sampler))
    if choice != "auto":
        return choice == "flashinfer"
    if official_image(image):
        return True
    return version is None or tuple(version) >= FLASHINFER_IN_WHEEL


def _sampler_path(rules, flashinfer):
    """The top-k/top-p implementation the profiling run samples with; flashinfer=False when
    the install lacks FlashInfer (flashinfer_installed)."""
    path = rules["sampler"]
    if path == "flashinfer" and flashinfer is False:
        return rules.get("native", "sort")
    return path


def forward_elements_per_token(model, tp, expert_parallel=False):
    """Largest number of activation elements one token holds at once in a decoder layer."""
    hidden = model["hidden_size"]
    base, mlp = DENSE_TOKEN_ELEMENTS
    best = 0
    inter = model.get("intermediate_size")
    if inter and (not model.get("num_experts") or model.get("first_dense_layers")):
        best = base * hidden + mlp * (inter // tp)
    if model.get("num_experts"):
        moe_inter = model["moe_intermediate_size"] // (1 if expert_parallel else tp)
        topk = model["experts_per_token"]
        moe = base * hidden + MOE_SCRATCH_FACTOR * topk * (2 * moe_inter + hidden)
        shared = model.get("shared_expert_intermediate_size") or 0
        moe += mlp * (shared // tp)
        best = max(best, moe)
    heads = model["num_attention_heads"] // tp or 1
    attention = base * hidden + 2 * heads * model["head_dim"] + 2 * model["kv_heads_per_rank"] * model["head_dim"]
    return max(best, attention)


def vision_peak_bytes(vision, encoder_budget_tokens, act_bytes):
    if not vision:
        return 0.0
    patches = encoder_budget_tokens * vision["merge"] ** 2
    per_patch = 3 * vision["hidden_size"] + 2 * vision["intermediate_size"]
    return VISION_SCRATCH_FACTOR * patches * per_patch * act_bytes


def estimate(model, rules, tp, batched_tokens, num_seqs, enforce_eager=False, flashinfer=None,
             graphs=None, pooling=False, unified_memory=False, expert_parallel=False, version=None,
             speculative_tokens=0):
    """{activation_gib, non_torch_gib, cuda_graph_gib, parts} for one GPU of the plan.

    model: the plan's architecture (hidden_size, intermediate_size, vocab_size, MoE and
    vision fields).  Returns the parts so that the plan can say what it assumed.
    """
    act_bytes = model.get("dtype_bytes", 2)
    forward = batched_tokens * forward_elements_per_token(model, tp, expert_parallel) * act_bytes
    path = None
    sampler = 0.0
    if not pooling:
        path = _sampler_path(rules, flashinfer)
        rows = min(num_seqs, batched_tokens)
        sampler = rows * model["vocab_size"] * SAMPLER_BYTES[path]
        # V1 keeps the forward's hidden states while it samples.
        sampler += batched_tokens * model["hidden_size"] * act_bytes if rules["engine"] == "V1" else 0
    encoder = 0.0
    if rules["engine"] == "V1":
        encoder = vision_peak_bytes(model.get("vision"), batched_tokens, act_bytes)
    activation = max(forward, sampler, encoder) / GIB + ACTIVATION_FIXED_GIB

    non_torch = NON_TORCH_BASE_GIB
    if rules["non_torch"] == "device":
        non_torch += CUDA_CONTEXT_GIB
    if tp > 1 and rules["non_torch"] in ("device", "since_context"):
        non_torch += NCCL_GIB
    elif tp > 1 and not enforce_eager:
        # Buffers for the captured graphs' collectives: seen with graphs (017), not eager (014).
        non_torch += NCCL_AFTER_SNAPSHOT_GIB
    if expert_parallel:
        non_torch += EXPERT_PARALLEL_GIB
    if model.get("weight_bits") == 8:
        non_torch += FP8_WEIGHTS_GIB
    if unified_memory:
        non_torch += UNIFIED_NON_TORCH_GIB

    graph_gib = 0.0
    graph_count = 0
    applied = rules["graphs"] if graphs is None else bool(graphs)
    if applied and not enforce_eager:
        piecewise, full = cudagraph_sizes(num_seqs, batched_tokens, version, speculative_tokens)
        graph_count = len(piecewise) + len(full)
        graph_gib = graph_count * GRAPH_GIB_PER_GRAPH
    return {
        "activation_gib": activation,
        "non_torch_gib": non_torch,
        "cuda_graph_gib": graph_gib,
        "parts": {
            "forward_gib": round(forward / GIB, 3),
            "sampler_gib": round(sampler / GIB, 3),
            "sampler_path": path,
            "encoder_gib": round(encoder / GIB, 3),
            "cuda_graphs": graph_count,
        },
    }
