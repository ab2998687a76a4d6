"""The vLLM layer after converge, idempotence and the side effects (H100 + L4, stand-in image)."""
import json
import os
import re
import time

import pytest

PLANTED = "PLANTED"  # in both planted secrets: hf_PLANTED_..., sk-PLANTED-...
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(HERE, "planted", "hf_token")) as _handle:
    HF_TOKEN = _handle.read().strip()
with open(os.path.join(HERE, "planted", "api_key")) as _handle:
    API_KEY = _handle.read().strip()
INSTANCES = {
    "qwen3-32b-fp8": (18000, "qwen3-32b", "0"),
    "qwen25-3b-awq-0": (18001, "qwen2.5-3b", "1"),
    "qwen25-3b-awq-1": (18002, "qwen2.5-3b", "1"),
    "qwen25-3b-awq-2": (18003, "qwen2.5-3b", "1"),
    "qwen25-3b-awq-3": (18004, "qwen2.5-3b", "1"),
}


def inspect(host, name):
    return json.loads(host.check_output("docker inspect %s" % name))[0]


def record(host):
    return json.loads(host.file("/etc/ansible/facts.d/gpuhost.fact").content_string)


@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_container_is_deployed_as_the_role_says(host, name):
    port, _, gpu = INSTANCES[name]
    data = inspect(host, name)
    config, hc = data["Config"], data["HostConfig"]
    assert data["State"]["Running"]
    assert hc["RestartPolicy"]["Name"] == "unless-stopped"
    assert hc["IpcMode"] == "host"
    (request,) = hc["DeviceRequests"]
    assert (request["Driver"], request["DeviceIDs"], request["Capabilities"]) == ("nvidia", [gpu], [["gpu"]])
    mounts = {m["Destination"]: m for m in data["Mounts"]}
    assert mounts["/models"]["Source"] == "/srv/models" and mounts["/models"]["RW"] is False
    assert mounts["/root/.cache/vllm"]["Type"] == "volume"
    assert mounts["/root/.cache/vllm"]["Name"] == "gpuhost-vllm-cache-" + name
    args = config["Cmd"]
    assert args[0].startswith("/models/")  # vllm serve's positional model
    for flag in ("--served-model-name", "--max-model-len", "--gpu-memory-utilization", "--tensor-parallel-size",
                 "--kv-cache-dtype", "--host", "--port"):
        assert flag in args, flag
    assert args[args.index("--host") + 1] == "127.0.0.1"
    assert args[args.index("--port") + 1] == str(port)
    assert config["Labels"]["gpuhost.vllm.instance"] == name


@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_image_cuda_was_checked_against_the_driver(host, name):
    # The stand-in carries the vLLM image's requirement (nvidia/cuda 12.8.1: "cuda>=12.8 brand=..."); the
    # simulated 580 driver reports CUDA 13.0 (nvidia-smi's header), so the image runs natively.
    env = dict(item.split("=", 1) for item in inspect(host, name)["Config"]["Env"])
    assert env["NVIDIA_REQUIRE_CUDA"].startswith("cuda>=12.8 brand=unknown,driver>=470,driver<471 ")
    smi_cuda = re.search(r"CUDA Version: (\d+\.\d+)", host.check_output("nvidia-smi")).group(1)
    assert record(host)["vllm"]["instances"][name]["cuda"] == {"verdict": "ok", "image_cuda": "12.8",
                                                               "driver_cuda": smi_cuda}
    assert smi_cuda == "13.0"


@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_secrets_only_in_the_environment(host, name):
    data = inspect(host, name)
    visible = json.dumps([data["Path"], data["Args"], data["Config"]["Cmd"], data["Config"]["Entrypoint"]])
    assert PLANTED not in visible
    env = data["Config"]["Env"]
    assert "HF_TOKEN=" + HF_TOKEN in env and "VLLM_API_KEY=" + API_KEY in env
    logs = host.run("docker logs %s 2>&1" % name)
    assert logs.rc == 0 and "Starting vLLM server on http://127.0.0.1:" in logs.stdout
    assert PLANTED not in logs.stdout


@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_api_answers_with_the_key_only(host, name):
    port, served, _ = INSTANCES[name]
    health = host.run("curl -s -o /dev/null -w '%%{http_code}' http://127.0.0.1:%d/health" % port)
    if health.rc == 127:  # no curl in the image: python's urllib
        health = host.run("python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:%d/health')"
                          ".status, end='')\"" % port)
    assert health.stdout.strip() == "200"
    script = ("import json, urllib.request as u, urllib.error as e\n"
              "def get(k=None):\n"
              "    r = u.Request('http://127.0.0.1:%d/v1/models', headers={'Authorization': 'Bearer ' + k} if k else {})\n"
              "    try:\n"
              "        return json.load(u.urlopen(r))\n"
              "    except e.HTTPError as x:\n"
              "        return x.code\n"
              "print(json.dumps([get(), get(%r)]))\n" % (port, API_KEY))
    out = json.loads(host.check_output("python3 -c %s" % _quote(script)))
    assert out[0] == 401
    assert [m["id"] for m in out[1]["data"]] == [served]


def _quote(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"


def test_record_holds_plan_and_startup_figures_within_one_percent(host):
    instances = record(host)["vllm"]["instances"]
    assert set(INSTANCES) <= set(instances)
    assert "kv-mismatch" not in instances  # removed through vllm_absent
    for name, entry in instances.items():
        if name not in INSTANCES:
            continue
        plan, startup = entry["plan"], entry["startup"]
        assert plan["verdict"] == "ok"
        assert abs(startup["kv_cache_tokens"] - plan["kv_cache_tokens"]) <= 0.01 * plan["kv_cache_tokens"]
        assert abs(startup["max_concurrency"] - plan["max_concurrency"]) <= 0.01 * plan["max_concurrency"]
        assert entry["warnings"] == []
        assert startup["vllm_version"] == "0.25.1"
    fp8 = instances["qwen3-32b-fp8"]
    # The plan (non-torch 0.25 GiB: the model's 0.05 + 0.2 for FP8 weights) and the log (0.06 GiB
    # "measured") differ, within the tolerance; the record keeps the plan the container started with.
    assert fp8["plan"]["kv_cache_tokens"] == 154304 and fp8["startup"]["kv_cache_tokens"] == 155088
    assert fp8["plan"]["max_concurrency"] == 4.71 and fp8["startup"]["max_concurrency"] == 4.73
    assert fp8["plan"]["estimates"] == "model" and fp8["plan"]["vllm_rules"] == "V1 0.21-0.33"
    assert fp8["gpu_uuids"][0].startswith("GPU-") and fp8["max_model_len"] == 32768
    awq = instances["qwen25-3b-awq-0"]
    assert awq["plan"]["kv_cache_tokens"] == awq["startup"]["kv_cache_tokens"] == 82368


def test_no_secret_in_the_record(host):
    assert PLANTED not in host.file("/etc/ansible/facts.d/gpuhost.fact").content_string


def test_no_secret_in_any_ansible_output():
    """Everything ansible printed in prepare, converge, idempotence and side_effect (ANSIBLE_LOG_PATH),
    and testinfra's inventory dump: the inventory names the secrets' files, never their values."""
    path = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "ansible.log")
    with open(path, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    assert "vllm plan qwen3-32b-fp8: OK" in text  # the log is the right one, and covers the role
    assert "shm_exhausted at weights_loaded" in text and "vllm: WARNING kv-mismatch" in text
    assert PLANTED not in text


def test_restart_loads_the_compile_cache(host):
    """The compile cache volume survives a restart: the new start loads the graphs, compiles nothing."""
    host.check_output("docker restart qwen25-3b-awq-3")
    deadline = time.time() + 60
    logs = ""
    while time.time() < deadline:
        logs = host.check_output("docker logs qwen25-3b-awq-3 2>&1")
        if logs.count("Starting vLLM server on") >= 2:
            break
        time.sleep(1)
    second = logs[logs.rindex("version 0.25.1"):]
    assert "Directly load the compiled graph(s) for compile range (1, 2048) from the cache" in second
    assert "Compiling a graph" not in second
    assert "Starting vLLM server on http://127.0.0.1:18004" in second


def test_no_failed_container_left(host):
    names = host.check_output("docker ps -a --format '{{.Names}}'").split()
    assert sorted(names) == sorted(INSTANCES)


def test_measurements_are_kept_and_used(host):
    """Each start's measured figures are kept by settings; the idempotence run planned with them."""
    store = json.loads(host.file("/var/lib/gpuhost/vllm-measured.json").content_string)
    instances = record(host)["vllm"]["instances"]
    by_model = {}
    for entry in store["entries"].values():
        by_model.setdefault(entry["settings"]["model"], []).append(entry)
    fp8 = [e for e in by_model["Qwen3-32B-FP8"] if e["settings"]["env"] == {"GPUHOST_STANDIN_NON_TORCH_GIB": "0.06"}]
    assert len(fp8) == 1
    entry, startup = fp8[0], instances["qwen3-32b-fp8"]["startup"]
    assert entry["kv_cache_gib"] == startup["kv_cache_gib"] and entry["weights_gib"] == startup["weights_gib"]
    parts = entry["weights_gib"] + entry["activation_gib"] + entry["non_torch_gib"] + entry["cuda_graph_gib"]
    assert abs(parts + entry["kv_cache_gib"] - entry["budget_gib"]) < 0.001
    path = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "ansible.log")
    with open(path, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    assert re.search(r"vllm plan qwen3-32b-fp8: OK .* \(measured on this host\)", text)
