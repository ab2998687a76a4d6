"""What site.yml's base layer leaves on every host (the docker scenario runs the whole of site.yml)."""


def test_systemd_is_pid_1(host):
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"


def test_prerequisite_packages_installed(host):
    for name in ("ca-certificates", "gnupg", "python3-debian"):
        assert host.package(name).is_installed, name


def test_local_facts_dir(host):
    facts = host.file("/etc/ansible/facts.d")
    assert facts.is_directory
    assert facts.user == "root"
    assert facts.mode == 0o755


def test_no_docker0_bridge_in_shared_netns(host):
    # Targets share the machine's network namespace: nothing may have added a bridge there.
    assert "docker0" not in host.check_output("ls /sys/class/net").split()
