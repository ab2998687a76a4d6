"""What the docker role leaves on a host that already had an operator's daemon.json."""
import json


def daemon_json(host):
    return json.loads(host.file("/etc/docker/daemon.json").content_string)


def test_operator_keys_survive(host):
    data = daemon_json(host)
    assert data["registry-mirrors"] == ["https://mirror.example"]
    assert data["log-opts"] == {"max-size": "10m"}
    assert data["features"]["buildkit"] is True


def test_managed_keys_merged(host):
    data = daemon_json(host)
    assert data["bridge"] == "none"
    assert data["iptables"] is False
    assert data["storage-driver"] == "overlay2"


def test_mode_kept_and_backup_made(host):
    assert host.file("/etc/docker/daemon.json").mode == 0o640
    # The backup is kept under /var/backups/gpuhost at the file's own path; /etc/docker holds only
    # what dockerd reads.
    backups = host.check_output("ls /var/backups/gpuhost/etc/docker").split()
    assert any(name.startswith("daemon.json.") and name.endswith("Z") for name in backups), backups
    beside = [n for n in host.check_output("ls -A /etc/docker").split() if n.startswith((".", "daemon.json."))]
    assert beside == [], beside


def test_engine_runs_with_the_merged_settings(host):
    assert host.service("docker").is_running
    assert host.service("docker").is_enabled
    info = json.loads(host.check_output("docker info --format '{{json .}}'"))
    assert info["Driver"] == "overlay2"
    assert "docker0" not in host.check_output("ls /sys/class/net").split()
