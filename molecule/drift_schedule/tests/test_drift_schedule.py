"""The drift timer on a control node."""
import time


def test_units_are_valid(host):
    out = host.run("systemd-analyze verify /etc/systemd/system/gpuhost-drift.service /etc/systemd/system/gpuhost-drift.timer")
    assert out.rc == 0, out.stderr


def test_timer_enabled_and_scheduled(host):
    assert host.service("gpuhost-drift.timer").is_enabled
    assert host.service("gpuhost-drift.timer").is_running
    listed = host.check_output("systemctl list-timers --all --no-pager gpuhost-drift.timer")
    assert "gpuhost-drift.service" in listed


def test_run_executes_playbook_and_logs_to_journal(host):
    host.run("rm -f /var/tmp/drift-runs")
    host.run_test("systemctl start gpuhost-drift.service")
    runs = host.file("/var/tmp/drift-runs").content_string.splitlines()
    assert runs == ["-i /opt/gpuhost/inventory/hosts.yml /opt/gpuhost/playbooks/drift.yml --check --limit gpu_hosts"]
    journal = host.check_output("journalctl -u gpuhost-drift.service --no-pager -o cat")
    assert "drift run: -i /opt/gpuhost/inventory/hosts.yml" in journal


def test_second_run_while_one_holds_the_lock_does_nothing(host):
    host.run("rm -f /var/tmp/drift-runs")
    # Another run (e.g. a manual one) holds the lock for a few seconds.
    host.run("systemd-run --unit=hold-drift-lock flock /run/lock/gpuhost-drift.lock sleep 6")
    time.sleep(1)
    started = time.time()
    result = host.run("systemctl start gpuhost-drift.service")
    assert result.rc == 0, result.stderr  # exit 75 counts as success, not a failed unit
    assert time.time() - started < 5
    assert not host.file("/var/tmp/drift-runs").exists
    status = host.check_output("systemctl show -p ExecMainStatus --value gpuhost-drift.service")
    assert status.strip() == "75"
