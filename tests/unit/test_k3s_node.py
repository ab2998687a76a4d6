"""k3s_node: the k3s facts a GPU node's set-up relies on, on real k3s outputs and documented files."""
import os

import pytest
import yaml

from containers import containerd_config
from containers import k3s_node
from serving import k8s_manifest
from conftest import CORPUS, FIXTURES, fixture_path, read_fixture, run_ansible_module


@pytest.mark.parametrize("prefix, version, schema, template", [
    ("001", (32, 9, 1), 3, "config-v3.toml.tmpl"),   # containerd 2.0 since v1.32.2+k3s1
    ("002", (30, 3, 1), 2, "config.toml.tmpl"),      # the 1.30 line stayed on containerd 1.7
    ("003", (35, 4, 1), 3, "config-v3.toml.tmpl"),
])
def test_version_schema_and_template_from_real_k3s_version_outputs(prefix, version, schema, template):
    parsed = k3s_node.parse_version(read_fixture("k3s", prefix))
    assert parsed == version
    assert k3s_node.config_schema(parsed) == schema
    assert k3s_node.template_name(parsed) == template


@pytest.mark.parametrize("version, schema", [
    ((31, 5, 1), 2), ((31, 6, 1), 3),   # the February 2025 releases: v1.31.6+k3s1 and v1.32.2+k3s1
    ((32, 1, 1), 2), ((32, 2, 1), 3), ((33, 0, 1), 3), ((29, 15, 1), 2),
])
def test_containerd_2_starts_with_the_documented_releases(version, schema):
    assert k3s_node.config_schema(version) == schema


@pytest.mark.parametrize("text", ["", "k3s: command not found", "Client Version: v1.32.5"])
def test_no_k3s_version_is_an_error_that_says_so(text):
    with pytest.raises(k3s_node.K3sError, match="no k3s version"):
        k3s_node.parse_version(text)


def test_the_runtime_k3s_added_is_found_in_its_generated_config():
    config = read_fixture("k3s", "004")
    assert containerd_config.runtimes_in(config) == {"nvidia": "io.containerd.grpc.v1.cri"}
    state = k3s_node.runtime_state(config, (32, 9, 1))
    assert state["ok"] and not state["restart"] and state["runtimes"] == ["nvidia"]


def test_containerd_2_config_with_single_quoted_plugin_ids():
    # Only subtables of `nvidia` are in the excerpt: a subtable defines its runtime too (TOML).
    config = read_fixture("k3s", "005")
    assert containerd_config.runtimes_in(config) == {"nvidia": "io.containerd.cri.v1.runtime",
                                            "nvidia-cdi": "io.containerd.cri.v1.runtime"}
    assert k3s_node.nvidia_runtimes(config) == ["nvidia", "nvidia-cdi"]


def test_nvidia_ctk_drop_in_runtimes_are_read_too():
    with open(os.path.join(CORPUS, "nvidia_ctk", "containerd_configure_99-nvidia.toml"), encoding="utf-8") as handle:
        assert k3s_node.nvidia_runtimes(handle.read()) == ["nvidia"]


def test_a_config_without_the_runtime_asks_for_a_k3s_restart_once_the_toolkit_is_there():
    # k3s's own runc entry only (the fixture's lines other than nvidia's are not in a grep; use the corpus
    # root config written before any runtime was added).
    with open(os.path.join(FIXTURES, "containerd", "config-1.7-default-systemdcgroup_lucheng0127-k8s_setup_guide.toml"),
              encoding="utf-8") as handle:
        config = handle.read()
    assert "nvidia" not in containerd_config.runtimes_in(config)
    state = k3s_node.runtime_state(config, (30, 3, 1))
    assert not state["ok"] and state["restart"]
    assert "restart k3s" in state["message"]
    state = k3s_node.runtime_state(config, (30, 3, 1), toolkit_installed=False)
    assert not state["restart"] and "install nvidia-container-toolkit" in state["message"]


def test_runtime_class_is_the_documented_one():
    assert k3s_node.runtime_class() == yaml.safe_load(read_fixture("k3s", "006"))


@pytest.mark.parametrize("prefix, rename", [("time-slicing_", False), ("time-slicing-renameByDefault", True)])
def test_time_slicing_config_has_the_device_plugin_readme_form(prefix, rename):
    text = read_fixture("k8s", prefix)
    # The rename example ends in the README's elision of further resources (`    ...`): not YAML.
    upstream = yaml.safe_load(text.replace("    ...\n", ""))
    rendered = k3s_node.time_slicing_config(10, rename_by_default=rename)
    assert rendered == upstream
    # And the plan reads it back as the node advertises it (seed 003: nvidia.com/gpu.shared).
    assert k8s_manifest.time_slicing([rendered]) == {k3s_node.advertised_resource(rendered): 10}
    assert k3s_node.advertised_resource(rendered) == ("nvidia.com/gpu.shared" if rename else "nvidia.com/gpu")


@pytest.mark.parametrize("replicas", [1, 0, -2, 2.5, "four", True, None])
def test_time_slicing_refuses_replicas_that_share_nothing_or_are_not_whole(replicas):
    with pytest.raises(k3s_node.K3sError, match="time-slicing replicas"):
        k3s_node.time_slicing_config(replicas)


def test_time_slicing_refuses_a_rename_that_is_not_a_boolean():
    with pytest.raises(k3s_node.K3sError, match="renameByDefault"):
        k3s_node.time_slicing_config(4, rename_by_default="yes")


def test_config_map_carries_the_config_text_under_its_key():
    text = yaml.safe_dump(k3s_node.time_slicing_config(4, rename_by_default=True))
    cm = k3s_node.config_map("time-slicing-config", "kube-system", "any", text)
    assert cm["kind"] == "ConfigMap" and cm["metadata"] == {"name": "time-slicing-config", "namespace": "kube-system"}
    assert yaml.safe_load(cm["data"]["any"])["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": 4}]
    with pytest.raises(k3s_node.K3sError, match="namespace"):
        k3s_node.config_map("time-slicing-config", "Kube_System", "any", text)


# ---------------------------------------------------------------- the module, through real ansible

def k3s_host(tmp_path, monkeypatch, version_prefix, config_prefix=None, server=True, toolkit=True):
    """A node's files: `k3s --version` printing a real output, k3s's generated config, the server directory."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    k3s = bin_dir / "k3s"
    k3s.write_text("#!/bin/sh\ncat %s\n" % fixture_path("k3s", version_prefix))
    k3s.chmod(0o755)
    if toolkit:
        runtime = bin_dir / "nvidia-container-runtime"
        runtime.write_text("#!/bin/sh\nexit 0\n")
        runtime.chmod(0o755)
    data = tmp_path / "k3s"
    (data / "agent" / "etc" / "containerd").mkdir(parents=True)
    if config_prefix:
        (data / "agent" / "etc" / "containerd" / "config.toml").write_text(read_fixture("k3s", config_prefix))
    if server:
        (data / "server").mkdir()
    monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % bin_dir)
    return str(data)


def test_module_finds_the_runtime_k3s_added_and_renders_the_manifests(tmp_path, monkeypatch):
    data = k3s_host(tmp_path, monkeypatch, "001", "004")
    res = run_ansible_module("k3s_gpu_node", {"data_dir": data, "time_slicing_replicas": 4,
                                              "time_slicing_rename_by_default": True}, "--check")
    assert not res.get("failed"), res
    assert (res["version"], res["schema"], res["ok"], res["restart"]) == ("v1.32.9+k3s1", 3, True, False)
    assert res["template"] == {"path": data + "/agent/etc/containerd/config-v3.toml.tmpl", "exists": False}
    assert res["server"] and res["unit"] == "k3s" and res["manifests_dir"] == data + "/server/manifests"
    assert res["time_slicing"]["resource"] == "nvidia.com/gpu.shared"
    plugin_config = yaml.safe_load(res["time_slicing"]["config_map"]["data"]["any"])
    assert k8s_manifest.time_slicing([plugin_config]) == {"nvidia.com/gpu.shared": 4}


def test_module_asks_for_a_restart_on_an_agent_without_the_runtime(tmp_path, monkeypatch):
    data = k3s_host(tmp_path, monkeypatch, "002", server=False)
    res = run_ansible_module("k3s_gpu_node", {"data_dir": data})
    assert (res["ok"], res["restart"], res["server"], res["unit"]) == (False, True, False, "k3s-agent")
    assert res["time_slicing"] is None


def test_module_refuses_bad_time_slicing_naming_the_layer(tmp_path, monkeypatch):
    data = k3s_host(tmp_path, monkeypatch, "003", "004")
    res = run_ansible_module("k3s_gpu_node", {"data_dir": data, "time_slicing_replicas": 1})
    assert res["failed"] and res["msg"].startswith("container engine (k3s): time-slicing replicas must be >= 2")


# ---------------------------------------------------------------- the role's k3s tasks, through ansible-playbook

def run_k3s_tasks(tmp_path, data_dir, *flags, **role_vars):
    """The toolkit role's k3s tasks on localhost (roles/nvidia_container_toolkit/tasks/runtime-k3s.yml)."""
    import json
    import subprocess
    import sys
    from conftest import ROOT
    extra = "".join("        %s: %s\n" % (key, json.dumps(value)) for key, value in role_vars.items())
    (tmp_path / "play.yml").write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.include_role:\n        name: nvidia_container_toolkit\n"
        "        tasks_from: runtime-k3s.yml\n      vars:\n"
        "        nvidia_container_toolkit_k3s_data_dir: %s\n%s" % (data_dir, extra))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.json", ANSIBLE_LOCALHOST_WARNING="False",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="False", ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), str(tmp_path / "play.yml"),
                           *flags], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    return proc.returncode, json.loads(proc.stdout)


def test_role_writes_the_server_manifests_once_and_touches_no_containerd_file(tmp_path, monkeypatch):
    data = k3s_host(tmp_path, monkeypatch, "001", "004")
    (tmp_path / "k3s" / "server" / "manifests").mkdir()
    generated = (tmp_path / "k3s" / "agent" / "etc" / "containerd" / "config.toml").read_text()
    rc, out = run_k3s_tasks(tmp_path, data, nvidia_container_toolkit_k3s_time_slicing_replicas=4,
                            nvidia_container_toolkit_k3s_time_slicing_rename_by_default=True)
    assert rc == 0, out
    assert out["stats"]["localhost"]["changed"] == 2
    manifests = tmp_path / "k3s" / "server" / "manifests"
    assert yaml.safe_load((manifests / "gpuhost-nvidia-runtimeclass.yaml").read_text()) == \
        yaml.safe_load(read_fixture("k3s", "006"))
    config_map = yaml.safe_load((manifests / "gpuhost-nvidia-time-slicing.yaml").read_text())
    assert k8s_manifest.time_slicing([yaml.safe_load(config_map["data"]["any"])]) == {"nvidia.com/gpu.shared": 4}
    # k3s's own files are k3s's: nothing added beside its config, the config untouched.
    assert sorted(os.listdir(tmp_path / "k3s" / "agent" / "etc" / "containerd")) == ["config.toml"]
    assert (tmp_path / "k3s" / "agent" / "etc" / "containerd" / "config.toml").read_text() == generated
    rc, out = run_k3s_tasks(tmp_path, data, nvidia_container_toolkit_k3s_time_slicing_replicas=4,
                            nvidia_container_toolkit_k3s_time_slicing_rename_by_default=True)
    assert rc == 0 and out["stats"]["localhost"]["changed"] == 0


def test_role_under_check_writes_nothing(tmp_path, monkeypatch):
    # (The restart a node without the runtime needs is the module's `restart`, tested above: this machine
    # has no k3s unit for systemd to restart, not even in check mode.)
    data = k3s_host(tmp_path, monkeypatch, "003", "004")
    (tmp_path / "k3s" / "server" / "manifests").mkdir()
    rc, out = run_k3s_tasks(tmp_path, data, "--check", nvidia_container_toolkit_k3s_time_slicing_replicas=2)
    assert rc == 0, out
    assert out["stats"]["localhost"]["changed"] == 2  # would write both manifests
    assert os.listdir(tmp_path / "k3s" / "server" / "manifests") == []
