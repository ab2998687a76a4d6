"""The image CUDA guard knows the GPU: brand and datacenter class from the GPU facts, through the roles.

An image admitted only through NVIDIA's brand/driver alternatives (CUDA forward compatibility) runs only on
datacenter GPUs ("Forward Compatibility is applicable only for systems with NVIDIA Data Center GPUs, select
NGC Server Ready SKUs of RTX cards, Jetson boards", CUDA Compatibility guide); on a GeForce it fails at
start with error 804. Real inputs only: NVIDIA_REQUIRE_CUDA values of NVIDIA's images
(tests/fixtures/cuda_require, see its README) and nvidia-smi captures (tests/fixtures/nvidia_smi).
"""
import json
import os

import pytest
import yaml

from containers import cuda_requirement as cr
from gpu import nvsmi_parse
from conftest import FIXTURES, ROOT, run_ansible_module
from test_cuda_requirement import image_env  # the real images' Config.Env

REQUIRE = os.path.join(FIXTURES, "cuda_require")
CUDA_12_8 = "001_cuda-12.8.1_ubuntu2204_x86_64.txt"   # the vLLM image's base; no geforce/titan alternatives
CUDA_12_4 = "002_cuda-12.4.1_ubuntu2204_x86_64.txt"   # lists geforce,driver>=535 among its alternatives
RTX4090_535 = "022_qx_535_RTX4090.xml"                 # 535.86.05, CUDA 12.2, GeForce
A100_535 = "039_qx_535.54.03_4xA100-SXM4-80GB_MIG.xml"  # 535.54.03, CUDA 12.2, NVIDIA A100 (one <gpu> kept)
H100_565 = "055_q_565.57.01_8xH100-SXM_fabric-completed-cliqueid0.txt"  # 565.57.01, CUDA 12.7, 8x H100
RTXPRO_590 = "043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml"  # NVIDIA RTX, Max-Q Workstation Edition
TESLA_P100 = "023_qx_Tesla-P100.xml"
GRID_P4 = "045_qx_513.46_GRID-P4-1Q_vGPU_13procs.xml"
GTX1070TI = "044_qx_GTX1070Ti_dtd-v10_minimal.xml"
RTX2080S_Q = "016_q_610.62_RTX2080S_windows_idle.txt"


def facts(smi_name):
    """The GPU facts nvidia_gpu_facts builds from a real nvidia-smi capture."""
    with open(os.path.join(FIXTURES, "nvidia_smi", smi_name), encoding="utf-8") as handle:
        return nvsmi_parse.facts_from_output(handle.read())


def guard(smi_name, require_name, cuda_version, **extra):
    """cuda_image_check as the roles call it: the driver and the GPUs from the same capture's facts."""
    host = facts(smi_name)
    args = {"env": image_env(require_name, cuda_version), "driver_cuda_version": host["cuda_driver_version"],
            "driver_version": host["driver_version"], "gpus": host["gpus"], "image": "vllm/vllm-openai:v0.9.0"}
    args.update(extra)
    return run_ansible_module("cuda_image_check", args, "--check")


# --- the facts carry each GPU's brand and datacenter class ------------------------------------


@pytest.mark.parametrize("smi_name, brand, datacenter", [
    (RTX4090_535, "GeForce", False),
    (RTX2080S_Q, "GeForce", False),                      # -q text form
    (GTX1070TI, None, False),                            # old DTD, no <product_brand>: the name says GeForce
    (A100_535, "NVIDIA", True),
    (H100_565, "NVIDIA", True),                          # -q text form
    (TESLA_P100, "Tesla", True),
    (GRID_P4, "NVIDIA RTX Virtual Workstation", True),   # a vGPU on a P4 (datacenter column)
    (RTXPRO_590, "NVIDIA RTX", None),                    # a workstation card: "select SKUs" only, not known
])
def test_facts_carry_product_brand_and_datacenter(smi_name, brand, datacenter):
    gpus = facts(smi_name)["gpus"]
    assert gpus and {g["product_brand"] for g in gpus} == {brand}
    assert {g["datacenter"] for g in gpus} == {datacenter}


def test_gpu_classes_of_the_facts():
    assert cr.gpu_classes(facts(RTX4090_535)["gpus"]) == (["GeForce"], False)
    assert cr.gpu_classes(facts(A100_535)["gpus"]) == (["NVIDIA"], True)
    assert cr.gpu_classes(facts(H100_565)["gpus"]) == (["NVIDIA"], True)          # eight GPUs, one brand
    assert cr.gpu_classes(facts(RTXPRO_590)["gpus"]) == (["NVIDIA RTX"], None)
    # The toolkit checks every GPU of the container: one GeForce among datacenter GPUs rules it out.
    mixed = facts(A100_535)["gpus"] + facts(RTX4090_535)["gpus"]
    assert cr.gpu_classes(mixed) == (["NVIDIA", "GeForce"], False)
    assert cr.gpu_classes([]) == (None, None) and cr.gpu_classes(None) == (None, None)
    # Entries without the datacenter key (facts from before it) are classed from name, id and brand.
    old = [dict((k, v) for k, v in g.items() if k != "datacenter") for g in facts(RTX4090_535)["gpus"]]
    assert cr.gpu_classes(old) == (["GeForce"], False)
    with pytest.raises(cr.CudaRequirementError, match="gpus"):
        cr.gpu_classes(["GPU-0"])


# --- consumer GPU + an image that needs forward compatibility: refused -------------------------


def test_rtx4090_on_535_refuses_the_12_8_image_naming_versions_datacenter_and_fixes():
    # The case: the vLLM image's CUDA 12.8 on an RTX 4090 with driver 535 (CUDA 12.2).
    res = guard(RTX4090_535, CUDA_12_8, "12.8.1")
    assert res.get("failed") is True and res["verdict"] == "refused"
    assert (res["gpu_brands"], res["datacenter"]) == (["GeForce"], False)
    msg = res["msg"]
    assert msg.startswith("image layer: vllm/vllm-openai:v0.9.0 needs CUDA 12.8")
    assert "535.86.05" in msg and "supports CUDA 12.2" in msg
    assert "works only on datacenter GPUs" in msg and "GeForce" in msg
    # The branches the image's alternatives list (README: 470 535 550 560 565).
    assert "driver branches 470, 535, 550, 560, 565" in msg
    # Fixes: a newer driver branch (Table 3: CUDA 12.8 needs >= 570.26), or an older image tag.
    assert "fix: driver: install branch 570 or newer" in msg and "570.26" in msg
    assert "fix: image: use an older tag of the image, one built for CUDA 12.2 or older" in msg
    assert not any(fix.startswith("forward compatibility") for fix in res["fixes"])


def test_rtx4090_on_535_refuses_the_12_4_image_the_toolkit_would_start():
    # The 12.4.1 image lists brand=geforce,driver>=535: the toolkit starts it, CUDA then fails with 804.
    res = guard(RTX4090_535, CUDA_12_4, "12.4.1")
    assert res.get("failed") is True and res["verdict"] == "refused"
    assert res["satisfied_by"] == ["brand=geforce,driver>=535,driver<536"]
    msg = res["msg"]
    assert "needs CUDA 12.4" in msg and "535.86.05" in msg and "supports CUDA 12.2" in msg
    assert "works only on datacenter GPUs" in msg and "804" in msg
    assert "fix: driver: install branch 550 or newer" in msg and "550.54.14" in msg
    assert "fix: image: use an older tag of the image, one built for CUDA 12.2 or older" in msg


def test_without_the_gpus_the_same_host_only_warns():
    # What the roles did before: no brand, no class: the brand alternatives are assumed to hold.
    res = guard(RTX4090_535, CUDA_12_8, "12.8.1", gpus=None)
    assert not res.get("failed") and res["verdict"] == "forward_compat" and res["datacenter"] is None


# --- datacenter GPU + the same image: forward compatibility stays a warning --------------------


def test_a100_on_535_runs_the_12_8_image_through_forward_compatibility_with_a_warning():
    res = guard(A100_535, CUDA_12_8, "12.8.1")
    assert not res.get("failed") and res["changed"] is False
    assert res["verdict"] == "forward_compat" and res["datacenter"] is True
    assert res["satisfied_by"] == ["brand=nvidia,driver>=535,driver<536"]
    assert res["assumed"] == []
    assert any("forward compatibility" in w and "needs CUDA 12.8" in w for w in res["warnings"])
    assert not any("unknown here" in w for w in res["warnings"])


def test_workstation_card_keeps_the_unknown_warning():
    # An RTX PRO Workstation card: forward compatibility only on "select NGC Server Ready SKUs", not known.
    host = facts(RTXPRO_590)
    result = cr.check(image_env(CUDA_12_8, "12.8.1"), "12.2", driver_version="535.86.05",
                      gpu_brands=["NVIDIA RTX"], datacenter=cr.gpu_classes(host["gpus"])[1])
    assert result["verdict"] == "forward_compat" and "unknown here" in result["message"]


def test_explicit_arguments_win_over_the_gpus():
    res = guard(A100_535, CUDA_12_8, "12.8.1", datacenter=False)
    assert res.get("failed") is True and "works only on datacenter GPUs" in res["msg"]


# --- the roles pass the GPUs -------------------------------------------------------------------

# Each caller's cuda_image_check tasks, by register: the vllm role judges an image before its pull (on the
# configuration its registry gives) and, for images the host had or the registry could not tell about, after it.
# gpu_validate's check (gpu_stack_check) judges the check and serving images itself, on the GPUs it reads.
CALLERS = [("roles/vllm/tasks/image.yml", ("vllm_image_cuda_before_pull", "vllm_image_cuda"))]


def cuda_check_tasks(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    return [t for t in tasks if "cuda_image_check" in t]


def test_every_cuda_image_check_in_roles_and_playbooks_is_a_known_caller():
    found = []
    for top in ("roles", "playbooks"):
        for base, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                path = os.path.relpath(os.path.join(base, name), ROOT)
                if name.endswith((".yml", ".yaml")):
                    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
                        if "cuda_image_check" in handle.read():
                            found.append(path)
    assert sorted(found) == sorted(path for path, _ in CALLERS)


@pytest.mark.parametrize("path, registers", CALLERS)
def test_role_task_passes_the_gpu_facts(path, registers):
    tasks = cuda_check_tasks(path)
    assert tuple(task["register"] for task in tasks) == registers
    for task in tasks:
        args = task["cuda_image_check"]
        assert "ansible_facts.nvidia.gpus" in args["gpus"]
        assert "driver_version_userspace" in args["driver_version"]
        assert "cuda_driver_version" in args["driver_cuda_version"]
        # Brand and class come from the facts through the module (Python), never decided in Jinja here.
        assert "gpu_brands" not in args and "datacenter" not in args


_PLUGINS = []


def render(expression, variables):
    """The task argument as Ansible templates it (a role file's text is trusted as a template)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader
    from ansible.template import Templar, trust_as_template
    if not _PLUGINS:
        init_plugin_loader()
        _PLUGINS.append(True)
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expression))


def test_vllm_role_judges_each_image_on_its_instances_gpus():
    # The eight H100s of 055 and the RTX 4090 of 022 as GPU 8: an image is judged on the GPUs its
    # instances are given, so a 4090 beside the H100s does not refuse the H100s' image.
    gpus = facts(H100_565)["gpus"] + [dict(facts(RTX4090_535)["gpus"][0], index=8)]
    tasks = cuda_check_tasks("roles/vllm/tasks/image.yml")
    assert len(tasks) == 2   # before the pull and after it: the same GPUs
    variables = {"ansible_facts": {"nvidia": {"gpus": gpus}},
                 "vllm_resolved": [{"name": "a", "image": "vllm/vllm-openai:v0.9.0", "gpu_indexes": [0, 1]},
                                   {"name": "b", "image": "vllm/vllm-openai:v0.9.0", "gpu_indexes": [3]},
                                   {"name": "c", "image": "other:1", "gpu_indexes": [8]}]}
    for task in tasks:
        given = render(task["cuda_image_check"]["gpus"], dict(variables, item={"item": "vllm/vllm-openai:v0.9.0"}))
        assert [g["index"] for g in given] == [0, 1, 3]
        assert cr.gpu_classes(given) == (["NVIDIA"], True)
        given = render(task["cuda_image_check"]["gpus"], dict(variables, item={"item": "other:1"}))
        assert [g["index"] for g in given] == [8] and cr.gpu_classes(given) == (["GeForce"], False)


# --- gpu_stack_check judges the check and serving images on every GPU it reads -------------------

SERVING_IMAGE = "vllm/vllm-openai:v0.9.0"


def stack_host(smi_name, images):
    """test_stack_check's fake host with another real nvidia-smi capture, one serving container and the images
    the host has: {reference: Config.Env}."""
    from test_stack_check import healthy_host
    io = healthy_host()
    io.commands[("/usr/bin/nvidia-smi", "-q", "-x")] = (0, load_smi(smi_name), "")
    inspect = [("/usr/bin/docker", "image", "inspect", "--format", "{{json .Config.Env}}", name)
               for name in ("img", "probe", SERVING_IMAGE)]
    for key in inspect:
        env = images.get(key[-1])
        io.commands[key] = (0, json.dumps(env) + "\n", "") if env is not None else (
            1, "", "Error response from daemon: No such image: %s\n" % key[-1])
    io.commands[("/usr/bin/docker", "ps")] = (0, "vllm-a\n", "")
    io.commands[("/usr/bin/docker", "inspect")] = (0, json.dumps([{
        "Name": "/vllm-a", "Config": {"Image": SERVING_IMAGE, "Labels": {"gpuhost.layer": "vllm"}},
        "State": {"Status": "running", "Running": True}}]), "")
    # Prefix keys: the image inspections must match before ("/usr/bin/docker", "inspect") and "run".
    io.commands = dict(sorted(io.commands.items(), key=lambda kv: -len(kv[0])))
    return io


def load_smi(name):
    with open(os.path.join(FIXTURES, "nvidia_smi", name), encoding="utf-8") as handle:
        return handle.read()


def judged(io):
    from layers import stack_check as sc
    opts = {"check_image": "img", "cuda_probe_image": "probe"}
    out = sc.evaluate(sc.capture(io, opts), opts)
    return dict((entry["image"], entry) for entry in out["images"])


def test_stack_check_refuses_the_serving_image_on_a_geforce_and_names_the_fixes():
    # The issue's case through the layer check: CUDA 12.8's image on the RTX 4090 with driver 535.
    images = judged(stack_host(RTX4090_535, {"img": image_env(CUDA_12_4, "12.4.1"),
                                             SERVING_IMAGE: image_env(CUDA_12_8, "12.8.1")}))
    assert sorted(images) == ["img", SERVING_IMAGE]      # the probe image is not on the host: not judged
    serving = images[SERVING_IMAGE]
    assert serving["verdict"] == "refused" and (serving["gpu_brands"], serving["datacenter"]) == (["GeForce"], False)
    assert serving["driver_version"] == "535.86.05" and serving["driver_cuda"] == "12.2"
    assert serving["summary"].startswith(serving["message"] + ". fix: driver: install branch 570 or newer")
    assert images["img"]["verdict"] == "refused" and "804" in images["img"]["message"]


def test_stack_check_lets_a_datacenter_gpu_run_the_image_through_forward_compatibility():
    images = judged(stack_host(A100_535, {"img": image_env(CUDA_12_4, "12.4.1"),
                                          SERVING_IMAGE: image_env(CUDA_12_8, "12.8.1")}))
    assert images[SERVING_IMAGE]["verdict"] == "forward_compat" and images[SERVING_IMAGE]["datacenter"] is True
    assert images[SERVING_IMAGE]["summary"] == images[SERVING_IMAGE]["message"]   # fixes only for a refusal


def test_stack_check_judges_nothing_without_the_container_check():
    from layers import stack_check as sc
    io = stack_host(RTX4090_535, {SERVING_IMAGE: image_env(CUDA_12_8, "12.8.1")})
    opts = {"check_image": "img", "cuda_probe_image": "probe", "container_check": False}
    assert sc.evaluate(sc.capture(io, opts), opts)["images"] == []
    assert not [argv for argv in io.ran if argv[1:3] == ["image", "inspect"]]


def test_an_image_whose_requirement_cannot_be_read_is_unknown_and_says_why():
    judged = cr.judge_images([("bad:1", ["CUDA_VERSION=twelve"])], facts(A100_535))
    assert [(j["image"], j["verdict"]) for j in judged] == [("bad:1", "unknown")]
    assert judged[0]["summary"].startswith("image layer: bad:1: ") and "twelve" in judged[0]["summary"]
