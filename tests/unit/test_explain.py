"""`gpuhost explain` over every real text of the corpus: the files that hold an error are explained
with the right layer and kind (most decisive first), the others get no finding; Xid lines from
public kernel logs; input hygiene; the CLI; and the one error table its readers share."""
import json
import os
import subprocess
import sys

import pytest

from diagnosis import error_catalogue as catalogue
from diagnosis import explain as ex
from gpu.nvsmi_error import classify_error
from layers import stack_check
from serving import vllm_log
from layers.registry import CATALOGUE_ORDER
from conftest import CORPUS, FIXTURES, ROOT
from test_stack_check import KMSG

GPUHOST = os.path.join(ROOT, "bin", "gpuhost")

# Every corpus text with an error: its findings as (layer, kind), most decisive first. Read off
# the files (the decisive line is quoted in the comment).
EXPECTED = {
    # "cudaGetDeviceCount returned 802 -> system not yet initialized" (8x H100 SXM, podman + CDI)
    "errors/001_devicequery-802_570.133.20_8xH100-SXM_podman-cdi_fm-not-started.txt":
        [("fabric", "fabric_manager_not_running")],
    # gpu_burn: "Error (gpu_burn-drv.cpp:298): system not yet initialized"
    "errors/002_gpu-burn-802_545.23.08_H100-80GB-HBM3-multi_centos7_no-fabricmanager.txt":
        [("fabric", "fabric_manager_not_running")],
    # "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service", then nvidia-settings' "ERROR: NVIDIA
    # driver is not loaded" (line 5): the refusal first, it is the cause
    "errors/003_journal_modprobe-nvidia-key-rejected-by-service_secure-boot.txt":
        [("driver", "secure_boot_rejected"), ("driver", "driver_not_loaded")],
    # inside the container after `systemctl daemon-reload`: "Failed to initialize NVML: Unknown Error"
    "errors/004_container-nvml-unknown-error-after-daemon-reload_510.68.02_markdown-section.txt":
        [("container", "daemon_reload_lost_devices")],
    # "invoking the NVIDIA Container Runtime Hook directly (e.g. specifying the docker --gpus flag)..."
    "errors/005_docker-gpus-flag-rejected-in-cdi-mode_dstack-log.txt":
        [("runtime_config", "gpus_flag_in_cdi_mode")],
    # 'could not select device driver "cdi" with capabilities: []'
    "errors/006_docker26-rootless-device-cdi_could-not-select-device-driver-cdi.txt":
        [("docker", "cdi_not_enabled")],
    # 'json: unknown field "additionalGids"'
    "errors/007_podman-4.9.3-cdi-spec-unknown-field-additionalGids_toolkit-1.19.1.txt":
        [("cdi", "cdi_spec_too_new")],
    # "unsatisfied condition: cuda>=12.8, please update your driver"
    "errors/008_compose-unsatisfied-condition-cuda-12.8_host-550.144.03.txt": [("image", "cuda_driver_too_old")],
    # "Error 804: forward compatibility was attempted on non supported HW"
    "errors/009_torch-804-forward-compat-on-geforce_460.80_GTX1650.txt": [("image", "forward_compat_unsupported")],
    # "(35 vs. 0)  CUDA driver version is insufficient for CUDA runtime version"
    "errors/010_caffe-cuda-driver-insufficient-35_K80.txt": [("image", "cuda_driver_too_old")],
    # "... failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]", then the unit fails
    "host/004_journal_fabricmanager_failed_NV_WARN_NOTHING_TO_DO_2xA40-nvlink-bridge_zh-locale.txt":
        [("fabric", "fabric_manager_not_needed"), ("fabric", "fabric_manager_failed")],
    # "Job for nvidia-fabricmanager.service failed because the control process exited with error code."
    "host/005_journalctl-xeu_fabricmanager_restart-failed_8xH20-ppcie.txt": [("fabric", "fabric_manager_failed")],
    # "fabric manager NVIDIA GPU driver interface version 590.48.01 don't match with driver version 580.126.09."
    "host/006_fabricmanager_version-mismatch_fm-590.48.01_driver-580.126.09_H200-HGX.txt":
        [("fabric", "fabric_manager_version_mismatch")],
    # "E: Version '580.65.06-1' for 'nvidia-fabricmanager-580' was not found"
    "host/010_apt_nvidia-fabricmanager-580-virtual-package_version-not-found.txt":
        [("driver", "package_version_not_found")],
    "nvidia_smi/029_error_nvml-version-mismatch_570.124.txt": [("driver", "nvml_mismatch")],
    "nvidia_smi/030_error_nvml-version-mismatch_550.144.txt": [("driver", "nvml_mismatch")],
    "nvidia_smi/031_error_nvml-version-mismatch_old-460-no-version-line.txt": [("driver", "nvml_mismatch")],
    "nvidia_smi/032_error_couldnt-communicate-with-driver.txt": [("driver", "driver_not_loaded")],
    # `nvidia-smi -q -i 0 | grep -A 2 '^ *Fabric'` on a p5 (8x H100 SXM): "State : In Progress" - the fabric manager
    # has not set the NVSwitch fabric up (what `gpuhost fabric` says: not_ready)
    "nvidia_smi/059_q-grep-fabric_570.133.20_8xH100-SXM_p5-rhel9_in-progress.txt": [("fabric", "fabric_not_ready")],
    # Completed / Success, but "Health / Summary : Unhealthy"
    "nvidia_smi/066_q-grep-fabric_completed-success_health-unhealthy_cliqueid2.txt": [("fabric", "fabric_unhealthy")],
    # "State : Completed", "Status : Insufficient Resources"
    "nvidia_smi/067_q-fabric_completed-insufficient-resources_cliqueid0_dedented.txt": [("fabric", "fabric_failed")],
    # "RuntimeError: Triton Error [CUDA]: device kernel image is invalid" (a T4)
    "vllm_logs/006_v0.11.0_T4_qwen3vl_ansi_triton-kernel-image-invalid.log": [("image", "kernel_image_invalid")],
    # "ValueError: The supplied chat template string (tool_use) appears path-like, but doesn't exist!"
    "vllm_logs/020_v0.11-era_cpu-macos_chat-template-arg-error.log": [("vllm_config", "argument_error")],
    # the start never completes; "No available shared memory broadcast block found in 60 seconds"
    "vllm_logs/025_v0.16.0_ROCm-8gpu_glm5-fp8_stalled-in-profiling.log": [("vllm_config", "worker_hang")],
    # "401 Client Error: Unauthorized for url: https://huggingface.co/meta-llama/..."
    "vllm_logs/026_v0.10.0_cpu-xeon_gated-repo-401_excerpt.log": [("vllm_config", "gated_model")],
    # after the start, at wake-up: "RuntimeError: CUDA Error: out of memory at .../cumem_allocator.cpp:139"
    "vllm_logs/031_v0.22.0_sleep-mode_wake-up-cuda-oom-after-start.log": [("vllm_memory", "cuda_oom")],
    # "OutOfMemoryError: HIP out of memory. Tried to allocate 80.00 MiB"
    "vllm_logs/033_v0.14.0rc1_ROCm-16GB_fp8_hip-oom-during-compile.log": [("vllm_memory", "cuda_oom")],
    # "Available KV cache memory: -2.14 GiB" (no line names the error: the start's report does)
    "vllm_logs/036_v0.10.1-era_H100_gpt-oss-120b_fp4-marlin-fallback_negative-kv_excerpt.log":
        [("vllm_memory", "kv_cache_insufficient")],
    # "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 786.00 MiB"
    "vllm_logs/038_v0.11-era_H100_gpt-oss-120b_cuda-oom-in-sampler-warmup_excerpt.log":
        [("vllm_memory", "cuda_oom")],
    # "# GPU blocks: 0, # CPU blocks: 256"
    "vllm_logs/039_v0.3-era_RTX3090_qanything_gpu-blocks-0_no-cache-memory_excerpt.log":
        [("vllm_memory", "kv_cache_insufficient")],
    # "ValueError: No available memory for the cache blocks."
    "vllm_logs/040_v0.6.4.post1_docker-compose_qwen2.5-0.5b_no-available-memory-cache-blocks_excerpt.log":
        [("vllm_memory", "kv_cache_insufficient")],
    # "The model's max seq len (29000) is larger than the maximum number of tokens ... (23648)"
    "vllm_logs/041_v0.6.x_RTX3090_llama3.1-8b_max-seq-len-larger-than-kv-cache_user-stripped-prefixes.log":
        [("vllm_memory", "kv_cache_insufficient")],
    # "NCCL WARN Error: failed to extend /dev/shm/nccl-WU88OE to 9637892 bytes ... No space left on device (28)"
    "vllm_logs/042_NOT-VLLM_pytorch-ci_T4x4_nccl-shm-no-space-left-on-device_excerpt.log":
        [("container", "shm_exhausted")],
    # "# GPU blocks: 229" = 3,664 tokens < max_seq_len 4096
    "vllm_logs/046_v0.2-era_alpaca2-7b_offline_gpu-blocks-229_max-seq-len-error_excerpt.log":
        [("vllm_memory", "kv_cache_insufficient")],
    # "To serve at least one request with the models's max seq len (131072), (4.54 GiB KV cache is needed..."
    "vllm_logs/047_v0.11-era_H100_gpt-oss-120b_models-s-typo_kv-needed_excerpt.log":
        [("vllm_memory", "kv_cache_insufficient")],
    # the same error, hard-wrapped at ~100 columns by the user's terminal
    "vllm_logs/048_v0.2x_intel-arc-b70-xpu_hard-wrapped-lines_kv-needed_excerpt.log":
        [("vllm_memory", "kv_cache_insufficient")],
}
CORPUS_DIRS = {"errors": "errors", "host": "host", "nvidia_smi": "nvidia_smi", "vllm_logs": "vllm_logs"}


def _corpus_files():
    out = []
    for sub in CORPUS_DIRS:
        directory = os.path.join(CORPUS, sub)
        if os.path.isdir(directory):
            out.extend("%s/%s" % (sub, name) for name in sorted(os.listdir(directory)))
    return out


def _fixture(name):
    sub, base = name.split("/", 1)
    with open(os.path.join(FIXTURES, CORPUS_DIRS[sub], base), "rb") as handle:
        return handle.read()


FILES = _corpus_files()


def test_fixtures_are_unedited_copies_of_the_corpus():
    if not FILES:
        pytest.skip("shared corpus not mounted")
    for name in FILES:
        with open(os.path.join(CORPUS, name), "rb") as original:
            assert original.read() == _fixture(name), name
    assert set(EXPECTED) <= set(FILES)


@pytest.mark.parametrize("name", FILES or ["(no corpus)"])
def test_every_corpus_text_is_explained_or_left_alone(name):
    if name == "(no corpus)":
        pytest.skip("shared corpus not mounted")
    result = ex.explain(_fixture(name))
    found = [(f["layer"], f["kind"]) for f in result["findings"]]
    assert found == EXPECTED.get(name, []), result["findings"]
    if not found:
        assert result["summary"] == ex.NO_FINDING
    for finding in result["findings"]:
        assert finding["quote"] and finding["meaning"] and finding["fix"] and finding["line"] >= 1


def test_the_decisive_line_is_quoted():
    result = ex.explain(_fixture("errors/008_compose-unsatisfied-condition-cuda-12.8_host-550.144.03.txt"))
    (finding,) = result["findings"]
    assert finding["line"] == 4 and "unsatisfied condition: cuda>=12.8" in finding["quote"]
    # A traceback quotes the raising source line first; the exception line is quoted instead.
    with open(os.path.join(FIXTURES, "vllm_logs_calibration",
                           "012_v0.10.2_RTX4080-16GB-WSL_llava-1.5-7b-hf_fp16_4k_negative-kv.log"), "rb") as h:
        (kv,) = ex.explain(h.read())["findings"]
    assert kv["quote"].startswith("ValueError: No available memory for the cache blocks.")


def test_a_hang_line_during_a_long_compile_is_not_news():
    # corpus 019 started fine; vLLM printed the broadcast-block line once while torch.compile ran.
    text = _fixture("vllm_logs/019_v0.13.0_nemotron-49b_singularity-job-trace_ok.log")
    assert b"No available shared memory broadcast block found" in text
    assert ex.explain(text)["findings"] == []


def test_xid_lines_name_the_gpu_and_nvidias_meaning():
    result = ex.explain(KMSG)
    kinds = [(f["kind"], f.get("pci")) for f in result["findings"]]
    assert kinds == [("xid_79", "0000:17:00"), ("xid_63", "0000:10:1c"), ("xid_32", "0000:01:00"),
                     ("xid_79", "0000:2b:00"), ("xid_13", "0000:17:00")]
    fallen = result["findings"][0]
    assert fallen["layer"] == "hardware" and "fallen off the bus" in fallen["meaning"]
    assert fallen["fix"] == catalogue.XID_ACTIONS["RESTART_BM"]
    for code in (13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 154):
        assert code in catalogue.XID_CATALOGUE
    # A lower layer explains a higher one: the Xid comes first.
    mixed = ex.explain(KMSG.splitlines()[-1] + "\nError: No available memory for the cache blocks.\n")
    assert [f["layer"] for f in mixed["findings"]][0] == "hardware"


def test_pastes_as_they_come():
    line = "Failed to initialize NVML: Driver/library version mismatch"
    for pasted in ("\x1b[31m" + line + "\x1b[0m\r\n", "2025-02-17T14:52:02.912834Z " + line + "\n",
                   "vllm-1  | " + line, "^[[0;36m(EngineCore_DP0 pid=70073)^[[0;0m " + line):
        (finding,) = ex.explain(pasted)["findings"]
        assert finding["kind"] == "nvml_mismatch", pasted
    assert ex.explain("")["findings"] == [] and ex.explain("all good\n")["summary"] == ex.NO_FINDING


def test_big_and_binary_input():
    big = ("INFO 12-04 07:00:00 [loggers.py:1] Avg prompt throughput: 1.0 tokens/s\n" * 60000
           + "ValueError: No available memory for the cache blocks.\n")
    assert len(big) > 4 * 1024 * 1024
    (finding,) = ex.explain(big.encode())["findings"]
    assert finding["kind"] == "kv_cache_insufficient" and finding["line"] == 60001
    with pytest.raises(ex.ExplainError, match="binary"):
        ex.explain(b"\x7fELF\x02\x01\x01\x00\x00\x00" * 50)
    with pytest.raises(ex.ExplainError, match="tail"):
        ex.explain(b"x" * (ex.MAX_INPUT_BYTES + 1))


def test_readers_share_the_table():
    """The stack check, the facts and the vLLM report classify with the same entries."""
    assert stack_check.classify_container({"rc": 125, "stdout": "", "stderr": _fixture(
        "errors/006_docker26-rootless-device-cdi_could-not-select-device-driver-cdi.txt").decode()})[0] == \
        "no_gpu_driver"
    assert classify_error(_fixture("nvidia_smi/029_error_nvml-version-mismatch_570.124.txt"))[0] == \
        "version_mismatch"
    assert [name for name, _ in vllm_log.FAILURE_ENTRIES] == [
        "shm_exhausted", "free_memory_below_utilization", "kv_cache_insufficient", "cuda_oom", "gated_model",
        "import_error", "argument_error"]
    assert stack_check.XID_CATALOGUE is catalogue.XID_CATALOGUE
    for entry in catalogue.ENTRIES:
        assert entry["layer"] in CATALOGUE_ORDER and entry["meaning"] and entry["fix"]


def gpuhost(*args, stdin=None):
    return subprocess.run([sys.executable, GPUHOST, "explain"] + list(args), input=stdin, capture_output=True,
                          timeout=60)


def test_cli_on_stdin_as_json_and_text():
    text = _fixture("errors/001_devicequery-802_570.133.20_8xH100-SXM_podman-cdi_fm-not-started.txt")
    proc = gpuhost("--json", "-", stdin=text)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["findings"][0]["kind"] == "fabric_manager_not_running"
    assert result["summary"].startswith("fabric layer: fabric_manager_not_running")
    proc = gpuhost(os.path.join(FIXTURES, "errors", "003_journal_modprobe-nvidia-key-rejected-by-service_secure-boot.txt"))
    assert proc.returncode == 0 and b"[driver] secure_boot_rejected" in proc.stdout and b"mokutil" in proc.stdout
    none = gpuhost("-", stdin=b"Application startup complete.\n")
    assert none.returncode == 1 and none.stdout.startswith(b"no known GPU-stack error in this text")
    bad = gpuhost("--json", "-", stdin=b"\x00\x01\x02binary")
    assert bad.returncode == 2 and json.loads(bad.stdout)["error"].startswith("gpuhost explain: input is binary")
    helped = subprocess.run([sys.executable, GPUHOST, "explain", "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "Example:" in helped.stdout and "gpuhost explain -" in helped.stdout


@pytest.mark.parametrize("name, layer, kind", [
    ("003_driver_too_old_gpu-operator-389.txt", "image", "cuda_driver_too_old"),
    ("006_no_device_gpu-operator-1900.txt", "container", "cuda_no_device"),
    ("007_other-forward-compat_gpu-operator-277.txt", "image", "forward_compat_unsupported"),
    ("009_other-busy-unavailable_gpu-operator-2842.txt", "driver", "cuda_device_busy"),
    ("011_other-initialization-error_gpu-operator-1546.txt", "driver", "cuda_initialization_error"),
    ("012_other-unknown-error-gpu-fault_gpu-operator-1146.txt", "driver", "cuda_unknown_error"),
])
def test_cuda_sample_failures_are_explained(name, layer, kind):
    with open(os.path.join(FIXTURES, "cuda_probe", name), "rb") as handle:
        result = ex.explain(handle.read())
    assert [(f["layer"], f["kind"]) for f in result["findings"]] == [(layer, kind)]
    assert "Failed to allocate device vector A" in result["findings"][0]["quote"]


def test_cuda_sample_success_is_left_alone():
    with open(os.path.join(FIXTURES, "cuda_probe", "001_success_gpu-operator-346.txt"), "rb") as handle:
        assert ex.explain(handle.read())["findings"] == []


# Secure Boot texts (tests/fixtures/secure_boot/README.md): the kernel's and modprobe's rejection lines
# name the driver layer; the facts (mokutil, lockdown, modinfo, dpkg, and a module that loaded unsigned)
# are no error.
SECURE_BOOT_EXPECTED = {
    # "[27532.356706] Loading of unsigned module is rejected"
    "dmesg_unsigned-module-rejected_wch-ch35x-38x-linux-32.txt": [("driver", "module_unsigned_rejected")],
    # "Loading of module with unavailable key is rejected", then "load nvidia failed: key was rejected by service"
    "talos-kern-log_nvidia_unavailable-key-rejected_talos-7043.txt":
        [("driver", "module_key_unavailable"), ("driver", "secure_boot_rejected")],
    # "Lockdown: modprobe: unsigned module loading is restricted; see man kernel_lockdown.7"
    "journal_lockdown-unsigned-module-restricted_evdi_displaylink-debian-523.txt":
        [("driver", "lockdown_unsigned_module")],
    # "ERROR: The kernel module failed to load, because it was not signed by a key that is trusted by the kernel."
    "nvidia-installer_not-signed-by-trusted-key_gpu-operator-266.txt": [("driver", "secure_boot_rejected")],
    # nvidia-smi's "couldn't communicate with the NVIDIA driver", then modprobe's "Key was rejected by service"
    "nvidia-smi-and-modprobe_key-rejected_ubuntu22.04-535_nvidia-graphics-drivers-62.txt":
        [("driver", "driver_not_loaded"), ("driver", "secure_boot_rejected")],
}
SECURE_BOOT_FILES = sorted(n for n in os.listdir(os.path.join(FIXTURES, "secure_boot")) if n.endswith(".txt"))


@pytest.mark.parametrize("name", SECURE_BOOT_FILES)
def test_secure_boot_texts(name):
    with open(os.path.join(FIXTURES, "secure_boot", name), "rb") as handle:
        result = ex.explain(handle.read())
    assert [(f["layer"], f["kind"]) for f in result["findings"]] == SECURE_BOOT_EXPECTED.get(name, [])
    for finding in result["findings"]:
        if finding["kind"] != "driver_not_loaded":
            assert "mokutil --import" in finding["fix"] and "linux-modules-nvidia-" in finding["fix"]


def test_every_secure_boot_row_has_a_real_example():
    kinds = {kind for expected in SECURE_BOOT_EXPECTED.values() for _, kind in expected}
    assert {entry["kind"] for _, entry in catalogue.in_scope("kernel")} <= kinds
    assert set(SECURE_BOOT_EXPECTED) <= set(SECURE_BOOT_FILES)


# --- each row's real phrasings, each line alone as an operator pastes it ------------------------------------
# (file under tests/fixtures, line number, layer, kind): the other ways the same error is printed - by each CUDA
# program, by another tool of the driver - read off the real captures; the row's pattern names them all.
PHRASINGS = [
    # deviceQuery: "cudaGetDeviceCount returned 802" (8x H100 SXM p5, RHEL 9, 570.133.20)
    ("errors/001_devicequery-802_570.133.20_8xH100-SXM_podman-cdi_fm-not-started.txt", 6,
     "fabric", "fabric_manager_not_running"),
    # its next line: "-> system not yet initialized"
    ("errors/001_devicequery-802_570.133.20_8xH100-SXM_podman-cdi_fm-not-started.txt", 7,
     "fabric", "fabric_manager_not_running"),
    # bandwidthTest: "cudaGetDeviceProperties returned 802"
    ("fabric/cuda-802_bandwidthTest_cudaErrorSystemNotReady.txt", 5, "fabric", "fabric_manager_not_running"),
    # the CUDA samples' checkCudaErrors: "CUDA error at bandwidthTest.cu:256 code=802(cudaErrorSystemNotReady) ..."
    ("fabric/cuda-802_bandwidthTest_cudaErrorSystemNotReady.txt", 7, "fabric", "fabric_manager_not_running"),
    # PyTorch: "UserWarning: CUDA initialization: ... Error 802: system not yet initialized"
    ("fabric/cuda-802_pytorch-is_available-warning_8xGPU-cloud-fm-mismatch.txt", 1,
     "fabric", "fabric_manager_not_running"),
    # gpu_burn: "what():  Error (gpu_burn-drv.cpp:298): system not yet initialized"
    ("errors/002_gpu-burn-802_545.23.08_H100-80GB-HBM3-multi_centos7_no-fabricmanager.txt", 8,
     "fabric", "fabric_manager_not_running"),
    # nvidia-smi: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. ..."
    ("nvidia_smi/032_error_couldnt-communicate-with-driver.txt", 1, "driver", "driver_not_loaded"),
    # nvidia-settings in an Ubuntu desktop journal: "nvidia-settings-autostart.desktop[2777]: ERROR: NVIDIA driver
    # is not loaded"
    ("errors/003_journal_modprobe-nvidia-key-rejected-by-service_secure-boot.txt", 5, "driver", "driver_not_loaded"),
]


@pytest.mark.parametrize("name, number, layer, kind", PHRASINGS)
def test_each_phrasing_of_a_row_alone(name, number, layer, kind):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        line = handle.read().split("\n")[number - 1]
    (finding,) = ex.explain(line + "\n")["findings"]
    assert (finding["layer"], finding["kind"]) == (layer, kind), line
    assert finding["quote"] and finding["quote"] in line


def test_nvidia_settings_driver_not_loaded_is_the_smi_state():
    line = _fixture("errors/003_journal_modprobe-nvidia-key-rejected-by-service_secure-boot.txt").decode().split(
        "\n")[4]
    assert classify_error(line)[0] == "driver_not_loaded"


# --- the Fabric blocks of a pasted -q: the verdict `gpuhost fabric` gives -------------------------------------

@pytest.mark.parametrize("name, kind, quote", [
    ("059_q-grep-fabric_570.133.20_8xH100-SXM_p5-rhel9_in-progress.txt", "fabric_not_ready", "In Progress"),
    ("066_q-grep-fabric_completed-success_health-unhealthy_cliqueid2.txt", "fabric_unhealthy", "Unhealthy"),
    ("067_q-fabric_completed-insufficient-resources_cliqueid0_dedented.txt", "fabric_failed", "Insufficient Resources"),
])
def test_fabric_findings_are_gpuhost_fabrics_verdict(name, kind, quote):
    from gpuhost_cli import fabric as fabric_cli
    path = os.path.join(FIXTURES, "nvidia_smi", name)
    with open(path, "rb") as handle:
        data = handle.read()
    (finding,) = ex.explain(data)["findings"]
    fabric = fabric_cli.report(data)
    assert (finding["layer"], finding["kind"]) == ("fabric", "fabric_" + fabric["verdict"]) == ("fabric", kind)
    assert finding["meaning"].startswith(fabric["message"]) and finding["fix"] == fabric["fix"]
    assert fabric["reason"] in finding["meaning"]  # the host needs the fabric manager, and why
    assert quote in finding["quote"] and data.decode().split("\n")[finding["line"] - 1].strip() == finding["quote"]


@pytest.mark.parametrize("name", ["055_q_565.57.01_8xH100-SXM_fabric-completed-cliqueid0.txt",
                                  "056_q_555.42.02_4xA100-SXM4-80GB_fabric-NA_no-nvswitch.txt",
                                  "057_q_590.48.01_H100-SXM-1gpu-vm_fabric-completed-health-block.txt",
                                  "060_q-grep-fabric_570.133.20_8xH100-SXM_p5-rhel9_completed.txt"])
def test_a_fabric_that_is_up_or_absent_is_no_finding(name):
    with open(os.path.join(FIXTURES, "nvidia_smi", name), "rb") as handle:
        assert ex.explain(handle.read())["findings"] == []


def test_an_nvswitch_host_without_its_fabric_manager():
    """One host (p5, 8x H100 SXM, RHEL 9, 570.133.20; corpus MANIFEST: the same article) before its fabric manager
    ran, pasted as its article shows it: the table looks healthy (061), `nvidia-smi -q | grep -A 2 Fabric` says In
    Progress (059), deviceQuery fails with 802 (errors/001). Both fabric findings; the first is the fabric's."""
    parts = [_fixture("nvidia_smi/061_table_570.133.20_8xH100-SXM_p5-rhel9_fabric-in-progress-looks-healthy.txt"),
             _fixture("nvidia_smi/059_q-grep-fabric_570.133.20_8xH100-SXM_p5-rhel9_in-progress.txt"),
             _fixture("errors/001_devicequery-802_570.133.20_8xH100-SXM_podman-cdi_fm-not-started.txt")]
    paste = b"\n".join(parts)
    found = ex.explain(paste)["findings"]
    assert [(f["layer"], f["kind"]) for f in found] == [("fabric", "fabric_not_ready"),
                                                       ("fabric", "fabric_manager_not_running")]
    assert "the host needs the fabric manager" in found[0]["meaning"]
    assert "nvidia-fabricmanager" in found[0]["fix"] and "nvidia-fabricmanager" in found[1]["fix"]
    # gpuhost smi reads the table and gives the fabric's reading with it
    from gpuhost_cli import smi as smi_cli
    out, text = smi_cli.answer(paste)
    assert out["command"] == "smi" and len(out["gpus"]) == 8 and out["fabric"]["verdict"] == "not_ready"
    assert "fabric: not_ready" in text


# --- pinned memory refused (the memlock limit): NCCL over IB and OFI, UCX, llama.cpp (tests/fixtures/memlock/) ---
MEMLOCK_FILES = sorted(os.listdir(os.path.join(FIXTURES, "memlock")))


@pytest.mark.parametrize("name", [n for n in MEMLOCK_FILES if n.endswith(".txt")])
def test_a_refused_memory_lock_is_the_memlock_limit_with_its_fix(name):
    with open(os.path.join(FIXTURES, "memlock", name), encoding="utf-8") as handle:
        text = handle.read()
    findings = ex.explain(text)["findings"]
    assert findings and (findings[0]["layer"], findings[0]["kind"]) == ("docker", "memlock_limit"), findings
    assert "--ulimit memlock=-1" in findings[0]["fix"] and "gpuhost_training" in findings[0]["fix"]
    assert findings[0]["quote"] in text


def test_every_memlock_text_has_its_source():
    with open(os.path.join(FIXTURES, "memlock", "README.md"), encoding="utf-8") as handle:
        readme = handle.read()
    assert [n for n in MEMLOCK_FILES if n.endswith(".txt") and "`%s`" % n not in readme] == []


@pytest.mark.parametrize("name, kind", [
    # NVIDIA/dcgm-exporter#193: dcgmi without a running nv-hostengine (both of its lines).
    ("not-connected_discovery-l_dcgm-exporter-193.txt", "dcgm_hostengine_unreachable"),
    # NVIDIA/DCGM#254: DCGM 4.4.1 on V100s whose cuda12 plugin package is not installed.
    ("diag-r3-v_4.4.1_4xV100_cuda12-plugins-missing_DCGM-254.txt", "dcgm_plugins_missing"),
])
def test_dcgmi_refusals_land_on_the_dcgm_layer(name, kind):
    with open(os.path.join(FIXTURES, "dcgmi", name), "rb") as handle:
        findings = ex.explain(handle.read())["findings"]
    assert [(f["layer"], f["kind"]) for f in findings][:1] == [("dcgm", kind)]
    assert "site.yml --tags dcgm" in findings[0]["gpuhost"]
