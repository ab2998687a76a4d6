"""vllm_instances: each instance resolved, checked and turned into its container (command line, environment,
labels) in Python (module_utils/serving/vllm_instances.py), where the vllm role did it in Jinja
(roles/vllm/tasks/instances.yml, deploy.yml) until commit 1c34c40; and the serving record built by
vllm_plan_measurement from the same results, where report.yml built it as a Jinja dict.

The proof of "nothing changed": role_harness runs the role's own task files through ansible-playbook on
the instances of the molecule inventories (vllm's two hosts, first_use, vllm's side_effect cases) and on cases
that reach every branch, and compares what the tasks decide - vllm_resolved, the arguments of each
docker_container task, the warnings, the record, where they fail - with what the same harness captured
from the Jinja of 1c34c40 (tests/fixtures/jinja_before/)."""
import json
import os
import sys
import tempfile

import pytest

from conftest import FIXTURES, ROOT, run_ansible_module

import role_harness

SIM = os.path.join(ROOT, "molecule", "simulator")
MODELS = os.path.join(FIXTURES, "models")
STANDIN = "local/vllm-standin:0.25.1"


# ---------------------------------------------------------------- the inputs (molecule's inventories)

def _simulated_gpus(models, mig=None):
    """The GPU facts of a simulated host (molecule's gpusim_gpus) as nvidia-smi -q and -L give them."""
    if SIM not in sys.path:
        sys.path.insert(0, SIM)
    from gpusim import ctl, smi, state as st
    from ansible.module_utils.gpu import nvsmi_parse
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "state.json")
        state = ctl.init_state(list(models), branches=["580"])
        state["driver"]["installed"] = {"version": "580.95.05", "kernel_modules": "open", "packages": []}
        state["driver"]["loaded"] = {"version": "580.95.05", "kernel_modules": "open"}
        st.save(state, path)
        for argv in mig or []:
            smi.run(list(argv), state_path=path, now=1784016758.0, euid=0)
        facts = nvsmi_parse.facts_from_output(smi.run(["-q"], state_path=path, now=1784016758.0, euid=0)[0])
        listing = smi.run(["-L"], state_path=path, now=1784016758.0, euid=0)[0]
    gpus = nvsmi_parse.merge_mig_listing(facts, listing)["gpus"]
    return {"state": "ok", "message": "%d NVIDIA GPU(s), driver 580.95.05" % len(gpus), "gpus": gpus}


def gpu_facts():
    return {
        "h100_l4": _simulated_gpus(["h100", "l4"]),
        "h100": _simulated_gpus(["h100"]),
        # the vllm scenario's MIG host: two H100, GPU 0 split into two 3g.40gb
        "h100_mig_h100": _simulated_gpus(["h100", "h100"], mig=[["-i", "0", "-mig", "1"],
                                                               ["mig", "-i", "0", "-cgi", "3g.40gb,3g.40gb", "-C"]]),
        # vllm side_effect: MIG turned on on the H100, no MIG device made
        "h100mig_l4": _simulated_gpus(["h100", "l4"], mig=[["-i", "0", "-mig", "1"]]),
        "no_driver": {"state": "driver_not_loaded", "gpus": [], "message": "NVIDIA-SMI has failed because it "
                      "couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed "
                      "and running."},
    }


def _awq(name, port, gpus=(1,), **extra):
    inst = {"name": name, "image": STANDIN, "gpus": list(gpus), "port": port, "model": "Qwen2.5-3B-Instruct-AWQ",
            "served_model_name": "qwen2.5-3b", "max_model_len": 4096, "max_num_seqs": 16, "gpu_memory_utilization": 0.23}
    inst.update(extra)
    return inst


FP8 = {"name": "seed-first-attempt", "image": STANDIN, "gpus": [0], "port": 18010, "model": "Qwen3-32B-FP8",
       "served_model_name": "qwen3-32b", "max_model_len": 32768, "gpu_memory_utilization": 0.92}
AWQ_040 = {"image": STANDIN, "gpus": [1], "model": "Qwen2.5-3B-Instruct-AWQ", "max_model_len": 4096,
           "gpu_memory_utilization": 0.40}
# molecule/vllm: the planted secrets are read from files there; any value stands for them here.
SECRETS = {"vllm_hf_token": "hf_PlantedTokenValue0123456789", "vllm_api_key": "sk-planted-api-key-0123456789"}
DIGEST = "vllm/vllm-openai@sha256:" + "0123456789abcdef" * 4


def vllm_cases(facts):
    """{case: (facts name, role variables)}: molecule's instances, then every branch of the resolution, the
    command line, the environment and the checks."""
    h100_l4 = facts["h100_l4"]["gpus"]
    host = {"vllm_models_dir": "/srv/models", "vllm_network_mode": "host"}
    cases = {
        # molecule/vllm/molecule.yml
        "molecule_vllm": ("h100_l4", dict(host, **SECRETS, vllm_instances=[
            {"name": "qwen3-32b-fp8", "image": STANDIN, "gpus": [0], "port": 18000, "model": "Qwen3-32B-FP8",
             "served_model_name": "qwen3-32b", "max_model_len": 32768, "gpu_memory_utilization": 0.92,
             "env": {"GPUHOST_STANDIN_NON_TORCH_GIB": "0.06"}}]
            + [_awq("qwen25-3b-awq-%d" % i, 18001 + i) for i in range(4)])),
        # molecule/vllm/molecule.yml, host vllm-mig
        "molecule_vllm_mig": ("h100_mig_h100", dict(host, vllm_instances=[
            dict(_awq(name, port, gpus), max_model_len=8192, gpu_memory_utilization=0.9)
            for name, gpus, port in (("slice-a", ["0:0"], 18100), ("slice-b", ["0:1"], 18101),
                                     ("whole-1", [1], 18102))])),
        # molecule/first_use/molecule.yml
        "molecule_first_use": ("h100", dict(host, vllm_instances=[
            _awq("qwen25-3b-awq", 18001, (0,), gpu_memory_utilization=0.5)])),
        # molecule/vllm/side_effect.yml
        "side_effect_shm": ("h100_l4", dict(host, **SECRETS, vllm_instances=[dict(FP8, ipc_mode="private")])),
        "side_effect_bf16": ("h100_l4", dict(host, **SECRETS, vllm_instances=[
            dict(FP8, name="qwen3-32b-bf16", model="Qwen3-32B", gpu_memory_utilization=0.90)])),
        "side_effect_overflow": ("h100_l4", dict(host, **SECRETS, vllm_instances=[
            dict(AWQ_040, name="awq-040-%d" % i, port=18020 + i) for i in range(4)])),
        "side_effect_kv_mismatch": ("h100_l4", dict(host, **SECRETS, vllm_instances=[
            {"name": "kv-mismatch", "image": STANDIN, "gpus": [0], "port": 18030, "model": "Qwen2.5-3B-Instruct-AWQ",
             "max_model_len": 4096, "gpu_memory_utilization": 0.08, "env": {"GPUHOST_STANDIN_ACTIVATION_GIB": "3.0"}}])),
        "side_effect_mig_whole": ("h100mig_l4", dict(host, **SECRETS, vllm_instances=[
            dict(AWQ_040, name="mig-whole", port=18040, gpus=[0])])),
        # The role's defaults: bridge, loopback, positional model, HF_HUB_OFFLINE, no secret.
        "defaults_bridge": ("h100_l4", {"vllm_instances": [
            {"name": "org-model", "image": DIGEST, "gpus": [h100_l4[1]["uuid"]], "port": 8000, "model": "org/Model-7B",
             "ipc_mode": "private", "shm_size": "16g", "quantization": "awq", "kv_cache_dtype": "fp8",
             "max_num_seqs": 8, "tensor_parallel_size": "1",
             "extra_args": ["--enable-prefix-caching", "--max-num-batched-tokens=4096"],
             "env": {"NUMBER": 1, "FLAG": True, "RATIO": 0.5, "TEXT": "x"}},
            {"name": "two-gpus", "image": "registry.local:5000/vllm/vllm-openai:v0.11.0", "gpus": [0, 1],
             "port": "8001", "model": "qwen3-4b", "gpu_memory_utilization": "0.85",
             "env": {"HF_TOKEN": "from-env", "HF_HOME": "/models/other"}}]}),
        # Published beyond loopback, --model, online, role-wide IPC and shm, a token without an API key.
        "exposed_option": ("h100_l4", {
            "vllm_expose_publicly": True, "vllm_bind_address": "0.0.0.0", "vllm_model_argument": "option",
            "vllm_hf_offline": False, "vllm_hf_home": "/models/hf-cache", "vllm_ipc_mode": "private",
            "vllm_shm_size": "8g", "vllm_compile_cache_volume_prefix": "cache-", "vllm_compile_cache_path": "/cache",
            "vllm_hf_token": "hf_only_the_token", "vllm_instances": [
                {"name": "any", "image": STANDIN, "gpus": [0], "port": 9000, "model": "m/a"},
                {"name": "v6-any", "image": STANDIN, "gpus": [0], "port": 9001, "model": "m/b", "bind_address": "::"},
                {"name": "v6", "image": STANDIN, "gpus": [1], "port": 9002, "model": "m/c/", "bind_address": "fd00::5",
                 "ipc_mode": "host"},
                {"name": "lan", "image": STANDIN, "gpus": [1], "port": 9003, "model": "c", "bind_address": "10.0.0.5",
                 "shm_size": ""},
                {"name": "star", "image": STANDIN, "gpus": [1], "port": 9004, "model": "d", "bind_address": "*"}]}),
        # null and empty values fall back to the defaults as the role's defaults do.
        "nulls": ("h100_l4", dict(host, vllm_instances=[
            {"name": "nulls", "image": STANDIN, "gpus": [1], "port": 9100, "model": "a/b", "served_model_name": None,
             "max_model_len": None, "bind_address": "", "tensor_parallel_size": 0, "env": None, "extra_args": None,
             "quantization": None, "non_torch_gib": 0.5, "activation_gib": None, "vllm_version": "0.11.0"}])),
        "host_network_loopback_v6": ("h100_l4", dict(host, vllm_instances=[
            {"name": "v6-loop", "image": STANDIN, "gpus": ["0"], "port": 9200, "model": "x", "bind_address": "::1"},
            {"name": "localhost", "image": STANDIN, "gpus": [1], "port": 9201, "model": "y",
             "bind_address": "localhost"}])),
        "no_instances": ("h100_l4", dict(host, vllm_instances=[])),
        "gpu_layer_broken": ("no_driver", dict(host, vllm_instances=[_awq("a", 9300)])),
    }
    invalid = {
        "bad_name": {"name": "-bad"},
        "name_with_space": {"name": "a b"},
        "image_latest": {"image": "vllm/vllm-openai:latest"},
        "image_untagged": {"image": "vllm/vllm-openai"},
        "image_registry_port_untagged": {"image": "registry:5000/vllm"},
        "image_empty_tag": {"image": "vllm/vllm-openai:"},
        "image_short_digest": {"image": "vllm/vllm-openai@sha256:abc"},
        "gpu_missing": {"gpus": [7]},
        "gpu_uuid_missing": {"gpus": ["GPU-ffffffff-0000-0000-0000-000000000000"]},
        "gpu_twice": {"gpus": [1, h100_l4[1]["uuid"]]},
        "gpus_empty": {"gpus": []},
        "tp_too_big": {"tensor_parallel_size": 2},
        "tp_text": {"tensor_parallel_size": "two"},
        "port_zero": {"port": 0},
        "port_high": {"port": 70000},
        "gmu_high": {"gpu_memory_utilization": 1.5},
        "gmu_zero": {"gpu_memory_utilization": 0},
        "gmu_text": {"gpu_memory_utilization": "lots"},
        "model_absolute": {"model": "/srv/models/x"},
        "model_parent": {"model": "a/../b"},
        "model_empty": {"model": ""},
        "bind_public": {"bind_address": "0.0.0.0"},
        "api_key_flag": {"extra_args": ["--api-key=abc"]},
        "api_key_flag_split": {"extra_args": ["--api-key", "abc"]},
    }
    for name, change in invalid.items():
        cases["invalid_" + name] = ("h100_l4", dict(host, vllm_instances=[
            _awq("ok-one", 9400), dict(_awq("broken", 9401), **change)]))
    cases["invalid_duplicate_names"] = ("h100_l4", dict(host, vllm_instances=[_awq("same", 9500), _awq("same", 9501)]))
    cases["invalid_duplicate_names_case"] = ("h100_l4", dict(host, vllm_instances=[
        _awq("Same", 9510), _awq("same", 9511)]))
    cases["invalid_duplicate_ports"] = ("h100_l4", dict(host, vllm_instances=[_awq("a", 9520), _awq("b", 9520)]))
    cases["duplicate_ports_int_and_text"] = ("h100_l4", dict(host, vllm_instances=[
        _awq("a", 9530), _awq("b", "9530")]))
    cases["invalid_mig_whole_and_bad_port"] = ("h100mig_l4", dict(host, vllm_instances=[
        _awq("whole", 9540, (0,)), _awq("bad-port", 0)]))
    return cases


# ---------------------------------------------------------------- the role's tasks in the harness

def _instances_tasks(tree):
    """instances.yml, then the deploy task with a stub in place of docker_container (its arguments kept)."""
    with open(os.path.join(tree, "roles", "vllm", "tasks", "instances.yml"), encoding="utf-8") as handle:
        tasks = role_harness.load_tasks(handle.read())
    with open(os.path.join(tree, "roles", "vllm", "tasks", "deploy.yml"), encoding="utf-8") as handle:
        deploy = role_harness.task_named(role_harness.load_tasks(handle.read()), "Deploy the serving containers")
    warn = role_harness.task_named(tasks, "Warn about instances on docker's 64 MB /dev/shm")
    warn["register"] = "capture_shm"
    deploy = role_harness.replace_module(deploy, "community.docker.docker_container", "capture_args")
    deploy.pop("no_log")  # the secrets are the point here
    return tasks + [deploy]


CAPTURE_INSTANCES = {
    "resolved": "{{ vllm_resolved | default(none) }}",
    "containers": "{{ vllm_deploy.results | default([]) | map(attribute='args') | list }}",
    "warnings": "{{ capture_shm.results | default([]) | selectattr('msg', 'defined') | map(attribute='msg') | list }}",
}


def run_instances(tree, inputs):
    defaults = os.path.join(tree, "roles", "vllm", "defaults", "main.yml")
    cases = {name: {"vars": case["vars"], "facts": {"nvidia": case["facts"]}} for name, case in inputs.items()}
    return role_harness.run_cases(cases, _instances_tasks(tree), CAPTURE_INSTANCES, os.path.join(tree, "library"),
                                  os.path.join(tree, "module_utils"), vars_files=[defaults])


def instances_inputs():
    facts = gpu_facts()
    return {name: {"facts": facts[which], "vars": variables} for name, (which, variables) in vllm_cases(facts).items()}


def capture_before(tree):
    inputs = instances_inputs()
    outputs = run_instances(tree, inputs)
    record = record_inputs(inputs, outputs)
    return {"vllm_instances": {name: {"inputs": inputs[name], "outputs": outputs[name]} for name in inputs},
            "vllm_record": {name: {"inputs": record[name], "outputs": out}
                            for name, out in run_record(tree, record).items()}}


# ---------------------------------------------------------------- the record (report.yml)

# The model directories the plans read: each molecule model name over a fixture config of its family, with a
# header-only safetensors file declaring its weights (as test_vllm_plan_host's).
RECORD_MODELS = {"Qwen3-32B-FP8": ("qwen3-14b", 32.8e9, "F8_E4M3"), "Qwen2.5-3B-Instruct-AWQ": ("qwen2.5-14b-instruct-awq",
                                                                                            3.1e9, "I32"),
                 "org/Model-7B": ("mistral-7b-instruct-v0.3", 7.2e9, "BF16"), "qwen3-4b": ("qwen3-4b", 4.02e9, "BF16")}
RECORD_CASES = {"molecule_vllm": ["024", "012", "012", "030", "007"], "molecule_vllm_mig": ["012", "024", "035"],
                "defaults_bridge": ["007", "017"]}


def _models_dir(root):
    import struct
    for name, (fixture, params, dtype) in RECORD_MODELS.items():
        os.makedirs(os.path.join(root, name))
        with open(os.path.join(MODELS, fixture, "config.json"), encoding="utf-8") as handle:
            config = handle.read()
        with open(os.path.join(root, name, "config.json"), "w", encoding="utf-8") as handle:
            handle.write(config)
        size = int(params) * (1 if dtype == "F8_E4M3" else 2)
        header = json.dumps({"w": {"dtype": dtype, "shape": [size], "data_offsets": [0, size]}}).encode()
        with open(os.path.join(root, name, "model.safetensors"), "wb") as handle:
            handle.write(struct.pack("<Q", len(header)) + header)


def _log_report(prefix):
    from ansible.module_utils.serving import vllm_log
    name = next(f for f in sorted(os.listdir(os.path.join(FIXTURES, "vllm_logs"))) if f.startswith(prefix))
    with open(os.path.join(FIXTURES, "vllm_logs", name), encoding="utf-8", errors="replace") as handle:
        return vllm_log.parse(handle.read())


def record_inputs(inputs, outputs):
    """report.yml's inputs for the record cases: the instances as the role resolved them (the captured
    vllm_resolved), their plans (vllm_host_plan.plan_host on model directories named as molecule's), startup
    reports of real logs, which containers this run deployed, and the image's CUDA verdict."""
    from ansible.module_utils.serving import vllm_host_plan
    out = {}
    with tempfile.TemporaryDirectory() as models:
        _models_dir(models)
        for case, logs in RECORD_CASES.items():
            resolved = outputs[case]["resolved"]
            gpus = inputs[case]["facts"]["gpus"]
            plans = vllm_host_plan.plan_host(resolved, gpus, models)["plans"]
            reports = dict((inst["name"], _log_report(log)) for inst, log in zip(resolved, logs))
            out[case] = {"facts": inputs[case]["facts"], "vars": {
                "vllm_resolved": resolved, "vllm_plan_by_name": plans, "vllm_report_by_name": reports,
                "vllm_deploy": {"results": [{"item": {"name": inst["name"]}, "changed": i % 2 == 0}
                                            for i, inst in enumerate(resolved)]},
                # molecule/vllm's verify: the stand-in's image declares CUDA 12.8; a second image was not judged.
                "vllm_image_cuda_by_image": {STANDIN: {"verdict": "ok", "image_cuda": "12.8", "driver_cuda": "13.0"}}}}
    return out


def _record_tasks(tree):
    with open(os.path.join(tree, "roles", "vllm", "tasks", "report.yml"), encoding="utf-8") as handle:
        tasks = role_harness.load_tasks(handle.read())
    tasks = [t for t in tasks if t.get("name") != "Report each instance"]  # a debug of the API checks' figures
    role_harness.task_named(tasks, "Record the deployed instances in the local facts")["register"] = "capture_record"
    return tasks


def run_record(tree, inputs):
    defaults = os.path.join(tree, "roles", "vllm", "defaults", "main.yml")
    cases = {name: {"vars": dict(case["vars"], vllm_plan_measured_path="{{ case_dir }}/measured.json"),
                    "facts": {"nvidia": case["facts"]}} for name, case in inputs.items()}
    return role_harness.run_cases(
        cases, _record_tasks(tree), {"record": "{{ capture_record.record | default(none) }}",
                                     "warnings": "{{ vllm_warnings | default(none) }}"},
        os.path.join(tree, "library"), os.path.join(tree, "module_utils"), vars_files=[defaults],
        module_defaults={"vllm_plan_measurement": {"record_path": "{{ case_dir }}/gpuhost.fact"},
                         "gpuhost_record": {"path": "{{ case_dir }}/gpuhost.fact"}})


# ---------------------------------------------------------------- the role now, against the Jinja of 1c34c40

def _before(name):
    with open(os.path.join(role_harness.FIXTURES, name + ".json"), encoding="utf-8") as handle:
        return json.load(handle)


def _same(value):
    """The value as JSON text: 1 and 1.0, "1" and 1 differ, as they do to docker and in the record."""
    return json.dumps(value, sort_keys=True)


def _failed_names(failed):
    """The instances a failure names: the looped checks' failed items, or the names in the module's errors."""
    if failed is None:
        return None
    return sorted(item["name"] for item in failed["items"] if isinstance(item, dict))


@pytest.fixture(scope="module")
def instances_now():
    before = _before("vllm_instances")
    return before, run_instances(ROOT, dict((name, case["inputs"]) for name, case in before.items()))


def test_the_captures_cover_molecule_and_every_check():
    before = _before("vllm_instances")
    assert {"molecule_vllm", "molecule_vllm_mig", "molecule_first_use", "side_effect_mig_whole"} <= set(before)
    failing = [name for name, case in before.items() if case["outputs"]["failed"]]
    assert len(failing) >= 30 and "gpu_layer_broken" in failing
    # the Jinja's three stages of checks all failed some case
    assert {case["outputs"]["failed"]["task"] for case in before.values() if case["outputs"]["failed"]} == {
        "The GPU layer is usable", "Each instance is valid", "Names and ports are unique on the host",
        "No instance gets a MIG-enabled GPU whole"}


def test_resolved_instances_are_what_the_jinja_resolved(instances_now):
    before, now = instances_now
    for name, case in before.items():
        if case["outputs"]["failed"] is None:
            assert now[name]["failed"] is None, (name, now[name]["failed"])
            assert _same(now[name]["resolved"]) == _same(case["outputs"]["resolved"]), name


def test_containers_are_what_the_jinja_deployed(instances_now):
    """The docker_container arguments: names, command lines, environment (secrets included), device requests,
    volumes, ports, labels - one for one."""
    before, now = instances_now
    compared = 0
    for name, case in before.items():
        if case["outputs"]["failed"] is None:
            assert _same(now[name]["containers"]) == _same(case["outputs"]["containers"]), name
            compared += len(case["outputs"]["containers"])
    assert compared >= 20


def test_warnings_are_the_jinja_warnings(instances_now):
    before, now = instances_now
    for name, case in before.items():
        assert now[name]["warnings"] == case["outputs"]["warnings"], name
    assert any(case["outputs"]["warnings"] for case in before.values())


def test_what_the_jinja_refused_is_refused_naming_the_instance_the_layer_and_the_fix(instances_now):
    before, now = instances_now
    for name, case in before.items():
        old = case["outputs"]["failed"]
        if old is None:
            continue
        new = now[name]["failed"]
        assert new is not None, name
        assert new["task"] == "Resolve and check the instances against the host's GPUs", name
        assert new["msg"].startswith("vllm: "), new["msg"]
        assert now[name]["containers"] == [], name  # nothing deployed
        for instance in _failed_names(old):
            assert "instance %s" % instance in new["msg"], (name, new["msg"])
        if old["task"] == "The GPU layer is usable":
            assert "converge the driver layer first (--tags driver)" in new["msg"]


@pytest.mark.parametrize("case, words", [
    ("invalid_image_latest", "image vllm/vllm-openai:latest is not pinned: give it a tag other than latest"),
    ("invalid_gpu_missing", "instance broken: gpus 7: 7 is not on this host (this host has GPUs 0, 1)"),
    ("invalid_gpu_twice", "name GPU 1 (1, GPU-"),
    ("invalid_tp_too_big", "tensor_parallel_size 2: from 1 to the number of its GPUs (1)"),
    ("invalid_port_high", "port 70000: an API port from 1 to 65535"),
    ("invalid_gmu_text", "gpu_memory_utilization lots: a share of the whole GPU, in (0, 1]"),
    ("invalid_model_parent", "model 'a/../b': a directory relative to vllm_models_dir (/srv/models), without '..'"),
    ("invalid_bind_public", "bind_address 0.0.0.0 is not loopback"),
    ("invalid_api_key_flag", "the API key goes in vllm_api_key (the container's VLLM_API_KEY)"),
    ("invalid_duplicate_names_case", "instance names ['Same', 'same'] must be unique on a host, whatever their case"),
    ("invalid_duplicate_ports", "instance ports [9520, 9520] must be unique"),
    # molecule/vllm's side_effect searches the failure for these words
    ("side_effect_mig_whole", "instance mig-whole is given GPU 0 whole, but MIG is enabled there"),
    ("side_effect_mig_whole", "(`nvidia-smi -i <index> -mig 0` with no process on the GPU)"),
    # both checks the Jinja made one after the other, at once
    ("invalid_mig_whole_and_bad_port", "instance whole is given GPU 0 whole"),
])
def test_each_refusal_says_why(instances_now, case, words):
    _, now = instances_now
    assert words in now[case]["failed"]["msg"], now[case]["failed"]["msg"]


@pytest.fixture(scope="module")
def record_now():
    before = _before("vllm_record")
    return before, run_record(ROOT, dict((name, case["inputs"]) for name, case in before.items()))


def test_the_record_is_what_the_jinja_recorded(record_now):
    before, now = record_now
    assert set(before) == set(RECORD_CASES)
    for name, case in before.items():
        assert case["outputs"]["failed"] is None and now[name]["failed"] is None, (name, now[name]["failed"])
        assert _same(now[name]["record"]) == _same(case["outputs"]["record"]), name
        assert now[name]["warnings"] == case["outputs"]["warnings"], name
    assert len(before["molecule_vllm"]["outputs"]["record"]["vllm"]["instances"]) == 5


# ---------------------------------------------------------------- the pure functions

from ansible.module_utils.serving import k8s_manifest, vllm_args, vllm_instances as vi  # noqa: E402


def test_the_command_line_reads_back_as_the_instance_through_the_manifest_reader():
    """What the role writes, k8s_manifest reads with the same table: a container of the role's command line
    in a Deployment is the same instance to `gpuhost plan --manifest`."""
    inputs = _before("vllm_instances")
    for name in ("molecule_vllm", "defaults_bridge", "exposed_option"):
        case = inputs[name]["inputs"]
        settings = dict((key[len("vllm_"):], value) for key, value in case["vars"].items()
                        if key[len("vllm_"):] in vi.SETTINGS)
        done = vi.instances(case["vars"]["vllm_instances"], case["facts"], settings)
        for inst, cont in zip(done["instances"], done["containers"]):
            read = k8s_manifest.vllm_container({"name": cont["name"], "image": cont["image"], "args": cont["command"],
                                                "resources": {"limits": {"nvidia.com/gpu": len(inst["gpu_ids"])}}},
                                               cont["name"])
            assert read["model"] == "/models/" + inst["model"]  # positional or --model alike
            assert read["gpu_memory_utilization"] == float(inst["gpu_memory_utilization"])
            assert read["tensor_parallel_size"] == inst["tensor_parallel_size"]
            assert read["max_model_len"] == (int(inst["max_model_len"]) if inst["max_model_len"] else None)
            assert read["max_num_seqs"] == (int(inst["max_num_seqs"]) if inst["max_num_seqs"] else None)


def test_the_table_reads_short_and_long_forms_as_before():
    assert vllm_args.read(["m", "--tensor-parallel-size", "4", "-tp", "2", "--max_model_len=8192", "--enforce-eager"]) \
        == {"tensor_parallel_size": "2", "max_model_len": "8192", "enforce_eager": ""}
    assert vllm_args.command_line({"served_model_name": "s", "host": "0.0.0.0", "port": 8000,
                                   "gpu_memory_utilization": 0.9, "tensor_parallel_size": 1, "kv_cache_dtype": "auto",
                                   "max_model_len": None, "max_num_seqs": 16, "quantization": ""},
                                  "/models/m", "option") == [
        "--model", "/models/m", "--served-model-name", "s", "--host", "0.0.0.0", "--port", "8000",
        "--gpu-memory-utilization", "0.9", "--tensor-parallel-size", "1", "--kv-cache-dtype", "auto",
        "--max-num-seqs", "16"]
    # the role's check of extra_args takes the flag as written (--api_key is another word to it)
    assert vllm_args.names_flag(["--api-key=x"], "api_key") and vllm_args.names_flag(["--api-key", "x"], "api_key")
    assert not vllm_args.names_flag(["--api-keys", "--api_key=x"], "api_key")


@pytest.mark.parametrize("value, number", [("2", 2), ("2.7", 2), (2.7, 2), ("two", 0), (None, 0), (True, 1),
                                           ("inf", 0)])
def test_numbers_are_read_as_the_jinja_read_them(value, number):
    assert vi.as_int(value) == number


def test_the_module_through_ansible_keeps_secrets_out():
    inputs = _before("vllm_instances")["molecule_vllm"]["inputs"]
    result = run_ansible_module("vllm_instances", {"instances": inputs["vars"]["vllm_instances"],
                                                   "gpu_facts": inputs["facts"], "network_mode": "host"})
    assert not result["changed"] and "failed" not in result, result
    assert [c["name"] for c in result["containers"]] == [i["name"] for i in inputs["vars"]["vllm_instances"]]
    assert all(set(c["env"]) <= {"HF_HOME", "HF_HUB_OFFLINE", "GPUHOST_STANDIN_NON_TORCH_GIB"}
               for c in result["containers"])
    assert "published_ports" not in result["containers"][0] and "shm_size" not in result["containers"][0]
