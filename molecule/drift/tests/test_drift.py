"""What the drift scenario leaves: the host followed the second upgrade (580.105.08) through the
drift run's repair: held and pinned again, recorded, runtime and CDI set up for the loaded driver."""
import json

import pytest

NEW = "580.105.08"


def record(host):
    return json.loads(host.file("/etc/ansible/facts.d/gpuhost.fact").content_string)


def test_newest_driver_loaded(host):
    assert " %s " % NEW in host.file("/proc/driver/nvidia/version").content_string


@pytest.mark.parametrize("name", ["nvidia-driver", "nvidia-smi", "libcuda1", "firmware-nvidia-gsp"])
def test_driver_packages_held_again(host, name):
    out = host.check_output("dpkg-query -W -f '${Version} ${db:Status-Abbrev}' %s", name)
    version, status = out.split(" ", 1)
    assert version == NEW + "-1"
    assert status.strip() == "hi"


def test_pin_follows_the_loaded_driver(host):
    assert "Pin: version %s-*" % NEW in host.file("/etc/apt/preferences.d/gpuhost-nvidia-driver.pref").content_string


def test_record_follows_every_layer(host):
    rec = record(host)
    assert rec["driver"]["version"] == NEW
    assert rec["runtime"]["driver_version"] == NEW
    assert rec["runtime"]["engines"] == ["docker"]
    assert rec["cdi"]["driver_version"] == NEW


def test_cdi_spec_for_the_loaded_driver(host):
    spec = host.file("/etc/cdi/nvidia.yaml").content_string
    assert "libcuda.so.%s" % NEW in spec
    assert "libcuda.so.580.95.05" not in spec and "libcuda.so.570.195.03" not in spec


def test_regenerated_spec_left_only_itself_in_the_spec_directory(host):
    # Specs replaced by the runs (two upgrades) are kept under /var/backups/gpuhost, where no CDI
    # consumer reads them as specs; the toolkit's own refresh unit may have regenerated some first.
    assert host.check_output("ls -A /etc/cdi").split() == ["nvidia.yaml"]
    if host.file("/var/backups/gpuhost/etc/cdi").exists:
        backups = host.check_output("ls /var/backups/gpuhost/etc/cdi").split()
        assert all(name.startswith("nvidia.yaml.2") for name in backups), backups


def test_runtime_registered_with_cdi(host):
    config = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert config["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert config["features"]["cdi"] is True


@pytest.mark.parametrize("device", [["--gpus", "all"], ["--device", "nvidia.com/gpu=all"]])
def test_container_sees_the_gpu(host, device):
    out = host.check_output("docker run --rm %s %s local/gpuhost-cuda-check:1 nvidia-smi -L", *device)
    assert out.startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
