"""An image's NVIDIA_REQUIRE_CUDA against the host driver, on real requirement strings and real nvidia-smi captures.

Expected values come from the sources, not from the code: the requirement grammar and messages from
libnvidia-container src/cli/dsl.c, which variables count from nvidia-container-toolkit
internal/config/image/cuda_image.go, minimum drivers from the CUDA release notes' Table 3, and the
branches and brands each image lists from the fixture text itself (tests/fixtures/cuda_require/README.md).
"""
import os
import re

import pytest

from containers import cuda_requirement as cr
from gpu import nvsmi_parse
from conftest import FIXTURES, run_ansible_module

REQUIRE = os.path.join(FIXTURES, "cuda_require")
CUDA_12_8 = "001_cuda-12.8.1_ubuntu2204_x86_64.txt"     # the vLLM image's base (CUDA_VERSION=12.8.1)
CUDA_12_4 = "002_cuda-12.4.1_ubuntu2204_x86_64.txt"     # lists geforce alternatives
CUDA_12_9 = "003_cuda-12.9.1_ubuntu2204_x86_64.txt"
CUDA_13_0 = "004_cuda-13.0.0_ubuntu2404_x86_64.txt"
CUDA_10_0 = "005_cuda-10.0_ubuntu1604_x86_64.txt"
# What nvidia-container-cli prints for a failed cuda>= requirement (corpus errors/008, tabbyAPI#324).
REAL_ERROR = os.path.join(FIXTURES, "errors", "008_compose-unsatisfied-condition-cuda-12.8_host-550.144.03.txt")


def require(name):
    with open(os.path.join(REQUIRE, name), encoding="utf-8") as handle:
        return handle.read().rstrip("\n")


def image_env(name, cuda_version):
    """Config.Env as the image has it: the Dockerfile's NVIDIA_REQUIRE_CUDA and CUDA_VERSION."""
    return ["PATH=/usr/local/cuda/bin:/usr/bin", "NVIDIA_REQUIRE_CUDA=" + require(name),
            "CUDA_VERSION=" + cuda_version, "NVIDIA_VISIBLE_DEVICES=all"]


def host(smi_name):
    """(driver_version, cuda_driver_version, [product brand]) of a real nvidia-smi capture."""
    with open(os.path.join(FIXTURES, "nvidia_smi", smi_name), encoding="utf-8") as handle:
        text = handle.read()
    facts = nvsmi_parse.facts_from_output(text)
    brands = re.findall(r"<product_brand>([^<]+)</product_brand>|Product Brand\s+: (.+)", text)
    return facts["driver_version"], facts["cuda_driver_version"], [a or b for a, b in brands] or None


RTX4090_535 = "022_qx_535_RTX4090.xml"                        # 535.86.05, CUDA 12.2, GeForce
A100_535 = "039_qx_535.54.03_4xA100-SXM4-80GB_MIG.xml"         # 535.54.03, CUDA 12.2, NVIDIA
A100_550 = "035_table_550.144.03_A100-SXM4-40GB.txt"           # 550.144.03, CUDA 12.4 (table: no brand)
A100_555 = "056_q_555.42.02_4xA100-SXM4-80GB_fabric-NA_no-nvswitch.txt"  # 555.42.02, CUDA 12.5, NVIDIA
H100_565 = "055_q_565.57.01_8xH100-SXM_fabric-completed-cliqueid0.txt"   # 565.57.01, CUDA 12.7, NVIDIA
H100_570 = "001_table_570.133.20_2xH100_no-processes.txt"      # 570.133.20, CUDA 12.8
RTXPRO_590 = "043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml"  # 590.44.01, CUDA 13.1


def test_captures_say_what_the_comments_say():
    assert host(RTX4090_535) == ("535.86.05", "12.2", ["GeForce"])
    assert host(A100_535)[:2] == ("535.54.03", "12.2") and set(host(A100_535)[2]) == {"NVIDIA"}
    assert host(A100_550) == ("550.144.03", "12.4", None)
    assert host(H100_570)[:2] == ("570.133.20", "12.8")


# --- parsing: the grammar of dsl.c on NVIDIA's own strings ----------------------------------


def test_brand_alternatives_of_the_12_8_image():
    alternatives = cr.parse_requirement(require(CUDA_12_8))
    assert alternatives[0] == [("cuda", ">=", "12.8")]
    # Five branches (README: 470 535 550 560 565) x twelve brands, each "brand=X,driver>=B,driver<B+1".
    assert len(alternatives) == 1 + 5 * 12
    for terms in alternatives[1:]:
        (b, beq, brand), (d1, ge, low), (d2, lt, high) = terms
        assert (b, beq, d1, ge, d2, lt) == ("brand", "=", "driver", ">=", "driver", "<")
        assert int(high) == int(low) + 1
    assert cr.forward_compat_branches(alternatives) == [470, 535, 550, 560, 565]
    brands = {terms[0][2] for terms in alternatives[1:]}
    assert "geforce" not in brands and "titan" not in brands and {"tesla", "nvidia", "unknown"} <= brands


def test_older_and_newer_images_list_other_branches():
    assert cr.forward_compat_branches(cr.parse_requirement(require(CUDA_12_4))) == [470, 525, 535]
    assert cr.forward_compat_branches(cr.parse_requirement(require(CUDA_12_9))) == [535, 550, 560, 565, 570]
    assert cr.forward_compat_branches(cr.parse_requirement(require(CUDA_13_0))) == [535, 550, 565, 570, 575]
    assert "geforce" in {t[0][2] for t in cr.parse_requirement(require(CUDA_12_4))[1:]}
    assert cr.parse_requirement(require(CUDA_10_0)) == [
        [("cuda", ">=", "10.0")], [("brand", "=", "tesla"), ("driver", ">=", "384"), ("driver", "<", "385")]]


def test_image_cuda_from_the_requirement_and_from_cuda_version():
    assert cr.image_cuda(image_env(CUDA_12_8, "12.8.1")) == "12.8"
    assert cr.image_cuda(["CUDA_VERSION=12.8.1"]) == "12.8"   # legacy image: no NVIDIA_REQUIRE_CUDA
    assert cr.image_cuda(["PATH=/usr/bin"]) is None


# --- the verdicts ----------------------------------------------------------------------------


def test_12_8_image_on_a_12_4_driver_is_refused_naming_both():
    driver, cuda, _ = host(A100_550)
    result = cr.check(image_env(CUDA_12_8, "12.8.1"), cuda, driver_version=driver, gpu_brands=["GeForce"],
                      image="vllm/vllm-openai")
    assert result["verdict"] == "refused"
    assert (result["image_cuda"], result["driver_cuda"]) == ("12.8", "12.4")
    assert "needs CUDA 12.8" in result["message"] and "supports CUDA 12.4" in result["message"]
    assert "550.144.03" in result["message"] and "image layer" in result["message"]
    # The toolkit names only the first term: the same words as the real capture.
    with open(REAL_ERROR, encoding="utf-8") as handle:
        assert result["toolkit_error"] in handle.read()
    # Release notes Table 3: CUDA 12.8 GA needs >= 570.26.
    assert any("570.26" in fix and "nvidia_driver_branch: 570" in fix for fix in result["fixes"])
    assert any(fix.startswith("image:") and "12.4" in fix for fix in result["fixes"])
    assert not any("forward compatibility" in fix for fix in result["fixes"])  # GeForce: none


def test_geforce_on_535_is_refused_by_the_12_8_image():
    driver, cuda, brands = host(RTX4090_535)
    result = cr.check(image_env(CUDA_12_8, "12.8.1"), cuda, driver_version=driver, gpu_brands=brands)
    assert result["verdict"] == "refused" and result["failed_requirement"]["brand"] == "GeForce"


def test_datacenter_gpu_on_a_listed_branch_runs_through_forward_compatibility():
    driver, cuda, brands = host(A100_535)
    result = cr.check(image_env(CUDA_12_8, "12.8.1"), cuda, driver_version=driver, gpu_brands=brands)
    assert result["verdict"] == "forward_compat"
    assert result["satisfied_by"] == ["brand=nvidia,driver>=535,driver<536"]
    driver, cuda, brands = host(H100_565)
    result = cr.check(image_env(CUDA_12_8, "12.8.1"), cuda, driver_version=driver, gpu_brands=brands,
                      datacenter=True)
    assert result["verdict"] == "forward_compat" and "brand=nvidia,driver>=565,driver<566" in result["satisfied_by"]
    assert "if the GPU is a datacenter part" not in result["message"]


def test_datacenter_gpu_on_an_unlisted_branch_is_refused_with_the_listed_branches():
    driver, cuda, brands = host(A100_555)
    result = cr.check(image_env(CUDA_12_8, "12.8.1"), cuda, driver_version=driver, gpu_brands=brands,
                      datacenter=True)
    assert result["verdict"] == "refused" and "supports CUDA 12.5" in result["message"]
    assert any("470, 535, 550, 560, 565" in fix for fix in result["fixes"])


def test_brand_unknown_passes_like_the_toolkit_without_a_gpu_but_says_so():
    driver, cuda, _ = host(A100_550)
    result = cr.check(image_env(CUDA_12_8, "12.8.1"), cuda, driver_version=driver)
    assert result["verdict"] == "forward_compat"
    assert result["assumed"] == ["brand=unknown"] and "unknown here" in result["message"]


def test_forward_compatibility_on_geforce_is_refused_with_804():
    # The 12.4.1 image lists geforce,driver>=535: the toolkit starts it, CUDA then fails (804, corpus errors/009).
    driver, cuda, brands = host(RTX4090_535)
    result = cr.check(image_env(CUDA_12_4, "12.4.1"), cuda, driver_version=driver, gpu_brands=brands)
    assert result["satisfied_by"] == ["brand=geforce,driver>=535,driver<536"]
    assert result["verdict"] == "refused" and "804" in result["message"]
    result = cr.check(image_env(CUDA_12_4, "12.4.1"), cuda, driver_version=driver, datacenter=False)
    assert result["verdict"] == "refused"


def test_equal_and_older_cuda_are_accepted():
    driver, cuda, _ = host(H100_570)
    assert cr.check(image_env(CUDA_12_8, "12.8.1"), cuda, driver_version=driver)["verdict"] == "ok"   # 12.8 = 12.8
    assert cr.check(image_env(CUDA_12_4, "12.4.1"), cuda, driver_version=driver)["verdict"] == "ok"   # older
    driver, cuda, _ = host(A100_550)
    assert cr.check(image_env(CUDA_12_4, "12.4.1"), cuda, driver_version=driver)["verdict"] == "ok"   # 12.4 = 12.4
    assert cr.check(image_env(CUDA_10_0, "10.0.130"), cuda, driver_version=driver)["verdict"] == "ok"
    driver, cuda, brands = host(RTXPRO_590)
    result = cr.check(image_env(CUDA_13_0, "13.0.0"), cuda, driver_version=driver, gpu_brands=brands)
    assert result["verdict"] == "ok" and result["satisfied_by"] == ["cuda>=13.0"]


def test_13_0_image_on_r570_datacenter_is_forward_compat_and_needs_580():
    driver, cuda, brands = host(H100_570)
    result = cr.check(image_env(CUDA_13_0, "13.0.0"), cuda, driver_version=driver, gpu_brands=["NVIDIA"])
    assert result["verdict"] == "forward_compat"
    assert any("580.65.06" in fix for fix in result["fixes"])   # Table 3: CUDA 13.0 GA >= 580.65.06


def test_min_driver_follows_the_release_notes():
    assert cr.min_driver("12.8") == "570.26"
    assert cr.min_driver("12.4") == "550.54.14"
    assert cr.min_driver("12.7") == "570.26"      # no 12.7 release: the next one up
    assert cr.min_driver("11.0") == "450.36.06"
    assert cr.min_driver("99.0") is None


def test_versions_compare_like_dsl_compare_version():
    assert cr.version_cmp("12.0", "12") == 0            # trailing zeros ignored
    assert cr.version_cmp("12.10", "12.8") > 0          # numbers, not strings
    assert cr.version_cmp("535.183.01", "535") > 0 and cr.version_cmp("535.183.01", "536") < 0


# --- which variables count (cuda_image.go) ---------------------------------------------------


@pytest.mark.parametrize("value", ["true", "1", "t", "TRUE", "True"])
def test_nvidia_disable_require_skips_the_check(value):
    env = image_env(CUDA_12_8, "12.8.1") + ["NVIDIA_DISABLE_REQUIRE=" + value]
    assert cr.requirement_strings(env) == []
    result = cr.check(env, "12.2", driver_version="535.86.05", gpu_brands=["GeForce"])
    assert result["verdict"] == "skipped" and "compatibility path" in result["message"]


@pytest.mark.parametrize("value", ["false", "0", "yes", "on", "", " true"])
def test_values_go_does_not_parse_as_true_keep_the_check(value):
    env = image_env(CUDA_12_8, "12.8.1") + ["NVIDIA_DISABLE_REQUIRE=" + value]
    assert cr.check(env, "12.2", driver_version="535.86.05", gpu_brands=["GeForce"])["verdict"] == "refused"


def test_disabled_requirement_is_not_parsed():
    env = ["NVIDIA_REQUIRE_CUDA=cuda >= 12.8", "NVIDIA_DISABLE_REQUIRE=true"]
    assert cr.check(env, "12.4")["verdict"] == "skipped"


def test_legacy_image_gets_cuda_ge_its_cuda_version():
    assert cr.requirement_strings(["CUDA_VERSION=12.8.1"]) == [(cr.LEGACY, "cuda>=12.8")]
    assert cr.check(["CUDA_VERSION=12.8.1"], "12.4", driver_version="550.144.03")["verdict"] == "refused"
    # An empty NVIDIA_REQUIRE_CUDA still counts as absent (len(cudaRequire) == 0).
    assert cr.requirement_strings(["CUDA_VERSION=12.8.1", "NVIDIA_REQUIRE_CUDA="]) == [(cr.LEGACY, "cuda>=12.8")]


def test_every_nvidia_require_variable_is_anded_but_jetpack():
    # The toolkit's own CDI test values (NVIDIA/nvidia-container-toolkit#1795): cuda>=99.0, driver>=9999.0.0.
    env = ["NVIDIA_REQUIRE_DRIVER=driver>=9999.0.0", "NVIDIA_REQUIRE_JETPACK=csv-mounts=all"]
    strings = cr.requirement_strings(env)
    assert strings == [("NVIDIA_REQUIRE_DRIVER", "driver>=9999.0.0")]
    result = cr.check(env + ["NVIDIA_REQUIRE_CUDA=cuda>=12.4"], "12.8", driver_version="570.133.20")
    assert result["verdict"] == "refused"
    assert result["failed_requirement"]["variable"] == "NVIDIA_REQUIRE_DRIVER"
    assert result["toolkit_error"] == "unsatisfied condition: driver>=9999.0.0"
    assert cr.check(["NVIDIA_REQUIRE_CUDA=cuda>=99.0"], "12.8")["toolkit_error"].startswith(
        "unsatisfied condition: cuda>=99.0, please update your driver")


def test_no_requirement_and_unknown_driver():
    assert cr.check(["PATH=/usr/bin"], "12.4")["verdict"] == "ok"
    assert cr.check(image_env(CUDA_12_8, "12.8.1"), None)["verdict"] == "unknown"


# --- malformed input: a clear error naming the variable and the term -------------------------


@pytest.mark.parametrize("text, why", [
    ("cuda >= 12.8", "expected <property><operator><value>"),    # spaces split it into three alternatives
    ("cuda=>12.8", "unknown operator '=>'"),
    ("cudnn>=8.9", "unknown property 'cudnn'"),
    ("brand>=tesla", "brand compares only with = or !="),
    ("cuda>=12.x", "a version of digits and dots"),
    ("cuda>=", "expected <property><operator><value>"),
])
def test_malformed_requirements_are_named(text, why):
    with pytest.raises(cr.CudaRequirementError) as err:
        cr.check(["NVIDIA_REQUIRE_CUDA=" + text], "12.8")
    assert why in str(err.value) and "NVIDIA_REQUIRE_CUDA" in str(err.value)


def test_malformed_versions_and_environment():
    with pytest.raises(cr.CudaRequirementError, match="CUDA_VERSION 'twelve'"):
        cr.check(["CUDA_VERSION=twelve"], "12.8")
    with pytest.raises(cr.CudaRequirementError, match="no '='"):
        cr.check(["NVIDIA_REQUIRE_CUDA"], "12.8")
    with pytest.raises(cr.CudaRequirementError, match="driver CUDA version"):
        cr.check(image_env(CUDA_12_8, "12.8.1"), "CUDA 12.8")


# --- the Ansible module (thin shell) ---------------------------------------------------------


def test_module_fails_naming_the_layer_and_fixes():
    driver, cuda, _ = host(A100_550)
    res = run_ansible_module("cuda_image_check", {"env": image_env(CUDA_12_8, "12.8.1"), "driver_cuda_version": cuda,
                                                  "driver_version": driver, "gpu_brands": ["GeForce"],
                                                  "image": "vllm/vllm-openai:v0.9.0"}, "--check")
    assert res.get("failed") is True and res["verdict"] == "refused"
    assert res["msg"].startswith("image layer: vllm/vllm-openai:v0.9.0 needs CUDA 12.8")
    assert "fix:" in res["msg"] and "570.26" in res["msg"]


def test_module_passes_an_equal_cuda():
    driver, cuda, _ = host(H100_570)
    res = run_ansible_module("cuda_image_check", {"env": image_env(CUDA_12_8, "12.8.1"), "driver_cuda_version": cuda,
                                                  "driver_version": driver})
    assert not res.get("failed") and res["verdict"] == "ok" and res["changed"] is False
