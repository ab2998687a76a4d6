"""What converge leaves on an RTX PRO 6000 Blackwell host with Ubuntu-style driver packages."""
import json

import pytest

PACKAGES = [
    "libnvidia-compute-580-server",
    "linux-modules-nvidia-580-server-open-generic",
    "nvidia-compute-utils-580-server",
    "nvidia-driver-580-server-open",
    "nvidia-headless-580-server-open",
    "nvidia-kernel-common-580-server",
    "nvidia-utils-580-server",
]


def dpkg(host, name):
    out = host.check_output("dpkg-query -W -f '${Version} ${db:Status-Abbrev}' %s", name)
    version, status = out.split(" ", 1)
    return version, status.strip()


def test_server_open_580_newest_is_installed_and_held(host):
    for name in PACKAGES:
        version, status = dpkg(host, name)
        assert version == "580.105.08-0ubuntu0.24.04.1", name
        assert status == "hi", (name, status)


def test_no_proprietary_modules_or_other_branch(host):
    listed = host.check_output("dpkg-query -W -f '${Package} ${db:Status-Abbrev}\\n' 'nvidia-*' 'linux-modules-nvidia-*'")
    installed = [line.split()[0] for line in listed.splitlines() if line.split()[1:2] in (["ii"], ["hi"])]
    assert sorted(installed) == sorted(p for p in PACKAGES if not p.startswith("lib"))


def test_open_module_loaded(host):
    version = host.file("/proc/driver/nvidia/version").content_string
    assert "NVIDIA UNIX Open Kernel Module for x86_64  580.105.08 " in version


def test_nvidia_smi_works_with_persistence_mode_on(host):
    out = host.check_output("nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv,noheader")
    assert out.strip() == "NVIDIA RTX PRO 6000 Blackwell Server Edition, 580.105.08, Enabled"


def test_fact_file_records_the_loaded_driver(host):
    data = json.loads(host.file("/etc/ansible/facts.d/gpuhost.fact").content_string)
    assert data["driver"] == {"version": "580.105.08", "branch": 580, "kernel_modules": "open", "packages": PACKAGES,
                              # every hold is gpuhost's own on a host gpuhost installed
                              "held_by_gpuhost": sorted(PACKAGES)}


def test_driver_changed_topic_fired_once(host):
    # converge (fresh install) fired it; idempotence did not.
    assert host.file("/var/lib/gpuhost-test-driver-changed").content_string.splitlines() == ["fired"]


def test_apt_pin_keeps_the_driver_at_the_converged_version(host):
    pin = host.file("/etc/apt/preferences.d/gpuhost-nvidia-driver.pref").content_string
    assert "Package: *nvidia* libcuda* libnv*\nPin: version 580.105.08-*\nPin-Priority: 1001\n" in pin
    policy = host.check_output("apt-cache policy nvidia-utils-580-server")
    assert "Candidate: 580.105.08-0ubuntu0.24.04.1" in policy


def test_driver_repository_added_through_the_role_variables(host):
    sources = host.file("/etc/apt/sources.list.d/gpusim-ubuntu.sources").content_string
    assert "Suites: noble-updates" in sources and "Components: restricted main" in sources


def test_unattended_upgrades_blacklist(host):
    conf = host.file("/etc/apt/apt.conf.d/51gpuhost-nvidia-driver")
    if not host.package("unattended-upgrades").is_installed:
        assert not conf.exists
        pytest.skip("unattended-upgrades is installed on the bookworm target only")
    dump = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    for name in PACKAGES:
        assert '"^%s$";' % name in dump, name


def test_persistenced_runs_with_persistence_mode_through_the_drop_in(host):
    dropin = host.file("/etc/systemd/system/nvidia-persistenced.service.d/gpuhost-persistence-mode.conf")
    assert dropin.exists
    assert "ExecStart=\nExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose\n" in dropin.content_string
    assert "StopWhenUnneeded=false" in dropin.content_string
    assert host.service("nvidia-persistenced").is_running
    exec_start = host.check_output("systemctl show -p ExecStart nvidia-persistenced")
    assert "--no-persistence-mode" not in exec_start
    # the packaged unit is static: a wants link starts it at boot
    assert host.file("/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service").is_symlink
