"""GPU references (module_utils/gpu/gpu_refs.py), the one reader of `0`, `GPU-...`, `0:1` and `MIG-...` that the vLLM
instances' `gpus` and the serving check's docker device requests share. Real captures of one H100 host in MIG mode
(driver 590.48.01): `nvidia-smi -q` (corpus 003) and `nvidia-smi -L` (corpus 028, masked UUIDs)."""
import os

import pytest

from gpu import gpu_refs, nvsmi_parse
from conftest import FIXTURES

SMI = os.path.join(FIXTURES, "nvidia_smi")


def load(name):
    with open(os.path.join(SMI, name), encoding="utf-8") as handle:
        return handle.read()


MIG_GPUS = nvsmi_parse.merge_mig_listing(
    {"gpus": nvsmi_parse.facts_from_output(load("003_q_590.48.01_H100-MIG_load.txt"))["gpus"]},
    load("028_L_590.48.01_H100-MIG.txt"))["gpus"]
GPU0_UUID = "GPU-00000000-0000-0000-0000-000000000000"
SLICE1_UUID = "MIG-00000001-0000-0000-0000-000000000001"


@pytest.mark.parametrize("ref, kind", [
    ("0", "index"), (" 7 ", "index"), ("0:1", "mig"), (GPU0_UUID, "uuid"), (SLICE1_UUID, "mig_uuid"), (3, "index"),
])
def test_each_form_is_read_as_what_it_names(ref, kind):
    assert gpu_refs.parse_gpu_ref(ref)["kind"] == kind
    assert gpu_refs.is_mig_ref(ref) == (kind in ("mig", "mig_uuid"))


def test_gpu_colon_device_carries_both_indexes():
    assert gpu_refs.parse_gpu_ref("2:3") == {"kind": "mig", "ref": "2:3", "gpu": 2, "device": 3}


@pytest.mark.parametrize("ref", ["0", GPU0_UUID, "0:1", SLICE1_UUID])
def test_every_form_finds_the_gpu_that_holds_it(ref):
    assert gpu_refs.gpu_named(ref, MIG_GPUS)["uuid"] == MIG_GPUS[0]["uuid"]


@pytest.mark.parametrize("ref, whole", [("0", True), (GPU0_UUID, True), ("0:1", False), (SLICE1_UUID, False)])
def test_only_an_index_or_gpu_uuid_gives_the_gpu_whole(ref, whole):
    assert (gpu_refs.gpu_named(ref, MIG_GPUS, whole=True) is not None) == whole


@pytest.mark.parametrize("ref", ["1", "GPU-ffffffff-0000-0000-0000-000000000000", "MIG-ffffffff-0000-0000-0000-0000000000ff"])
def test_what_this_host_lacks_is_none(ref):
    assert gpu_refs.gpu_named(ref, MIG_GPUS) is None
