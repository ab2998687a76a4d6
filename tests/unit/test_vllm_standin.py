"""The vLLM stand-in of the `vllm` scenario: its startup log, read by the product's own parser
(module_utils/serving/vllm_log.py), must say what vLLM would say - the stages, the failure kinds and
stages, and KV figures equal to the memory plan's (module_utils/serving/vllm_plan.py) for the same
arguments; its line shapes must be the current vLLM's (corpus 001, v0.25.1); and its API must
answer the role's check module (roles/vllm/library/vllm_api_check.py)."""
import io
import json
import os
import re
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import FIXTURES, ROOT

sys.path.insert(0, os.path.join(ROOT, "molecule", "vllm_standin"))
sys.path.insert(0, os.path.join(ROOT, "roles", "vllm", "library"))

import make_model  # noqa: E402
from serving import safetensors_header as sth  # noqa: E402
import server  # noqa: E402
import vllm_api_check  # noqa: E402
from serving import vllm_log  # noqa: E402
from serving import vllm_plan as vp  # noqa: E402

H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "total_mib": 81559, "reserved_mib": 479, "used_mib": 0,
        "free_mib": 81559 - 479, "compute_cap": "9.0"}
L4 = {"index": 0, "name": "NVIDIA L4", "total_mib": 23034, "reserved_mib": 434, "used_mib": 0,
      "free_mib": 23034 - 434, "compute_cap": "8.9"}
DOCKER_DEFAULT_SHM = 64 * 1000 * 1000  # docker's default --shm-size (64m)


class FakeHost(server.Host):
    def __init__(self, gpus=(H100,), shm=16 * 1024 ** 3, cache=None):
        server.Host.__init__(self, env={})
        self._gpus = [dict(g, index=i) for i, g in enumerate(gpus)]
        self._shm = shm
        self._cache = cache

    def gpus(self):
        return self._gpus or None

    def shm_free_bytes(self):
        return self._shm

    def ram_gib(self):
        return 120.0

    def cache_root(self):
        return self._cache


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    for key in make_model.MODELS:
        make_model.write_model(str(root), key)
    return str(root)


def run(argv, host=None, env=None, tmp_cache=None):
    """(exit status, log text, report) of one start; no socket, no sleeping."""
    out = io.StringIO()
    host = host or FakeHost()
    if host._cache is None:
        host._cache = tmp_cache or "/nonexistent/vllm-cache"
    try:
        server.start(argv, env=env or {}, host=host, out=out, err=out, sleep=lambda s: None, bind=False)
        code = 0
    except server.StartFailure as failure:
        code = failure.code
    text = out.getvalue()
    return code, text, vllm_log.parse(text)


def fp8_args(models, *extra):
    return [os.path.join(models, "Qwen3-32B-FP8"), "--served-model-name", "qwen3-32b", "--max-model-len", "32768",
            "--gpu-memory-utilization", "0.92", "--host", "127.0.0.1", "--port", "18000"] + list(extra)


def plan_for(models, name, gpu=H100, **kw):
    """The product's plan for what the stand-in runs (vLLM 0.25.1 on that GPU)."""
    inputs = dict(gpu_memory_mib=gpu["total_mib"], gpu_reserved_mib=gpu["reserved_mib"], gpu_name=gpu["name"],
                  vllm_version=server.VLLM_VERSION, model_dir=os.path.join(models, name))
    inputs.update(kw)
    return vp.plan(**inputs)


# ------------------------------------------------------------------ synthetic models

def test_model_files_are_headers_only_with_the_real_sizes(models):
    path = os.path.join(models, "Qwen3-32B", "model.safetensors")
    assert os.path.getsize(path) < 1024 * 1024
    found = sth.checkpoint_weight_bytes(os.path.dirname(path))
    params = found["bytes"] / 2
    assert 32.7e9 < params < 32.9e9  # Qwen3-32B: 32.8B parameters in BF16
    assert found["by_dtype"] == {"BF16": found["bytes"]}
    fp8 = sth.checkpoint_weight_bytes(os.path.join(models, "Qwen3-32B-FP8"))
    assert set(fp8["by_dtype"]) == {"F8_E4M3", "F32", "BF16"}
    assert 0.5 < fp8["bytes"] / float(found["bytes"]) < 0.54  # linear layers at one byte, embeddings kept
    header = sth.read_header(path)
    ends = sorted(e["data_offsets"] for k, e in header.items() if k != "__metadata__")
    assert ends[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ends, ends[1:]))


# ------------------------------------------------------------------ a good start

def test_fp8_start_reports_the_plans_figures(models):
    code, text, report = run(fp8_args(models))
    plan = plan_for(models, "Qwen3-32B-FP8", gpu_memory_utilization=0.92, max_model_len=32768)
    assert code == 0
    assert report["started"] and report["failure"] is None and report["warnings"] == []
    assert report["stages"] == list(vllm_log.STAGES)
    assert report["kv_cache_tokens"] == plan["kv_cache_tokens"]
    assert report["max_concurrency"] == plan["max_concurrency"]
    # vLLM 0.25.1 counts the logged tokens as int(concurrency x max_model_len) (kv_cache_utils.py).
    assert abs(report["kv_cache_tokens"] - report["max_concurrency"] * 32768) < 0.005 * 32768
    # The 0.25.1 lines: the CUDA-graph estimate is subtracted, and the report reads it back.
    assert report["profile"]["cuda_graph_profiling"]
    assert report["profile"]["cuda_graph_estimate_gib"] == pytest.approx(plan["cuda_graph_gib"], abs=0.005)
    assert "CUDA graph memory profiling is enabled (default since v0.21.0)" in text
    assert report["weights_gib"] == pytest.approx(plan["weights_gib"], abs=0.005)
    assert report["kv_cache_gib"] == pytest.approx(plan["kv_cache_gib"], abs=0.005)
    assert report["max_model_len"] == 32768 and report["gpu_memory_utilization"] == 0.92
    assert report["vllm_version"] == server.VLLM_VERSION and report["mode"] == "server"
    assert report["api_url"] == "http://127.0.0.1:18000"
    assert report["runs"] == 1


def test_measured_figures_move_the_log_off_the_plan(models):
    """What profiling 'measures' is the stand-in's environment: corpus 051's measured 0.06 GiB of
    non-torch memory (a vLLM of 0.11+) keeps the FP8 run within 1 %; a large figure does not."""
    plan = plan_for(models, "Qwen3-32B-FP8", gpu_memory_utilization=0.92, max_model_len=32768)
    _, _, near = run(fp8_args(models), env={"GPUHOST_STANDIN_NON_TORCH_GIB": "0.06"})
    assert near["kv_cache_tokens"] != plan["kv_cache_tokens"]
    assert abs(near["kv_cache_tokens"] - plan["kv_cache_tokens"]) / float(plan["kv_cache_tokens"]) < 0.01
    _, _, far = run(fp8_args(models), env={"GPUHOST_STANDIN_ACTIVATION_GIB": "8"})
    assert (plan["kv_cache_tokens"] - far["kv_cache_tokens"]) / float(plan["kv_cache_tokens"]) > 0.1
    assert far["max_concurrency"] < plan["max_concurrency"]


def test_line_shapes_are_the_current_vllms(models):
    """Each stage line the report reads has the shape of v0.25.1's (corpus 001), prefix included."""
    _, text, _ = run(fp8_args(models))
    with open(os.path.join(FIXTURES, "vllm_logs", "001_v0.25.1_dgx-spark-gb10_gemma4-int4_ok.log"),
              encoding="utf-8", newline="") as handle:
        corpus = handle.read().replace("\r\n", "\n")  # keep tqdm's bare \r, drop a pasted CRLF
    prefix = r"^\((?:APIServer|EngineCore) pid=\d+\) (?:INFO|WARNING) \d\d-\d\d \d\d:\d\d:\d\d \[[\w.]+:\d+\] "
    shapes = [
        r".*\u2588 \u2580\u2584\u2580 \u2588  version \d+\.\d+\.\d+$",
        r"non-default args: \{'model_tag': '[^']+', 'host': '[^']+', ",
        r"Initializing a V1 LLM engine \(v[\d.]+\) with config: model='[^']+', ",
        r"Model loading took \d+\.\d\d GiB memory and \d+\.\d{6} seconds$",
        r"Available KV cache memory: \d+\.\d\d GiB$",
        r"GPU KV cache size: [\d,]+ tokens$",
        r"Maximum concurrency for [\d,]+ tokens per request: \d+\.\d\dx$",
        r"Graph capturing finished in \d+ secs, took \d+\.\d\d GiB$",
        r"init engine \(profile, create kv cache, warmup model\) took \d+\.\d\d s \(compilation: \d+\.\d\d s\)$",
        r"Starting vLLM server on http://[\d.]+:\d+$",
    ]
    for shape in shapes:
        pattern = re.compile(prefix + shape, re.M)
        assert pattern.search(corpus), shape
        assert pattern.search(text), shape
    bar = re.compile(r"^\(EngineCore pid=\d+\) \r?Capturing CUDA graphs \(decode, FULL\): .*100%\|", re.M)
    assert bar.search(corpus) and bar.search(text)
    assert re.search(r'^\(APIServer pid=\d+\) INFO:     Application startup complete\.$', text, re.M)


def test_compile_cache_makes_the_restart_shorter(models, tmp_path):
    host = FakeHost(cache=str(tmp_path))
    _, first, _ = run(fp8_args(models), host=host)
    _, second, report = run(fp8_args(models), host=host)
    # An H100 (>= 70 GiB, not an A100): 0.25.1 steps 8,192 tokens (arg_utils.get_batch_defaults).
    assert "Compiling a graph for compile range (1, 8192)" in first
    assert "Directly load the compiled graph(s) for compile range (1, 8192) from the cache" in second
    assert os.path.isdir(os.path.join(str(tmp_path), "torch_compile_cache")) and report["started"]


def test_awq_instances_share_an_l4_at_023(models):
    argv = [os.path.join(models, "Qwen2.5-3B-Instruct-AWQ"), "--max-model-len", "4096",
            "--gpu-memory-utilization", "0.23", "--max-num-seqs", "16", "--port", "18001"]
    code, text, report = run(argv, host=FakeHost(gpus=[L4]))
    plan = plan_for(models, "Qwen2.5-3B-Instruct-AWQ", gpu=L4, gpu_memory_utilization=0.23, max_model_len=4096,
                    max_num_seqs=16, instances=[{"name": "q%d" % i, "gpu_memory_utilization": 0.23} for i in range(4)])
    assert code == 0 and plan["verdict"] == "ok"
    assert "quantization=awq_marlin" in text  # the engine must report the AWQ kernel (domain.md §5)
    assert report["kv_cache_tokens"] == plan["kv_cache_tokens"]
    assert report["max_concurrency"] == plan["max_concurrency"]


def test_fp8_kv_cache_and_tensor_parallel_follow_the_plan(models):
    _, _, fp8kv = run(fp8_args(models, "--kv-cache-dtype", "fp8"))
    plan = plan_for(models, "Qwen3-32B-FP8", gpu_memory_utilization=0.92, max_model_len=32768, kv_cache_dtype="fp8")
    assert fp8kv["kv_cache_tokens"] == plan["kv_cache_tokens"]
    _, _, tp2 = run(fp8_args(models, "--tensor-parallel-size", "2"), host=FakeHost(gpus=[H100, H100]))
    plan2 = plan_for(models, "Qwen3-32B-FP8", gpu_memory_utilization=0.92, max_model_len=32768,
                     tensor_parallel_size=2)
    assert tp2["started"] and tp2["kv_cache_tokens"] == plan2["kv_cache_tokens"]


def test_on_the_fly_fp8_holds_half_the_linear_weights(models):
    """`--quantization fp8` on a BF16 checkpoint: vLLM keeps the linear layers at one byte. The plan
    reads the 16-bit headers and does not halve them, so the log shows more KV than planned."""
    argv = [os.path.join(models, "Qwen3-32B"), "--max-model-len", "32768", "--quantization", "fp8"]
    _, _, report = run(argv)
    plan = plan_for(models, "Qwen3-32B", max_model_len=32768, quantization="fp8")
    assert 31.0 < report["weights_gib"] < 32.5
    assert plan["weights_gib"] > 60
    assert report["kv_cache_tokens"] > plan["kv_cache_tokens"]


# ------------------------------------------------------------------ failed starts

def test_docker_default_shm_fails_at_weight_loading(models):
    """The seed's first attempt (no --ipc/--shm-size): docker's 64 MB /dev/shm."""
    code, text, report = run(fp8_args(models), host=FakeHost(shm=DOCKER_DEFAULT_SHM))
    assert code == 1 and not report["started"]
    failure = report["failure"]
    assert failure["kind"] == "shm_exhausted" and failure["stage"] == "weights_loaded"
    assert re.search(r"unable to open shared memory object </torch_\d+_\d+_0> in read-write mode: "
                     r"No space left on device \(28\)$", failure["message"])
    assert "Loading safetensors checkpoint shards:   0% Completed" in text
    assert "GPU KV cache size" not in text
    assert "Engine core initialization failed" in text


def test_tensor_parallel_needs_more_than_docker_default_shm(models):
    # The 3B AWQ model's largest tensor (the embedding, 622 MB / 2) fits a 1 GiB /dev/shm at TP 1 and 2...
    small = [os.path.join(models, "Qwen2.5-3B-Instruct-AWQ"), "--max-model-len", "4096"]
    assert run(small, host=FakeHost(gpus=[L4, L4], shm=1024 ** 3))[2]["started"]
    assert run(small + ["-tp", "2"], host=FakeHost(gpus=[L4, L4], shm=1024 ** 3))[2]["started"]
    # ... but TP 2 never fits 64 MB: the workers' broadcast ring alone is 160 MiB.
    _, _, report = run(small + ["-tp", "2"], host=FakeHost(gpus=[L4, L4], shm=server.TP_SHM_RING_BYTES))
    assert report["failure"]["kind"] == "shm_exhausted"


def test_bf16_at_32k_fails_as_check_enough_kv_cache_memory(models):
    # The seed's second attempt, at its 0.90 (0.25.1's default of 0.92 just fits 1.1x).
    argv = [os.path.join(models, "Qwen3-32B"), "--max-model-len", "32768", "--gpu-memory-utilization", "0.9"]
    code, text, report = run(argv)
    plan = plan_for(models, "Qwen3-32B", max_model_len=32768, gpu_memory_utilization=0.9)
    assert plan["verdict"] == "refuse" and plan["max_concurrency"] < 1
    assert code == 1 and report["failure"]["kind"] == "kv_cache_insufficient"
    assert report["failure"]["stage"] == "kv_cache_allocated"
    message = report["failure"]["message"]
    assert message.startswith("ValueError: To serve at least one request with the model's max seq len (32768), "
                              "(8.00 GiB KV cache is needed, which is larger than the available KV cache memory "
                              "(%.2f GiB)." % plan["kv_cache_gib"])
    # Full attention: the longest request that fits is the pool itself.
    assert "the estimated maximum model length is %d." % plan["kv_cache_tokens"] in message
    assert "GPU KV cache size" not in text


def test_no_room_at_all_is_no_available_memory(models):
    argv = [os.path.join(models, "Qwen3-32B"), "--gpu-memory-utilization", "0.7"]
    _, text, report = run(argv)
    assert "Available KV cache memory: -" in text
    assert report["failure"]["kind"] == "kv_cache_insufficient"
    assert "No available memory for the cache blocks" in report["failure"]["message"]


def test_memory_held_by_others_fails_at_start(models):
    busy = dict(H100, used_mib=40000, free_mib=81559 - 479 - 40000)
    _, _, report = run(fp8_args(models), host=FakeHost(gpus=[busy]))
    assert report["failure"]["kind"] == "free_memory_below_utilization"
    # CUDA's figures: 81,559 - 479 reserved = 79.18 GiB total, 40.12 GiB of it free; 0.92 x 79.18.
    assert "Free memory on device cuda:0 (40.12/79.18 GiB) on startup is less than desired GPU memory " \
           "utilization (0.92, 72.85 GiB)" in report["failure"]["message"]


def test_no_gpu_in_the_container(models):
    code, text, report = run(fp8_args(models), host=FakeHost(gpus=[]))
    assert code == 1 and not report["started"]
    assert "Failed to infer device type" in report["failure"]["message"]


@pytest.mark.parametrize("argv, needle", [
    (["--frobnicate"], "vllm serve: error: unrecognized arguments: --frobnicate"),
    (["--max-model-len", "65536"], "User-specified max_model_len (65536) is greater than the derived"),
])
def test_argument_errors(models, argv, needle):
    code, text, report = run(fp8_args(models)[:1] + argv)
    assert needle in text
    assert report["failure"]["kind"] == "argument_error" and not report["started"]


def test_model_option_is_accepted_with_vllms_deprecation_warning(models):
    _, text, report = run(["--model"] + fp8_args(models))
    assert report["started"] and "instead of via the `--model` option" in text


def test_secrets_in_the_environment_never_reach_the_log(models):
    env = {"HF_TOKEN": "hf_PLANTED_unit", "VLLM_API_KEY": "sk-PLANTED-unit"}
    _, text, report = run(fp8_args(models), env=env)
    assert report["started"] and "PLANTED" not in text
    # vLLM prints a key given on the command line among its non-default args: the role must not.
    _, text, _ = run(fp8_args(models, "--api-key", "sk-PLANTED-cli"))
    assert "'api_key': 'sk-PLANTED-cli'" in text


# ------------------------------------------------------------------ the API

@pytest.fixture
def live(models):
    """A served stand-in on 127.0.0.1 (an ephemeral port); yields (base URL, engine)."""
    out = io.StringIO()
    env = {"VLLM_API_KEY": "sk-PLANTED-live", "GPUHOST_STANDIN_FIRST_REQUEST_S": "0.2"}
    engine, sock = server.start(fp8_args(models)[:-2] + ["--port", "0"], env=env, host=FakeHost(cache="/nonexistent"),
                                out=out, err=out, sleep=lambda s: None)
    engine.sleep = lambda s: None
    thread = threading.Thread(target=server.serve, args=(engine, sock), daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % engine.port, engine, out
    server_stop = getattr(engine, "stop", None)
    if server_stop:
        server_stop()


def _get(url, key=None):
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + key} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_health_models_and_auth(live):
    base, engine, out = live
    assert _get(base + "/health") == (200, b"")
    assert _get(base + "/v1/models")[0] == 401
    status, body = _get(base + "/v1/models", "sk-PLANTED-live")
    assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == ["qwen3-32b"]
    assert '"GET /health HTTP/1.1" 200 OK' in out.getvalue()
    assert "sk-PLANTED-live" not in out.getvalue()


def _opener(url, data=None, headers=None, method=None, timeout=None, **_):
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    return urllib.request.urlopen(request, timeout=timeout)


def test_api_check_module_warms_up_then_times_one_request(live):
    base, engine, _ = live
    ticks = iter(range(1000))
    params = dict(url=base, served_model_name="qwen3-32b", api_key="sk-PLANTED-live", warmup_requests=3,
                  warmup_max_tokens=4, max_tokens=32, prompt="hello", timeout=10)
    result = vllm_api_check.check(params, opener=_opener, clock=lambda: next(ticks))
    assert result["models"] == ["qwen3-32b"]
    assert result["warmup"] == {"count": 3, "latencies_s": [1, 1, 1]}
    assert result["timed"]["latency_s"] == 1 and result["timed"]["completion_tokens"] == 32
    assert engine.requests == 4  # 3 warm-up + the timed one
    assert "PLANTED" not in json.dumps(result)


@pytest.mark.parametrize("change, needle", [
    ({"served_model_name": "other"}, "not the served name 'other'"),
    ({"api_key": "wrong"}, "HTTP 401"),
])
def test_api_check_module_names_what_is_wrong(live, change, needle):
    base, _, _ = live
    params = dict(url=base, served_model_name="qwen3-32b", api_key="sk-PLANTED-live", warmup_requests=0,
                  warmup_max_tokens=4, max_tokens=4, prompt="hello", timeout=10)
    params.update(change)
    with pytest.raises(vllm_api_check.CheckError) as err:
        vllm_api_check.check(params, opener=_opener)
    assert needle in str(err.value) and "PLANTED" not in str(err.value)


def test_chat_rejects_an_unknown_model_and_an_overlong_request(models):
    engine = server.Engine(served=["m"], max_model_len=100, requests=0, lock=threading.Lock(), env={},
                           sleep=lambda s: None, model="/models/m")
    assert server.chat_reply(engine, {"model": "x", "messages": [{"role": "user", "content": "hi"}]})[0] == 404
    status, body = server.chat_reply(engine, {"model": "m", "max_tokens": 200,
                                              "messages": [{"role": "user", "content": "hi"}]})
    assert status == 400 and "maximum context length is 100 tokens" in body["error"]["message"]


class SmiHost(server.Host):
    """The stand-in's Host reading real nvidia-smi captures instead of running nvidia-smi."""

    def __init__(self, outputs):
        server.Host.__init__(self, env={})
        self.outputs = outputs

    def _smi(self, args):
        return self.outputs.get(args[0].split("=")[0])


def _corpus(name):
    with open(os.path.join(FIXTURES, "nvidia_smi", name), encoding="utf-8") as handle:
        return handle.read()


def test_mig_enabled_gpu_is_seen_as_its_mig_devices():
    """CUDA on a MIG-enabled H100 enumerates its MIG devices with their own memory (captures 004/028/003 of one
    host: --query-gpu says MIG Enabled, -L names the profiles, -q gives each device's FB memory)."""
    host = SmiHost({"--query-gpu": _corpus("004_query-gpu_590.48.01_H100-MIG_many-fields.csv"),
                    "-L": _corpus("028_L_590.48.01_H100-MIG.txt"),
                    "-q": _corpus("003_q_590.48.01_H100-MIG_load.txt")})
    devices = host.gpus()
    assert [(d["name"], d["total_mib"], d["used_mib"], d["reserved_mib"]) for d in devices] == [
        ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", 40448, 11091, 0),
        ("NVIDIA H100 80GB HBM3 MIG 2g.20gb", 20096, 17, 0),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 9984, 9, 0),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 9984, 9, 0)]
    assert devices[0]["free_mib"] == 40448 - 11091 and devices[0]["compute_cap"] == "9.0"
    assert [d["index"] for d in devices] == [0, 1, 2, 3]


def test_mig_enabled_gpu_given_whole_is_no_cuda_device():
    """The same MIG-enabled H100 with no MIG device listed under it (-L of capture 027): vLLM finds no device."""
    host = SmiHost({"--query-gpu": _corpus("004_query-gpu_590.48.01_H100-MIG_many-fields.csv"),
                    "-L": _corpus("027_L_590.48.01_H100.txt"),
                    "-q": _corpus("003_q_590.48.01_H100-MIG_load.txt")})
    assert host.gpus() is None


# ------------------------------------------------------------------ streaming, /metrics, load, vllm bench serve
#
# What vLLM's OpenAI server streams (entrypoints/openai/completion/serving.py, chat_completion/serving.py), its
# /metrics names (docs/research/serving-acceptance.md 3) and `vllm bench serve`'s printed block and JSON keys (1a,
# 1b; tests/fixtures/vllm_bench/).

sys.path.insert(0, os.path.join(ROOT, "molecule", "simulator"))

import bench  # noqa: E402
from gpusim import ctl as sim_ctl, smi as sim_smi, state as sim_state  # noqa: E402

KEY = "sk-PLANTED-live"


def _post(url, body, key=KEY):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode()


def _events(text):
    """The SSE events' data, as vLLM's bench client splits them."""
    assert text.endswith("\n\n")
    return [m[len("data: "):] for m in text.split("\n\n") if m]


def test_streamed_completion_is_vllms_sse(live):
    base, engine, out = live
    status, headers, text = _post(base + "/v1/completions", {
        "model": "qwen3-32b", "prompt": "abc " * 40, "max_tokens": 5, "stream": True,
        "stream_options": {"include_usage": True}})
    assert status == 200 and headers["content-type"] == "text/event-stream; charset=utf-8"
    events = _events(text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    tokens, usage = chunks[:-1], chunks[-1]
    assert len(tokens) == 5
    for chunk in tokens:   # dumped with exclude_unset=False: every field, usage null
        assert list(chunk) == ["id", "object", "created", "model", "choices", "usage"]
        assert chunk["object"] == "text_completion" and chunk["usage"] is None and chunk["id"].startswith("cmpl-")
        assert list(chunk["choices"][0]) == ["index", "text", "logprobs", "finish_reason", "stop_reason",
                                             "prompt_token_ids", "token_ids"]
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None] * 4 + ["length"]
    assert len({c["id"] for c in chunks}) == 1
    # the usage chunk: exclude_none, no choices
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 40, "total_tokens": 45,
                                                         "completion_tokens": 5}
    assert '"POST /v1/completions HTTP/1.1" 200 OK' in out.getvalue()
    # compact JSON, as pydantic writes it
    assert events[0].startswith('{"id":"cmpl-')


def test_streamed_chat_sends_the_role_chunk_first(live):
    base, _, _ = live
    _, _, text = _post(base + "/v1/chat/completions", {
        "model": "qwen3-32b", "max_completion_tokens": 3, "stream": True,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "abc " * 10}]}]})
    events = _events(text)
    chunks = [json.loads(e) for e in events[:-1]]
    assert events[-1] == "[DONE]" and len(chunks) == 4      # role + 3 tokens, no usage unless asked
    assert chunks[0]["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                     "finish_reason": None}]
    assert all(c["object"] == "chat.completion.chunk" and "usage" not in c for c in chunks)
    assert chunks[1]["choices"][0] == {"index": 0, "delta": {"content": "This"}, "logprobs": None,
                                       "finish_reason": None}
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {"content": " comes"}, "logprobs": None,
                                        "finish_reason": "length", "stop_reason": None}


def test_time_per_prompt_and_output_token(models):
    engine = server.Engine(served=["m"], max_model_len=4096, requests=0, lock=threading.Lock(), model="/models/m",
                           env={"GPUHOST_STANDIN_PREFILL_TOKEN_S": "0.001", "GPUHOST_STANDIN_TOKEN_S": "0.02",
                                "GPUHOST_STANDIN_FIRST_REQUEST_S": "0.5"}, sleep=None)
    slept = []
    engine.sleep = slept.append
    sent = []
    server.stream_events(engine, {"prompt": "abcd" * 100, "max_tokens": 4, "stream": True}, False, sent.append)
    # the first request's JIT cost and the prefill of 100 prompt tokens before the first token, then one step a token
    assert slept == [pytest.approx(0.5 + 0.1), 0.02, 0.02, 0.02] and len(sent) == 5
    slept[:] = []
    server.stream_events(engine, {"prompt": "abcd" * 100, "max_tokens": 2, "stream": True}, False, sent.append)
    assert slept == [pytest.approx(0.5 / 4 + 0.1), 0.02]


def _scrape(base):
    """/metrics parsed back: {(name, frozenset(labels)): value}, {name: (type, help)}."""
    status, body = _get(base + "/metrics")
    assert status == 200
    samples, families = {}, {}
    for line in body.decode().splitlines():
        if line.startswith("# HELP "):
            name, text = line[len("# HELP "):].split(" ", 1)
            families.setdefault(name, {})["help"] = text
        elif line.startswith("# TYPE "):
            name, kind = line[len("# TYPE "):].split(" ")
            families.setdefault(name, {})["type"] = kind
        else:
            m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\} (\S+)$', line)
            assert m, line
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            assert m.group(2) == ",".join('%s="%s"' % kv for kv in sorted(labels))   # prometheus_client sorts them
            samples[(m.group(1), labels)] = float(m.group(3))
    return samples, families


# docs/research/serving-acceptance.md section 3 (loggers.py @ 005a810b and the later loggers.py / metrics.md)
REAL_NAMES = {
    "vllm:num_requests_running": ("gauge", "Number of requests in model execution batches."),
    "vllm:num_requests_waiting": ("gauge", "Number of requests waiting to be processed."),
    "vllm:kv_cache_usage_perc": ("gauge", "KV-cache usage. 1 means 100 percent usage."),
    "vllm:prompt_tokens_total": ("counter", "Number of prefill tokens processed."),
    "vllm:generation_tokens_total": ("counter", "Number of generation tokens processed."),
    "vllm:request_success_total": ("counter", "Count of successfully processed requests."),
    "vllm:time_to_first_token_seconds": ("histogram", "Histogram of time to first token in seconds."),
    "vllm:inter_token_latency_seconds": ("histogram", "Histogram of inter-token latency in seconds."),
    "vllm:e2e_request_latency_seconds": ("histogram", "Histogram of e2e request latency in seconds."),
    "vllm:request_queue_time_seconds": ("histogram", "Histogram of time spent in WAITING phase for request."),
    "vllm:request_inference_time_seconds": ("histogram", "Histogram of time spent in RUNNING phase for request."),
    "vllm:request_prefill_time_seconds": ("histogram", "Histogram of time spent in PREFILL phase for request."),
    "vllm:request_decode_time_seconds": ("histogram", "Histogram of time spent in DECODE phase for request."),
}
ALSO_REAL = {"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total",
             "vllm:request_prompt_tokens", "vllm:request_generation_tokens", "vllm:request_params_max_tokens"}


def test_metrics_count_what_was_served(live):
    base, _, _ = live
    for n in (3, 7):
        _post(base + "/v1/completions", {"prompt": "abcd" * 20, "max_tokens": n, "stream": True})
    _post(base + "/v1/chat/completions", {"messages": [{"role": "user", "content": "abcd" * 8}], "max_tokens": 2})
    samples, families = _scrape(base)
    for name, (kind, text) in REAL_NAMES.items():
        assert families[name] == {"type": kind, "help": text}, name
    assert set(families) == set(REAL_NAMES) | ALSO_REAL     # only names vLLM has
    label = frozenset([("engine", "0"), ("model_name", "qwen3-32b")])
    value = lambda name, **extra: samples[(name, label | frozenset(extra.items()))]  # noqa: E731
    assert value("vllm:prompt_tokens_total") == 20 + 20 + (8 + 4)
    assert value("vllm:generation_tokens_total") == 3 + 7 + 2
    assert value("vllm:request_success_total", finished_reason="length") == 3
    assert value("vllm:request_success_total", finished_reason="abort") == 0
    assert value("vllm:num_requests_running") == value("vllm:num_requests_waiting") == 0
    assert value("vllm:kv_cache_usage_perc") == 0
    assert value("vllm:time_to_first_token_seconds_count") == 3
    assert value("vllm:inter_token_latency_seconds_count") == 2 + 6 + 1
    buckets = sorted((float(dict(k[1])["le"]), v) for k, v in samples.items()
                     if k[0] == "vllm:e2e_request_latency_seconds_bucket")
    assert [b for b, _ in buckets][:3] == [0.3, 0.5, 0.8] and buckets[-1] == (float("inf"), 3)
    assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:]))      # cumulative
    assert ("vllm:time_to_first_token_seconds_bucket", label | {("le", "2560.0")}) in samples


def test_requests_beyond_max_num_seqs_wait_and_running_ones_fill_the_kv_cache(live):
    base, engine, _ = live
    engine.slots = threading.BoundedSemaphore(1)
    go, first_token = threading.Event(), threading.Event()
    # the first request holds its batch slot in its prefill until `go`
    engine.sleep = lambda s: (first_token.set(), go.wait(10))
    held = threading.Thread(target=_post, args=(base + "/v1/completions", {"prompt": "abcd" * 100, "max_tokens": 2}))
    held.start()
    assert first_token.wait(10)
    other = threading.Thread(target=_post, args=(base + "/v1/completions", {"prompt": "abcd", "max_tokens": 1}))
    other.start()
    deadline = time.time() + 10
    while time.time() < deadline:
        samples, _ = _scrape(base)
        label = frozenset([("engine", "0"), ("model_name", "qwen3-32b")])
        if samples[("vllm:num_requests_waiting", label)] == 1:
            break
        time.sleep(0.01)
    assert samples[("vllm:num_requests_running", label)] == 1
    assert samples[("vllm:num_requests_waiting", label)] == 1
    assert 0 < samples[("vllm:kv_cache_usage_perc", label)] < 1
    go.set()
    held.join(10)
    other.join(10)
    samples, _ = _scrape(base)
    assert samples[("vllm:num_requests_running", label)] == samples[("vllm:num_requests_waiting", label)] == 0


def test_serving_shows_as_load_in_the_simulated_dmon(models, tmp_path):
    """The stand-in records its work where the simulated nvidia-smi reads it (gpusim/load.py): dmon shows the GPU
    busy while a request runs, with the memory the engine holds, and idle again after."""
    state_path = tmp_path / "state.json"
    state = sim_ctl.init_state(["h100", "h100"], driver="580.95.05")
    sim_state.save(state, str(state_path))
    load_dir = tmp_path / "load"
    load_dir.mkdir()
    gpus = [dict(H100, index=i, uuid=g["uuid"]) for i, g in enumerate(state["gpus"])]
    env = {"VLLM_API_KEY": KEY, "GPUSIM_LOAD_DIR": str(load_dir), "GPUHOST_STANDIN_HOLD_MEMORY": "1"}
    out = io.StringIO()
    engine, sock = server.start(fp8_args(models)[:-2] + ["--port", "0"], env=env,
                                host=FakeHost(gpus=gpus, cache="/nonexistent"), out=out, err=out,
                                sleep=lambda s: None)
    go, busy = threading.Event(), threading.Event()
    engine.sleep = lambda s: (busy.set(), go.wait(10))
    thread = threading.Thread(target=server.serve, args=(engine, sock), daemon=True)
    thread.start()

    def dmon():
        os.environ["GPUSIM_LOAD_DIR"] = str(load_dir)
        try:
            text, _ = sim_smi.run(["dmon", "-s", "pum", "-c", "1"], state_path=str(state_path), now=time.time())
        finally:
            del os.environ["GPUSIM_LOAD_DIR"]
        names = text.splitlines()[0].lstrip("#").split()
        return [dict(zip(names, line.split())) for line in text.splitlines()[2:]]
    try:
        deadline = time.time() + 10   # serve() writes the first record (the memory it holds) as it starts
        while not os.listdir(str(load_dir)) and time.time() < deadline:
            time.sleep(0.01)
        budget = int(0.92 * (81559 - 479))
        idle = dmon()
        assert [(r["sm"], r["fb"]) for r in idle] == [("0", str(budget))] + [("0", "0")]   # held, not busy
        request = threading.Thread(target=_post, args=("http://127.0.0.1:%d/v1/completions" % engine.port,
                                                       {"prompt": "abcd" * 10, "max_tokens": 3, "stream": True}))
        request.start()
        assert busy.wait(10)
        gpu0, gpu1 = dmon()
        assert gpu0["sm"] == "100" and int(gpu0["mem"]) >= 35 and int(gpu0["pwr"]) > 69 + 200
        assert gpu1["sm"] == "0"                       # TP 1: the other GPU is not the engine's
        go.set()
        request.join(10)
        assert dmon()[0]["sm"] == "0"
    finally:
        go.set()
        engine.recorder.stop()
        getattr(engine, "stop", lambda: None)()
    assert os.listdir(str(load_dir)) == []           # SIGTERM's stop removes the record


# ------------------------------------------------------------------ vllm bench serve

def _bench(capsys, *argv):
    code = server.main(["bench", "serve"] + list(argv))
    return code, capsys.readouterr().out


def _block(text):
    lines = text.splitlines()
    start = lines.index("============ Serving Benchmark Result ============")
    return lines[start:lines.index("=" * 50, start + 1) + 1]


def test_bench_prints_the_real_block_row_for_row(live, capsys, tmp_path):
    """The same options as the real GB10 run of tests/fixtures/vllm_bench (chat backend, a finite rate, E2EL and
    four percentiles): the same rows in the same order, each padded as `"{:<40} {:<10}"` pads it."""
    base, engine, _ = live
    code, text = _bench(capsys, "--backend", "openai-chat", "--base-url", base, "--endpoint", "/v1/chat/completions",
                        "--model", "qwen3-32b", "--percentile-metrics", "ttft,tpot,itl,e2el",
                        "--metric-percentiles", "50,90,95,99", "--seed", "42", "--dataset-name", "random",
                        "--random-input-len", "32", "--random-output-len", "8", "--num-prompts", "6",
                        "--request-rate", "200", "--header", "Authorization=Bearer " + KEY)
    with open(os.path.join(FIXTURES, "vllm_bench", "serve-result_openai-chat_rate-0.2_e2el_p50-90-95-99_gb10.txt"),
              encoding="utf-8") as handle:
        real = handle.read().splitlines()
    mine = _block(text)
    assert code == 0 and len(mine) == len(real)
    for line, real_line in zip(mine, real):
        assert line[:41] == real_line[:41] and len(line) == len(real_line), (line, real_line)
    rows = dict((line[:40].strip(), line[41:].strip()) for line in mine if line[:40].strip().endswith(":"))
    assert rows["Successful requests:"] == "6" and rows["Failed requests:"] == "0"
    assert rows["Request rate configured (RPS):"] == "200.00"
    assert rows["Total generated tokens:"] == "48"
    assert rows["Total input tokens:"] == str(6 * (32 + 4))     # the chat template's tokens, as the server counts
    before = text[:text.index(mine[0])].splitlines()
    assert before[0].startswith("Namespace(")
    assert before[-1] == "tip: install termplotlib and gnuplot to plot the metrics"
    assert ["Starting initial single prompt test run...", "Skipping endpoint ready check.",
            "Starting main benchmark run...", "Traffic request rate: 200.0",
            "Burstiness factor: 1.0 (Poisson process)", "Maximum request concurrency: None"] == \
        [line for line in before if not line.startswith(("Namespace(", "WARNING", "tip:"))]
    assert engine.requests >= 6


# vllm/benchmarks/serve.py @ 009e6d4a (docs/research/serving-acceptance.md 1b): main_async's setup keys, then
# benchmark()'s result without the per-request lists --save-detailed keeps, then process_one_metric's per metric.
SETUP_KEYS = ["date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
              "burstiness", "max_concurrency"]
RESULT_KEYS = ["duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
               "request_goodput", "output_throughput", "total_token_throughput", "latencies", "queue_times",
               "max_output_tokens_per_s", "max_concurrent_requests", "rtfx"]
DETAILED_KEYS = ["input_lens", "output_lens", "ttfts", "itls", "start_times", "generated_texts", "errors"]


def _metric_keys(metrics, percentiles):
    return [k for m in metrics for k in ["mean_%s_ms" % m, "median_%s_ms" % m, "std_%s_ms" % m] +
            ["p%s_%s_ms" % (p, m) for p in percentiles]]


def test_bench_saves_the_real_json_keys(live, capsys, tmp_path):
    base, _, _ = live
    code, text = _bench(capsys, "--base-url", base, "--num-prompts", "5", "--random-input-len", "16",
                        "--random-output-len", "4", "--save-result", "--result-dir", str(tmp_path),
                        "--percentile-metrics", "ttft,tpot,itl,e2el", "--header", "Authorization=Bearer " + KEY)
    assert code == 0
    assert "Model not specified, fetching first model from server..." in text
    names = os.listdir(str(tmp_path))
    # {label}-{request_rate}qps-{model basename}-{%Y%m%d-%H%M%S}.json, the model id being /v1/models' root
    assert len(names) == 1 and re.match(r"^openai-infqps-Qwen3-32B-FP8-\d{8}-\d{6}\.json$", names[0]), names
    with open(os.path.join(str(tmp_path), names[0]), encoding="utf-8") as handle:
        saved = json.load(handle)
    assert list(saved) == SETUP_KEYS + RESULT_KEYS + _metric_keys(["ttft", "tpot", "itl", "e2el"], ["99"])
    assert saved["completed"] == 5 and saved["failed"] == 0 and saved["total_output_tokens"] == 20
    assert saved["total_input_tokens"] == 5 * 16 and saved["request_rate"] == "inf"
    assert saved["max_concurrency"] is None and saved["request_goodput"] is None
    assert saved["output_throughput"] == pytest.approx(20 / saved["duration"])
    assert len(saved["latencies"]) == 5 and saved["max_concurrent_requests"] >= 1


def test_bench_with_max_concurrency_and_details(live, capsys, tmp_path):
    base, _, _ = live
    result = str(tmp_path / "r.json")
    code, text = _bench(capsys, "--base-url", base, "--num-prompts", "4", "--random-input-len", "8",
                        "--random-output-len", "3", "--max-concurrency", "2", "--save-result", "--save-detailed",
                        "--result-filename", result, "--metric-percentiles", "50,99.9", "--num-warmups", "2",
                        "--percentile-metrics", "ttft,tpot,itl,client_queue_time", "--goodput", "ttft:60000",
                        "--header", "Authorization=Bearer " + KEY)
    with open(result, encoding="utf-8") as handle:
        saved = json.load(handle)
    assert code == 0 and "Warming up with 2 requests..." in text and "Warmup run completed." in text
    rows = [line[:40].strip() for line in _block(text)]
    assert rows[3] == "Maximum request concurrency:" and "Request goodput (req/s):" in rows
    # the client-side queueing section (only with --max-concurrency, and only when --percentile-metrics names it)
    assert "{s:{c}^{n}}".format(s="Client-side Queueing", n=50, c="-") in _block(text)
    assert "Mean Client Queue Time (ms):" in rows and "P99.9 Client Queue Time (ms):" in rows
    assert list(saved) == SETUP_KEYS + RESULT_KEYS[:9] + DETAILED_KEYS[:4] + ["latencies", "start_times",
                                                                                "queue_times"] + \
        DETAILED_KEYS[5:] + RESULT_KEYS[11:] + _metric_keys(["ttft", "tpot", "itl"], ["50", "99.9"]) + \
        _metric_keys(["client_queue_time"], ["50", "99.9"])
    assert saved["max_concurrency"] == 2 and saved["max_concurrent_requests"] <= 2
    assert saved["request_goodput"] == pytest.approx(4 / saved["duration"])


def test_bench_statistics_are_numpys():
    values = [0.1, 0.4, 0.2, 0.9]
    assert bench.percentile(values, 50) == pytest.approx(0.3)          # numpy.median
    assert bench.percentile(values, 99) == pytest.approx(0.885)        # numpy.percentile(values, 99), linear
    assert bench.std(values) == pytest.approx(0.3082207, abs=1e-7)     # numpy.std, ddof 0
    assert bench.percentile([], 99) == bench.mean([]) == 0
