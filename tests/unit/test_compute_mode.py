"""Compute modes on real nvidia-smi captures (tests/fixtures/compute_mode/): who may create a CUDA context on a
GPU, the health layer's compute_mode check, and the vLLM plan's refusal before any container starts."""
import os

from diagnosis import error_catalogue as catalogue
from gpu import compute_mode as cm
from gpu import nvsmi_parse
from layers import health
from serving import vllm_host_plan as vhp
from conftest import FIXTURES
from test_vllm_plan_host import H100, instance, models  # noqa: F401  (the models fixture)

CAPTURES = os.path.join(FIXTURES, "compute_mode")
GH200_EXCLUSIVE = "nvidia-smi_535.129.03_4xGH200_exclusive-process_no-processes_dedented.txt"
A100_MPS = "nvidia-smi_550.54.15_2xA100-PCIE-40GB_exclusive-process_mps-server-and-client.txt"
P40_DEFAULT = "nvidia-smi_387.26_Tesla-P40_default-after-gpu_cmode-shared_no-process-section.txt"
BUSY = "cuda-error_vectorAdd_5th-process-on-4xGH200-exclusive-process_dedented.txt"


def facts(name, partial=False):
    with open(os.path.join(CAPTURES, name), encoding="utf-8") as handle:
        return nvsmi_parse.facts_from_output(handle.read(), partial=partial)


def test_the_compute_mode_column_is_read_from_each_capture():
    assert [g["compute_mode"] for g in facts(GH200_EXCLUSIVE)["gpus"]] == ["Exclusive_Process"] * 4
    assert [g["compute_mode"] for g in facts(P40_DEFAULT, partial=True)["gpus"]] == ["Default"]


def test_an_exclusive_gpu_takes_one_newcomer_and_no_second():
    gpu = facts(GH200_EXCLUSIVE)["gpus"][0]
    assert cm.context_blocked(gpu, [], newcomers=1) is None
    why = cm.context_blocked(gpu, [], newcomers=2)
    assert why["reason"].startswith("GPU 0 is in compute mode Exclusive_Process (one process at a time) and 2 "
                                    "instances")
    assert "`nvidia-smi -i 0 -c DEFAULT`" in why["fix"]


def test_an_mps_server_holding_an_exclusive_gpu_is_the_mps_set_up_not_a_conflict():
    host = facts(A100_MPS)
    gpu0 = host["gpus"][0]
    on_gpu0 = [p for p in host["processes"] if p["gpu_index"] == 0]
    assert {p["name"] for p in on_gpu0} == {"nvidia-cuda-mps-server", "/usr/bin/dcgmproftester12"}
    assert cm.context_blocked(gpu0, on_gpu0) is None
    check = health.check_compute_mode(dict(host, state="ok"))
    assert check["status"] == "ok" and "MPS server on GPU 0, 1" in check["summary"]


def test_another_process_holding_an_exclusive_gpu_keeps_serving_off_it():
    host = facts(A100_MPS)
    # The MPS client left alone on GPU 0 (its server gone): an ordinary process holding an exclusive GPU.
    client = [p for p in host["processes"] if p["name"] == "/usr/bin/dcgmproftester12"]
    why = cm.context_blocked(host["gpus"][0], client)
    assert why["reason"].startswith(
        "GPU 0 is in compute mode Exclusive_Process and pid 686657 (/usr/bin/dcgmproftester12) holds it")
    check = health.check_compute_mode(dict(host, state="ok", processes=client))
    assert check["status"] == "fail" and check["layer"] == "health"
    assert "pid 686657 (/usr/bin/dcgmproftester12)" in check["summary"]
    assert check["remedy"].startswith("GPU 0: stop it, or `nvidia-smi -i 0 -c DEFAULT`")
    assert check["data"]["blocked"][0]["holders"] == [{"pid": 686657, "name": "/usr/bin/dcgmproftester12"}]
    # the same process inside a serving container is the container's own use of its GPU
    cgroups = {686657: "0::/system.slice/docker-4f1c2d9e.scope\n"}
    assert health.check_compute_mode(dict(host, state="ok", processes=client), cgroups, ["4f1c2d9e"])["status"] == "ok"


def test_prohibited_takes_no_process_and_mig_gpus_are_not_judged():
    gpu = dict(facts(GH200_EXCLUSIVE)["gpus"][1], compute_mode=cm.PROHIBITED)
    assert "no process may create a CUDA context" in cm.context_blocked(gpu, [])["reason"]
    assert cm.context_blocked(dict(gpu, mig_mode=True), []) is None


def test_default_gpus_pass_and_an_unreadable_host_is_skipped():
    check = health.check_compute_mode(dict(facts(P40_DEFAULT, partial=True), state="ok"))
    assert check["status"] == "ok" and check["summary"] == "every GPU in compute mode Default"
    assert health.check_compute_mode({"state": "driver_not_loaded", "gpus": []})["status"] == "skipped"


def test_the_busy_error_a_process_gets_there_is_the_catalogues_row_naming_compute_mode():
    with open(os.path.join(CAPTURES, BUSY), encoding="utf-8") as handle:
        text = handle.read()
    rows = [e for e in catalogue.ENTRIES if catalogue.matches(e, text, text.lower())]
    assert [e["kind"] for e in rows] == ["cuda_device_busy"]
    assert "Exclusive_Process" in rows[0]["meaning"]


def test_the_plan_refuses_instances_an_exclusive_gpu_cannot_take(models):  # noqa: F811
    mode = facts(GH200_EXCLUSIVE)["gpus"][0]["compute_mode"]
    gpu = dict(H100, compute_mode=mode)
    one = vhp.plan_host([instance("solo", "qwen3-4b", [0], 0.4, 4096)], [gpu], models)
    assert one["refused"] == []
    two = vhp.plan_host([instance("a", "qwen3-4b", [0], 0.4, 4096), instance("b", "qwen3-4b", [0], 0.4, 4096)],
                        [gpu], models)
    assert two["refused"] == ["a", "b"]
    assert "Exclusive_Process (one process at a time) and 2 instances" in two["message"]
    assert two["plans"]["a"]["remedies"] == []
    holder = [{"pid": 686657, "name": "/usr/bin/dcgmproftester12", "gpu_index": 0, "used_mib": 456}]
    held = vhp.plan_host([instance("solo", "qwen3-4b", [0], 0.4, 4096)], [gpu], models, others=holder)
    assert held["refused"] == ["solo"]
    assert "pid 686657 (/usr/bin/dcgmproftester12) holds it" in held["message"]
    assert held["message"].endswith("No container was started.")
