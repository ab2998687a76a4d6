"""k8s_manifest: vLLM containers of Deployments/StatefulSets and the device plugin's time-slicing
config, on the fixtures of tests/fixtures/k8s/ (see its README for where each comes from)."""
import json
import os

import pytest

from serving import k8s_manifest as km
from conftest import FIXTURES

K8S = os.path.join(FIXTURES, "k8s")


def load(name):
    with open(os.path.join(K8S, name), "rb") as handle:
        return km.load_documents(handle.read(), name)


def only(docs):
    found = km.workloads(docs)
    assert len(found) == 1
    return found[0]


def test_seed_003_flag_equals_value_form():
    # seed 003 section 2: the settings table of ~/k3s-gpu-cluster/engine/vllm.yaml.
    w = only(load("seed003_vllm-qwen_4-replicas.yaml"))
    assert (w["kind"], w["namespace"], w["name"], w["replicas"]) == ("Deployment", "llm", "vllm-qwen", 4)
    assert w["image"] == "vllm/vllm-openai:latest" and w["model"] == "Qwen/Qwen2.5-3B-Instruct-AWQ"
    assert (w["gpu_memory_utilization"], w["max_model_len"], w["max_num_seqs"]) == (0.40, 4096, 16)
    assert (w["gpu_resource"], w["gpu_count"], w["tensor_parallel_size"]) == ("nvidia.com/gpu.shared", 1, 1)


def test_separate_tokens_read_as_flag_equals_value():
    equals = load("seed003_vllm-qwen_4-replicas.yaml")[0]["spec"]["template"]["spec"]["containers"][0]
    tokens = dict(equals, args=[part for arg in equals["args"] for part in arg.split("=", 1)])
    assert tokens["args"][:2] == ["--model", "Qwen/Qwen2.5-3B-Instruct-AWQ"]
    assert km.vllm_container(tokens, "t") == km.vllm_container(equals, "t")


def test_vllm_docs_sh_c_string_without_utilization():
    w = only(load("deployment-mistral-7b_vllm-docs-k8s.yaml"))
    assert w["model"] == "mistralai/Mistral-7B-Instruct-v0.3"
    assert w["gpu_memory_utilization"] is None  # not given: vLLM's default applies (the plan says which)
    assert (w["max_model_len"], w["max_num_seqs"]) == (None, None)
    assert (w["gpu_resource"], w["gpu_count"], w["replicas"]) == ("nvidia.com/gpu", 1, 1)  # "1" as a string


def test_statefulset_api_server_separate_tokens_env_and_sidecar():
    docs = load("statefulset-api-server_whole-gpu.yaml")
    assert [d["kind"] for d in docs] == ["Service", "StatefulSet"]
    w = only(docs)  # the busybox sidecar is not vLLM
    assert (w["kind"], w["namespace"], w["name"], w["container"]) == ("StatefulSet", "serving", "vllm-llama", "server")
    assert w["model"] == "/models/Llama-3.1-8B-Instruct"  # $(MODEL_DIR) from the container's env
    assert (w["gpu_memory_utilization"], w["max_model_len"], w["max_num_seqs"]) == (0.9, 8192, 64)
    assert (w["gpu_resource"], w["gpu_count"], w["tensor_parallel_size"]) == ("nvidia.com/gpu", 1, 1)


@pytest.mark.parametrize("container, model, tp", [
    ({"image": "vllm/vllm-openai:v0.11.0", "command": ["vllm", "serve", "Qwen/Qwen3-8B"],
      "args": ["--tensor-parallel-size=2"]}, "Qwen/Qwen3-8B", 2),
    # no command: the image's ENTRYPOINT (`vllm serve`) takes a positional model
    ({"image": "vllm/vllm-openai:latest", "args": ["Qwen/Qwen3-8B", "-tp", "4"]}, "Qwen/Qwen3-8B", 4),
    ({"image": "registry.local/serving:1", "command": ["/usr/local/bin/vllm", "serve", "--model", "m"]}, "m", 1),
    ({"image": "x", "command": ["bash", "-c", "pip list && vllm serve 'my model' --max_model_len 2048 && echo done"]},
     "my model", 1),
])
def test_command_forms(container, model, tp):
    container = dict(container, name="c", resources={"limits": {"nvidia.com/gpu": 2}})
    found = km.vllm_container(container, "t")
    assert (found["model"], found["tensor_parallel_size"], found["gpu_count"]) == (model, tp, 2)


def test_not_vllm():
    assert km.vllm_container({"name": "web", "image": "nginx", "args": ["--port", "80"]}, "t") is None
    # a vLLM image whose command runs something else
    assert km.vllm_container({"name": "dl", "image": "vllm/vllm-openai", "command": ["huggingface-cli", "download"]},
                             "t") is None


def test_kind_list_is_flattened():
    docs = load("seed003_vllm-qwen_4-replicas.yaml")
    assert km.workloads(km.load_documents(json.dumps({"kind": "List", "items": docs})))[0]["replicas"] == 4


# ------------------------------------------------------------------ time-slicing

def test_device_plugin_readme_example():
    # NVIDIA/k8s-device-plugin README: nvidia.com/gpu, 10 replicas, no rename.
    assert km.time_slicing(load("time-slicing_k8s-device-plugin-README.yaml")) == {"nvidia.com/gpu": 10}


def test_device_plugin_readme_rename_example_is_not_yaml():
    # The README's block ends in an elision (`    ...`) that makes it invalid as a file: line 8.
    with pytest.raises(km.ManifestError) as err:
        load("time-slicing-renameByDefault_k8s-device-plugin-README.yaml")
    assert "is not YAML" in str(err.value) and "at line 8)" in str(err.value)


def test_rename_by_default_advertises_shared():
    # seed 003's node: one L4 advertised as nvidia.com/gpu.shared: 4 (renameByDefault).
    text = "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n" \
           "    - name: nvidia.com/gpu\n      replicas: 4\n"
    assert km.time_slicing(km.load_documents(text)) == {"nvidia.com/gpu.shared": 4}


@pytest.mark.parametrize("doc, words", [
    ({"version": "v1", "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}, "MPS"),
    ({"version": "v1", "flags": {"migStrategy": "none"}}, "no sharing.timeSlicing.resources"),
    ({"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": "four"}]}}}, "not a number"),
])
def test_time_slicing_errors(doc, words):
    with pytest.raises(km.ManifestError) as err:
        km.time_slicing([doc])
    assert words in str(err.value)


# ------------------------------------------------------------------ errors

@pytest.mark.parametrize("text, words", [
    ("kind: Deployment\nspec:\n  replicas: [1\n", "is not YAML: "),
    ("- just\n- a list\n", "document 1 is not a mapping"),
])
def test_load_errors(text, words):
    with pytest.raises(km.ManifestError) as err:
        km.load_documents(text)
    assert words in str(err.value) and "\n" not in str(err.value)


def deployment(container):
    return [{"kind": "Deployment", "metadata": {"name": "d"},
             "spec": {"template": {"spec": {"containers": [container]}}}}]


@pytest.mark.parametrize("container, words", [
    ({"name": "web", "image": "nginx"}, "no vLLM container found (Deployment default/d)"),
    ({"name": "v", "image": "vllm/vllm-openai", "args": ["m"]}, "asks for no nvidia.com/gpu"),
    ({"name": "v", "image": "vllm/vllm-openai", "args": ["m"], "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}},
     "MIG slice"),
    ({"name": "v", "image": "vllm/vllm-openai", "args": ["m", "--gpu-memory-utilization", "40"],
      "resources": {"limits": {"nvidia.com/gpu": 1}}}, "is not in (0, 1]"),
    ({"name": "v", "image": "vllm/vllm-openai", "args": ["m", "--max-model-len=lots"],
      "resources": {"limits": {"nvidia.com/gpu": 1}}}, "--max-model-len 'lots' is not a number"),
])
def test_workload_errors(container, words):
    with pytest.raises(km.ManifestError) as err:
        km.workloads(deployment(container))
    assert words in str(err.value)


def test_replicas_default_to_one():
    docs = deployment({"name": "v", "image": "vllm/vllm-openai", "args": ["m"],
                       "resources": {"limits": {"nvidia.com/gpu": 1}}})
    assert km.workloads(docs)[0]["replicas"] == 1
