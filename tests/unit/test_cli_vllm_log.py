"""`gpuhost vllm-log` through the real dispatcher (subprocess)."""
import json
import os
import subprocess
import sys

from conftest import FIXTURES, ROOT

GPUHOST = os.path.join(ROOT, "bin", "gpuhost")
LOGS = os.path.join(FIXTURES, "vllm_logs")
OK_LOG = os.path.join(LOGS, "021_v0.10.0_8xH100_tp8-ep_qwen3-235b-fp8_ok.log")
FAILED_LOG = os.path.join(LOGS, "041_v0.6.x_RTX3090_llama3.1-8b_max-seq-len-larger-than-kv-cache_user-stripped-prefixes.log")


def gpuhost(*args, stdin=None):
    return subprocess.run([sys.executable, GPUHOST, "vllm-log"] + list(args), input=stdin,
                          capture_output=True, timeout=60)


def test_json_report():
    proc = gpuhost("--json", OK_LOG)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    for key in ("started", "last_stage", "failure", "kv_cache_tokens", "max_concurrency", "max_model_len",
                "weights_gib", "gpu_memory_utilization", "graph_capture_s", "vllm_version", "warnings", "runs"):
        assert key in report
    assert report["started"] and report["kv_cache_tokens"] == 1590736 and report["runs"] == 1


def test_text_report_and_stdin():
    proc = gpuhost("-", stdin=open(FAILED_LOG, "rb").read())
    assert proc.returncode == 0
    out = proc.stdout.decode()
    assert out.startswith("vLLM startup: NOT STARTED") and "kv_cache_insufficient" in out


def test_check_flag():
    assert gpuhost("--check", OK_LOG).returncode == 0
    assert gpuhost("--check", FAILED_LOG).returncode == 1


def test_line_numbers_follow_the_file_despite_bare_cr():
    # 031 has tqdm '\r' inside lines; the reported line must be the file's line.
    log = os.path.join(LOGS, "031_v0.22.0_sleep-mode_wake-up-cuda-oom-after-start.log")
    report = json.loads(gpuhost("--json", log).stdout)
    line = report["warning_details"][0]["line"]
    assert open(log, "rb").read().split(b"\n")[line - 1].startswith(b"CUDA Error: out of memory")


def test_unreadable_file_is_one_line_and_exit_2(tmp_path):
    locked = tmp_path / "locked.log"
    locked.write_text("x")
    locked.chmod(0)
    cases = [[str(tmp_path / "missing.log")], [str(tmp_path)], [], ["--bogus", OK_LOG]]
    if os.geteuid() != 0:  # root reads anything
        cases.append([str(locked)])
    for args in cases:
        proc = gpuhost(*args)
        err = proc.stderr.decode()
        assert proc.returncode == 2, args
        assert proc.stdout == b""
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert err.startswith("gpuhost vllm-log: ")
