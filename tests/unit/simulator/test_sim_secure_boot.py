"""The simulated boot's module-signature check: a DKMS-built module under Secure Boot loads only with its
key enrolled; Canonical's signed modules always load (gpusim/boot.py, DESIGN.md firmware row)."""
import os

import pytest

from simhelpers import make_state
from gpusim import boot, state as st

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "fixtures")


def booted(tmp_path, packages, secure_boot, enrolled=None):
    path = tmp_path / "state.json"
    firmware = {"secure_boot": secure_boot}
    if enrolled is not None:
        firmware["dkms_key_enrolled"] = enrolled
    s = make_state(path, loaded=False, firmware=firmware)
    s["driver"]["installed"]["packages"] = packages
    log = boot.apply_state(s)
    return s, log


UBUNTU_SIGNED = ["nvidia-headless-no-dkms-580-server-open", "linux-modules-nvidia-580-server-open-generic",
                 "linux-modules-nvidia-580-server-open-6.8.0-149-generic"]
UBUNTU_DKMS = ["nvidia-driver-580-server-open", "nvidia-dkms-580-server-open"]
DEBIAN_DKMS = ["nvidia-driver", "nvidia-open-kernel-dkms"]


@pytest.mark.parametrize("packages", [UBUNTU_DKMS, DEBIAN_DKMS, UBUNTU_SIGNED + ["nvidia-dkms-580-server-open"]])
def test_a_dkms_module_is_rejected_under_secure_boot_without_its_key(tmp_path, packages):
    s, log = booted(tmp_path, packages, secure_boot=True)
    assert s["driver"]["loaded"] is None
    # the kernel's line for a module signed by a key it does not trust (a real one: the fixture)
    with open(os.path.join(FIXTURES, "secure_boot", "talos-kern-log_nvidia_unavailable-key-rejected_talos-7043.txt")) as fh:
        real = fh.read()
    assert log == ["Loading of module with unavailable key is rejected"]
    assert log[0] in real


@pytest.mark.parametrize("packages, secure_boot, enrolled", [
    (UBUNTU_SIGNED, True, None),        # Canonical's signature: no MOK needed
    (UBUNTU_DKMS, True, True),          # the DKMS key enrolled at the console
    (DEBIAN_DKMS, False, None),         # no Secure Boot
])
def test_the_module_loads(tmp_path, packages, secure_boot, enrolled):
    s, log = booted(tmp_path, packages, secure_boot, enrolled)
    assert s["driver"]["loaded"] == {"version": "580.95.05", "kernel_modules": "open"}
    assert not any("rejected" in line for line in log)
