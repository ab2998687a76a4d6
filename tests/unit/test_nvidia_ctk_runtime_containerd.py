"""nvidia_ctk_runtime with runtime=containerd, run by real ansible on local files.

nvidia-ctk is the simulated one (molecule/simulator/bin/nvidia-ctk, toolkit 1.20.0), whose containerd output is
checked byte for byte against the real tool's in tests/unit/simulator/test_ctk.py; where a test needs the tool to
misbehave, a small stand-in script writes the drop-in. Inputs: tests/fixtures/nvidia_ctk/ (real nvidia-ctk 1.20.0
outputs) and tests/fixtures/containerd/ (real config.toml files, sources in its README).
"""
import os
import stat
import sys

import pytest

from conftest import ANSIBLE, ROOT, containerd_fixture as fixture, run_ansible_module

tomllib = pytest.importorskip("tomllib")
pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE), reason="ansible not installed in this venv")

SIM_CTK = os.path.join(ROOT, "molecule", "simulator", "bin", "nvidia-ctk")
V2_CRI = "io.containerd.grpc.v1.cri"
V3_CRI = "io.containerd.cri.v1.runtime"


@pytest.fixture
def host(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSIM_CTK_VERSION", "1.20.0")
    # The host's files under host/, the stand-in nvidia-ctk beside it.
    etc = tmp_path / "host" / "etc" / "containerd"
    etc.mkdir(parents=True)
    return dict(tmp=tmp_path / "host", config=etc / "config.toml", drop_in=etc / "conf.d" / "99-nvidia.toml",
                backups=tmp_path / "host" / "backups")


def run(host, *flags, ctk=SIM_CTK, **args):
    params = dict(runtime="containerd", config=str(host["config"]), drop_in=str(host["drop_in"]),
                  backup_dir=str(host["backups"]), nvidia_ctk_path=ctk)
    params.update(args)
    return run_ansible_module("nvidia_ctk_runtime", params, *flags)


def files(host):
    return sorted(os.path.relpath(os.path.join(d, f), str(host["tmp"]))
                  for d, _, names in os.walk(str(host["tmp"])) for f in names)


def stand_in_ctk(tmp_path, drop_in_text=None, rc=0, stderr=""):
    """An nvidia-ctk that writes `drop_in_text` to --drop-in-config, or fails with `stderr`."""
    script = tmp_path / "fake-nvidia-ctk"
    script.write_text("#!%s\nimport os, sys\n"
                      "args = dict(a[2:].split('=', 1) for a in sys.argv[1:] if a.startswith('--') and '=' in a)\n"
                      "sys.stderr.write(%r)\n"
                      "if %d:\n    sys.exit(%d)\n"
                      "os.makedirs(os.path.dirname(args['drop-in-config']), exist_ok=True)\n"
                      "open(args['drop-in-config'], 'w').write(%r)\n" % (sys.executable, stderr, rc, rc, drop_in_text))
    script.chmod(0o755)
    return str(script)


def test_fresh_host_gets_the_real_tools_files_then_stays_unchanged(host):
    res = run(host)
    assert res["changed"] is True and res["drop_in_changed"] is True and res["config_changed"] is True
    # Byte for byte what the real nvidia-ctk 1.20.0 wrote from no config (imports name this host's directory).
    assert host["drop_in"].read_text() == fixture("containerd_configure_99-nvidia.toml")
    assert host["config"].read_text() == fixture("containerd_configure_config.toml").replace(
        "/etc/containerd/conf.d", str(host["drop_in"].parent))
    assert res["config_version"] == 2 and res["imports"] == [str(host["drop_in"].parent) + "/*.toml"]
    assert "--drop-in-config=%s" % host["drop_in"] in res["command"] and "--config-source=file" in res["command"]
    assert stat.S_IMODE(os.stat(str(host["drop_in"])).st_mode) == 0o644
    assert files(host) == ["etc/containerd/conf.d/99-nvidia.toml", "etc/containerd/config.toml"]
    again = run(host)
    assert again["changed"] is False and again["drop_in_changed"] is False and again["config_changed"] is False
    assert run(host, "--check")["changed"] is False


def test_check_mode_writes_nothing_and_diffs_both_files(host):
    res = run(host, "--check", "--diff")
    assert res["changed"] is True
    assert files(host) == []
    drop_in_diff, config_diff = res["diff"]
    assert drop_in_diff["before_header"] == str(host["drop_in"]) and drop_in_diff["before"] == ""
    assert drop_in_diff["after"] == fixture("containerd_configure_99-nvidia.toml")
    assert config_diff["before_header"] == str(host["config"])
    assert config_diff["after"] == 'imports = ["%s/*.toml"]\nversion = 2\n' % host["drop_in"].parent


def test_real_1_7_config_flags_reach_the_drop_in_and_only_imports_changes(host):
    original = fixture("config-1.7-default-systemdcgroup_lucheng0127-k8s_setup_guide.toml")
    host["config"].write_text(original)
    res = run(host, set_as_default=True, cdi_enabled=True)
    assert res["changed"] is True
    assert "--set-as-default" in res["command"] and "--cdi.enabled" in res["command"]
    assert host["config"].read_text() == original.replace(
        "imports = []\n", 'imports = ["%s/*.toml"]\n' % host["drop_in"].parent)
    with open(res["backup_file"]) as handle:
        assert handle.read() == original
    drop_in = tomllib.loads(host["drop_in"].read_text())
    cri = drop_in["plugins"][V2_CRI]
    assert drop_in["version"] == 2
    assert cri["containerd"]["default_runtime_name"] == "nvidia" and cri["enable_cdi"] is True
    assert cri["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert run(host, set_as_default=True, cdi_enabled=True)["changed"] is False
    # Dropping set_as_default touches the drop-in only; config.toml keeps every byte.
    before = host["config"].read_bytes()
    res = run(host, set_as_default=False, cdi_enabled=True)
    assert res["changed"] is True and res["drop_in_changed"] is True and res["config_changed"] is False
    assert "default_runtime_name = \"nvidia\"" not in host["drop_in"].read_text()
    assert host["config"].read_bytes() == before


def test_version_3_root_gets_a_version_3_drop_in(host):
    # containerd 2.x style, inline (no real 2.x config file was found; fixtures README).
    original = "version = 3\nroot = '/var/lib/containerd'\n\n[plugins.'%s'.containerd]\n  default_runtime_name = 'runc'\n" \
        % V3_CRI
    host["config"].write_text(original)
    res = run(host, cdi_enabled=True)
    assert res["changed"] is True and res["config_version"] == 3
    drop_in = tomllib.loads(host["drop_in"].read_text())
    assert drop_in["version"] == 3 and drop_in["plugins"][V3_CRI]["enable_cdi"] is True
    assert V2_CRI not in drop_in["plugins"]
    assert host["config"].read_text() == original.replace(
        "version = 3\n", 'version = 3\nimports = ["%s/*.toml"]\n' % host["drop_in"].parent)


def test_only_the_lost_imports_line_is_put_back(host):
    original = fixture("config-v2-imports-conf.d_kairos-provider-kubeadm.toml").replace(
        'imports = ["/etc/containerd/conf.d/*.toml"]\n', "")
    host["config"].write_text(original)
    assert run(host)["changed"] is True
    # An operator rewrites config.toml without the imports line: the drop-in is still right.
    host["config"].write_text(original)
    res = run(host)
    assert res["changed"] is True and res["config_changed"] is True and res["drop_in_changed"] is False
    assert host["config"].read_text() == original.replace(
        "version = 2\n", 'version = 2\nimports = ["%s/*.toml"]\n' % host["drop_in"].parent)


def test_malformed_config_fails_naming_layer_and_fix_and_stays_byte_identical(host):
    original = fixture("config-1.7-default-systemdcgroup_lucheng0127-k8s_setup_guide.toml").replace(
        'state = "/run/containerd"', 'state = "/run/containerd', 1).encode()
    host["config"].write_bytes(original)
    res = run(host)
    assert res.get("failed") is True
    assert res["msg"].startswith("container engine (containerd): %s is not valid TOML" % host["config"])
    assert "line 7" in res["msg"] and "Fix it by hand" in res["msg"] and "left untouched" in res["msg"]
    assert host["config"].read_bytes() == original
    assert files(host) == ["etc/containerd/config.toml"]


def test_config_without_version_is_refused_untouched(host):
    original = fixture("config-no-version_cavebeavis-containerd-test.toml").encode()
    host["config"].write_bytes(original)
    res = run(host)
    assert res.get("failed") is True and "container engine (containerd)" in res["msg"]
    assert "version 1" in res["msg"] and "version = 2" in res["msg"]
    assert host["config"].read_bytes() == original and files(host) == ["etc/containerd/config.toml"]


def test_drop_in_with_another_version_than_the_root_is_refused(host, tmp_path):
    # What NVIDIA/aicr#1688 hit: a version-4 drop-in (from `containerd config dump`) over a version-2 root.
    original = fixture("config-1.7-default-systemdcgroup_lucheng0127-k8s_setup_guide.toml").encode()
    host["config"].write_bytes(original)
    v4 = fixture("containerd_configure_99-nvidia.toml").replace("version = 2", "version = 4", 1)
    res = run(host, ctk=stand_in_ctk(tmp_path, v4))
    assert res.get("failed") is True
    assert "config version 4" in res["msg"] and "version 2" in res["msg"] and "2.3.0-2.3.4" in res["msg"]
    assert host["config"].read_bytes() == original and not host["drop_in"].exists()


def test_other_drop_in_with_a_higher_version_is_warned_about(host):
    host["drop_in"].parent.mkdir()
    (host["drop_in"].parent / "10-mirrors.toml").write_text("version = 3\n")
    res = run(host)
    assert res["changed"] is True
    assert any("10-mirrors.toml has config version 3" in w for w in res.get("warnings", []))


def test_drop_in_left_by_toolkit_1_18_0_is_named(host):
    # 1.18.0 wrote config.d/99-nvidia.toml and imported config.d (NVIDIA/nvidia-container-toolkit#1404).
    legacy = host["config"].parent / "config.d" / "99-nvidia.toml"
    legacy.parent.mkdir()
    legacy.write_text(fixture("containerd_configure_99-nvidia.toml"))
    host["config"].write_text('imports = ["%s/*.toml"]\nversion = 2\n' % legacy.parent)
    res = run(host)
    assert res["changed"] is True
    assert res["imports"] == [str(legacy.parent) + "/*.toml", str(host["drop_in"].parent) + "/*.toml"]
    assert any(str(legacy) in w and "1.18.0" in w for w in res.get("warnings", []))
    assert legacy.read_text() == fixture("containerd_configure_99-nvidia.toml")


def test_toolkit_without_drop_in_support_is_named(host, tmp_path):
    ctk = stand_in_ctk(tmp_path, rc=1, stderr="Incorrect Usage: flag provided but not defined: -drop-in-config\n")
    res = run(host, ctk=ctk)
    assert res.get("failed") is True and "toolkit >= 1.18" in res["msg"]
    assert files(host) == []


def test_documentation_parses_and_names_the_containerd_options():
    import ast
    import yaml
    with open(os.path.join(ROOT, "library", "nvidia_ctk_runtime.py")) as handle:
        tree = ast.parse(handle.read())
    docs = dict((node.targets[0].id, yaml.safe_load(node.value.value)) for node in tree.body
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in
                ("DOCUMENTATION", "EXAMPLES", "RETURN"))
    assert {"drop_in", "set_as_default", "cdi_enabled"} <= set(docs["DOCUMENTATION"]["options"])
    assert {"drop_in_changed", "config_changed", "config_version", "imports"} <= set(docs["RETURN"])
    assert any(task.get("nvidia_ctk_runtime", {}).get("runtime") == "containerd" for task in docs["EXAMPLES"])
