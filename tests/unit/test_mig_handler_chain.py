"""The chain a MIG layout change sets off (issue 24 item 2), read from the YAML Ansible runs: the nvidia_mig role's
module task notifies `gpuhost mig changed`, the role's handlers are the shared chain (roles/gpuhost_handlers/
handlers/chain.yml), and in that chain (Ansible runs handlers in definition order) the topic reaches the CDI
regeneration, then containerd's restart (a containerd node), then the serving containers on the GPUs whose layout
changed, and never docker's restart (issue 39: a change on GPU 0 restarted every container of the host). The
molecule scenario `mig` has no docker, so this order is checked here; the vllm scenario's MIG host checks docker and GPU 1's
instance are left alone by drift.yml's repair of GPU 0."""
import os

import yaml

from conftest import ROOT

CHAIN = os.path.join(ROOT, "roles", "gpuhost_handlers", "handlers", "chain.yml")
TOPIC = "gpuhost mig changed"


def load(*parts):
    with open(os.path.join(ROOT, *parts)) as handle:
        return yaml.safe_load(handle)


def listens(handler):
    topics = handler.get("listen") or []
    return [topics] if isinstance(topics, str) else list(topics)


def test_the_role_notifies_the_topic_from_its_module_task_only():
    tasks = load("roles", "nvidia_mig", "tasks", "main.yml")[0]["block"]
    notifying = [t for t in tasks if t.get("notify")]
    assert [t["name"] for t in notifying] == ["Bring the GPUs to the declared MIG layout"]
    assert notifying[0]["notify"] == TOPIC and "nvidia_mig" in notifying[0]


def test_the_role_carries_the_shared_chain():
    handlers = load("roles", "nvidia_mig", "handlers", "main.yml")
    assert handlers[0]["ansible.builtin.import_tasks"].endswith("/../gpuhost_handlers/handlers/chain.yml")


def test_the_topic_runs_cdi_then_containerd_then_the_changed_gpus_serving_containers():
    chain = load("roles", "gpuhost_handlers", "handlers", "chain.yml")
    names = [h["name"] for h in chain]
    on_topic = [h["name"] for h in chain if TOPIC in listens(h)]
    assert on_topic == ["Regenerate the CDI spec", "Restart containerd",
                        "Restart the serving containers on the GPUs whose MIG layout changed"]
    serving = next(h for h in chain if h["name"] == on_topic[-1])
    # only the instances whose recorded GPUs the module changed, and not again after a docker restart
    assert "nvidia_mig_result.gpus" in " ".join(serving["when"])
    assert "gpuhost_handlers_docker_restart" in " ".join(serving["when"])
    assert names.index("Restart docker") < names.index(serving["name"])
    assert chain[names.index("Restart docker")]["register"] == "gpuhost_handlers_docker_restart"
    # the runtime entry is the driver's business, not a layout's; docker resolves MIG devices at container start
    assert TOPIC not in listens(next(h for h in chain if h["name"] == "Configure the nvidia runtime for docker"))
    assert TOPIC not in listens(next(h for h in chain if h["name"] == "Restart docker"))
