"""vLLM on MIG (issue 24 item 4, unit level): an instance's `gpus` naming one MIG device (`GPU:device` or its MIG UUID)
is planned against that slice's memory. Real captures of one H100 host in MIG mode (driver 590.48.01): `nvidia-smi -q`
(corpus 003: MIG devices 3g.40gb 40448 MiB, 2g.20gb 20096 MiB, 1g.10gb 9984 MiB x2, each Reserved 0 MiB) and
`nvidia-smi -L` (corpus 028: the same four devices with their profiles and masked MIG UUIDs)."""
import os

import pytest

from gpu import nvsmi_parse
from serving import vllm_gpus as vg
from serving import vllm_host_plan as vhp
from serving import vllm_measured as vme
from serving import vllm_plan_inputs as vpi
from conftest import FIXTURES
import test_vllm_plan_host
from test_vllm_plan_host import instance

models = test_vllm_plan_host.models  # that module's fixture, for the tests here

SMI = os.path.join(FIXTURES, "nvidia_smi")


def load(name):
    with open(os.path.join(SMI, name), encoding="utf-8") as handle:
        return handle.read()


GPUS = nvsmi_parse.facts_from_output(load("003_q_590.48.01_H100-MIG_load.txt"))["gpus"]
LISTING = load("028_L_590.48.01_H100-MIG.txt")


def test_the_captures_are_one_h100_with_four_mig_devices():
    assert [g["mig_mode"] for g in GPUS] == [True]
    assert [d["memory_total_mib"] for d in GPUS[0]["mig_devices"]] == [40448, 20096, 9984, 9984]


def test_gpu_colon_device_names_the_slice():
    got = vg.resolve_gpus(["0:0"], GPUS, LISTING)
    mig = got["mig_device"]
    assert got["gpu_indexes"] == [0]
    assert (mig["profile"], mig["memory_total_mib"], mig["uuid"]) == \
        ("3g.40gb", 40448, "MIG-00000000-0000-0000-0000-000000000000")
    assert mig["cdi_device"] == "nvidia.com/gpu=0:0" and mig["visible_devices"] == mig["uuid"]
    assert mig["gpu_name"] == "NVIDIA H100 80GB HBM3 MIG 3g.40gb"


def test_a_mig_uuid_names_the_slice():
    mig = vg.resolve_gpus(["MIG-00000001-0000-0000-0000-000000000001"], GPUS, LISTING)["mig_device"]
    assert (mig["ref"], mig["profile"], mig["memory_total_mib"]) == ("0:1", "2g.20gb", 20096)


def test_without_the_listing_a_gpu_colon_device_still_has_its_memory():
    mig = vg.resolve_gpus(["0:2"], GPUS)["mig_device"]
    assert mig["memory_total_mib"] == 9984 and mig["profile"] is None and mig["visible_devices"] == "0:2"


@pytest.mark.parametrize("ids, words", [
    (["0"], "MIG is enabled there"),
    (["GPU-00000000-0000-0000-0000-000000000000"], "0:0, 0:1, 0:2, 0:3"),
    (["0:0", "0:1"], "one MIG device"),
    (["0:7"], "no MIG device 7"),
    (["3:0"], "no GPU 3"),
    (["MIG-ffffffff-0000-0000-0000-000000000000"], "not on this host"),
    ([], "gpus is empty"),
])
def test_what_cannot_be_served_is_refused_with_the_reason(ids, words):
    with pytest.raises(vpi.PlanError) as err:
        vg.resolve_gpus(ids, GPUS, LISTING)
    assert words in str(err.value)


def _on(name, ref, util, model="qwen3-4b", max_model_len=4096):
    got = vg.resolve_gpus([ref], GPUS, LISTING)
    return instance(name, model, got["gpu_indexes"], util, max_model_len, mig_device=got["mig_device"],
                    tensor_parallel_size=1)


def test_two_instances_each_on_a_slice_are_planned_against_the_slices(models):
    result = vhp.plan_host([_on("a", "0:0", 0.9), _on("b", "0:1", 0.9)], GPUS, models)
    a, b = result["plans"]["a"], result["plans"]["b"]
    # each budget is a share of its own slice (the captures' Totals, Reserved 0), not of the 80 GB card
    assert a["cuda_total_mib"] == 40448 and b["cuda_total_mib"] == 20096
    assert a["budget_mib"] == int(40448 * 0.9) or abs(a["budget_mib"] - 40448 * 0.9) <= 1
    # 0.9 + 0.9 would not fit one device; on two slices each fits its own
    assert result["refused"] == [], result["message"]
    assert "0:0 (NVIDIA H100 80GB HBM3 MIG 3g.40gb)" in result["lines"][0]
    # no tensor-parallel remedy across MIG devices
    assert all(r["tensor_parallel_size"] == 1 for plan in result["plans"].values() for r in plan["remedies"])


def test_two_instances_on_one_slice_share_it(models):
    result = vhp.plan_host([_on("a", "0:1", 0.6), _on("b", "MIG-00000001-0000-0000-0000-000000000001", 0.6)],
                           GPUS, models)
    assert result["refused"] == ["a", "b"]
    assert "GPU 0:1: 2 instances (a, b)" in result["message"]


def test_a_model_too_large_for_the_slice_is_refused(models):
    # Qwen2.5-14B's 13.9 GiB of BF16 weights do not fit 1g.10gb's 9984 MiB
    result = vhp.plan_host([_on("big", "0:2", 0.9, model="qwen2.5-14b-instruct")], GPUS, models)
    assert result["refused"] == ["big"]


def test_an_instance_whose_gpu_ids_name_a_mig_device_is_resolved_by_the_host_plan(models):
    # as the role resolves it: gpu_ids as given, gpu_indexes the parent GPU
    inst = instance("a", "qwen3-4b", [0], 0.9, 4096, gpu_ids=["0:1"], tensor_parallel_size=1)
    result = vhp.plan_host([inst], GPUS, models)
    assert result["plans"]["a"]["cuda_total_mib"] == 20096 and result["refused"] == []


def test_the_measurement_key_names_the_mig_device_in_the_plan_and_after_the_start(models):
    inst = instance("a", "qwen3-4b", [0], 0.9, 4096, gpu_ids=["0:1"], tensor_parallel_size=1)
    result = vhp.plan_host([inst], GPUS, models)
    key = result["plans"]["a"]["measurement_key"]
    # without the -L listing the slice is named by its size (003: 2g.20gb is 20096 MiB, 32 SMs)
    assert key == vme.measurement_key(inst, "NVIDIA H100 80GB HBM3 MIG 20096 MiB 32 SMs")[0]
    assert key != vme.measurement_key(inst, "NVIDIA H100 80GB HBM3")[0]
    after = vme.after_starts([inst], result["plans"], {}, set(), {}, GPUS, {}, 0.1)
    assert set(after["plans"]) == {"a"}


def test_gpu_indexes_of_every_form_an_instance_may_name():
    # the GPU facts of a host as nvidia_gpu_facts gives them with MIG on GPU 0 (-q's devices, -L's UUIDs merged)
    gpus = [{"index": 0, "uuid": "GPU-aaaa", "mig_mode": True,
             "mig_devices": [{"index": 0, "gpu_index": 0, "uuid": "MIG-1111"}, {"index": 1, "gpu_index": 0,
                                                                              "uuid": "MIG-2222"}]},
            {"index": 1, "uuid": "GPU-bbbb", "mig_mode": False, "mig_devices": []}]
    assert vg.gpu_indexes(["1"], gpus) == [1]
    assert vg.gpu_indexes([0, "GPU-bbbb"], gpus) == [0, 1]
    assert vg.gpu_indexes(["0:1"], gpus) == [0]
    assert vg.gpu_indexes(["MIG-2222"], gpus) == [0]
    # the same GPU twice counts once; what the host lacks adds nothing (the role compares the counts)
    assert vg.gpu_indexes(["1", "GPU-bbbb"], gpus) == [1]
    assert vg.gpu_indexes(["7", "GPU-cccc", "MIG-9999", "3:0"], gpus) == []


def test_instance_gpus_through_the_instances_module():
    from conftest import run_ansible_module
    gpus = [{"index": 0, "uuid": "GPU-aaaa", "memory_total_mib": 81559,
             "mig_devices": [{"index": 0, "gpu_index": 0, "uuid": "MIG-1111"}]},
            {"index": 1, "uuid": "GPU-bbbb", "memory_total_mib": 23034}]
    image = "vllm/vllm-openai:v0.11.0"
    result = run_ansible_module("vllm_instances", {"gpu_facts": {"state": "ok", "gpus": gpus}, "instances": [
        {"name": "slice", "gpus": ["MIG-1111"], "image": image, "port": 8000, "model": "m"},
        {"name": "whole", "gpus": [1, "GPU-aaaa"], "image": image, "port": 8001, "model": "m"},
        {"name": "typo", "gpus": ["2"], "image": image, "port": 8002, "model": "m"}]})
    # what the host lacks adds no index: the count differs, and the instance is refused naming what the host has
    assert result["failed"] and list(result["errors"]) == ["typo"], result
    assert "gpus 2: 2 is not on this host (this host has GPUs 0, 1; MIG devices 0:0)" in result["msg"]
    result = run_ansible_module("vllm_instances", {"gpu_facts": {"state": "ok", "gpus": gpus}, "instances": [
        {"name": "slice", "gpus": ["MIG-1111"], "image": image, "port": 8000, "model": "m"},
        {"name": "whole", "gpus": [1, "GPU-aaaa"], "image": image, "port": 8001, "model": "m"}]})
    assert not result["changed"]
    assert [(i["name"], i["gpu_ids"], i["gpu_indexes"], i["memory_total_mib"]) for i in result["instances"]] == [
        ("slice", ["MIG-1111"], [0], 81559), ("whole", ["1", "GPU-aaaa"], [0, 1], 23034)]
