"""dcgmi diag -j read on real DCGM 4 documents (tests/fixtures/dcgm_diag/): per GPU and test, DCGM's warnings with
their error ids, and the verdict with dcgmi's exit code (the source runs exited 226)."""
import pytest

from conftest import read_fixture
from gpu import dcgm_diag as dd

GATED = read_fixture("dcgm_diag", "diag-r2-j_4.5.2_GB10_software-fail_memory-pcie-skip.json")
ALLOWED = read_fixture("dcgm_diag", "diag-r2-j_4.5.2_GB10_software-fail_memory-pcie-pass.json")
A100 = read_fixture("dcgm_diag", "diag-r1-j_4.1.1_A100-SXM4-40GB_software-fail.json")


def test_a_level_1_run_names_the_failed_test_the_gpu_and_dcgms_error():
    parsed = dd.parse(A100)
    assert (parsed["version"], parsed["driver_version"]) == ("4.1.1", "570.148.08")
    assert parsed["gpus"] == {0: {"device_id": "20b0", "serial": "0000000000000"}}
    assert [(t["category"], t["name"], t["status"]) for t in parsed["tests"]] == [("Deployment", "software", "fail")]
    out = dd.verdict(parsed, 226)
    assert out["status"] == "fail" and out["exit"].startswith("a test failed")
    assert out["failed"][0]["gpu"] == 0 and out["failed"][0]["warnings"][0]["error_id"] == 29
    assert out["messages"] == ["GPU 0: software (Deployment) failed: Persistence Mode: Persistence mode for GPU 0 is "
                               "disabled. Enable persistence mode by running \"nvidia-smi -i <gpuId> -pm 1 \" as root. "
                               "(DCGM error 29)"]


def test_a_skipped_test_is_said_never_counted_as_a_pass():
    # GB10 is not among the SKUs DCGM runs its memory and PCIe plugins on unless allowed: both skip, no reason given.
    out = dd.verdict(dd.parse(GATED), 226)
    assert [(s["gpu"], s["test"]) for s in out["skipped"]] == [(0, "memory"), (0, "pcie")]
    assert "GPU 0: memory (Hardware) was skipped: not proven" in out["messages"]


def test_the_plugins_allowed_pass_and_carry_their_measurements():
    parsed = dd.parse(ALLOWED)
    tests = dict((t["name"], t) for t in parsed["tests"])
    assert tests["memory"]["status"] == "pass" and tests["pcie"]["status"] == "pass"
    assert "GPU to Host bandwidth:\t\t58.62 GB/s" in tests["pcie"]["results"][0]["info"]
    # The summary repeats the software test's warning (4.5.2); the failure is counted once, per result.
    out = dd.verdict(parsed, 226)
    assert [(f["gpu"], f["test"]) for f in out["failed"]] == [(0, "software")] and out["skipped"] == []


@pytest.mark.parametrize("rc,status", [(205, "isolate"), (242, "error"), (1, "error")])
def test_the_exit_code_decides_what_the_document_does_not(rc, status):
    assert dd.verdict(dd.parse(A100), rc)["status"] == ("fail" if status == "error" else status)
    # The same code with no failed result in the document: the code alone decides.
    assert dd.verdict({"tests": [], "runtime_error": None}, rc)["status"] == status


def test_what_is_not_a_dcgm_4_document_is_named():
    with pytest.raises(dd.DcgmDiagError, match="prints a table"):
        dd.parse("Successfully ran diagnostic for group.\n")
    with pytest.raises(dd.DcgmDiagError, match="DCGM 3 document"):
        dd.parse(A100.replace('"DCGM Diagnostic"', '"DCGM GPU Diagnostic"'))
