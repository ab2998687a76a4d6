"""The chain a MIG layout change sets off (issue 24 item 2), read from the YAML Ansible runs: the nvidia_mig role's
module task notifies `gpuhost mig changed`, the role's handlers are the shared chain (roles/gpuhost_handlers/
handlers/chain.yml), and in that chain (Ansible runs handlers in definition order) the topic reaches the CDI
regeneration, then the engine restarts, whose `gpuhost docker restarted` restarts the serving containers. The
molecule scenario `mig` has no docker, so this order is checked here."""
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


def test_the_topic_runs_cdi_then_the_engines_then_the_serving_containers():
    chain = load("roles", "gpuhost_handlers", "handlers", "chain.yml")
    names = [h["name"] for h in chain]
    on_topic = [h["name"] for h in chain if TOPIC in listens(h)]
    assert on_topic == ["Regenerate the CDI spec", "Clear docker's start rate limit", "Restart docker",
                        "Restart containerd"]
    restart = next(h for h in chain if h["name"] == "Restart docker")
    assert restart["notify"] == "gpuhost docker restarted"
    serving = next(h for h in chain if "gpuhost docker restarted" in listens(h))
    assert serving["name"] == "Restart the serving containers"
    assert names.index("Regenerate the CDI spec") < names.index("Restart docker") < names.index(serving["name"])
    # the runtime entry is the driver's business, not a layout's
    assert TOPIC not in listens(next(h for h in chain if h["name"] == "Configure the nvidia runtime for docker"))
