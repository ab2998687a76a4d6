"""`gpuhost plan` through the real dispatcher (subprocess)."""
import json
import math
import os
import subprocess
import sys

from conftest import FIXTURES, ROOT

GPUHOST = os.path.join(ROOT, "bin", "gpuhost")
MODELS = os.path.join(FIXTURES, "models")


def gpuhost(*args):
    return subprocess.run([sys.executable, GPUHOST, "plan"] + list(args),
                          capture_output=True, text=True, timeout=60)


# seeds/000: 95.00 GiB as vLLM prints it (CUDA's total), a vLLM before 0.20.
SEED = ["--gpu-memory-mib", "97280", "--gpu-reserved-mib", "0", "--vllm-version", "0.11.0",
        "--gpu-memory-utilization", "0.90", "--max-model-len", "32768",
        "--weights-gib", "54.12", "--kv-bytes-per-token", "262144",
        "--non-torch-gib", "0.91", "--activation-gib", "4.38"]


def test_json_plan_has_the_promised_keys():
    proc = gpuhost("--json", *SEED)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    for key in ("budget_mib", "weights_gib", "kv_bytes_per_token", "kv_cache_gib", "kv_cache_tokens",
                "max_concurrency", "verdict", "reasons", "remedies"):
        assert key in plan
    assert round(plan["kv_cache_gib"], 2) == 26.09
    assert plan["verdict"] == "warn"


def test_text_plan_is_readable():
    proc = gpuhost(*SEED)
    assert proc.returncode == 0
    assert proc.stdout.startswith("vLLM memory plan: WARN")
    assert "26.09 GiB" in proc.stdout and "remedies" in proc.stdout


def test_instances_and_check_flag():
    # seed 003: an L4. Its 23,034 MiB less the driver's 434 MiB (catalogue) are what
    # vLLM applies 0.40 to: 9,040 MiB; the seed's EngineCore held 9,184 MiB with its CUDA
    # context, which vLLM does not count in the budget.
    args = ["--json", "--gpu", "L4", "--gpu-memory-utilization", "0.40",
            "--max-model-len", "4096", "--weights-gib", "2", "--kv-bytes-per-token", "36864"]
    proc = gpuhost(*(args + ["--instances", "4"]))
    plan = json.loads(proc.stdout)
    assert proc.returncode == 0 and plan["verdict"] == "refuse" and plan["budget_mib"] == 9040
    assert plan["gpu_reserved_source"].startswith("catalogue L4")
    assert gpuhost(*(args + ["--instances", "4", "--check"])).returncode == 1
    args[4] = "0.23"
    proc = gpuhost(*(args + ["--instances", "4", "--check"]))
    assert proc.returncode == 0 and json.loads(proc.stdout)["instances"][0]["fits"]


def test_model_directory(tmp_path):
    proc = gpuhost("--json", "--gpu-memory-mib", "24576", "--max-model-len", "8192",
                   "--model", os.path.join(MODELS, "llama-3.1-8b-instruct"), "--weights-gib", "14.96",
                   "--kv-cache-dtype", "fp8", "--tensor-parallel-size", "2")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["kv_bytes_per_token"] == 32768 and plan["weights_gib"] == 7.48


def test_bad_input_is_one_line_and_exit_2():
    for args in (["--gpu-memory-mib", "lots", "--weights-gib", "1", "--kv-bytes-per-token", "1", "--max-model-len", "8"],
                 ["--gpu-memory-mib", "1000"],
                 ["--gpu-memory-utilization", "0.5"],
                 ["--gpu-memory-mib", "1000", "--model", "/does/not/exist"],
                 ["--gpu-memory-mib", "1000", "--weights-gib", "1", "--kv-bytes-per-token", "1",
                  "--max-model-len", "8", "--instances", "0"],
                 ["--no-such-flag"]):
        proc = gpuhost(*args)
        assert proc.returncode == 2, args
        assert proc.stdout == ""
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
        assert proc.stderr.startswith("gpuhost plan: ")


def test_gpu_catalogue_image_version_and_other_instances():
    """`--gpu NAME` takes nvidia-smi's total and reserved from the catalogue, the image's tag
    names the vLLM rules, and other instances' utilisations count against the same GPU."""
    args = ["--json", "--gpu", "H100", "--image", "vllm/vllm-openai:v0.11.0", "--gpu-memory-utilization", "0.5",
            "--max-model-len", "8192", "--weights-gib", "15", "--kv-bytes-per-token", "131072"]
    plan = json.loads(gpuhost(*args).stdout)
    assert plan["cuda_total_mib"] == 81559 - 479 and plan["budget_mib"] == round(0.5 * 81080)
    assert plan["engine"]["vllm_version"] == "0.11.0" and plan["engine"]["rules"] == "V1 0.11.0"
    crowded = json.loads(gpuhost(*(args + ["--other-utilization", "0.3", "--other-utilization", "0.25"])).stdout)
    assert crowded["verdict"] == "refuse" and crowded["instances"][0]["sum_utilization"] == 1.05
    assert crowded["remedies"][0]["name"] == "share_gpu_evenly"
    assert crowded["remedies"][0]["verdict"] in ("ok", "warn")
    assert all(r["verdict"] == "refuse" and not r["fits_gpu"] for r in crowded["remedies"][1:])


def test_json_errors_are_json():
    proc = gpuhost("--json", "--gpu-memory-mib", "24576", "--model", "/does/not/exist")
    assert proc.returncode == 2 and proc.stderr == ""
    assert json.loads(proc.stdout)["error"].startswith("gpuhost plan: model directory /does/not/exist")
    proc = gpuhost("--json", "--gpu", "V100", "--weights-gib", "1", "--kv-bytes-per-token", "1")
    assert proc.returncode == 2 and "unknown --gpu 'V100'" in json.loads(proc.stdout)["error"]


def test_help_names_the_catalogue_and_an_example():
    proc = subprocess.run([sys.executable, GPUHOST, "plan", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--gpu" in proc.stdout and "L40S" in proc.stdout


# ------------------------------------------------------------------ --manifest (Kubernetes)

K8S = os.path.join(FIXTURES, "k8s")
SEED_MANIFEST = os.path.join(K8S, "seed003_vllm-qwen_4-replicas.yaml")
# seed 003: the L4's 23,034 MiB; its driver reserves 434 MiB (nvidia_smi_memory/L4_555.42.06.txt), so
# vLLM's 0.40 applies to 22,600 MiB; the EngineCore held 9,184 MiB at 0.40, the rest beyond its budget.
L4_CUDA_TOTAL = 23034 - 434
OUTSIDE = 9184 - round(0.40 * L4_CUDA_TOTAL)


def largest_fitting(count, held=0):
    """The formula: count x (u x CUDA total + outside) + held <= CUDA total, u floored to 2 decimals."""
    return math.floor(((L4_CUDA_TOTAL - held) / count - OUTSIDE) / L4_CUDA_TOTAL * 100) / 100


def seed_manifest(tmp_path, util):
    with open(SEED_MANIFEST) as handle:
        text = handle.read()
    path = tmp_path / "vllm.yaml"
    path.write_text(text.replace("--gpu-memory-utilization=0.40", "--gpu-memory-utilization=%s" % util))
    return str(path)


def test_manifest_seed_003_four_times_040_refused_naming_the_fitting_utilization():
    expected = largest_fitting(4)
    assert 0.23 <= expected <= 0.24 and OUTSIDE == 144
    proc = gpuhost("--json", "--manifest", SEED_MANIFEST, "--gpu", "L4", "--time-slicing-replicas", "4")
    assert proc.returncode == 1, proc.stderr
    plan = json.loads(proc.stdout)
    gpu = plan["gpus"][0]
    assert plan["verdict"] == "refuse" and plan["reasons"][0]["code"] == "replicas_overflow_gpu"
    assert gpu["replicas_on_one_gpu"] == 4 and not gpu["fits"]
    assert [p["budget_mib"] for p in gpu["processes"]] == [round(0.40 * L4_CUDA_TOTAL)] * 4 == [9040] * 4
    assert gpu["required_mib"] == 4 * 9184 and gpu["cuda_total_mib"] == L4_CUDA_TOTAL
    assert gpu["largest_fitting_utilization"] == expected
    assert gpu["remedies"][0] == dict(gpu["remedies"][0], name="lower_gpu_memory_utilization",
                                      gpu_memory_utilization=expected)
    # 0.40 leaves room for 2 such processes: 2 x 9,184 <= 22,600 < 3 x 9,184
    assert gpu["remedies"][1]["replicas_on_one_gpu"] == 2
    text = gpuhost("--manifest", SEED_MANIFEST, "--gpu", "L4", "--time-slicing-replicas", "4")
    assert text.returncode == 1 and text.stdout.startswith("vLLM replicas per GPU: REFUSE")
    assert "largest --gpu-memory-utilization that fits 4 replicas: %.2f" % expected in text.stdout
    assert "9,040 + 9,040 + 9,040 + 9,040 MiB" in text.stdout and "36,736 MiB > 22,600 MiB" in text.stdout


def test_manifest_seed_003_at_023_accepted(tmp_path):
    proc = gpuhost("--json", "--manifest", seed_manifest(tmp_path, "0.23"), "--gpu", "L4",
                   "--time-slicing-replicas", "4")
    assert proc.returncode == 0, proc.stdout
    gpu = json.loads(proc.stdout)["gpus"][0]
    assert gpu["fits"] and gpu["required_mib"] == 4 * (round(0.23 * L4_CUDA_TOTAL) + OUTSIDE) <= L4_CUDA_TOTAL


def test_manifest_four_quarters_do_not_fit(tmp_path):
    # 4 x 0.25 is the whole CUDA total in budgets alone: the memory each process holds beyond its
    # budget has no room (vLLM's fourth start finds less free than its budget).
    proc = gpuhost("--json", "--manifest", seed_manifest(tmp_path, "0.25"), "--gpu", "L4",
                   "--time-slicing-replicas", "4")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["gpus"][0]["required_mib"] == L4_CUDA_TOTAL + 4 * OUTSIDE


def test_manifest_memory_held_by_others(tmp_path):
    # seed 003: the old Deployment vllm-blue still held 4,792 MiB on the same L4.
    proc = gpuhost("--json", "--manifest", seed_manifest(tmp_path, "0.23"), "--gpu", "L4",
                   "--time-slicing-replicas", "4", "--held-mib", "4792")
    gpu = json.loads(proc.stdout)["gpus"][0]
    assert proc.returncode == 1 and not gpu["fits"]
    assert gpu["largest_fitting_utilization"] == largest_fitting(4, held=4792) == 0.19


def test_manifest_time_slicing_file(tmp_path):
    # seed 003's node: renameByDefault advertises nvidia.com/gpu.shared, 4 per GPU.
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
                      "    - name: nvidia.com/gpu\n      replicas: 4\n")
    plan = json.loads(gpuhost("--json", "--manifest", SEED_MANIFEST, "--gpu", "L4", "--time-slicing",
                              str(config)).stdout)
    assert plan["gpus"][0]["time_slicing_replicas"] == 4
    assert plan["gpus"][0]["largest_fitting_utilization"] == largest_fitting(4)
    # a pod asking nvidia.com/gpu does not schedule there (seed 003); the README's config keeps the name
    docs = os.path.join(K8S, "deployment-mistral-7b_vllm-docs-k8s.yaml")
    proc = gpuhost("--json", "--manifest", docs, "--gpu", "L4", "--time-slicing", str(config))
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["reasons"][0]["code"] == "resource_not_advertised"
    proc = gpuhost("--json", "--manifest", SEED_MANIFEST, "--gpu", "L4", "--time-slicing",
                   os.path.join(K8S, "time-slicing_k8s-device-plugin-README.yaml"))
    assert proc.returncode == 1 and "pods stay Pending" in json.loads(proc.stdout)["reasons"][0]["message"]


def test_manifest_one_replica_of_090_on_a_whole_gpu_accepted():
    proc = gpuhost("--json", "--manifest", os.path.join(K8S, "statefulset-api-server_whole-gpu.yaml"),
                   "--gpu-memory-mib", "23034", "--gpu-reserved-mib", "434")
    assert proc.returncode == 0, proc.stdout
    plan = json.loads(proc.stdout)
    gpu = plan["gpus"][0]
    assert plan["verdict"] == "ok" and gpu["replicas_on_one_gpu"] == 1 and gpu["time_slicing_replicas"] is None
    assert gpu["required_mib"] == round(0.9 * L4_CUDA_TOTAL) + OUTSIDE


def test_manifest_default_utilization_follows_the_image():
    # vllm/vllm-openai:latest names no version: the newest rules, whose default is 0.92 (from 0.20).
    proc = gpuhost("--json", "--manifest", os.path.join(K8S, "deployment-mistral-7b_vllm-docs-k8s.yaml"),
                   "--gpu", "L4")
    workload = json.loads(proc.stdout)["workloads"][0]
    assert proc.returncode == 0 and workload["gpu_memory_utilization"] == 0.92
    assert workload["utilization_source"].startswith("vLLM's default")


def test_manifest_bad_input_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Deployment\nspec:\n  replicas: [1\n")
    web = tmp_path / "web.yaml"
    web.write_text("kind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n"
                   "      containers: [{name: web, image: nginx}]\n")
    for args, words in (([str(bad), "--gpu", "L4"], "is not YAML: "),
                        ([str(web), "--gpu", "L4"], "no vLLM container found (Deployment default/web)"),
                        ([SEED_MANIFEST, "--gpu", "L4"], "give the node's time-slicing"),
                        ([SEED_MANIFEST], "give --gpu NAME or --gpu-memory-mib"),
                        ([str(tmp_path / "none.yaml"), "--gpu", "L4"], "cannot read manifest"),
                        ([SEED_MANIFEST, "--gpu", "L4", "--time-slicing-replicas", "0"], ">= 1"),
                        ([SEED_MANIFEST, "--gpu", "L4", "--time-slicing-replicas", "4", "--time-slicing", "x"],
                         "not allowed with argument"),
                        ([SEED_MANIFEST, "--gpu", "L4", "--instances", "4"], "unrecognized arguments")):
        proc = gpuhost("--manifest", *args)
        assert proc.returncode == 2 and proc.stdout == "", args
        assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("gpuhost plan: "), args
        assert words in proc.stderr, (args, proc.stderr)
    proc = gpuhost("--json", "--manifest", str(bad), "--gpu", "L4")
    assert proc.returncode == 2 and json.loads(proc.stdout)["error"].startswith("gpuhost plan: manifest ")


def test_sampler_option_changes_the_sampler_path():
    """0.11.0 from pip: no FlashInfer (sort); the official image or --sampler flashinfer: FlashInfer."""
    base = ["--json", "--gpu", "L4", "--max-model-len", "8192", "--vllm-version", "0.11.0",
            "--model", os.path.join(MODELS, "llama-3.1-8b-instruct"), "--weights-gib", "14.96"]
    paths = {}
    for extra in ([], ["--sampler", "flashinfer"], ["--image", "vllm/vllm-openai:v0.11.0"],
                  ["--image", "vllm/vllm-openai:v0.11.0", "--sampler", "native"]):
        proc = gpuhost(*(base + extra))
        assert proc.returncode == 0, proc.stderr
        paths[" ".join(extra)] = json.loads(proc.stdout)["engine"]["sampler"]
    assert list(paths.values()) == ["sort", "flashinfer", "flashinfer", "sort"]
    assert gpuhost(*(base + ["--sampler", "fast"])).returncode == 2
