"""`gpuhost secure-boot` through the real entry point, on the real captures in tests/fixtures/secure_boot/
(sources in its README.md). Expected values were read off the files."""
import json
import os
import subprocess
import sys

from conftest import ROOT, fixture_path

GPUHOST = os.path.join(ROOT, "bin", "gpuhost")
ENABLED = fixture_path("secure_boot", "mokutil-sb-state_enabled_ubuntu22.04")
DISABLED = fixture_path("secure_boot", "mokutil-sb-state_disabled_setup-mode")
DKMS_MODINFO = fixture_path("secure_boot", "modinfo-nvidia_dkms_590.44.01")
NOT_ENROLLED = fixture_path("secure_boot", "mokutil-test-key_not-enrolled")
SIGNED_DPKG = fixture_path("secure_boot", "dpkg-l_linux-modules-nvidia-525")
DKMS_STATUS = fixture_path("secure_boot", "dkms-status_nvidia-535.113.01")
KEY_REJECTED = fixture_path("secure_boot", "nvidia-smi-and-modprobe_key-rejected")


def gpuhost(*args):
    proc = subprocess.run([sys.executable, GPUHOST, "secure-boot", "--json"] + list(args), capture_output=True,
                          text=True, timeout=60)
    return proc.returncode, json.loads(proc.stdout)


def test_a_dkms_module_without_an_enrolled_key_is_rejected_and_the_console_is_named(tmp_path):
    rc, out = gpuhost("--sb-state", ENABLED, "--modinfo", DKMS_MODINFO, "--test-key", NOT_ENROLLED,
                      "--distribution", "debian", "--branch", "590", "--kernel-log", KEY_REJECTED)
    assert rc == 1
    assert out["secure_boot"]["enforcing"] is True and out["module"]["kind"] == "dkms"
    assert out["loads"] is False and "Key was rejected by service" in out["reason"]
    assert out["console_required"] is True
    assert out["kernel_log_rejections"] == ["modprobe: ERROR: could not insert 'nvidia': Key was rejected by service"]


def test_signed_prebuilt_modules_load_but_a_new_kernel_without_its_package_is_stranded(tmp_path):
    kernels = tmp_path / "modules"
    kernels.write_text("5.15.0-58-generic\n5.15.0-60-generic\n")
    rc, out = gpuhost("--sb-state", ENABLED, "--packages", SIGNED_DPKG, "--kernels", str(kernels),
                      "--running", "5.15.0-58-generic")
    assert rc == 1 and out["loads"] is True and out["module"]["kind"] == "signed-prebuilt"
    assert [k["kver"] for k in out["stranded_kernels"]] == ["5.15.0-60-generic"]
    # the installed package (525, not -server) names the one the new kernel needs
    assert "linux-modules-nvidia-525-5.15.0-60-generic" in out["stranded_kernels"][0]["fix"]


def test_secure_boot_off_and_every_kernel_built_is_fine():
    rc, out = gpuhost("--sb-state", DISABLED, "--kernels", DKMS_STATUS, "--dkms", DKMS_STATUS,
                      "--modinfo", DKMS_MODINFO, "--running", "6.2.0-34-generic")
    assert rc == 0, out
    assert out["loads"] is True and out["stranded_kernels"] == []


def test_the_sb_state_is_required():
    proc = subprocess.run([sys.executable, GPUHOST, "secure-boot", "--modinfo", DKMS_MODINFO], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "--sb-state" in proc.stderr


def test_without_mokutil_the_efivar_decides_and_lockdown_enforces_signatures(tmp_path):
    from test_secure_boot import hexdump_bytes, load
    efivar = tmp_path / "SecureBoot"
    efivar.write_bytes(hexdump_bytes(load("efivarfs-hexdump_SecureBoot_disabled_mokutil-89.txt")))
    rc, out = gpuhost("--efivar", str(efivar), "--modinfo", DKMS_MODINFO)
    assert rc == 0 and out["secure_boot"]["enforcing"] is False and out["loads"] is True
    # the same host with its kernel in lockdown (integrity): only signed modules load
    lockdown = fixture_path("secure_boot", "lockdown_integrity")
    rc, out = gpuhost("--efivar", str(efivar), "--lockdown", lockdown, "--modinfo", DKMS_MODINFO,
                      "--test-key", NOT_ENROLLED)
    assert rc == 1 and out["lockdown"] == "integrity" and out["loads"] is False
    on = tmp_path / "SecureBootOn"
    on.write_bytes(hexdump_bytes(load("efivarfs-hexdump_SecureBoot_enabled_ubuntu22.04_salt-66955.txt")))
    assert gpuhost("--efivar", str(on), "--modinfo", DKMS_MODINFO, "--test-key", NOT_ENROLLED)[1]["loads"] is False
