"""The plan's inputs and the host side: the GPU memory catalogue against real captures, vLLM
versions from image tags, engine flags, memory held by other processes, a host's instances
planned together, and what a start measured recorded and used again."""
import json
import os
import re
import struct

import pytest

from gpu import gpu_memory
from serving import vllm_log
from serving import vllm_overheads as vo
from serving import vllm_host_plan as vhp
from serving import vllm_measured as vme
from serving import vllm_plan as vp
from conftest import FIXTURES, run_ansible_module

MODELS = os.path.join(FIXTURES, "models")
GIB = 1024 ** 3


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Model directories: the fixtures' config.json and a header-only safetensors file that
    declares the model's BF16 weights (3.8 GiB for Qwen3-4B, 13.9 GiB for Qwen2.5-14B)."""
    root = tmp_path_factory.mktemp("models")
    for name, params in (("qwen3-4b", 4.02e9), ("qwen2.5-14b-instruct", 14.77e9)):
        os.makedirs(str(root / name))
        with open(os.path.join(MODELS, name, "config.json")) as handle:
            (root / name / "config.json").write_text(handle.read())
        size = int(params) * 2
        header = json.dumps({"w": {"dtype": "BF16", "shape": [size // 2], "data_offsets": [0, size]}}).encode()
        with open(str(root / name / "model.safetensors"), "wb") as handle:
            handle.write(struct.pack("<Q", len(header)) + header)
    return str(root)
MEMORY = os.path.join(FIXTURES, "nvidia_smi_memory")
CORPUS_SMI = os.path.join(FIXTURES, "nvidia_smi")


# ------------------------------------------------------------------ the catalogue

def _captured(path):
    """Every (Total, Reserved) MiB pair a -q text or -q -x XML capture prints (MIG devices too)."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    pairs = re.findall(r"<total>(\d+) MiB</total>\s*<reserved>(\d+) MiB</reserved>", text)
    pairs += re.findall(r"Total\s+: (\d+) MiB\s+Reserved\s+: (\d+) MiB", text)
    return {(int(t), int(r)) for t, r in pairs}


@pytest.mark.parametrize("row", [r for r in gpu_memory.CATALOGUE if r["source"].startswith(gpu_memory.FIXTURES)
                                 or r["source"].startswith("corpus nvidia_smi/")], ids=lambda r: r["key"])
def test_catalogue_rows_are_what_their_captures_print(row):
    source = row["source"].split(" ")[0] if row["source"].startswith(gpu_memory.FIXTURES) else None
    if source is None:
        source = os.path.join(CORPUS_SMI, row["source"].split(" ")[1].split("/")[1])
    else:
        source = os.path.join(os.path.dirname(FIXTURES), "..", source)
    if not source.endswith((".txt", ".xml")) or "deviceQuery" in source or "oom" in source or "htcondor" in source \
            or "GB10" in source:
        pytest.skip("a derived figure: its source is not a -q capture")
    assert (row["total_mib"], row["reserved_mib"]) in _captured(source)


def test_cuda_total_is_total_less_reserved_where_a_host_has_both():
    # thamada/gls: the L4's -q (23,034 / 556 MiB) and deviceQuery (23,570,219,008 bytes) on one host.
    assert _captured(os.path.join(MEMORY, "L4_550.90.07.txt")) == {(23034, 556)}
    with open(os.path.join(MEMORY, "L4_550.90.07_deviceQuery.txt")) as handle:
        cuda_bytes = int(re.search(r"(\d{8,}) bytes", handle.read()).group(1))
    assert abs(gpu_memory.cuda_total_mib(23034, 556) - cuda_bytes / 1024.0 ** 2) < 1


def test_lookup_by_key_alias_and_nvidia_smi_name():
    assert gpu_memory.lookup("l4")["key"] == "L4"
    assert gpu_memory.lookup("NVIDIA A100-SXM4-80GB")["key"] == "A100-80GB"
    assert gpu_memory.lookup("NVIDIA A100-SXM4-40GB")["key"] == "A100-40GB"
    assert gpu_memory.lookup("NVIDIA A10G")["key"] == "A10G" and gpu_memory.lookup("NVIDIA A10")["key"] == "A10"
    assert gpu_memory.lookup("NVIDIA RTX PRO 6000 Blackwell Server Edition")["key"] == "RTX-PRO-6000"
    assert gpu_memory.lookup("Tesla V100-SXM2-16GB") is None
    # The host's facts win; a missing reservation comes from the catalogue, then the default.
    assert gpu_memory.device_memory("NVIDIA L4", 23034, 556)["reserved_source"] == "facts"
    assert gpu_memory.device_memory("NVIDIA L4", 23034)["reserved_mib"] == 434
    unknown = gpu_memory.device_memory("Tesla V100", 16384)
    assert unknown["reserved_mib"] == gpu_memory.DEFAULT_RESERVED_MIB and unknown["card"] is None


# ------------------------------------------------------------------ versions and engine arguments

@pytest.mark.parametrize("image, version", [
    ("vllm/vllm-openai:v0.11.0", "0.11.0"),
    ("docker.io/vllm/vllm-openai:v0.10.1.1", "0.10.1.1"),
    ("vllm/vllm-openai:v0.9.2-cu128", "0.9.2"),
    ("local/vllm-standin:0.25.1", "0.25.1"),
    ("nvcr.io/nvidia/vllm:26.01-py3", "0.13.0"),  # corpus 045: "0.13.0+faa43dbf.nv26.01"
    ("vllm/vllm-openai@sha256:" + "a" * 64, None),
    ("vllm/vllm-openai:nightly", None),
])
def test_version_of_image(image, version):
    assert vo.version_of_image(image) == version


def test_generations_follow_the_released_rules():
    names = {v: vo.generation(vo.parse_version(v))[0] for v in ("0.5.5", "0.6.6", "0.8.5", "0.10.1.1", "0.11.0",
                                                                 "0.13.0", "0.19.1", "0.20.0", "0.25.1")}
    assert names == {"0.5.5": "V0 <= 0.6.5", "0.6.6": "V0 0.6.6-0.7", "0.8.5": "V1 0.8-0.9.0",
                     "0.10.1.1": "V1 0.9.1-0.10", "0.11.0": "V1 0.11.0", "0.13.0": "V1 0.11.2-0.16",
                     "0.19.1": "V1 0.17-0.19", "0.20.0": "V1 0.20", "0.25.1": "V1 0.21-0.33"}
    assert vo.generation(None)[0] == "V1 0.21-0.33"
    # 0.20 raised the default utilisation with the CUDA-graph estimate (PR #38284).
    assert vo.generation((0, 19, 1))[1]["default_utilization"] == 0.90
    assert vo.generation((0, 20, 0))[1]["default_utilization"] == 0.92


def test_cudagraph_sizes_as_logs_print_them():
    # corpus 035: "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)".
    pieces, full = vo.cudagraph_sizes(256, 2048)
    assert (len(pieces), max(pieces), len(full), max(full)) == (51, 512, 35, 256)
    # corpus 001: max_num_seqs 32 -> "PIECEWISE=11 (largest=64), FULL=7 (largest=32)".
    pieces, full = vo.cudagraph_sizes(32, 2496)
    assert (len(pieces), max(pieces), len(full), max(full)) == (11, 64, 7, 32)


def test_engine_flags_from_extra_args():
    assert vhp.engine_flags(["--enable-prefix-caching", "--max-num-batched-tokens", "4096", "--enforce-eager",
                             "--max_num_seqs=32", "--runner", "pooling"]) == {
        "max_num_batched_tokens": "4096", "max_num_seqs": "32", "enforce_eager": True, "pooling": True}
    assert vhp.engine_flags([]) == {}


def test_held_by_others_counts_only_foreign_processes():
    processes = [{"pid": 10, "gpu_index": 0, "used_mib": 9000}, {"pid": 11, "gpu_index": 0, "used_mib": 4000},
                 {"pid": 12, "gpu_index": 1, "used_mib": 700}, {"pid": 13, "gpu_index": 1, "used_mib": 50}]
    cgroups = {10: "0::/system.slice/docker-abc123.scope\n", 11: "0::/user.slice/session-2.scope\n",
               12: "0::/system.slice/docker-def456.scope\n"}  # 13 has ended: counted
    assert vhp.held_by_others(vhp.other_processes(processes, cgroups, ["abc123", "def456"])) == {0: 4000, 1: 50}


# ------------------------------------------------------------------ a host's instances

H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "memory_reserved_mib": 479}
L4 = {"index": 1, "name": "NVIDIA L4", "memory_total_mib": 23034, "memory_reserved_mib": 434}


def instance(name, model, gpus, util, max_model_len, **extra):
    out = dict(name=name, image="vllm/vllm-openai:v0.11.0", model=model, gpu_indexes=gpus,
               gpu_memory_utilization=util, max_model_len=max_model_len, tensor_parallel_size=len(gpus),
               kv_cache_dtype="auto", quantization=None, max_num_seqs=None, extra_args=[], env={},
               non_torch_gib=None, activation_gib=None)
    out.update(extra)
    return out


def test_host_plan_uses_each_gpus_facts_and_the_images_version(models):
    result = vhp.plan_host([instance("big", "qwen3-4b", [0], 0.5, 32768),
                            instance("small", "qwen3-4b", [1], 0.9, 8192)], [H100, L4], models)
    big, small = result["plans"]["big"], result["plans"]["small"]
    assert big["cuda_total_mib"] == 81080 and small["cuda_total_mib"] == 22600
    assert big["gpu_reserved_source"] == small["gpu_reserved_source"] == "facts"
    assert big["engine"]["vllm_version"] == "0.11.0" and big["engine"]["rules"] == "V1 0.11.0"
    # 0.11.0's defaults: 8,192 tokens / 1,024 sequences on the H100, 2,048 / 256 on the L4.
    assert (big["engine"]["max_num_batched_tokens"], big["engine"]["max_num_seqs"]) == (8192, 1024)
    assert (small["engine"]["max_num_batched_tokens"], small["engine"]["max_num_seqs"]) == (2048, 256)
    assert result["refused"] == [] and result["message"] is None
    assert result["lines"][0].startswith("vllm plan big: ")


def test_host_plan_takes_the_instances_sampler(models):
    """0.11.0: the official image carries FlashInfer; another image is taken for a pip install
    (sort) unless the instance says sampler: flashinfer."""
    plans = vhp.plan_host([
        instance("official", "qwen3-4b", [1], 0.3, 8192),
        instance("custom", "qwen3-4b", [1], 0.3, 8192, image="registry.example/vllm-custom:v0.11.0"),
        instance("said", "qwen3-4b", [1], 0.3, 8192, image="registry.example/vllm-custom:v0.11.0",
                 sampler="flashinfer")], [H100, L4], models)["plans"]
    assert [plans[n]["engine"]["sampler"] for n in ("official", "custom", "said")] == ["flashinfer", "sort", "flashinfer"]


def test_host_plan_refuses_an_overflowing_gpu_with_the_names(models):
    result = vhp.plan_host([instance("r%d" % i, "qwen3-4b", [1], 0.4, 4096) for i in range(4)], [H100, L4], models)
    assert result["refused"] == ["r0", "r1", "r2", "r3"]
    assert result["message"].startswith("vllm memory plan: refuse r0 - GPU 1: 4 instances (r0, r1, r2, r3)")
    assert result["message"].endswith("No container was started.")


def test_host_plan_counts_held_memory_and_limits_tensor_parallel_to_the_gpus_there_are(models):
    result = vhp.plan_host([instance("a", "qwen2.5-14b-instruct", [1], 0.9, 32768)], [H100, L4], models,
                           held={1: 3000})
    plan = result["plans"]["a"]
    assert plan["held_mib"] == 3000 and plan["verdict"] == "refuse"
    assert "free_memory_below_budget" in {r["code"] for r in plan["reasons"]}
    # Two GPUs at least as large as the L4: TP 2 is possible, TP 4 would not be.
    assert all(r["tensor_parallel_size"] <= 2 for r in plan["remedies"])


# ------------------------------------------------------------------ measured on this host

def _started(plan, report):
    return dict(report, started=True)


def test_a_measured_start_makes_the_next_plan_exact():
    """Calibration 001 (L4, 0.11.0): after the start, the plan of the same settings uses what it
    measured and predicts the log's own KV share and tokens."""
    with open(os.path.join(FIXTURES, "vllm_logs_calibration", "001_v0.11.0_L4_llama3.1-8b-instruct_gmu0.92_32k.log"),
              "rb") as handle:
        report = vllm_log.parse(handle.read())
    inputs = dict(gpu_name="L4", gpu_memory_utilization=0.92, max_model_len=32000, max_num_seqs=128,
                  model_dir=os.path.join(MODELS, "llama-3.1-8b-instruct"), weights_gib=report["weights_gib"],
                  vllm_version="0.11.0")
    first = vp.plan(**inputs)
    entry = vme.measured_entry(first, report)
    assert entry["weights_gib"] == report["weights_gib"] and entry["kv_cache_gib"] == report["kv_cache_gib"]
    again = dict(inputs)
    again.pop("weights_gib")
    second = vp.plan(measured=entry, **again)
    assert second["estimates"] == {"activation_gib": "measured on this host", "non_torch_gib": "measured on this host",
                                   "cuda_graph_gib": "measured on this host"}
    assert second["weights_source"] == "measured on this host"
    assert second["kv_cache_gib"] == pytest.approx(report["kv_cache_gib"], abs=0.002)
    # Exact but for the log's two decimals: 0.005 GiB is 41 tokens of 128 KiB.
    assert abs(second["kv_cache_tokens"] - report["kv_cache_tokens"]) <= 0.005 * GIB / 131072 + 16
    assert second["band"]["share"] == vp.MEASURED_BAND_SHARE < first["band"]["share"]
    assert "measured on this host" in vhp.instance_lines({"name": "x", "gpu_indexes": [0]}, second)[0]


def test_the_log_breakdown_splits_the_measured_overheads():
    # Calibration 005 prints 0.17 GiB of peak activation and 0.02 GiB of non-torch memory.
    with open(os.path.join(FIXTURES, "vllm_logs_calibration", "005_v0.10.2_RTX4090_qwen2.5-3b_fp16_4k.log"), "rb") as h:
        report = vllm_log.parse(h.read())
    assert report["profile"] == {"activation_gib": 0.17, "non_torch_gib": 0.02, "cuda_graph_estimate_gib": None,
                                 "cuda_graph_profiling": False}
    plan = vp.plan(gpu_memory_mib=24218, gpu_reserved_mib=0, model_dir=os.path.join(MODELS, "qwen2.5-3b"),
                   weights_gib=report["weights_gib"], max_model_len=4096, max_num_seqs=1, vllm_version="0.10.2")
    entry = vme.measured_entry(plan, report)
    assert entry["activation_gib"] == 0.17
    total = entry["weights_gib"] + entry["activation_gib"] + entry["non_torch_gib"] + entry["cuda_graph_gib"]
    assert total + entry["kv_cache_gib"] == pytest.approx(plan["budget_gib"], abs=0.001)


def test_after_starts_keeps_the_deployed_plan_of_an_unchanged_container(models):
    inst = instance("a", "qwen3-4b", [0], 0.5, 32768)
    plans = vhp.plan_host([inst], [H100], models)["plans"]
    report = {"started": True, "weights_gib": 7.56, "kv_cache_gib": 25.0, "kv_cache_tokens": 182032,
              "max_concurrency": 5.56, "warning_details": []}
    first = vme.after_starts([inst], plans, {"a": report}, {"a"}, {}, [H100], {}, 0.01)
    (key, entry), = first["entries"].items()
    assert entry["settings"]["model"] == "qwen3-4b" and entry["kv_cache_gib"] == 25.0
    assert first["warnings"]["a"][0].startswith("vllm: WARNING a: KV cache tokens 182032 in the startup log")
    # Next run: the plan now uses the measurement, the container was not recreated.
    replanned = vhp.plan_host([inst], [H100], models, measurements=first["entries"])["plans"]
    assert replanned["a"]["estimates"]["activation_gib"] == "measured on this host"
    previous = {"a": {"plan": first["plans"]["a"]}}
    second = vme.after_starts([inst], replanned, {"a": report}, set(), previous, [H100], first["entries"], 0.01)
    assert second == first  # nothing to record anew, the same warnings
    # A changed argument is another key: the model again.
    changed = vhp.plan_host([dict(inst, max_model_len=16384)], [H100], models, measurements=first["entries"])
    assert changed["plans"]["a"]["estimates"]["activation_gib"] == "model"


def test_measurement_module_records_atomically_and_supports_check_mode(models, tmp_path):
    inst = instance("a", "qwen3-4b", [0], 0.5, 32768, image="vllm/vllm-openai:v0.11.0")
    plans = vhp.plan_host([inst], [H100], models)["plans"]
    report = {"started": True, "weights_gib": 7.56, "kv_cache_gib": 30.0, "kv_cache_tokens": 218448,
              "max_concurrency": 6.67, "warning_details": []}
    store = tmp_path / "measured.json"
    args = {"path": str(store), "record_path": str(tmp_path / "none.fact"), "instances": [inst], "gpus": [H100],
            "plans": plans, "reports": {"a": report}, "deployed": ["a"]}
    checked = run_ansible_module("vllm_plan_measurement", args, "--check", "--diff")
    assert checked["changed"] and not store.exists()
    assert "\"kv_cache_gib\": 30.0" in checked["diff"]["after"]
    done = run_ansible_module("vllm_plan_measurement", args)
    assert done["changed"] and json.loads(store.read_text())["entries"]
    assert not run_ansible_module("vllm_plan_measurement", args)["changed"]
    store.write_text("{not json")
    bad = run_ansible_module("vllm_plan_measurement", args)
    assert bad["failed"] and "not JSON" in bad["msg"] and store.read_text() == "{not json"


def test_host_mode_module_reads_cgroups_and_the_store(models, tmp_path):
    store = tmp_path / "measured.json"
    store.write_text(json.dumps({"entries": {}}))
    result = run_ansible_module("vllm_memory_plan", {
        "host_instances": [instance("a", "qwen3-4b", [0], 0.5, 32768)], "gpus": [H100],
        "processes": [{"pid": 999999999, "gpu_index": 0, "used_mib": 1234}], "models_dir": models,
        "measured_path": str(store)}, "--check")
    assert not result.get("failed") and result["changed"] is False
    assert result["held_mib"] == {"0": 1234} or result["held_mib"] == {0: 1234}
    assert result["plans"]["a"]["held_mib"] == 1234 and result["lines"][0].startswith("vllm plan a: ")


# ------------------------------------------------------------------ tensor parallelism and the topology

DGX1 = os.path.join(FIXTURES, "fabric", "topo-m_8xV100-DGX1_hybrid-cube-mesh_NV1-NV2-SYS_msccl-tools.txt")


def test_placement_warning_names_free_nvlink_gpus():
    """The DGX-1's hybrid cube mesh (real topo -m): GPU0 and GPU5 cross SYS; GPU0-3 and GPU4-7 are NVLink-joined
    fours. With GPU0 taken by another instance, the first free NVLink pair keeps GPU1 (its own) with GPU2."""
    from gpu import gpu_topology
    with open(DGX1, encoding="utf-8") as handle:
        topo = gpu_topology.parse_topo_matrix(handle.read())
    warned = gpu_topology.placement_warnings(topo, [{"name": "tp2", "gpu_indexes": [0, 5]}])
    assert [(w["name"], w["slowest_link"], w["better"]) for w in warned] == [("tp2", "SYS", [0, 1])]
    assert "crosses SYS" in warned[0]["message"] and "gpus: [0, 1]" in warned[0]["message"]
    other = [{"name": "tp2", "gpu_indexes": [1, 4]}, {"name": "single", "gpu_indexes": [0]}]
    assert gpu_topology.placement_warnings(topo, other)[0]["better"] == [1, 2]
    # NVLink-joined already, a single GPU, or no NVLink-joined set free: nothing to say
    assert gpu_topology.placement_warnings(topo, [{"name": "ok", "gpu_indexes": [0, 1, 2, 3]},
                                                  {"name": "one", "gpu_indexes": [5]}]) == []
    # x crosses SYS, but the only GPUs free of y are its own two; y's six cannot all be NVLink-joined
    busy = [{"name": "x", "gpu_indexes": [0, 5]}, {"name": "y", "gpu_indexes": [1, 2, 3, 4, 6, 7]}]
    assert gpu_topology.placement_warnings(topo, busy) == []


def test_host_mode_module_warns_about_a_placement(models, tmp_path):
    from gpu import gpu_topology
    with open(DGX1, encoding="utf-8") as handle:
        topo = gpu_topology.parse_topo_matrix(handle.read())
    gpus = [dict(H100, index=i) for i in range(8)]
    result = run_ansible_module("vllm_memory_plan", {
        "host_instances": [instance("tp2", "qwen3-4b", [0, 5], 0.5, 8192)], "gpus": gpus, "models_dir": models,
        "measured_path": str(tmp_path / "none.json"), "topology": topo}, "--check")
    assert not result.get("failed")
    assert result["placement"][0]["better"] == [0, 1]
    assert any("gpus: [0, 1]" in w for w in result.get("warnings", []))
