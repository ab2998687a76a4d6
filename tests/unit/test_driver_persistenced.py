"""nvidia-persistenced's packaged units and the drop-in that turns persistence mode on."""
import os

from driver import persistenced_unit as pu
from conftest import FIXTURES


def load(name):
    with open(os.path.join(FIXTURES, "host", name), encoding="utf-8") as handle:
        return handle.read()


def test_ubuntu_unit_needs_the_drop_in():
    info = pu.analyse(load("nvidia-persistenced.service_ubuntu-nvidia-compute-utils.txt"))
    assert info["no_persistence_mode"] and info["stop_when_unneeded"] and info["static"]
    assert info["exec_start"] == ["/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose"]
    body = info["dropin"].split("\n", 2)[2]
    assert body == ("[Unit]\nStopWhenUnneeded=false\n\n[Service]\nExecStart=\n"
                    "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose\n")
    assert info["dropin"].startswith("# Managed by gpuhost")


def test_debian_and_nvidia_units_need_nothing():
    for name in ("nvidia-persistenced.service_debian.txt", "nvidia-persistenced.service_nvidia-template.txt"):
        info = pu.analyse(load(name))
        assert not info["no_persistence_mode"] and not info["static"] and info["dropin"] == "", name


def test_exec_start_reset_and_continuation():
    unit = ("[Service]\nExecStart=/bin/old\nExecStart=\nExecStart=/usr/bin/nvidia-persistenced \\\n"
            "  --no-persistence-mode --user x\n")
    info = pu.analyse(unit)
    assert info["exec_start"] == ["/usr/bin/nvidia-persistenced --no-persistence-mode --user x"]
    assert "ExecStart=/usr/bin/nvidia-persistenced --user x\n" in info["dropin"]
    assert "[Unit]" not in info["dropin"] and info["static"]
