"""vLLM memory plan: the seeds' arithmetic, KV-per-token against real logs, remedies,
several instances, safetensors headers and the Ansible module shell."""
import io
import json
import os
import struct
from contextlib import redirect_stdout

import pytest
from hypothesis import given, settings, strategies as st

from serving import safetensors_header as sth
from serving import vllm_model as vm
from serving import vllm_overheads as vo
from serving import vllm_plan as vp
from serving import vllm_plan_inputs as vpi
from serving import vllm_sharing as vsh
from conftest import FIXTURES

MODELS = os.path.join(FIXTURES, "models")


def arch(name):
    return vm.model_arch(vm.load_config(os.path.join(MODELS, name)))


def seed_plan(**overrides):
    # seeds/000: RTX PRO 6000, 95.00 GiB total as vLLM prints it (CUDA's total: nothing
    # more reserved), Qwen3.6-27B in BF16 at 32K, a vLLM that captured its CUDA graphs
    # after sizing the KV cache (before 0.20).
    inputs = dict(gpu_memory_mib=95 * 1024, gpu_reserved_mib=0, vllm_version="0.11.0",
                  gpu_memory_utilization=0.90, max_model_len=32768,
                  weights_gib=54.12, non_torch_gib=0.91, activation_gib=4.38,
                  # 64 layers x 8 KV heads x 128 x 2 (K,V) x 2 bytes: a plausible 27B figure;
                  # the seed's own token count is illustrative (see test_fp8_remedy_ratio).
                  kv_bytes_per_token=262144)
    inputs.update(overrides)
    return vp.plan(**inputs)


# ------------------------------------------------------------------ the seeds

def test_seed_kv_share_arithmetic():
    # 95.00 x 0.90 = 85.50; - 54.12 - 0.91 - 4.38 = 26.09 GiB (domain.md §5, seed 000).
    result = seed_plan()
    assert result["budget_gib"] == pytest.approx(85.50, abs=0.005)
    assert round(result["kv_cache_gib"], 2) == 26.09
    assert result["kv_cache_tokens"] == int(26.09 * vp.GIB // (262144 * 16)) * 16


def test_budget_is_a_share_of_the_whole_device():
    # seed 003: L4 23,034 MiB, 0.40 -> 9,214 MiB (measured 9,184 MiB, 0.3 % off).
    assert seed_plan(gpu_memory_mib=23034, gpu_memory_utilization=0.40, weights_gib=2,
                     activation_gib=1, non_torch_gib=1)["budget_mib"] == 9214
    # Held memory does not shrink the budget, it only has to leave room for it.
    assert seed_plan(gpu_memory_mib=23034, gpu_memory_utilization=0.40, weights_gib=2,
                     activation_gib=1, non_torch_gib=1, held_mib=4792)["budget_mib"] == 9214


def test_fp8_remedy_ratio():
    """FP8 halves the weights (54 -> 27 GiB); tokens grow by the KV share's ratio.

    The seed prints 8,192 -> 176,128 tokens (21.5x) next to a KV share of 26.09 ->
    ~60 GiB; those token counts are illustrative and do not follow from its own GiB
    figures (26.09 -> 54.79 GiB is 2.1x), so the test checks ratios of the arithmetic.
    """
    base = seed_plan()
    fp8 = [r for r in base["remedies"] if r["name"] == "quantize_weights_fp8"][0]
    assert fp8["weights_gib"] == pytest.approx(27.06, abs=0.01)
    share_ratio = fp8["kv_cache_gib"] / base["kv_cache_gib"]
    assert share_ratio == pytest.approx((85.50 - 27.06 - 0.91 - 4.38) / 26.09, rel=1e-3)
    assert fp8["kv_cache_tokens"] / base["kv_cache_tokens"] == pytest.approx(share_ratio, rel=1e-3)
    assert fp8["max_concurrency"] / base["max_concurrency"] == pytest.approx(share_ratio, rel=1e-2)
    # The seed's FP8 run itself (27.31 GiB weights, 0.92, 0.89, 4.41): 54.79 GiB of KV.
    rerun = seed_plan(weights_gib=27.31, gpu_memory_utilization=0.92, non_torch_gib=0.89, activation_gib=4.41)
    assert round(rerun["kv_cache_gib"], 2) == 54.79
    assert rerun["kv_cache_tokens"] / base["kv_cache_tokens"] == pytest.approx(54.79 / 26.09, rel=2e-3)


def test_seed_token_count_implies_the_verdict():
    # With the seed's own figure (26.09 GiB -> 8,192 tokens) 32K gives 0.25x: refuse.
    per_token = 26.09 * vp.GIB / 8192
    result = seed_plan(kv_bytes_per_token=per_token)
    assert result["kv_cache_tokens"] == 8192
    assert result["max_concurrency"] == 0.25
    assert result["verdict"] == "refuse"
    assert result["reasons"][0]["code"] == "concurrency_below_1"


def test_raising_utilisation_is_the_small_remedy():
    # 0.90 -> 0.95 adds ~4.7 GiB on 95 GiB (domain.md §5).
    result = seed_plan()
    raise_util = [r for r in result["remedies"] if r["name"] == "raise_gpu_memory_utilization"][0]
    assert raise_util["gpu_memory_utilization"] == 0.95
    assert raise_util["kv_cache_gib"] - result["kv_cache_gib"] == pytest.approx(4.75, abs=0.01)
    fp8 = [r for r in result["remedies"] if r["name"] == "quantize_weights_fp8"][0]
    assert fp8["kv_cache_tokens"] > raise_util["kv_cache_tokens"]


# ------------------------------------------------------------------ several instances

def test_four_times_040_on_one_l4_is_refused():
    instances = [{"name": "vllm-%d" % i, "gpu_memory_utilization": 0.40, "gpu_index": 0} for i in range(4)]
    result = seed_plan(gpu_memory_mib=23034, gpu_memory_utilization=0.40, max_model_len=4096,
                       weights_gib=2.0, kv_bytes_per_token=36864, instances=instances)
    assert result["verdict"] == "refuse"
    assert result["reasons"][0]["code"] == "instances_overflow"
    for name in ("vllm-0", "vllm-1", "vllm-2", "vllm-3"):
        assert name in result["reasons"][0]["message"]
    check = result["instances"][0]
    assert check["sum_utilization"] == pytest.approx(1.6)
    assert not check["fits"]
    # Each process holds 144 MiB beyond its budget (seed 003): 4 x 144 MiB off the 23,034 MiB leaves
    # 0.975 of the GPU for budgets, 0.2437 each.
    assert check["required_mib"] == round(1.6 * 23034) + 4 * 144
    top = result["remedies"][0]
    assert top["name"] == "share_gpu_evenly" and top["gpu_memory_utilization"] == 0.24
    # the other remedies change this instance, not the summed budgets: judged on the whole GPU, none fixes it
    rest = result["remedies"][1:]
    assert {"kv_cache_fp8", "quantize_weights_fp8", "tensor_parallel"} <= set(r["name"] for r in rest)
    for remedy in rest:
        assert remedy["verdict"] == "refuse" and remedy["fits_gpu"] is False, remedy["name"]
        assert "does not fix GPU 0: the budgets of its 4 instances still sum to 1.60 (room 0.97)" in remedy["description"]


def test_four_times_023_on_one_l4_is_accepted():
    instances = [{"name": "vllm-%d" % i, "gpu_memory_utilization": 0.23} for i in range(4)]
    result = seed_plan(gpu_memory_mib=23034, gpu_memory_utilization=0.23, max_model_len=4096,
                       weights_gib=2.0, kv_bytes_per_token=36864, non_torch_gib=1, activation_gib=1,
                       instances=instances)
    assert result["instances"][0]["fits"]
    assert result["instances"][0]["sum_utilization"] == pytest.approx(0.92)
    assert result["verdict"] == "ok"


def test_instances_count_memory_already_held():
    checks = vsh.check_instances([{"name": "a", "gpu_memory_utilization": 0.5},
                                  {"name": "b", "gpu_memory_utilization": 0.45}], 23034, held_mib=2000)
    assert not checks[0]["fits"]  # 0.95 x 23034 + 2000 > 23034
    checks = vsh.check_instances([{"name": "a", "gpu_memory_utilization": 0.5, "gpu_index": 0},
                                  {"name": "b", "gpu_memory_utilization": 0.5, "gpu_index": 1}], 23034)
    assert [c["gpu_index"] for c in checks] == [0, 1] and all(c["fits"] for c in checks)


def test_four_quarters_fit_only_without_what_each_process_holds_beyond_its_budget():
    quarters = [{"name": str(i), "gpu_memory_utilization": 0.25} for i in range(4)]
    assert vsh.check_instances(quarters, 23034)[0]["fits"]
    assert not vsh.check_instances(quarters, 23034, per_instance_mib=vsh.OUTSIDE_BUDGET_MIB)[0]["fits"]


def test_host_plan_refuses_four_quarters_on_one_gpu():
    # vLLM sizes each budget on CUDA's total (nvidia-smi's total less the reserved memory), and each
    # process holds more than its budget: four instances of 0.25 overflow the GPU.
    quarters = [{"name": "vllm-%d" % i, "gpu_memory_utilization": 0.25} for i in range(4)]
    result = seed_plan(gpu_memory_mib=23034, gpu_reserved_mib=434, gpu_memory_utilization=0.25,
                       max_model_len=4096, weights_gib=2.0, kv_bytes_per_token=36864, instances=quarters)
    check = result["instances"][0]
    assert check["total_mib"] == 23034 - 434
    assert check["required_mib"] == round(22600 + 4 * 144)
    assert not check["fits"] and result["verdict"] == "refuse"
    # (1 - 576 / 22600) / 4 = 0.2436
    assert result["remedies"][0]["name"] == "share_gpu_evenly"
    assert result["remedies"][0]["gpu_memory_utilization"] == 0.24


# ------------------------------------------------------------------ verdicts

def test_verdict_thresholds():
    common = dict(gpu_memory_mib=24576, gpu_reserved_mib=0, gpu_memory_utilization=0.9, weights_gib=10,
                  non_torch_gib=1, activation_gib=1, kv_bytes_per_token=131072)
    # KV share 9.6 GiB -> 78,640 tokens.
    assert vp.plan(max_model_len=8192, **common)["verdict"] == "ok"  # 9.6x
    assert vp.plan(max_model_len=32768, **common)["verdict"] == "warn"  # 2.4x
    assert vp.plan(max_model_len=131072, **common)["verdict"] == "refuse"  # 0.6x
    exactly_one = vp.plan(max_model_len=78640, **common)
    assert exactly_one["max_concurrency"] == 1.0 and exactly_one["verdict"] == "warn"


def test_no_room_for_the_kv_cache_is_refused():
    result = vp.plan(gpu_memory_mib=16384, gpu_memory_utilization=0.9, max_model_len=4096,
                     weights_gib=15.0, kv_bytes_per_token=131072)
    assert result["kv_cache_gib"] < 0 and result["kv_cache_tokens"] == 0
    assert result["verdict"] == "refuse"
    assert result["reasons"][0]["code"] == "kv_share_not_positive"


def test_budget_above_free_memory_is_refused():
    # vLLM: "Free memory on device ... is less than desired GPU memory utilization".
    result = vp.plan(gpu_memory_mib=23034, gpu_memory_utilization=0.9, max_model_len=4096,
                     weights_gib=2, kv_bytes_per_token=36864, held_mib=4792)
    assert result["verdict"] == "refuse"
    assert result["reasons"][0]["code"] == "free_memory_below_budget"
    lower = result["remedies"][0]
    assert lower["name"] == "lower_gpu_memory_utilization"
    assert lower["gpu_memory_utilization"] * 23034 <= 23034 - 4792
    assert not [r for r in result["remedies"] if r["name"] == "raise_gpu_memory_utilization"]


# ------------------------------------------------------------------ remedies

def test_remedies_are_ranked_and_carry_figures():
    result = seed_plan()
    names = [r["name"] for r in result["remedies"]]
    assert set(names) == {"quantize_weights_fp8", "quantize_weights_int4", "kv_cache_fp8",
                          "tensor_parallel", "lower_max_model_len", "raise_gpu_memory_utilization"}
    score = {"ok": 2, "warn": 1, "refuse": 0}
    keys = [(score[r["verdict"]], r["max_concurrency"]) for r in result["remedies"]]
    assert keys == sorted(keys, reverse=True)
    for remedy in result["remedies"]:
        for key in ("kv_cache_tokens", "max_concurrency", "kv_cache_gib", "verdict", "change"):
            assert key in remedy
    kv8 = [r for r in result["remedies"] if r["name"] == "kv_cache_fp8"][0]
    assert kv8["kv_bytes_per_token"] == 131072
    assert kv8["kv_cache_tokens"] == pytest.approx(2 * result["kv_cache_tokens"], abs=16)
    tp = [r for r in result["remedies"] if r["name"] == "tensor_parallel"][0]
    assert tp["tensor_parallel_size"] == 2 and tp["weights_gib"] == pytest.approx(27.06, abs=0.01)


def test_lower_max_model_len_reaches_four():
    result = seed_plan()  # 3.26x at 32K
    lower = [r for r in result["remedies"] if r["name"] == "lower_max_model_len"][0]
    assert lower["max_model_len"] < 32768 and lower["max_concurrency"] >= 4.0
    assert lower["max_model_len"] in vp._max_len_candidates(32768)
    # The next bigger candidate would not reach 4x.
    bigger = [n for n in vp._max_len_candidates(32768) if n > lower["max_model_len"]]
    if bigger:
        assert seed_plan(max_model_len=min(bigger))["max_concurrency"] < 4.0


def test_remedies_skip_what_is_already_done(tmp_path):
    # Qwen3-235B-A22B-FP8 with fp8 KV at TP8 on a tight budget: no FP8-weights and
    # no FP8-KV remedy, since both are in use already.
    result = vp.plan(gpu_memory_mib=81559, gpu_memory_utilization=0.45, max_model_len=131072,
                     model_dir=os.path.join(MODELS, "qwen3-235b-a22b-fp8"), weights_gib=221.3,
                     kv_cache_dtype="fp8", tensor_parallel_size=8, activation_gib=6)
    names = {r["name"] for r in result["remedies"]}
    assert "quantize_weights_fp8" not in names and "kv_cache_fp8" not in names
    assert "quantize_weights_int4" in names
    assert result["quantization"] == "fp8" and result["verdict"] == "refuse"
    # AWQ: no weight quantisation remedy at all.
    awq = vp.plan(gpu_memory_mib=24576, gpu_memory_utilization=0.9, max_model_len=32768,
                  model_dir=os.path.join(MODELS, "qwen2.5-14b-instruct-awq"), weights_gib=9.38)
    assert awq["verdict"] == "warn" and awq["remedies"]
    assert not {r["name"] for r in awq["remedies"]} & {"quantize_weights_fp8", "quantize_weights_int4"}


def test_tensor_parallel_offered_only_when_heads_divide():
    # Qwen2.5-14B has 40 heads: TP 8 -> 16 does not divide them.
    result = vp.plan(gpu_memory_mib=24576, gpu_memory_utilization=0.9, max_model_len=131072,
                     model_dir=os.path.join(MODELS, "qwen2.5-14b-instruct"), weights_gib=27.5,
                     tensor_parallel_size=8)
    assert "tensor_parallel" not in {r["name"] for r in result["remedies"]}


def test_ok_plan_has_no_remedies():
    assert seed_plan(max_model_len=4096)["remedies"] == []


def test_refuse_message_names_layer_numbers_and_top_remedy():
    result = seed_plan(kv_bytes_per_token=26.09 * vp.GIB / 8192)
    text = vp.refuse_message(result)
    assert text.startswith("vllm memory plan: refuse")
    assert "8,192" in text and "0.25x" in text and "Remedies, best first: " in text
    assert result["remedies"][0]["description"] in text


# ------------------------------------------------------------------ KV bytes per token

@pytest.mark.parametrize("model, expected", [
    ("llama-3.1-8b-instruct", 131072),      # 32 layers x 8 KV heads x 128 x 2 x 2 B = 128 KiB
    ("qwen2.5-14b-instruct", 196608),       # 48 x 8 x 128 x 2 x 2
    ("llama-3.2-1b-instruct", 32768),       # 16 x 8 x 64 x 2 x 2
    ("mistral-7b-instruct-v0.3", 131072),   # 32 x 8 x 128 x 2 x 2 (head_dim = 4096 / 32)
    ("qwen2.5-3b-instruct", 36864),         # 36 x 2 x 128 x 2 x 2
    ("qwen3-4b", 147456),                   # 36 x 8 x 128 x 2 x 2
    ("qwen3-vl-2b-instruct", 114688),       # text_config: 28 x 8 x 128 x 2 x 2
    ("deepseek-v2-lite", 31104),            # MLA: 27 x (512 + 64) x 2 B, no separate K and V
    ("gemma-3-27b-it", 507904),             # text_config: 62 x 16 x 128 x 2 x 2
    ("gpt-oss-20b", 49152),                 # 24 x 8 x 64 x 2 x 2 (sliding and full together)
])
def test_kv_bytes_per_token_from_config(model, expected):
    assert vm.kv_bytes_per_token(arch(model)) == expected


def test_kv_dtype_and_tensor_parallel_split():
    llama = arch("llama-3.1-8b-instruct")
    assert vm.kv_bytes_per_token(llama, "fp8") == 65536
    assert vm.kv_bytes_per_token(llama, "fp8_e5m2", tp=2) == 32768
    assert vm.kv_bytes_per_token(llama, "auto", tp=4) == 32768
    # 4 KV heads over 8 ranks: replicated, one head per rank.
    assert vm.kv_bytes_per_token(arch("qwen3-235b-a22b-fp8"), "fp8", tp=8) == 94 * 1 * 128 * 2
    # MLA is not split by tensor parallelism.
    assert vm.kv_bytes_per_token(arch("deepseek-v2-lite"), tp=4) == 31104
    with pytest.raises(vpi.PlanError):
        vm.kv_bytes_per_token(llama, "int3")


def test_hybrid_layer_patterns():
    gemma = arch("gemma-3-27b-it")
    assert sum(1 for k, _ in gemma["layers"] if k == "full") == 10  # every 6th of 62
    assert {w for k, w in gemma["layers"] if k == "sliding"} == {1024}
    oss = arch("gpt-oss-20b")
    assert [k for k, _ in oss["layers"]].count("sliding") == 12
    qwen = arch("qwen2.5-14b-instruct")  # sliding_window set but use_sliding_window false
    assert all(k == "full" for k, _ in qwen["layers"])


def test_sliding_layers_raise_concurrency_not_tokens():
    """gpt-oss-20b, corpus 045: 12.94 GiB -> 282,624 tokens and 54.44x at 8,192 - the
    sliding half needs only its window, so concurrency beats tokens / max_model_len."""
    result = vp.plan(gpu_memory_mib=int(12.94 * 1024 * 2), gpu_reserved_mib=0, gpu_memory_utilization=0.5,
                     max_model_len=8192, model_dir=os.path.join(MODELS, "gpt-oss-20b"), weights_gib=0,
                     non_torch_gib=0, activation_gib=0, cuda_graph_gib=0, vllm_version="0.13.0")
    assert result["kv_cache_gib"] == pytest.approx(12.94, abs=0.001)
    assert result["kv_cache_tokens"] == pytest.approx(282624, rel=0.002)
    assert result["max_concurrency"] == pytest.approx(54.44, rel=0.003)
    assert result["max_concurrency"] > result["kv_cache_tokens"] / 8192.0


# Logged KV memory / our bytes per token vs the logged `GPU KV cache size`
# (per rank for TP; V0 logs give blocks x 16).  Corpus files named per row.
CORPUS_KV = [
    ("005_v0.11.0_T4_qwen3vl-embed_ok.log", "qwen3-vl-2b-instruct", 1, "auto", 6.01, 56288),
    ("008_v0.6.4.post1_V0_tp2_llama3.1-8b_ok.log", "llama-3.1-8b-instruct", 2, "auto", 30.55, 31284 * 16),
    ("009_v0.6.4.post1_V0_tp4_llama3.1-8b_ok.log", "llama-3.1-8b-instruct", 4, "auto", 34.32, 70293 * 16),
    ("012_v0.13.0_qwen2.5-14b-awq_ansi_ok.log", "qwen2.5-14b-instruct-awq", 1, "auto", 10.39, 56736),
    ("014_v0.6.6.post1_V0_8xL40S_tp8_internvl3-78b_offline_ok.log", "qwen2.5-72b-instruct", 8, "auto", 3.09, 5065 * 16),
    ("015_v0.11.2_llama3-8b_ansi_negative-graph-mem_ok.log", "llama-3.1-8b-instruct", 1, "auto", 105.97, 868080),
    ("017_v0.9.2_tp4_qwen2.5-14b_ok.log", "qwen2.5-14b-instruct", 4, "auto", 12.79, 279408),
    ("021_v0.10.0_8xH100_tp8-ep_qwen3-235b-fp8_ok.log", "qwen3-235b-a22b-fp8", 8, "fp8", 35.65, 1590736),
    ("024_v0.17.0_ok.log", "qwen2.5-3b-instruct", 1, "auto", 14.74, 429328),
    ("032_v0.13.0_tp2_marlin-wna16-moe_ok.log", "qwen3-30b-a3b", 2, "auto", 5.93, 129504),
    ("041_v0.6.x_RTX3090_llama3.1-8b_max-seq-len-larger-than-kv-cache_user-stripped-prefixes.log",
     "llama-3.1-8b-instruct", 1, "auto", 2.89, 1478 * 16),
    ("045_v0.13.0-nv26.01_NGC-container_GB10_ok.log", "gpt-oss-20b", 1, "auto", 12.94, 282624),
    ("051_v0.12.0_verl-ray-nested-prefixes_DEBUG-memory-profiling_2-engines_excerpt.log", "qwen3-4b", 1, "auto", 39.28, 285984),
]


@pytest.mark.parametrize("log, model, tp, kv_dtype, logged_gib, logged_tokens", CORPUS_KV)
def test_kv_tokens_match_corpus_logs(log, model, tp, kv_dtype, logged_gib, logged_tokens):
    assert os.path.exists(os.path.join(FIXTURES, "vllm_logs", log))
    predicted = logged_gib * vp.GIB / vm.kv_bytes_per_token(arch(model), kv_dtype, tp)
    # The logs print GiB with two decimals: 2.89 GiB is +-0.17 %.
    assert predicted == pytest.approx(logged_tokens, rel=0.002)


# ------------------------------------------------------------------ safetensors headers

def write_safetensors(path, tensors, metadata=None, pad_data=True):
    """A real safetensors file: 8-byte LE length, JSON header, then the data."""
    header = {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = sth.tensor_bytes({"dtype": dtype, "shape": shape})
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    if metadata is not None:
        header["__metadata__"] = metadata
    blob = json.dumps(header).encode()
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(blob)))
        handle.write(blob)
        if pad_data:
            handle.write(b"\0" * offset)
    return offset


def test_safetensors_header_sum(tmp_path):
    path = tmp_path / "model.safetensors"
    size = write_safetensors(str(path), {
        "embed.weight": ("BF16", [1000, 64]),
        "layer.0.weight": ("F8_E4M3", [64, 64]),
        "layer.0.scale": ("F32", [64]),
        "norm": ("F16", [64]),
    }, metadata={"format": "pt"})
    assert size == 1000 * 64 * 2 + 64 * 64 + 64 * 4 + 64 * 2
    found = sth.checkpoint_weight_bytes(str(tmp_path))
    assert found["bytes"] == size and found["source"] == "safetensors_headers"
    assert found["by_dtype"]["F8_E4M3"] == 4096


def test_headers_only_are_read(tmp_path):
    # No tensor data at all: the header alone gives the size.
    size = write_safetensors(str(tmp_path / "model.safetensors"), {"w": ("BF16", [4096, 4096])}, pad_data=False)
    assert os.path.getsize(str(tmp_path / "model.safetensors")) < 1000
    assert sth.checkpoint_weight_bytes(str(tmp_path))["bytes"] == size


def test_index_selects_shards_and_falls_back_to_total_size(tmp_path):
    a = write_safetensors(str(tmp_path / "model-00001-of-00002.safetensors"), {"a": ("BF16", [10, 10])})
    b = write_safetensors(str(tmp_path / "model-00002-of-00002.safetensors"), {"b": ("BF16", [20, 10])})
    # Mistral-style duplicate that vLLM does not load beside the index.
    write_safetensors(str(tmp_path / "consolidated.safetensors"), {"a": ("BF16", [10, 10]), "b": ("BF16", [20, 10])})
    index = {"metadata": {"total_size": a + b},
             "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / sth.INDEX_NAME).write_text(json.dumps(index))
    assert sth.checkpoint_weight_bytes(str(tmp_path))["bytes"] == a + b
    # Shards not downloaded yet: the index's total_size.
    os.remove(str(tmp_path / "model-00002-of-00002.safetensors"))
    found = sth.checkpoint_weight_bytes(str(tmp_path))
    assert found == {"bytes": a + b, "source": "index_total_size", "files": [], "by_dtype": {}}


@pytest.mark.parametrize("content", [b"", b"\x01\x00", struct.pack("<Q", 0), struct.pack("<Q", 50) + b"{}",
                                     struct.pack("<Q", 2) + b"[]", struct.pack("<Q", 3) + b"\xff\xfe{",
                                     struct.pack("<Q", 1 << 40)])
def test_bad_headers_raise_a_clear_error(tmp_path, content):
    path = tmp_path / "model.safetensors"
    path.write_bytes(content)
    with pytest.raises(sth.SafetensorsError):
        sth.read_header(str(path))


def test_plan_from_a_model_directory(tmp_path):
    model = tmp_path / "tiny-llama"
    model.mkdir()
    config = json.load(open(os.path.join(MODELS, "llama-3.2-1b-instruct", "config.json")))
    (model / "config.json").write_text(json.dumps(config))
    size = write_safetensors(str(model / "model.safetensors"), {"w": ("BF16", [1024, 1024, 1024])}, pad_data=False)
    result = vp.plan(gpu_memory_mib=24576, gpu_reserved_mib=0, gpu_memory_utilization=0.9,
                     model_dir=str(model), image="vllm/vllm-openai:v0.11.0")
    assert result["weights_total_gib"] == pytest.approx(size / vp.GIB)  # 2 GiB
    assert result["weights_source"] == "safetensors_headers"
    assert result["kv_bytes_per_token"] == 32768
    assert result["max_model_len"] == 131072  # max_position_embeddings
    assert result["model"]["num_hidden_layers"] == 16
    assert result["estimates"] == {"non_torch_gib": "model", "activation_gib": "model", "cuda_graph_gib": "model"}
    # 0.11.0 (the official image, which carries FlashInfer) on a 24 GiB card: 2,048 tokens and
    # 256 sequences per step; FlashInfer samples
    # 256 x 128,256 float32 logits + probabilities + the bf16 logits (14 B each), with the
    # step's 2,048 x 2,048 bf16 hidden states kept; that is more than the forward's
    # 2,048 x (3 x 2,048 + 3 x 8,192) x 2 B.
    engine = result["engine"]
    assert (engine["max_num_batched_tokens"], engine["max_num_seqs"]) == (2048, 256)
    sampler = (256 * 128256 * 14 + 2048 * 2048 * 2) / vp.GIB
    assert result["overhead_parts"]["sampler_gib"] == pytest.approx(sampler, abs=0.001)
    assert result["activation_gib"] == pytest.approx(sampler + 0.03, abs=0.001)
    assert result["cuda_graph_gib"] == 0  # graphs are captured after the KV cache before 0.20
    share = 21.6 - 2 - result["activation_gib"] - result["non_torch_gib"]
    assert result["kv_cache_gib"] == pytest.approx(share, abs=0.001)
    assert result["kv_cache_tokens"] == int(share * vp.GIB // (32768 * 16)) * 16
    assert result["verdict"] == "ok"


# ------------------------------------------------------------------ input checking

@pytest.mark.parametrize("bad", [
    dict(gpu_memory_mib=0),
    dict(gpu_memory_mib="lots"),
    dict(gpu_memory_utilization=1.5),
    dict(gpu_memory_utilization=0),
    dict(max_model_len=0),
    dict(max_model_len=1.5),
    dict(tensor_parallel_size=0),
    dict(held_mib=-1),
    dict(held_mib=10 ** 9),
    dict(kv_cache_dtype="int2"),
    dict(weights_gib=None),
    dict(kv_bytes_per_token=None),
    dict(activation_gib=float("nan")),
    dict(model_dir="/does/not/exist"),
])
def test_bad_input_is_a_plan_error(bad):
    inputs = dict(gpu_memory_mib=24576, gpu_memory_utilization=0.9, max_model_len=4096,
                  weights_gib=10, kv_bytes_per_token=131072)
    inputs.update(bad)
    with pytest.raises(vpi.PlanError):
        vp.plan(**inputs)


def test_model_dir_without_weights_asks_for_weights_gib():
    with pytest.raises(vpi.PlanError, match="weights_gib"):
        vp.plan(gpu_memory_mib=24576, model_dir=os.path.join(MODELS, "llama-3.1-8b-instruct"))


@settings(max_examples=150, deadline=None)
@given(total=st.integers(1024, 200000), reserved=st.integers(0, 1100), util=st.floats(0.05, 1.0),
       weights=st.floats(0, 300), per_token=st.integers(1, 2_000_000), length=st.integers(1, 1_000_000),
       tp=st.integers(1, 16), held=st.integers(0, 1000), kv=st.sampled_from(["auto", "fp8", "bfloat16"]),
       version=st.sampled_from([None, "0.6.4", "0.10.0", "0.11.2", "0.17.1", "0.20.0", "0.25.1"]))
def test_plan_never_crashes_and_keeps_its_invariants(total, reserved, util, weights, per_token, length, tp,
                                                      held, kv, version):
    reserved = min(reserved, total // 2)
    cuda_total = total - reserved
    result = vp.plan(gpu_memory_mib=total, gpu_reserved_mib=reserved, gpu_memory_utilization=util,
                     max_model_len=length, weights_gib=weights, kv_bytes_per_token=per_token,
                     tensor_parallel_size=tp, held_mib=min(held, cuda_total - 1), kv_cache_dtype=kv,
                     vllm_version=version)
    assert result["kv_cache_tokens"] >= 0
    if vo.generation(vo.parse_version(version) if version else None)[1]["tokens"] == "blocks":
        assert result["kv_cache_tokens"] % 16 == 0
    low, high = result["band"]["max_concurrency"]
    assert low <= result["max_concurrency"] <= high
    assert result["verdict"] in ("ok", "warn", "refuse")
    if result["verdict"] == "ok":
        assert result["max_concurrency"] >= 4.0 and low >= 1.0 and result["remedies"] == []
    if result["band"]["kv_cache_tokens"][1] == 0:
        assert result["verdict"] == "refuse"
    if result["verdict"] == "refuse" and not result["held_mib"]:
        assert high < 1.0  # never refused while the band's optimistic end still fits
    json.dumps(result)


# ------------------------------------------------------------------ the module shell

def run_module(args):
    from ansible.module_utils.testing import patch_module_args
    import vllm_memory_plan
    out = io.StringIO()
    with patch_module_args(args), redirect_stdout(out), pytest.raises(SystemExit):
        vllm_memory_plan.main()
    return json.loads(out.getvalue())


def test_module_returns_plan_and_never_changes():
    result = run_module({"gpu_memory_mib": 97280, "gpu_reserved_mib": 0, "vllm_version": "0.11.0",
                         "gpu_memory_utilization": 0.9, "max_model_len": 32768, "weights_gib": 54.12, "kv_bytes_per_token": 262144, "non_torch_gib": 0.91,
                         "activation_gib": 4.38, "_ansible_check_mode": True})
    assert result["changed"] is False and not result.get("failed")
    assert round(result["plan"]["kv_cache_gib"], 2) == 26.09


def test_module_reports_refuse_without_failing_unless_asked():
    args = {"gpu_memory_mib": 23034, "gpu_memory_utilization": 0.4, "max_model_len": 4096,
            "weights_gib": 2.0, "kv_bytes_per_token": 36864,
            "instances": [{"name": "vllm-%d" % i, "gpu_memory_utilization": 0.4} for i in range(4)]}
    result = run_module(args)
    assert not result.get("failed") and result["plan"]["verdict"] == "refuse"
    result = run_module(dict(args, fail_on_refuse=True))
    assert result["failed"] and result["changed"] is False
    assert result["msg"].startswith("vllm memory plan: refuse")
    assert "vllm-3" in result["msg"] and "36630 MiB" in result["msg"] and "Remedies, best first: share_gpu_evenly" in result["msg"]


def test_module_bad_input_fails_with_the_layer_named():
    result = run_module({"gpu_memory_mib": 23034, "weights_gib": 2.0})
    assert result["failed"] and result["msg"].startswith("vllm memory plan: ")
    result = run_module({"gpu_memory_mib": 23034})
    assert result["failed"]  # neither model_dir nor weights_gib
