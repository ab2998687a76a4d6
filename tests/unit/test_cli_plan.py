"""`gpuhost plan` through the real dispatcher (subprocess)."""
import json
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
