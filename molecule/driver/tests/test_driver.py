"""What converge leaves on an RTX PRO 6000 Blackwell host with Ubuntu-style driver packages."""
import json

import pytest

# The Ubuntu driver without DKMS (ubuntu-drivers install --gpgpu's set, research
# ubuntu-signed-modules-no-dkms.md 1-2) plus nvidia-utils for nvidia-smi, at the newest 580.
USERSPACE = [
    "libnvidia-compute-580-server",
    "nvidia-compute-utils-580-server",
    "nvidia-headless-no-dkms-580-server-open",
    "nvidia-kernel-common-580-server",
    "nvidia-kernel-source-580-server-open",
    "nvidia-utils-580-server",
]


def kernel(host):
    return host.check_output("uname -r").strip()


def signed_modules(host):
    """Canonical's signed modules: the generic flavour's metapackage and the running kernel's own package."""
    return ["linux-modules-nvidia-580-server-open-generic", "linux-modules-nvidia-580-server-open-" + kernel(host)]


def packages(host):
    return sorted(USERSPACE + signed_modules(host))


def dpkg(host, name):
    out = host.check_output("dpkg-query -W -f '${Version} ${db:Status-Abbrev}' %s", name)
    version, status = out.split(" ", 1)
    return version, status.strip()


def test_server_open_580_newest_is_installed_and_held(host):
    for name in USERSPACE:
        version, status = dpkg(host, name)
        assert version == "580.105.08-0ubuntu0.24.04.1", name
        assert status == "hi", (name, status)


def test_signed_modules_of_the_running_kernel_built_for_the_driver_are_installed_and_held(host):
    for name in signed_modules(host):
        version, status = dpkg(host, name)
        assert status == "hi", (name, status)
        # a kernel package's version, not the driver's
        assert not version.startswith("580."), (name, version)
    depends = host.check_output("dpkg-query -W -f '${Depends}' %s", signed_modules(host)[1])
    assert "nvidia-kernel-common-580-server (>= 580.105.08)" in depends
    dep = host.file("/lib/modules/%s/modules.dep" % kernel(host)).content_string
    assert "kernel/nvidia-580srv-open/nvidia.ko:" in dep and "updates/dkms/" not in dep


def test_no_dkms_and_no_other_driver_package(host):
    listed = host.check_output("dpkg-query -W -f '${Package} ${db:Status-Abbrev}\\n' 'nvidia-*' 'linux-modules-nvidia-*' "
                               "'dkms' 2>/dev/null || true")
    installed = [line.split()[0] for line in listed.splitlines() if line.split()[1:2] in (["ii"], ["hi"])]
    assert sorted(installed) == sorted(p for p in packages(host) if not p.startswith("lib"))
    assert not [p for p in installed if "dkms" in p.replace("no-dkms", "")]


def test_open_module_loaded(host):
    version = host.file("/proc/driver/nvidia/version").content_string
    assert "NVIDIA UNIX Open Kernel Module for x86_64  580.105.08 " in version


def test_nvidia_smi_works_with_persistence_mode_on(host):
    out = host.check_output("nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv,noheader")
    assert out.strip() == "NVIDIA RTX PRO 6000 Blackwell Server Edition, 580.105.08, Enabled"


def test_fact_file_records_the_loaded_driver(host):
    data = json.loads(host.file("/etc/ansible/facts.d/gpuhost.fact").content_string)
    assert data["driver"] == {"version": "580.105.08", "branch": 580, "kernel_modules": "open",
                              "packages": packages(host),
                              # every hold is gpuhost's own on a host gpuhost installed, at the version dpkg has
                              "held_by_gpuhost": packages(host),
                              "held_versions": ["%s=%s" % (name, dpkg(host, name)[0]) for name in packages(host)]}


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
    for name in packages(host):
        # the entries are regular expressions: a kernel release's dots are matched literally
        assert '"^%s$";' % name.replace(".", "[.]").replace("+", "[+]") in dump, name


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
