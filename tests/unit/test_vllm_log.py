"""vLLM startup-log report against every corpus log (tests/fixtures/vllm_logs/, copied
unedited from /work/shared/corpus/vllm_logs/).  The expected values were read from
each file by eye and cross-checked with MANIFEST.tsv; where they differ the file
wins and the row says why."""
import io
import json
import os
import stat
from contextlib import redirect_stdout

import pytest
from hypothesis import given, settings, strategies as st

from serving import vllm_log
from conftest import CORPUS, FIXTURES

LOGS = os.path.join(FIXTURES, "vllm_logs")
ALL_LOGS = sorted(n for n in os.listdir(LOGS) if n.endswith(".log"))


def report(name):
    with open(os.path.join(LOGS, name), "rb") as handle:
        return vllm_log.parse(handle.read())


# name prefix -> expected fields (None = not in the log).
#   v version, st started, last last_stage, kv kv_cache_tokens, c max_concurrency,
#   L max_model_len, w weights_gib, g gpu_memory_utilization, gs graph_capture_s, f failure kind
EXPECTED = {
    "001": dict(v="0.25.1", st=True, last="api_server_started", kv=3875400, c=14.78, L=262144,
                w=16.63, g=0.85, gs=4, f=None),
    # Killed after torch.compile; the log just ends (MANIFEST: presumably an OOM kill).
    "003": dict(v="0.25.1", st=False, last="weights_loaded", kv=None, c=None, L=65536,
                w=95.63, g=0.89, gs=None, f="incomplete"),
    # Started; the EngineDeadError comes much later, at run time.
    "004": dict(v="0.25.1", st=True, last="api_server_started", kv=94135, c=1.44, L=65536,
                w=95.63, g=0.89, gs=11, f=None),
    "005": dict(v="0.11.0+torch271", st=True, last="api_server_started", kv=56288, c=6.87, L=8192,
                w=4.3072, g=0.8, gs=None, f=None),  # enforce_eager: no graph capture
    "006": dict(v="0.11.0+torch271", st=False, last="weights_loaded", kv=None, c=None, L=4096,
                w=3.4554, g=0.85, gs=None, f="other"),
    "007": dict(v="0.9.0.1", st=True, last="api_server_started", kv=1028832, c=7.85, L=131072,
                w=2.3185, g=None, gs=None, f=None),
    # V0 prints blocks only: 31,284 x 16 = 500,544 tokens.
    "008": dict(v="0.6.4.post1", st=True, last="api_server_started", kv=500544, c=3.82, L=131072,
                w=7.5122, g=0.9, gs=9, f=None),
    "009": dict(v="0.6.4.post1", st=True, last="api_server_started", kv=70293 * 16, c=8.58, L=131072,
                w=3.771, g=0.9, gs=11, f=None),
    "011": dict(v="0.8.5.post1", st=True, last="api_server_started", kv=32832, c=1.0, L=32768,
                w=27.5916, g=0.9, gs=33, f=None),
    "012": dict(v="0.13.0", st=True, last="api_server_started", kv=56736, c=6.93, L=8192,
                w=9.3795, g=None, gs=20, f=None),
    # Offline LLM(): no API server; the engine initialised, which is its start.
    "014": dict(v="0.6.6.post1", st=True, last="graphs_captured", kv=5065 * 16, c=9.89, L=8192,
                w=21.6682, g=0.92, gs=31, f=None),
    "015": dict(v="0.11.2", st=True, last="api_server_started", kv=868080, c=847.73, L=1024,
                w=14.9596, g=None, gs=4, f=None),
    "017": dict(v="0.9.2", st=True, last="api_server_started", kv=279408, c=17.05, L=16384,
                w=6.9461, g=None, gs=34, f=None),
    "019": dict(v="0.13.0", st=True, last="api_server_started", kv=914832, c=6.98, L=131072,
                w=23.2619, g=None, gs=91, f=None),
    "020": dict(v=None, st=False, last=None, kv=None, c=None, L=None, w=None, g=None, gs=None,
                f="argument_error"),  # MANIFEST: config_error (chat template path)
    # Eight ranks print differing sizes (1,590,736-1,611,664); the engine uses the minimum
    # (MANIFEST quotes the first line, 1,594,928).
    "021": dict(v="0.10.0", st=True, last="api_server_started", kv=1590736, c=48.55, L=32768,
                w=27.6656, g=None, gs=190, f=None),
    # 0.5.5: no profiling line and no concurrency line; 10,786 blocks x 16.
    "023": dict(v="0.5.5", st=True, last="api_server_started", kv=10786 * 16, c=None, L=8192,
                w=13.5083, g=0.75, gs=15, f=None),
    "024": dict(v="0.17.0", st=True, last="api_server_started", kv=429328, c=104.82, L=4096,
                w=5.79, g=None, gs=3, f=None),
    "025": dict(v="0.16.0", st=False, last="weights_loaded", kv=None, c=None, L=131072,
                w=91.36, g=0.92, gs=None, f="incomplete"),
    "026": dict(v="0.10.0", st=False, last=None, kv=None, c=None, L=None, w=None, g=None, gs=None,
                f="gated_model"),
    "030": dict(v="0.9.1", st=True, last="api_server_started", kv=106032, c=6.47, L=16384,
                w=5.7174, g=0.75, gs=13, f=None),
    # Started; the CUDA OOM happens an hour later on wake_up.
    "031": dict(v="0.22.0", st=True, last="api_server_started", kv=275328, c=33.61, L=8192,
                w=15.27, g=0.6, gs=1, f=None),
    "032": dict(v="0.13.0", st=True, last="api_server_started", kv=129504, c=15.78, L=8196,
                w=7.8951, g=0.65, gs=10, f=None),
    "033": dict(v="0.14.0rc1.dev2+g7d9f6663a.d20260121", st=False, last="weights_loaded", kv=None,
                c=None, L=1024, w=15.4668, g=0.75, gs=None, f="cuda_oom"),  # HIP wording
    "035": dict(v="0.19.2rc1.dev206+g95995bbef", st=True, last="api_server_started", kv=179632,
                c=47.14, L=16384, w=15.16, g=0.85, gs=14, f=None),
    # Excerpt: 'Available KV cache memory: -2.14 GiB', then the traceback is cut.
    "036": dict(v=None, st=False, last="memory_profiled", kv=None, c=None, L=None, w=65.9651,
                g=None, gs=None, f="kv_cache_insufficient"),
    "037": dict(v=None, st=False, last="weights_loaded", kv=None, c=None, L=None, w=64.38,
                g=None, gs=None, f="incomplete"),
    # OOM in the dummy sampler run, i.e. during profiling, so the weights were loaded.
    "038": dict(v=None, st=False, last="weights_loaded", kv=None, c=None, L=None, w=None,
                g=None, gs=None, f="cuda_oom"),
    "039": dict(v=None, st=False, last="memory_profiled", kv=0, c=None, L=4096, w=None,
                g=None, gs=None, f="kv_cache_insufficient"),
    "040": dict(v=None, st=False, last="memory_profiled", kv=None, c=None, L=None, w=None,
                g=None, gs=None, f="kv_cache_insufficient"),
    "041": dict(v=None, st=False, last="memory_profiled", kv=1478 * 16, c=0.82, L=29000,
                w=14.9888, g=0.9, gs=None, f="kv_cache_insufficient"),
    "042": dict(v=None, st=False, last=None, kv=None, c=None, L=None, w=None, g=None, gs=None,
                f="shm_exhausted"),  # NCCL, not vLLM
    "045": dict(v="0.13.0+faa43dbf.nv26.01", st=True, last="api_server_started", kv=282624,
                c=54.44, L=8192, w=13.7193, g=0.25, gs=17, f=None),
    # 229 blocks x 16 = 3,664 < 4,096: V0 raises (the ValueError is beyond the excerpt).
    "046": dict(v=None, st=False, last="memory_profiled", kv=3664, c=None, L=4096, w=None,
                g=None, gs=None, f="kv_cache_insufficient"),
    "047": dict(v=None, st=False, last="memory_profiled", kv=None, c=None, L=131072, w=None,
                g=None, gs=None, f="kv_cache_insufficient"),
    "048": dict(v=None, st=False, last="memory_profiled", kv=None, c=None, L=100000, w=None,
                g=None, gs=None, f="kv_cache_insufficient"),
    # verl embeds two engines (no vLLM API server); gpu_memory_utilization 0.5 from the DEBUG line.
    "051": dict(v="0.12.0", st=True, last="graphs_captured", kv=285984, c=6.98, L=40960,
                w=7.5552, g=0.5, gs=1, f=None),
    "052": dict(v="0.11.0", st=False, last=None, kv=None, c=None, L=16000, w=None, g=0.92,
                gs=None, f="incomplete"),
}


def test_every_corpus_log_has_an_expectation():
    assert sorted(n[:3] for n in ALL_LOGS) == sorted(EXPECTED)
    assert len(ALL_LOGS) == 38


def test_fixtures_are_unedited_copies():
    corpus = os.path.join(CORPUS, "vllm_logs")
    if not os.path.isdir(corpus):
        pytest.skip("corpus not present")
    for name in ALL_LOGS:
        with open(os.path.join(LOGS, name), "rb") as a, open(os.path.join(corpus, name), "rb") as b:
            assert a.read() == b.read(), name


@pytest.mark.parametrize("name", ALL_LOGS)
def test_corpus_log(name):
    exp = EXPECTED[name[:3]]
    r = report(name)
    assert r["vllm_version"] == exp["v"]
    assert r["started"] is exp["st"]
    assert r["last_stage"] == exp["last"]
    assert r["kv_cache_tokens"] == exp["kv"]
    assert r["max_concurrency"] == exp["c"]
    assert r["max_model_len"] == exp["L"]
    assert r["weights_gib"] == exp["w"]
    assert r["gpu_memory_utilization"] == exp["g"]
    assert r["graph_capture_s"] == exp["gs"]
    if exp["f"] is None:
        assert r["failure"] is None
    else:
        assert r["failure"]["kind"] == exp["f"]
        assert r["failure"]["stage"] in vllm_log.STAGES
    assert r["runs"] == 1
    # Stages are reported in order and end at last_stage.
    assert r["stages"] == [s for s in vllm_log.STAGES if s in r["stages"]]
    assert (r["stages"][-1] if r["stages"] else None) == r["last_stage"]
    json.dumps(r)


def test_failure_messages_are_the_real_lines():
    assert report("006_v0.11.0_T4_qwen3vl_ansi_triton-kernel-image-invalid.log")["failure"]["message"] == \
        "RuntimeError: Triton Error [CUDA]: device kernel image is invalid"
    gated = report("026_v0.10.0_cpu-xeon_gated-repo-401_excerpt.log")["failure"]
    assert gated["message"].startswith("requests.exceptions.HTTPError: 401 Client Error: Unauthorized")
    assert gated["stage"] == "engine_start"
    oom = report("038_v0.11-era_H100_gpt-oss-120b_cuda-oom-in-sampler-warmup_excerpt.log")["failure"]
    assert oom["message"].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 786.00 MiB")
    assert oom["stage"] == "memory_profiled"
    hip = report("033_v0.14.0rc1_ROCm-16GB_fp8_hip-oom-during-compile.log")["failure"]
    assert "HIP out of memory" in hip["message"] and hip["line"] == 155
    # The exception line, not the 'raise ValueError(' source line above it.
    cache = report("040_v0.6.4.post1_docker-compose_qwen2.5-0.5b_no-available-memory-cache-blocks_excerpt.log")["failure"]
    assert cache["message"] == ("ValueError: No available memory for the cache blocks. Try increasing "
                                "`gpu_memory_utilization` when initializing the engine.")
    assert cache["line"] == 3 and cache["stage"] == "kv_cache_allocated"
    typo = report("047_v0.11-era_H100_gpt-oss-120b_models-s-typo_kv-needed_excerpt.log")["failure"]
    assert "models's max seq len (131072)" in typo["message"]
    v0 = report("041_v0.6.x_RTX3090_llama3.1-8b_max-seq-len-larger-than-kv-cache_user-stripped-prefixes.log")
    assert v0["failure"]["message"].startswith("The model's max seq len (29000) is larger than")
    shm = report("042_NOT-VLLM_pytorch-ci_T4x4_nccl-shm-no-space-left-on-device_excerpt.log")["failure"]
    assert "No space left on device (28)" in shm["message"] and shm["line"] == 1
    arg = report("020_v0.11-era_cpu-macos_chat-template-arg-error.log")["failure"]
    assert arg["message"].startswith("ValueError: The supplied chat template string (tool_use)")


def test_hard_wrapped_error_is_joined():
    failure = report("048_v0.2x_intel-arc-b70-xpu_hard-wrapped-lines_kv-needed_excerpt.log")["failure"]
    assert "(4.26 GiB KV cache is needed, which is larger than the available KV cache memory (4.25 GiB)" \
        in failure["message"]
    assert not failure["inferred"]


def test_inferred_failures_say_so():
    negative = report("036_v0.10.1-era_H100_gpt-oss-120b_fp4-marlin-fallback_negative-kv_excerpt.log")
    assert negative["failure"]["inferred"] and negative["failure"]["message"] == "Available KV cache memory: -2.14 GiB"
    assert negative["kv_cache_gib"] == -2.14
    zero = report("039_v0.3-era_RTX3090_qanything_gpu-blocks-0_no-cache-memory_excerpt.log")["failure"]
    assert zero["inferred"] and "# GPU blocks: 0" in zero["message"]
    short = report("046_v0.2-era_alpaca2-7b_offline_gpu-blocks-229_max-seq-len-error_excerpt.log")["failure"]
    assert short["inferred"] and "3664 tokens < max_model_len 4096" in short["message"]
    cut = report("003_v0.25.1_dgx-spark-gb10_laguna-nvfp4_killed-after-compile.log")["failure"]
    assert cut["kind"] == "incomplete" and "torch.compile took 30.61 s in total" in cut["message"]
    assert cut["stage"] == "memory_profiled"


def test_warnings():
    def kinds(name):
        return report(name)["warnings"]
    # The real fallback warning (no native FP4 support, Marlin instead) ...
    assert "kernel_fallback" in kinds("036_v0.10.1-era_H100_gpt-oss-120b_fp4-marlin-fallback_negative-kv_excerpt.log")
    assert "kernel_fallback" in kinds("045_v0.13.0-nv26.01_NGC-container_GB10_ok.log")
    # ... but not Marlin chosen for INT4 weights, nor 'disable_fallback=False' or FlashInfer's.
    for name in ("001_v0.25.1_dgx-spark-gb10_gemma4-int4_ok.log", "032_v0.13.0_tp2_marlin-wna16-moe_ok.log",
                 "024_v0.17.0_ok.log", "035_v0.19.2rc1_ok.log", "004_v0.25.1_dgx-spark-gb10_laguna-nvfp4_ok-then-enginedead.log"):
        assert "kernel_fallback" not in kinds(name), name
    assert "concurrency_below_1" in kinds("041_v0.6.x_RTX3090_llama3.1-8b_max-seq-len-larger-than-kv-cache_user-stripped-prefixes.log")
    assert "concurrency_below_1" not in kinds("011_v0.8.5.post1_V1_deepseek-r1-14b_ok.log")  # exactly 1.00x
    after = report("031_v0.22.0_sleep-mode_wake-up-cuda-oom-after-start.log")
    assert after["warnings"] == ["error_after_start"] and "out of memory" in after["warning_details"][0]["message"]
    assert "worker_hang_suspected" in kinds("025_v0.16.0_ROCm-8gpu_glm5-fp8_stalled-in-profiling.log")
    # The same INFO message during a start that completed is not a warning.
    assert "worker_hang_suspected" not in kinds("019_v0.13.0_nemotron-49b_singularity-job-trace_ok.log")


def test_traps_of_job_logs():
    # 019: a RAG server's 'Application startup complete.' and a shell 'Starting vLLM
    # instance...' come long before vLLM's own start.
    r = report("019_v0.13.0_nemotron-49b_singularity-job-trace_ok.log")
    assert r["api_url"] == "http://0.0.0.0:34405"
    text = open(os.path.join(LOGS, "019_v0.13.0_nemotron-49b_singularity-job-trace_ok.log"), "rb").read().decode()
    cut = text[:text.index("Loading weights took")]
    early = vllm_log.parse(cut)
    assert not early["started"] and early["last_stage"] == "engine_start"
    # 045: the wrapper's '🚀 Starting vLLM container...' is not the server line.
    text = open(os.path.join(LOGS, "045_v0.13.0-nv26.01_NGC-container_GB10_ok.log"), "rb").read().decode()
    assert not vllm_log.parse(text[:text.index("Loading weights took")])["started"]


def test_v0_server_counts_uvicorn_only_after_kv_sizing():
    r = report("008_v0.6.4.post1_V0_tp2_llama3.1-8b_ok.log")
    assert r["api_url"] == "http://0.0.0.0:8000" and r["kv_cache_gib"] == 30.55
    assert vllm_log.parse("INFO:     Application startup complete.\nINFO:     Uvicorn running on http://x:1\n")["started"] is False
    # V1 always prints 'Starting vLLM API server'; a uvicorn line after KV sizing is another server's.
    v1 = ("INFO 01-01 00:00:00 [core.py:1] Initializing a V1 LLM engine (v0.13.0) with config: x\n"
          "INFO 01-01 00:00:01 [kv_cache_utils.py:1] GPU KV cache size: 1,024 tokens\n"
          "INFO:     Application startup complete.\n")
    assert vllm_log.parse(v1)["started"] is False


def test_other_numbers():
    r = report("021_v0.10.0_8xH100_tp8-ep_qwen3-235b-fp8_ok.log")
    assert r["kv_cache_gib"] == 35.65 and r["init_engine_s"] == 682.07 and r["api_url"] == "http://0.0.0.0:8011"
    assert report("015_v0.11.2_llama3-8b_ansi_negative-graph-mem_ok.log")["graph_capture_s"] == 4
    assert report("005_v0.11.0_T4_qwen3vl-embed_ok.log")["enforce_eager"] is True
    assert report("014_v0.6.6.post1_V0_8xL40S_tp8_internvl3-78b_offline_ok.log")["mode"] == "embedded"


# ------------------------------------------------------------------ synthetic cases

def test_several_starts_report_the_last():
    failed = open(os.path.join(LOGS, "006_v0.11.0_T4_qwen3vl_ansi_triton-kernel-image-invalid.log"), "rb").read()
    ok = open(os.path.join(LOGS, "024_v0.17.0_ok.log"), "rb").read()
    r = vllm_log.parse(failed + b"\n" + ok)
    assert r["runs"] == 2 and r["started"] and r["vllm_version"] == "0.17.0" and r["failure"] is None
    r = vllm_log.parse(ok + b"\n" + failed)
    assert r["runs"] == 2 and not r["started"] and r["failure"]["kind"] == "other"
    restarts = open(os.path.join(LOGS, "026_v0.10.0_cpu-xeon_gated-repo-401_excerpt.log"), "rb").read() * 3
    assert vllm_log.parse(restarts)["runs"] == 3


@pytest.mark.parametrize("text, kind", [
    # seed 000 step 4: the real docker /dev/shm failure.
    ("INFO Starting vLLM engine...\nERROR RuntimeError: unable to open shared memory object </torch_shm_1a2b> "
     "in read-write mode: No space left on device (28)\n", "shm_exhausted"),
    ("NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size 9637888), error: "
     "No space left on device (28)\n", "shm_exhausted"),
    ("(EngineCore_DP0 pid=1) ERROR 01-01 00:00:00 [core.py:1] ValueError: Free memory on device cuda:0 "
     "(7.34/15.49 GiB) on startup is less than desired GPU memory utilization (0.8, 12.39 GiB). "
     "Decrease GPU memory utilization or reduce GPU memory used by other processes.\n",
     "free_memory_below_utilization"),
    ("huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo for url x\n", "gated_model"),
    ("OSError: You are trying to access a gated repo.\nAccess to model meta-llama/Llama-3.1-8B is restricted. "
     "You must have access to it and be authenticated to access it. Please log in.\n", "gated_model"),
    ("Traceback (most recent call last):\n  File \"x.py\", line 1\nImportError: libcudart.so.12: cannot open "
     "shared object file: No such file or directory\n", "import_error"),
    ("ModuleNotFoundError: No module named 'vllm._C'\n", "import_error"),
    ("usage: vllm serve [model_tag] [options]\nvllm serve: error: unrecognized arguments: --gpu-util 0.9\n",
     "argument_error"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n", "cuda_oom"),
    ("Traceback (most recent call last):\nKeyError: 'model.layers.0.weight'\n", "other"),
    ("INFO 01-01 00:00:00 [core.py:1] Initializing a V1 LLM engine (v0.13.0) with config: x\n", "incomplete"),
])
def test_failure_kinds(text, kind):
    r = vllm_log.parse(text)
    assert not r["started"] and r["failure"]["kind"] == kind


def test_seed_transcript():
    # seed 000 step 6, as the seed prints it (no file headers).
    text = ("INFO Loading model weights took 27.31 GB\nINFO Memory profiling results:\n"
            "total_gpu_memory=95.00GiB\nmodel_weights=27.31GiB\nnon_torch_memory=0.89GiB\n"
            "PyTorch_activation_peak=4.41GiB\ngpu_memory_utilization=0.92\n"
            "INFO GPU KV cache size: 176,128 tokens\nINFO Maximum concurrency for 32,768 tokens per request: 5.37x\n"
            "INFO Capturing CUDA graphs: 100%|##########| 35/35 [00:47<00:00]\nINFO init engine took 94.22 seconds\n"
            "INFO Starting vLLM API server on http://0.0.0.0:8000\n")
    r = vllm_log.parse(text)
    assert r["started"] and r["kv_cache_tokens"] == 176128 and r["max_concurrency"] == 5.37
    assert r["max_model_len"] == 32768 and r["weights_gib"] == 27.31 and r["gpu_memory_utilization"] == 0.92
    low = vllm_log.parse("INFO GPU KV cache size: 8,192 tokens\n"
                         "INFO Maximum concurrency for 32,768 tokens per request: 0.25x\n"
                         "ERROR ValueError: To serve at least one request with 32768 tokens,\n"
                         "more KV cache is needed than available.\n")
    assert "concurrency_below_1" in low["warnings"] and not low["started"]
    assert low["failure"]["kind"] == "kv_cache_insufficient" and low["last_stage"] == "memory_profiled"
    # seed 000 step 4, wrapped as the seed prints it.
    shm = vllm_log.parse("INFO Starting vLLM engine...\nINFO Loading safetensors checkpoint shards: 0% Completed\n"
                         "ERROR RuntimeError: unable to open shared memory object </torch_shm_1a2b>\n"
                         "in read-write mode: No space left on device (28)\n")
    assert shm["failure"]["kind"] == "shm_exhausted" and not shm["started"]
    assert shm["failure"]["message"].startswith("RuntimeError: unable to open shared memory object")


def test_seed_fallback_lines():
    text = ("INFO Detected device capability: 12.0 (sm_120)\nINFO Using MarlinLinearKernel for FP8 quantization\n"
            "WARNING Native FP8 kernels unavailable for sm_120, falling back\n")
    assert vllm_log.parse(text)["warnings"] == ["kernel_fallback"]
    assert vllm_log.parse("INFO Using MarlinLinearKernel for FP8 quantization\n")["warnings"] == []


def test_clean_line_handles_prefixes_and_escapes():
    assert vllm_log.clean_line("^[[0;36m(EngineCore_DP0 pid=70073)^[[0;0m INFO 01-27 00:31:44 [x.py:1] hi") == \
        ("INFO", "hi", "EngineCore_DP0", None)
    assert vllm_log.clean_line("\x1b[36m(vLLMHttpServer pid=1)\x1b[0m \x1b[0;36m(VllmWorker rank=3 pid=2)\x1b[0;0m "
                               "ERROR 04-21 06:58:12 [v1/engine/core.py:93] x") == ("ERROR", "x", "VllmWorker", "3")
    assert vllm_log.clean_line("vllm-1  | ERROR 11-18 18:07:28 engine.py:366] ValueError: y")[:2] == ("ERROR", "ValueError: y")
    assert vllm_log.clean_line("2024-04-27 10:13:05 | ERROR | stderr | Traceback (most recent call last):")[1] == \
        "Traceback (most recent call last):"


def test_bytes_and_crlf():
    text = open(os.path.join(LOGS, "006_v0.11.0_T4_qwen3vl_ansi_triton-kernel-image-invalid.log"), "rb").read()
    assert b"\r\n" in text
    assert vllm_log.parse(text) == vllm_log.parse(text.decode())
    assert vllm_log.parse(b"\xff\xfe garbage \x00\n")["failure"]["kind"] == "incomplete"


def test_render_text():
    text = vllm_log.render_text(report("041_v0.6.x_RTX3090_llama3.1-8b_max-seq-len-larger-than-kv-cache_user-stripped-prefixes.log"))
    assert text.startswith("vLLM startup: NOT STARTED") and "kv_cache_insufficient" in text


# ------------------------------------------------------------------ robustness

CORPUS_LINES = []
for _name in ALL_LOGS:
    with open(os.path.join(LOGS, _name), "rb") as _handle:
        CORPUS_LINES.extend(_handle.read().decode("utf-8", "replace").split("\n")[:40])


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_parser_never_crashes_on_text(text):
    r = vllm_log.parse(text)
    assert r["failure"] is None or r["failure"]["kind"] in vllm_log.FAILURE_KINDS
    json.dumps(r)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(CORPUS_LINES), max_size=60), st.binary(max_size=64))
def test_parser_never_crashes_on_shuffled_corpus_lines(lines, noise):
    r = vllm_log.parse("\n".join(lines).encode("utf-8") + noise)
    assert r["runs"] >= 1
    assert r["started"] or r["failure"] is not None
    json.dumps(r)


# ------------------------------------------------------------------ the module shell

def run_module(args):
    from ansible.module_utils.testing import patch_module_args
    import vllm_startup_report
    out = io.StringIO()
    with patch_module_args(args), redirect_stdout(out), pytest.raises(SystemExit):
        vllm_startup_report.main()
    return json.loads(out.getvalue())


def test_module_with_log_text():
    text = open(os.path.join(LOGS, "024_v0.17.0_ok.log")).read()
    result = run_module({"log": text, "_ansible_check_mode": True})
    assert result["changed"] is False and result["report"]["started"] is True
    assert result["report"]["kv_cache_tokens"] == 429328


def test_module_reads_docker_logs(tmp_path):
    # A stand-in docker CLI: prints the log on stdout and the traceback on stderr.
    fake = tmp_path / "docker"
    log = os.path.join(LOGS, "041_v0.6.x_RTX3090_llama3.1-8b_max-seq-len-larger-than-kv-cache_user-stripped-prefixes.log")
    fake.write_text("#!/bin/sh\n[ \"$1\" = logs ] || exit 9\n[ \"$2\" = --tail ] && shift 2\n"
                    "[ \"$2\" = vllm ] || { echo \"Error: No such container: $2\" >&2; exit 1; }\n"
                    "head -n 4 '%s'\ntail -n 1 '%s' >&2\n" % (log, log))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    result = run_module({"container": "vllm", "docker_bin": str(fake)})
    assert result["changed"] is False
    assert result["report"]["failure"]["kind"] == "kv_cache_insufficient"
    assert run_module({"container": "vllm", "docker_bin": str(fake), "tail": 100})["report"]["kv_cache_tokens"] == 23648
    missing = run_module({"container": "nope", "docker_bin": str(fake)})
    assert missing["failed"] and missing["msg"].startswith("vllm startup report: ")
    assert "No such container" in missing["msg"]


def test_module_needs_log_or_container():
    assert run_module({})["failed"]
