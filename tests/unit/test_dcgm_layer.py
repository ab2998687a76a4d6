"""DCGM on a host (issue 40): which packages at which version (dcgm_install), the dcgm layer's check and the health
layer's dcgm_diag on real DCGM 4 documents (tests/fixtures/dcgm_diag/)."""
import pytest

from conftest import read_fixture
from gpu import dcgm_diag as dd
from gpu import dcgm_install as di
from layers import dcgm

A100 = read_fixture("dcgm_diag", "diag-r1-j_4.1.1_A100-SXM4-40GB_software-fail.json")
GATED = read_fixture("dcgm_diag", "diag-r2-j_4.5.2_GB10_software-fail_memory-pcie-skip.json")


def _dpkg(*rows):
    """`dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'` lines (host/dpkg.py's FORMAT's words)."""
    return "".join("%s\t%s\t%s\n" % row for row in rows)


MADISON = (" datacenter-gpu-manager-4-core | 1:4.5.2-1 | http://127.0.0.1/cuda/repos/debian12/x86_64  Packages\n"
           " datacenter-gpu-manager-4-core | 1:4.4.2-1 | http://127.0.0.1/cuda/repos/debian12/x86_64  Packages\n"
           "datacenter-gpu-manager-4-cuda13 | 1:4.5.2-1 | http://127.0.0.1/cuda/repos/debian12/x86_64  Packages\n"
           "datacenter-gpu-manager-4-cuda13 | 1:4.4.2-1 | http://127.0.0.1/cuda/repos/debian12/x86_64  Packages\n")


@pytest.mark.parametrize("cuda, archs, major", [
    ("13.0", ["Hopper", "Ada Lovelace"], 13),
    ("12.8", ["Hopper"], 12),
    # CUDA 13 dropped Maxwell, Pascal and Volta: a 580 driver on a V100 reports 13.0, DCGM's plugins are cuda12's.
    ("13.0", ["Volta"], 12),
])
def test_the_plugins_follow_the_drivers_cuda_major_and_the_gpus(cuda, archs, major):
    assert di.cuda_major(cuda, archs)[0] == major


def test_no_cuda_version_is_a_clear_refusal_and_a_set_major_wins():
    with pytest.raises(di.DcgmPlanError, match="install the driver first"):
        di.cuda_major(None, [])
    assert di.cuda_major(None, [], "12") == (12, "nvidia_dcgm_cuda_major: 12")
    with pytest.raises(di.DcgmPlanError, match="CUDA major"):
        di.cuda_major("13.0", [], "twelve")


def test_a_first_install_takes_the_newest_and_replaces_dcgm_3():
    out = di.plan(_dpkg(("datacenter-gpu-manager", "1:3.3.9", "ii ")), MADISON, 13)
    assert out["install"] == ["datacenter-gpu-manager-4-core=1:4.5.2-1", "datacenter-gpu-manager-4-cuda13=1:4.5.2-1"]
    assert out["remove"] == ["datacenter-gpu-manager"] and out["version"] == "4.5.2"
    assert out["driver_from_cuda_repo"] is False


def test_the_installed_release_stays_and_a_wanted_one_moves_both_packages():
    installed = _dpkg(("datacenter-gpu-manager-4-core", "1:4.4.2-1", "hi "),
                      ("datacenter-gpu-manager-4-cuda13", "1:4.4.2-1", "hi "),
                      ("datacenter-gpu-manager-4-cuda12", "1:4.4.2-1", "ii "))
    stay = di.plan(installed, MADISON, 13)
    assert stay["install"] == [] and stay["version"] == "4.4.2" and stay["held"] == [
        "datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13"]
    # Another major's plugins (left from an older driver) go.
    assert stay["remove"] == ["datacenter-gpu-manager-4-cuda12"]
    move = di.plan(installed, MADISON, 13, "4.5.2")
    assert move["install"] == ["datacenter-gpu-manager-4-core=1:4.5.2-1", "datacenter-gpu-manager-4-cuda13=1:4.5.2-1"]


def test_a_release_the_repository_lacks_names_those_it_has():
    with pytest.raises(di.DcgmPlanError, match=r"no datacenter-gpu-manager-4-core or datacenter-gpu-manager-4-cuda13 "
                                               r"at 4\.1\.1 \(it has 4\.4\.2, 4\.5\.2\)"):
        di.plan("", MADISON, 13, "4.1.1")
    with pytest.raises(di.DcgmPlanError, match="datacenter-gpu-manager-4-cuda12"):
        di.plan("", MADISON, 12)


def test_the_pin_keeps_driver_packages_of_the_cuda_repository_below_zero_unless_the_driver_is_nvidias():
    text = di.pin_text()
    assert "Pin: release l=NVIDIA CUDA\nPin-Priority: -1\n" in text
    assert "nvidia-*" in text.split("Package: ", 1)[1].split("\n", 1)[0]
    nvidia_style = _dpkg(("nvidia-driver-pinning-580", "580.126.09-1", "ii "))
    assert di.plan(nvidia_style, MADISON, 13)["driver_from_cuda_repo"] is True


FACTS = {"state": "ok", "cuda_driver_version": "13.0", "gpus": [{"index": 0, "architecture": "Hopper"}]}
INSTALLED = _dpkg(("datacenter-gpu-manager-4-core", "1:4.5.2-1", "hi "),
                  ("datacenter-gpu-manager-4-cuda13", "1:4.5.2-1", "hi "))


def test_the_dcgm_layer_is_skipped_where_nobody_asked_and_fails_where_asked_and_missing():
    assert dcgm.check_dcgm("", None, FACTS)["status"] == "skipped"
    missing = dcgm.check_dcgm("", None, FACTS, expected=True)
    assert missing["status"] == "fail" and "site.yml --tags dcgm" in missing["remedy"]
    old = dcgm.check_dcgm(_dpkg(("datacenter-gpu-manager", "1:3.3.9", "ii ")), "active", FACTS)
    assert old["status"] == "warn" and "DCGM 3" in old["summary"]


def test_the_dcgm_layer_needs_the_host_engine_and_the_plugins_of_the_drivers_cuda():
    assert dcgm.check_dcgm(INSTALLED, "active", FACTS)["status"] == "ok"
    down = dcgm.check_dcgm(INSTALLED, "failed", FACTS)
    assert down["status"] == "fail" and "systemctl enable --now nvidia-dcgm.service" in down["remedy"]
    # The driver moved to CUDA 12 (a downgrade to 570): cuda13's plugins do not serve it.
    older = dcgm.check_dcgm(INSTALLED, "active", dict(FACTS, cuda_driver_version="12.8"))
    assert older["status"] == "fail" and "datacenter-gpu-manager-4-cuda12=1:4.5.2-1" in older["remedy"]


def test_the_health_layer_fails_naming_the_gpu_the_test_and_dcgms_message():
    ok = {"status": "ok", "summary": "DCGM 4.1.1"}
    out = dcgm.check_dcgm_diag(dd.read_run(226, A100), 1, ok)
    assert out["status"] == "fail" and out["layer"] == "health"
    assert out["summary"].startswith("dcgmi diag -r 1: GPU 0: software (Deployment) failed: Persistence Mode")
    assert "(DCGM error 29)" in out["summary"] and "GPU 0" in out["remedy"]
    assert out["data"]["failed"][0]["test"] == "software"


def test_skipped_tests_and_a_dcgmi_that_cannot_run_are_never_a_pass():
    ok = {"status": "ok", "summary": "DCGM 4.5.2"}
    gated = dcgm.check_dcgm_diag(dd.read_run(226, GATED), 2, ok)
    assert gated["status"] == "fail" and [s["test"] for s in gated["data"]["skipped"]] == ["memory", "pcie"]
    # NVIDIA/DCGM#254: the plugins of the driver's CUDA major are not installed (dcgmi -v prints no document).
    missing = read_fixture("dcgmi", "diag-r3-v_4.4.1_4xV100_cuda12-plugins-missing_DCGM-254.txt")
    down = dcgm.check_dcgm_diag(dd.read_run(226, missing), 3, ok)
    assert down["status"] == "warn" and down["summary"].startswith(
        "dcgmi diag -r 3 did not run: Error: Unable to complete diagnostic for entities 0,1,2,3.")
    assert "Cannot load plugins" in down["summary"]
    assert dcgm.check_dcgm_diag(None, 1, {"status": "skipped", "summary": "DCGM is not installed"})["status"] == \
        "skipped"
    assert dcgm.check_dcgm_diag(None, 0, ok)["status"] == "skipped"
