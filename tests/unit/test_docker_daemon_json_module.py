"""The docker_daemon_json module run by real ansible on local files."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

ANSIBLE = os.path.join(os.path.dirname(sys.executable), "ansible")
pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE), reason="ansible not installed in this venv")


def run_module(args, *flags):
    # Backups beside the test's file, never in this machine's /var/backups.
    args = dict(args)
    args.setdefault("backup_dir", os.path.join(os.path.dirname(os.path.dirname(args["path"])), "backups"))
    env = dict(os.environ, ANSIBLE_LIBRARY=os.path.join(ROOT, "library"),
               ANSIBLE_MODULE_UTILS=os.path.join(ROOT, "module_utils"),
               ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    proc = subprocess.run([ANSIBLE, "localhost", "-c", "local", "-m", "docker_daemon_json",
                           "-a", json.dumps(args), *flags], capture_output=True, text=True, env=env, timeout=120,
                          cwd=os.path.dirname(args["path"]) if os.path.isdir(os.path.dirname(args["path"])) else "/")
    out = json.loads(proc.stdout)
    return out["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_merge_keeps_user_keys_backs_up_and_keeps_mode(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text('{"registry-mirrors": ["https://m.example"], "log-opts": {"max-size": "10m"},'
                    ' "features": {"buildkit": true}}')
    os.chmod(path, 0o600)
    res = run_module({"path": str(path), "options": {"features": {"cdi": True}, "bridge": "none"}, "validate": "never"})
    assert res["changed"] is True
    data = json.loads(path.read_text())
    assert data == {"registry-mirrors": ["https://m.example"], "log-opts": {"max-size": "10m"},
                    "features": {"buildkit": True, "cdi": True}, "bridge": "none"}
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert res["backup_file"] and json.loads(open(res["backup_file"]).read())["features"] == {"buildkit": True}
    # The backup mirrors the file's path under backup_dir; nothing but daemon.json is left beside it.
    assert res["backup_file"].startswith(os.path.join(str(tmp_path.parent), "backups") + str(path) + ".")
    assert os.stat(res["backup_file"]).st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path) == ["daemon.json"]
    again = run_module({"path": str(path), "options": {"features": {"cdi": True}, "bridge": "none"}, "validate": "never"})
    assert again["changed"] is False


def test_check_mode_changes_nothing_and_reports_diff(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text('{"debug": true}')
    res = run_module({"path": str(path), "options": {"bridge": "none"}}, "--check", "--diff")
    assert res["changed"] is True
    assert '"bridge": "none"' in res["diff"]["after"]
    assert path.read_text() == '{"debug": true}'
    assert sorted(os.listdir(tmp_path)) == ["daemon.json"]


def test_malformed_file_fails_naming_it_and_stays_byte_identical(tmp_path):
    path = tmp_path / "daemon.json"
    original = b'{"bridge": "none",, }\n'
    path.write_bytes(original)
    res = run_module({"path": str(path), "options": {"bridge": "none"}})
    assert res.get("failed") is True
    assert str(path) in res["msg"] and "not valid JSON" in res["msg"]
    assert path.read_bytes() == original
    assert sorted(os.listdir(tmp_path)) == ["daemon.json"]


def test_missing_file_is_created_0644(tmp_path):
    path = tmp_path / "docker" / "daemon.json"
    res = run_module({"path": str(path), "options": {"bridge": "none"}, "validate": "never"})
    assert res["changed"] is True
    assert path.read_text() == '{\n    "bridge": "none"\n}'
    assert os.stat(path).st_mode & 0o777 == 0o644


def test_training_host_gets_seed_000s_ulimits_and_keeps_the_operators(tmp_path):
    """Seed 000's training container: --ulimit memlock=-1 --ulimit stack=67108864, as docker's default-ulimits.
    An operator's own nofile and memlock stay as they are; a second run changes nothing."""
    path = tmp_path / "daemon.json"
    path.write_text('{"default-ulimits": {"nofile": {"Name": "nofile", "Hard": 65536, "Soft": 65536}}}')
    res = run_module({"path": str(path), "options": {"bridge": "none"}, "training": True, "validate": "never"})
    assert res["changed"] is True
    ulimits = json.loads(path.read_text())["default-ulimits"]
    assert ulimits == {"nofile": {"Name": "nofile", "Hard": 65536, "Soft": 65536},
                       "memlock": {"Name": "memlock", "Hard": -1, "Soft": -1},
                       "stack": {"Name": "stack", "Hard": 67108864, "Soft": 67108864}}
    assert not run_module({"path": str(path), "options": {"bridge": "none"}, "training": True,
                           "validate": "never"})["changed"]
    operator = tmp_path / "operator.json"
    operator.write_text('{"default-ulimits": {"memlock": {"Name": "memlock", "Hard": 1073741824, "Soft": 1073741824}}}')
    run_module({"path": str(operator), "options": {}, "training": True, "validate": "never"})
    kept = json.loads(operator.read_text())["default-ulimits"]
    assert kept["memlock"]["Hard"] == 1073741824 and kept["stack"]["Soft"] == 67108864


def test_a_serving_host_gets_no_ulimits(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text('{"debug": true}')
    assert not run_module({"path": str(path), "options": {"debug": True}, "validate": "never"})["changed"]
    assert "default-ulimits" not in json.loads(path.read_text())
