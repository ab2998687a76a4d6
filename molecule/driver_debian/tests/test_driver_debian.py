"""What converge leaves with Debian's packaging, and on the GPU-less target."""
import json

import pytest

PACKAGES = [
    "firmware-nvidia-gsp",
    "libcuda1",
    "libnvidia-ml1",
    "libnvidia-ptxjitcompiler1",
    "nvidia-driver",
    "nvidia-open-kernel-dkms",
    "nvidia-persistenced",
    "nvidia-smi",
]


@pytest.fixture
def gpu(host):
    if host.backend.get_hostname().endswith("-nogpu"):
        pytest.skip("the GPU-less target")
    return host


@pytest.fixture
def nogpu(host):
    if not host.backend.get_hostname().endswith("-nogpu"):
        pytest.skip("a GPU target")
    return host


def test_open_modules_580_installed_and_held(gpu):
    for name in PACKAGES:
        out = gpu.check_output("dpkg-query -W -f '${Version} ${db:Status-Abbrev}' %s", name)
        assert out.strip() == "580.105.08-1 hi", (name, out)
    assert not gpu.package("nvidia-kernel-dkms").is_installed


def test_non_free_enabled_in_the_hosts_own_sources(gpu):
    text = gpu.file("/etc/apt/sources.list.d/debian.sources").content_string
    stanzas = [s for s in text.split("\n\n") if s.strip()]
    assert len(stanzas) == 2
    for stanza in stanzas:
        assert "Components: main contrib non-free non-free-firmware" in stanza
        assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" in stanza


def test_driver_repository_for_the_suite(gpu):
    release = gpu.system_info.codename
    sources = gpu.file("/etc/apt/sources.list.d/gpusim-debian.sources").content_string
    assert "Suites: %s" % release in sources
    assert "Components: non-free non-free-firmware" in sources


def test_open_module_loaded_and_recorded(gpu):
    assert "Open Kernel Module for x86_64  580.105.08 " in gpu.file("/proc/driver/nvidia/version").content_string
    data = json.loads(gpu.file("/etc/ansible/facts.d/gpuhost.fact").content_string)
    assert data["driver"] == {"version": "580.105.08", "branch": 580, "kernel_modules": "open", "packages": PACKAGES,
                              # every hold is gpuhost's own on a host gpuhost installed, at the version dpkg has
                              "held_by_gpuhost": sorted(PACKAGES),
                              "held_versions": ["%s=%s" % (name, gpu.check_output("dpkg-query -W -f '${Version}' %s",
                                                                                  name))
                                                for name in sorted(PACKAGES)]}


def test_persistence_through_debians_unit_without_a_drop_in(gpu):
    assert gpu.service("nvidia-persistenced").is_running
    assert gpu.service("nvidia-persistenced").is_enabled
    assert not gpu.file("/etc/systemd/system/nvidia-persistenced.service.d/gpuhost-persistence-mode.conf").exists
    out = gpu.check_output("nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")
    assert out.strip() == "Enabled"


def test_nogpu_host_was_left_alone(nogpu):
    listed = nogpu.run("dpkg-query -W -f '${Package} ${db:Status-Abbrev}\\n' '*nvidia*'").stdout
    assert not [line for line in listed.splitlines() if line.split()[1:2] in (["ii"], ["hi"])]
    assert "non-free" not in nogpu.file("/etc/apt/sources.list.d/debian.sources").content_string
    assert not nogpu.file("/etc/apt/sources.list.d/gpusim-debian.sources").exists
    fact = nogpu.file("/etc/ansible/facts.d/gpuhost.fact")
    assert not fact.exists or "driver" not in json.loads(fact.content_string)
