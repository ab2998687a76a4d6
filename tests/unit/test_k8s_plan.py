"""k8s_plan: which replicas can share one GPU, and the check of their memory (seed 003's L4)."""
import pytest

from gpu import gpu_memory
from serving import k8s_plan
from serving import vllm_sharing as vsh

L4 = gpu_memory.device_memory("L4")  # 23,034 MiB - 434 reserved = 22,600 MiB CUDA total


def workload(name, replicas, util, resource="nvidia.com/gpu.shared", count=1):
    return {"kind": "Deployment", "namespace": "llm", "name": name, "replicas": replicas, "container": "vllm",
            "image": "vllm/vllm-openai:v0.11.0", "model": "m", "gpu_memory_utilization": util,
            "max_model_len": 4096, "max_num_seqs": 16, "tensor_parallel_size": count,
            "gpu_resource": resource, "gpu_count": count}


def test_check_instances_counts_memory_outside_the_budgets():
    four = [{"name": str(i), "gpu_memory_utilization": 0.25} for i in range(4)]
    assert vsh.check_instances(four, 22600)[0]["fits"]  # budgets alone: exactly the device
    check = vsh.check_instances(four, 22600, per_instance_mib=144)[0]
    assert not check["fits"] and check["required_mib"] == 22600 + 4 * 144
    assert vsh.even_share(check) == 0.24  # floor((22,600 - 576) / 4 / 22,600, 2 decimals)


def test_two_deployments_on_one_shared_resource_pack_the_largest_budgets():
    # 2 x 0.40 and 3 x 0.20 asking nvidia.com/gpu.shared, 4 per GPU: the worst GPU takes 0.40, 0.40, 0.20, 0.20.
    plan = k8s_plan.plan_manifest([workload("a", 2, 0.40), workload("b", 3, 0.20)], L4, replicas_option=4)
    gpu = plan["gpus"][0]
    assert gpu["workloads"] == ["a", "b"] and gpu["replicas_on_one_gpu"] == 4
    assert gpu["sum_utilization"] == pytest.approx(1.2) and not gpu["fits"] and plan["verdict"] == "refuse"
    assert "4 of the 5 GPU references" in gpu["sharing"]


def test_whole_gpus_hold_one_process_each():
    # 3 pods of TP 2 on whole GPUs: each GPU runs one rank, whatever the replicas.
    plan = k8s_plan.plan_manifest([workload("big", 3, 0.90, "nvidia.com/gpu", 2)], L4)
    gpu = plan["gpus"][0]
    assert gpu["replicas_on_one_gpu"] == 1 and gpu["fits"] and plan["verdict"] == "ok"
    assert gpu["required_mib"] == round(0.90 * 22600) + k8s_plan.OUTSIDE_BUDGET_MIB


def test_fewer_replicas_than_slices():
    plan = k8s_plan.plan_manifest([workload("a", 2, 0.40)], L4, replicas_option=4)
    assert plan["gpus"][0]["replicas_on_one_gpu"] == 2 and plan["verdict"] == "ok"
