"""Secure Boot facts on real texts (tests/fixtures/secure_boot/README.md names every source): mokutil's
--sb-state and --test-key, the SecureBoot EFI variable, kernel lockdown, which package provides the nvidia
module, the kernels installed but not booted, the kernel's signature verdicts, and whether the module loads.
Expected values are read off the texts (quoted in the comments)."""
import os
import re
import sys

import pytest

from driver import secure_boot as sb
from layers import driver as layers_driver
from layers import stack_check as sc
from conftest import FIXTURES, ROOT

SB = os.path.join(FIXTURES, "secure_boot")
HOST = os.path.join(FIXTURES, "host")


def load(name, folder=SB):
    with open(os.path.join(folder, name), encoding="utf-8") as handle:
        return handle.read()


def hexdump_bytes(text):
    """The bytes a `hexdump -C` listing shows (offset column and |ascii| column left out)."""
    out = bytearray()
    for line in text.splitlines():
        match = re.match(r"^[0-9a-f]{8}  ((?:[0-9a-f]{2} {1,2})*[0-9a-f]{2})\s+\|", line)
        if match:
            out.extend(int(b, 16) for b in match.group(1).split())
    return bytes(out)


def cap(argv, rc=0, stdout="", stderr=""):
    return {"argv": argv, "rc": rc, "stdout": stdout, "stderr": stderr}


# --- mokutil --sb-state ---------------------------------------------------------------------------

@pytest.mark.parametrize("name, enabled, enforcing, shim_off, setup_mode, efi", [
    # "SecureBoot enabled"
    ("mokutil-sb-state_enabled_ubuntu22.04_salt-66955.txt", True, True, False, False, True),
    # "SecureBoot enabled" + "SecureBoot validation is disabled in shim"
    ("mokutil-sb-state_enabled_validation-disabled-in-shim_holoscan-aja-doc.txt", True, False, True, False, True),
    # "SecureBoot disabled" + "Platform is in Setup Mode"
    ("mokutil-sb-state_disabled_setup-mode_system76-firmware-open-388.txt", False, False, False, True, True),
    # stderr "EFI variables are not supported on this system": booted without EFI
    ("mokutil-stderr_efi-variables-not-supported_ublue-hwe-173.txt", False, False, False, False, False),
    # stderr "This system doesn't support Secure Boot"
    ("mokutil-sb-state-stderr_no-secure-boot_mokutil-source.txt", False, False, False, False, False),
])
def test_sb_state(name, enabled, enforcing, shim_off, setup_mode, efi):
    state = sb.parse_sb_state(load(name))
    assert (state["enabled"], state["enforcing"], state["shim_validation_disabled"], state["setup_mode"],
            state["efi"]) == (enabled, enforcing, shim_off, setup_mode, efi)
    assert state["line"] == load(name).splitlines()[0]


def test_sb_state_of_other_text_is_unknown():
    for text in ("", None, b"\xff\xfe", 42, load("mokutil-test-key_not-enrolled_dkms-mok.pub_r-pufky-docs.txt")):
        state = sb.parse_sb_state(text)
        assert state["enabled"] is None and state["enforcing"] is None


# --- the SecureBoot EFI variable ------------------------------------------------------------------

def test_efivar_hexdumps():
    # salt#66955: efivarfs "06 00 00 00 01" on the host where mokutil says "SecureBoot enabled"
    on = hexdump_bytes(load("efivarfs-hexdump_SecureBoot_enabled_ubuntu22.04_salt-66955.txt"))
    assert on == b"\x06\x00\x00\x00\x01"
    assert sb.parse_efivar_secureboot(on) is True
    # the same host's older sysfs file holds the data byte alone: "01"
    data = hexdump_bytes(load("sysfs-vars-hexdump_SecureBoot-data_enabled_ubuntu22.04_salt-66955.txt"))
    assert data == b"\x01" and sb.parse_efivar_secureboot(data) is True
    # mokutil#89: SecureBoot "06 00 00 00 00" (off), SetupMode "06 00 00 00 01" (in Setup Mode)
    off = hexdump_bytes(load("efivarfs-hexdump_SecureBoot_disabled_mokutil-89.txt"))
    setup = hexdump_bytes(load("efivarfs-hexdump_SetupMode_on_mokutil-89.txt"))
    assert sb.parse_efivar_secureboot(off) is False
    assert sb.parse_efivar_secureboot(off, setup_mode=setup) is False


def test_efivar_in_setup_mode_counts_as_off():
    # mokutil: "SecureBoot enabled" only when SecureBoot == 1 and SetupMode == 0 (src/mokutil.c); the
    # bytes are salt#66955's SecureBoot and mokutil#89's SetupMode.
    on = hexdump_bytes(load("efivarfs-hexdump_SecureBoot_enabled_ubuntu22.04_salt-66955.txt"))
    setup = hexdump_bytes(load("efivarfs-hexdump_SetupMode_on_mokutil-89.txt"))
    assert sb.parse_efivar_secureboot(on, setup_mode=setup) is False
    assert sb.parse_efivar_secureboot(on, setup_mode=b"\x06\x00\x00\x00\x00") is True


def test_efivar_other_bytes_are_unknown():
    hexdump_text = load("efivarfs-hexdump_SecureBoot_enabled_ubuntu22.04_salt-66955.txt")
    for data in (None, b"", b"\x06\x00\x00\x00", b"\x06\x00\x00\x00\x07", hexdump_text, hexdump_text.encode(), 5):
        assert sb.parse_efivar_secureboot(data) is None


# --- /sys/kernel/security/lockdown ----------------------------------------------------------------

@pytest.mark.parametrize("name, mode", [
    ("lockdown_none_ubuntu18.04_bpftrace-2455.txt", "none"),              # "[none] integrity confidentiality"
    ("lockdown_integrity_two-levels_ibm-linux-on-z-doc.txt", "integrity"),  # "none [integrity]"
    ("lockdown_none_two-levels_ibm-linux-on-z-doc.txt", "none"),           # "[none] integrity"
])
def test_lockdown(name, mode):
    assert sb.parse_lockdown(load(name)) == mode


def test_lockdown_of_other_text():
    assert sb.parse_lockdown("cat: /sys/kernel/security/lockdown: No such file or directory\n") is None
    assert sb.parse_lockdown(None) is None


# --- mokutil --test-key ---------------------------------------------------------------------------

@pytest.mark.parametrize("name, enrolled, key", [
    ("mokutil-test-key_not-enrolled_dkms-mok.pub_r-pufky-docs.txt", False, "/var/lib/dkms/mok.pub"),
    ("mokutil-test-key_enrolled_dkms-mok.pub_r-pufky-docs.txt", True, "/var/lib/dkms/mok.pub"),
    ("mokutil-test-key_enrolled_mokutil-commit-9ae73db.txt", True, "sb_cert.cer"),
])
def test_test_key(name, enrolled, key):
    verdict = sb.parse_test_key(load(name))
    assert (verdict["enrolled"], verdict["key"], verdict["pending"]) == (enrolled, key, False)


def test_test_key_of_other_text_is_unknown():
    for text in (load("mokutil-stderr_efi-variables-not-supported_ublue-hwe-173.txt"), "", None):
        assert sb.parse_test_key(text)["enrolled"] is None


def test_dkms_key_per_distribution():
    # dkms.in prepare_mok(): Ubuntu signs with update-secureboot-policy's MOK, the rest with DKMS's own
    assert sb.dkms_mok_certificate("ubuntu") == "/var/lib/shim-signed/mok/MOK.der"
    assert sb.dkms_mok_certificate("debian") == "/var/lib/dkms/mok.pub"
    assert sb.dkms_mok_certificate(None) == "/var/lib/dkms/mok.pub"


# --- which package provides the module ------------------------------------------------------------

def test_modinfo_of_a_dkms_build():
    # "filename:       /lib/modules/6.8.0-90-generic/updates/dkms/nvidia.ko"
    text = load("modinfo-nvidia_dkms_590.44.01_ubuntu-6.8.0-90_aikitoria-open-gpu-kernel-modules-15_excerpt.txt")
    info = sb.parse_modinfo(text)
    assert info["filename"] == "/lib/modules/6.8.0-90-generic/updates/dkms/nvidia.ko"
    assert info["version"] == "590.44.01" and info["signer"] is None
    source = sb.module_source(modinfo=text)
    assert source["kind"] == "dkms" and source["filename"] == info["filename"]
    assert sb.module_source(modinfo=text)["kind"] == "dkms"


def test_signed_module_layout():
    # linux-signatures-nvidia-5.15.0-112-generic ships .../kernel/nvidia-390/bits/*.ko.sig, .../nvidia-450srv/bits/
    paths = [line.split()[-1].lstrip(".") for line in load(
        "dpkg-deb-c_linux-signatures-nvidia-5.15.0-112_gpu-driver-container-35_excerpt.txt").splitlines()]
    signatures = [p for p in paths if p.endswith(".ko.sig")]
    assert len(signatures) == 4
    assert {sb.module_path_kind(p) for p in signatures} == {"signed-prebuilt"}
    assert sb.module_path_kind("/lib/modules/5.15.0-112-generic/kernel/nvidia-450srv/bits/") == "signed-prebuilt"
    assert sb.module_path_kind("/lib/modules/5.15.0-112-generic/kernel/") is None


@pytest.mark.parametrize("folder, name, kver, kind, package", [
    # "ii  linux-modules-nvidia-525-5.15.0-58-generic 5.15.0-58.64+1 ..." and no DKMS package
    (SB, "dpkg-l_linux-modules-nvidia-525_ubuntu22.04_elementary-settings-system-302.txt", "5.15.0-58-generic",
     "signed-prebuilt", "linux-modules-nvidia-525-5.15.0-58-generic"),
    (SB, "dpkg-l_linux-modules-nvidia-525_ubuntu22.04_elementary-settings-system-302.txt", None,
     "signed-prebuilt", "linux-modules-nvidia-525-5.15.0-58-generic"),
    # corpus host/007: "ii  linux-modules-nvidia-550-server-6.8.0-51-generic 6.8.0-51.52+1 ..."
    (HOST, "007_dpkg-l_550.127.08-server_ubuntu24.04_linux-modules-nvidia-signed_excerpt.txt", "6.8.0-51-generic",
     "signed-prebuilt", "linux-modules-nvidia-550-server-6.8.0-51-generic"),
    # the same packages say nothing about another kernel
    (HOST, "007_dpkg-l_550.127.08-server_ubuntu24.04_linux-modules-nvidia-signed_excerpt.txt", "6.8.0-52-generic",
     None, None),
    # Debian: "nvidia-open-kernel-dkms	580.105.08-1	hi " (held, installed)
    (HOST, "dpkg-query-W_debian-trixie_nvidia-driver-580-held.txt", None, "dkms", "nvidia-open-kernel-dkms"),
])
def test_installed_packages_name_the_source(folder, name, kver, kind, package):
    source = sb.module_source(packages=load(name, folder), kver=kver)
    assert (source["kind"], source["package"]) == (kind, package)


def test_removed_packages_do_not_count():
    # "rc  nvidia-compute-utils-525 ..." is removed (configuration kept)
    installed = sb.installed_packages(
        load("dpkg-l_linux-modules-nvidia-525_ubuntu22.04_elementary-settings-system-302.txt"))
    assert "nvidia-compute-utils-525" not in installed
    assert installed["linux-signatures-nvidia-5.15.0-58-generic"] == "5.15.0-58.64+1"
    assert installed["libnvidia-compute-525"] == "525.78.01-0ubuntu0.22.04.1"


def test_both_installed_leaves_it_to_modinfo():
    both = (load("dpkg-l_linux-modules-nvidia-525_ubuntu22.04_elementary-settings-system-302.txt")
            + load("dpkg-query-W_debian-trixie_nvidia-driver-580-held.txt", HOST))
    source = sb.module_source(packages=both)
    assert source["kind"] is None and "modinfo" in source["evidence"]
    dkms = load("modinfo-nvidia_dkms_590.44.01_ubuntu-6.8.0-90_aikitoria-open-gpu-kernel-modules-15_excerpt.txt")
    assert sb.module_source(packages=both, modinfo=dkms)["kind"] == "dkms"


def test_signed_package_names():
    # apt log (PXDiv/Div-Acer-Manager-Max#38): per-kernel and flavour packages of branch 570 (not -server)
    names = re.findall(r"Setting up (linux-modules-nvidia-\S+)", load(
        "apt-setting-up_linux-modules-nvidia-570_6.14.0-23-and-24_pxdiv-div-acer-manager-max-38_excerpt.txt"))
    parsed = [sb.signed_package(n) for n in names]
    assert [(p["branch"], p["server"], p["open"], p["kver"], p["flavour"]) for p in parsed] == [
        (570, False, False, "6.14.0-23-generic", None),
        (570, False, False, "6.14.0-24-generic", None),
        (570, False, False, None, "generic-hwe-24.04")]
    assert sb.signed_package("linux-modules-nvidia-550-server-6.8.0-51-generic")["server"] is True
    assert sb.signed_package("nvidia-dkms-535") is None


def test_signed_metapackage_names_match_ubuntu_drivers():
    # "nvidia-driver-570-server, (kernel modules provided by linux-modules-nvidia-570-server-generic)"
    listing = load("ubuntu-drivers-list-gpgpu_server.txt", HOST)
    pairs = re.findall(r"^nvidia-driver-(\d+)-server, \(kernel modules provided by (\S+)\)$", listing, re.M)
    assert len(pairs) == 3
    for branch, package in pairs:
        assert sb.signed_modules_metapackage(int(branch), "generic") == package
    assert sb.signed_modules_metapackage(580, "generic", open_modules=True) == \
        "linux-modules-nvidia-580-server-open-generic"


# --- kernels installed but not booted -------------------------------------------------------------

def test_kernels_not_booted_from_dkms_status():
    # "nvidia/535.113.01, 5.15.0-86-generic, ...", "... 6.2.0-33-generic ...", "... 6.2.0-34-generic ..."
    text = load("dkms-status_nvidia-535.113.01_three-kernels_nvidia-graphics-drivers-62.txt")
    assert sb.installed_kernels(text) == ["5.15.0-86-generic", "6.2.0-33-generic", "6.2.0-34-generic"]
    # were the host running 6.2.0-33-generic, 6.2.0-34 is the newer kernel the next boot starts
    assert sb.kernels_not_booted(text, "6.2.0-33-generic") == [
        {"kver": "5.15.0-86-generic", "newer": False}, {"kver": "6.2.0-34-generic", "newer": True}]
    assert sb.kernels_not_booted(text, "6.2.0-34-generic") == [
        {"kver": "5.15.0-86-generic", "newer": False}, {"kver": "6.2.0-33-generic", "newer": False}]


def test_kernels_of_the_signed_module_packages():
    # apt set up linux-modules-nvidia-570 for 6.14.0-23 and for the newly installed 6.14.0-24
    text = load("apt-setting-up_linux-modules-nvidia-570_6.14.0-23-and-24_pxdiv-div-acer-manager-max-38_excerpt.txt")
    kvers = [sb.signed_package(n)["kver"] for n in re.findall(r"Setting up (linux-modules-nvidia-\S+)", text)
             if sb.signed_package(n)["kver"]]
    assert sb.kernels_not_booted(kvers, "6.14.0-23-generic") == [{"kver": "6.14.0-24-generic", "newer": True}]


def test_a_kernel_without_a_dkms_build_is_stranded():
    dkms = load("dkms-status_nvidia-535.113.01_three-kernels_nvidia-graphics-drivers-62.txt")
    assert sb.dkms_installed_kernels(dkms) == {"5.15.0-86-generic", "6.2.0-33-generic", "6.2.0-34-generic"}
    assert sb.dkms_installed_kernels(dkms, module="nvidia-fs") == set()
    # every kernel that dkms status names has its build: nothing is stranded
    assert sb.stranded_kernels(dkms, "6.2.0-34-generic", dkms_status=dkms, module_kind=sb.DKMS) == []
    # a kernel installed since (here named by release, as `ls /lib/modules` would) has no build yet
    installed = sb.installed_kernels(dkms) + ["6.5.0-14-generic"]
    stranded = sb.stranded_kernels(installed, "6.2.0-34-generic", dkms_status=dkms, module_kind=sb.DKMS)
    assert [(k["kver"], k["newer"]) for k in stranded] == [("6.5.0-14-generic", True)]
    assert "dkms autoinstall -k 6.5.0-14-generic" in stranded[0]["fix"]


def test_a_kernel_without_its_signed_module_package_is_stranded():
    # Canonical's signed modules for 5.15.0-58-generic only
    dpkg = load("dpkg-l_linux-modules-nvidia-525_ubuntu22.04_elementary-settings-system-302.txt")
    assert sb.signed_module_kernels(dpkg) == {"5.15.0-58-generic"}
    stranded = sb.stranded_kernels(["5.15.0-58-generic", "5.15.0-60-generic"], "5.15.0-58-generic", packages=dpkg,
                                   module_kind=sb.SIGNED_PREBUILT, branch=525, server=False)
    assert [k["kver"] for k in stranded] == ["5.15.0-60-generic"]
    assert "linux-modules-nvidia-525-5.15.0-60-generic" in stranded[0]["fix"]
    # the DKMS builds of another host do not serve a signed-prebuilt one
    dkms = load("dkms-status_nvidia-535.113.01_three-kernels_nvidia-graphics-drivers-62.txt")
    assert sb.stranded_kernels(["5.15.0-58-generic", "6.2.0-34-generic"], "5.15.0-58-generic", dkms_status=dkms,
                               packages=dpkg, module_kind=sb.SIGNED_PREBUILT)[0]["kver"] == "6.2.0-34-generic"


def test_kernel_release_order():
    assert sb.kernel_key("6.2.0-34-generic") == (6, 2, 0, 34)
    assert sb.kernel_key("5.14.0-427.13.1.el9_4.x86_64") == (5, 14, 0, 427, 13, 1)
    assert sb.installed_kernels(["/lib/modules/6.1.0-28-amd64", "vmlinuz-6.1.0-27-amd64", "6.1.0-28-amd64"]) == [
        "6.1.0-27-amd64", "6.1.0-28-amd64"]


# --- the kernel's signature verdicts --------------------------------------------------------------

@pytest.mark.parametrize("folder, name, kinds, unsigned", [
    # "nvidia: module verification failed: signature and/or required key missing - tainting kernel": it loaded
    (SB, "dmesg_nvidia-525_unsigned-taint_k8s-device-plugin-480.txt", [], ["nvidia"]),
    # "Loading of module with unavailable key is rejected", then "load nvidia failed: key was rejected by service"
    (SB, "talos-kern-log_nvidia_unavailable-key-rejected_talos-7043.txt",
     ["module_key_unavailable", "secure_boot_rejected"], []),
    # "[27532.356706] Loading of unsigned module is rejected"
    (SB, "dmesg_unsigned-module-rejected_wch-ch35x-38x-linux-32.txt", ["module_unsigned_rejected"], []),
    # "Lockdown: modprobe: unsigned module loading is restricted; see man kernel_lockdown.7" (evdi: modprobe's
    # "Operation not permitted" line names no nvidia module)
    (SB, "journal_lockdown-unsigned-module-restricted_evdi_displaylink-debian-523.txt",
     ["lockdown_unsigned_module"], []),
    # NVIDIA's installer: "...because it was not signed by a key that is trusted by the kernel..."
    (SB, "nvidia-installer_not-signed-by-trusted-key_gpu-operator-266.txt", ["secure_boot_rejected"], []),
    # gdm3's "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service", six times
    (os.path.join(FIXTURES, "errors"), "003_journal_modprobe-nvidia-key-rejected-by-service_secure-boot.txt",
     ["secure_boot_rejected"] * 6, []),
    (SB, "mokutil-sb-state_enabled_ubuntu22.04_salt-66955.txt", [], []),
])
def test_module_signature_events(folder, name, kinds, unsigned):
    events = sb.module_signature_events(load(name, folder))
    assert [e["kind"] for e in events["rejected"]] == kinds
    assert [e["module"] for e in events["unsigned_loaded"]] == unsigned
    assert events["rejected_kind"] == (kinds[0] if kinds else None)


def test_stack_check_names_the_rejection_and_the_fix():
    check = sc.check_module_signature(cap(["dmesg"], 0, load(
        "talos-kern-log_nvidia_unavailable-key-rejected_talos-7043.txt")))
    assert (check["name"], check["layer"], check["status"]) == ("module_signature", "driver", "fail")
    assert check["summary"].startswith("module rejected by Secure Boot: ")
    assert "mokutil --test-key" in check["remedy"] and "mokutil --import" in check["remedy"]
    assert check["evidence"]["lines"][0].endswith("Loading of module with unavailable key is rejected")
    assert check["data"]["rejected"] == ["module_key_unavailable", "secure_boot_rejected"]
    modprobe = sc.check_module_signature(cap(["journalctl", "-k"], 0, load(
        "nvidia-smi-and-modprobe_key-rejected_ubuntu22.04-535_nvidia-graphics-drivers-62.txt")))
    assert modprobe["status"] == "fail" and "linux-modules-nvidia-<branch>-server" in modprobe["remedy"]


def test_stack_check_unsigned_but_loaded_and_unreadable_logs():
    taint = sc.check_module_signature(cap(["dmesg"], 0, load(
        "dmesg_nvidia-525_unsigned-taint_k8s-device-plugin-480.txt")))
    assert taint["status"] == "ok" and taint["data"]["unsigned_loaded"] == ["nvidia"]
    assert "module verification failed" in taint["evidence"]["lines"][0]
    clean = sc.check_module_signature(cap(["dmesg"], 0, "[    0.0] Linux version 6.1\n"))
    assert clean["status"] == "ok" and clean["remedy"] is None
    denied = sc.check_module_signature(cap(["dmesg"], 1, "", "dmesg: read kernel buffer failed: Operation not "
                                                             "permitted\n"))
    assert denied["status"] == "warn" and "journalctl" in denied["remedy"]
    assert sc.check_module_signature(None)["status"] == "skipped"


# --- would the module load ------------------------------------------------------------------------

ENABLED = "mokutil-sb-state_enabled_ubuntu22.04_salt-66955.txt"
SHIM_OFF = "mokutil-sb-state_enabled_validation-disabled-in-shim_holoscan-aja-doc.txt"
DISABLED = "mokutil-sb-state_disabled_setup-mode_system76-firmware-open-388.txt"
NOT_ENROLLED = "mokutil-test-key_not-enrolled_dkms-mok.pub_r-pufky-docs.txt"
ENROLLED = "mokutil-test-key_enrolled_dkms-mok.pub_r-pufky-docs.txt"
DKMS_MODINFO = "modinfo-nvidia_dkms_590.44.01_ubuntu-6.8.0-90_aikitoria-open-gpu-kernel-modules-15_excerpt.txt"
SIGNED_DPKG = "dpkg-l_linux-modules-nvidia-525_ubuntu22.04_elementary-settings-system-302.txt"


def facts(sb_name, module=None, test_key=None):
    state = sb.parse_sb_state(load(sb_name))
    kind = sb.module_source(modinfo=load(module))["kind"] if module == DKMS_MODINFO else \
        sb.module_source(packages=load(module))["kind"] if module else None
    enrolled = sb.parse_test_key(load(test_key))["enrolled"] if test_key else None
    return state, kind, enrolled


def test_dkms_without_enrolled_mok_does_not_load_on_ubuntu():
    state, kind, enrolled = facts(ENABLED, DKMS_MODINFO, NOT_ENROLLED)
    verdict = sb.load_verdict(state, kind, enrolled, distribution="ubuntu", branch=580, flavour="generic",
                              open_modules=True)
    assert verdict["loads"] is False and "not an enrolled MOK" in verdict["reason"]
    assert "linux-modules-nvidia-580-server-open-generic" in verdict["fix"]
    assert "mokutil --import /var/lib/shim-signed/mok/MOK.der" in verdict["fix"]
    assert "no playbook can complete the enrolment" in verdict["fix"]
    assert verdict["console_required"] is False  # the signed package needs no console


def test_dkms_without_enrolled_mok_does_not_load_on_debian():
    state, kind, enrolled = facts(ENABLED, DKMS_MODINFO, NOT_ENROLLED)
    verdict = sb.load_verdict(state, kind, enrolled, distribution="debian")
    assert verdict["loads"] is False and verdict["console_required"] is True
    assert "mokutil --import /var/lib/dkms/mok.pub" in verdict["fix"] and "reboot" in verdict["fix"]
    assert "linux-modules-nvidia" not in verdict["fix"] and "no playbook" in verdict["fix"]


def test_what_loads():
    state, kind, enrolled = facts(ENABLED, DKMS_MODINFO, ENROLLED)
    assert sb.load_verdict(state, kind, enrolled, distribution="debian")["loads"] is True
    state, kind, _ = facts(ENABLED, SIGNED_DPKG)
    signed = sb.load_verdict(state, kind, None, distribution="ubuntu")
    assert kind == "signed-prebuilt" and signed["loads"] is True and signed["fix"] is None
    # "SecureBoot validation is disabled in shim": enabled, not enforced
    state, kind, enrolled = facts(SHIM_OFF, DKMS_MODINFO, NOT_ENROLLED)
    shim = sb.load_verdict(state, kind, enrolled)
    assert shim["loads"] is True and "validation is disabled" in shim["reason"]
    state, kind, enrolled = facts(DISABLED, DKMS_MODINFO, NOT_ENROLLED)
    assert sb.load_verdict(state, kind, enrolled)["loads"] is True


def test_what_cannot_be_told():
    state, kind, _ = facts(ENABLED, DKMS_MODINFO)
    unknown_key = sb.load_verdict(state, kind, None, distribution="ubuntu")
    assert unknown_key["loads"] is None and "mokutil --test-key /var/lib/shim-signed/mok/MOK.der" in \
        unknown_key["reason"]
    assert sb.load_verdict(state, None)["loads"] is None
    # text that is not --sb-state's: the state is unknown
    assert sb.load_verdict(sb.parse_sb_state(load(NOT_ENROLLED)), kind, False)["loads"] is None
    assert sb.load_verdict(None, kind, False)["loads"] is None
    assert sb.load_verdict(False, kind, False)["loads"] is True


def test_dpkg_s_of_another_file_names_no_module_source():
    # "nvidia-smi: /usr/bin/nvidia-smi" (dpkg-query -S on Debian): a real -S line, but not the module's file
    source = sb.module_source(dpkg_s=load("dpkg-query-S_nvidia-smi_debian.txt", HOST))
    assert source["kind"] is None and source["package"] is None


# ---------------------------------------------------------------------------------------------
# The host: what a reboot starts, and whether it has a module (capture + boot_facts).

DEP_1517 = "modules-dep-grep_dkms_debian-forky_nvidia-container-toolkit-1517_excerpt.txt"
DKMS_3 = "dkms-status_nvidia-535.113.01_three-kernels_nvidia-graphics-drivers-62.txt"
MODINFO_DKMS = "modinfo-nvidia_dkms_590.44.01_ubuntu-6.8.0-90_aikitoria-open-gpu-kernel-modules-15_excerpt.txt"
DPKG_SIGNED = "dpkg-l_linux-modules-nvidia-525_ubuntu22.04_elementary-settings-system-302.txt"


def test_modules_dep_names_the_module_where_depmod_found_it():
    text = load(DEP_1517)
    # nvidia.ko.xz is there as nvidia-modeset's and nvidia-drm's dependency; forcedeth and nvidia-wmi-ec-backlight
    # are other drivers whose paths hold the word nvidia
    assert sb.dep_module_path(text) == "updates/dkms/nvidia.ko.xz"
    assert sb.dep_module_path("\n".join(text.splitlines()[:2])) is None
    assert sb.dep_module_path(None) is None and sb.dep_module_path("") is None


def test_boot_kernels_and_the_next_boot():
    # the three kernels of the dkms status capture, as /boot names their images
    kvers = sb.installed_kernels(load(DKMS_3))
    names = ["config-6.2.0-34-generic", "grub", "initrd.img-6.2.0-34-generic"] + ["vmlinuz-%s" % k for k in kvers] \
        + ["vmlinuz", "vmlinuz.old"]
    assert sb.boot_kernels(names) == kvers
    assert sb.boot_kernels(names[:1], "6.2.0-33-generic") == ["6.2.0-33-generic"]
    assert sb.next_boot_kernel(kvers) == "6.2.0-34-generic" and sb.next_boot_kernel([]) is None


class BootIO(object):
    """A host for capture(): files, directory listings and commands (argv prefix -> (rc, out, err))."""

    def __init__(self, files=None, dirs=None, commands=None, blobs=None):
        self.files, self.dirs, self.commands, self.blobs = files or {}, dirs or {}, commands or {}, blobs or {}
        self.ran = []

    def which(self, name):
        return "/usr/bin/" + name if ("/usr/bin/" + name,) in self.commands else None

    def run(self, argv):
        self.ran.append(list(argv))
        return self.commands.get((argv[0],), (127, "", "not found"))

    def read(self, path):
        return self.files.get(path)

    def read_bytes(self, path):
        return self.blobs.get(path)

    def listdir(self, path):
        return self.dirs.get(path)

    def exists(self, path):
        return path in self.files or path in self.blobs


def dkms_host(newer_built):
    """An Ubuntu host running 6.2.0-33 with DKMS builds (dkms status of the capture), 6.2.0-34 installed and,
    where newer_built, built for too; Secure Boot state from the real mokutil output."""
    dep = load(DEP_1517)
    files = {"/proc/sys/kernel/osrelease": "6.2.0-33-generic\n", "/etc/os-release": 'NAME="Ubuntu"\nID=ubuntu\n',
             "/lib/modules/6.2.0-33-generic/modules.dep": dep, "/var/lib/shim-signed/mok/MOK.der": "der",
             "/lib/modules/6.2.0-34-generic/modules.dep": dep if newer_built else "kernel/fs/fat/fat.ko:\n"}
    dkms = "\n".join(l for l in load(DKMS_3).splitlines() if newer_built or "6.2.0-34" not in l)
    commands = {("/usr/bin/mokutil",): (0, load("mokutil-sb-state_enabled_ubuntu22.04_salt-66955.txt"), ""),
                ("/usr/bin/modinfo",): (0, load(MODINFO_DKMS), ""),
                ("/usr/bin/dkms",): (0, dkms, "")}
    return BootIO(files, {"/boot": ["vmlinuz-6.2.0-33-generic", "vmlinuz-6.2.0-34-generic"]}, commands)


def test_a_newer_kernel_without_its_dkms_build_is_the_next_boot_problem():
    io = dkms_host(newer_built=False)
    caps = sb.capture(io)
    assert caps["distribution"] == "ubuntu" and caps["running"] == "6.2.0-33-generic"
    # mokutil asked for the DKMS key Ubuntu signs with; nothing else ran that changes anything
    assert ["/usr/bin/mokutil", "--test-key", "/var/lib/shim-signed/mok/MOK.der"] in io.ran
    facts = sb.boot_facts(caps)
    assert facts["module"]["kind"] == sb.DKMS and facts["secure_boot"]["enforcing"] is True
    kernels = facts["kernels"]
    assert kernels["installed"] == ["6.2.0-33-generic", "6.2.0-34-generic"]
    assert kernels["with_module"] == ["6.2.0-33-generic"] and kernels["next_boot"] == "6.2.0-34-generic"
    assert kernels["next_boot_has_module"] is False
    problem = sb.next_boot_problem(facts)
    assert problem.startswith("the next boot starts kernel 6.2.0-34-generic (newer than the running "
                              "6.2.0-33-generic), which has no nvidia module: build the module for it")
    assert "dkms autoinstall -k 6.2.0-34-generic" in problem


def test_a_newer_kernel_with_its_build_is_fine():
    facts = sb.boot_facts(sb.capture(dkms_host(newer_built=True)))
    assert facts["kernels"]["next_boot_has_module"] is True and facts["kernels"]["stranded"] == []
    assert sb.next_boot_problem(facts) is None


def test_signed_prebuilt_module_found_in_modules_dep():
    """Ubuntu's signed modules sit under kernel/nvidia-<branch>srv/ (the signatures package's layout): modules.dep
    then names the source where modinfo says nothing."""
    dpkg = load(DPKG_SIGNED)
    io = BootIO({"/proc/sys/kernel/osrelease": "5.15.0-58-generic\n",
                 "/lib/modules/5.15.0-58-generic/modules.dep": "kernel/nvidia-525/nvidia.ko:\n",
                 "/lib/modules/5.15.0-60-generic/modules.dep": "kernel/fs/fat/fat.ko:\n"},
                {"/boot": ["vmlinuz-5.15.0-58-generic", "vmlinuz-5.15.0-60-generic"]},
                {("/usr/bin/dpkg-query",): (0, dpkg, "")})
    facts = sb.boot_facts(sb.capture(io, "Ubuntu"))
    assert facts["module"]["kind"] == sb.SIGNED_PREBUILT
    assert facts["secure_boot"]["enforcing"] is None and facts["loads"] is None
    assert "linux-modules-nvidia-525" in sb.next_boot_problem(facts)
    assert "5.15.0-60-generic" in sb.next_boot_problem(facts)


def test_efivar_read_where_mokutil_is_absent():
    blob = bytes([6, 0, 0, 0, 1])
    io = BootIO({"/proc/sys/kernel/osrelease": "6.1.0-28-amd64\n"}, blobs={sb.SECUREBOOT_EFIVAR: blob})
    facts = sb.boot_facts(sb.capture(io, "Debian"))
    assert facts["secure_boot"]["enforcing"] is True and facts["secure_boot"]["source"] == "SecureBoot EFI variable"


def test_running_kernel_whose_module_is_gone():
    io = BootIO({"/proc/sys/kernel/osrelease": "6.1.0-28-amd64\n",
                 "/lib/modules/6.1.0-28-amd64/modules.dep": "kernel/fs/fat/fat.ko:\n"})
    facts = sb.boot_facts(sb.capture(io, "Debian"))
    assert facts["kernels"]["next_boot"] == "6.1.0-28-amd64"
    problem = sb.next_boot_problem(facts)
    # Debian's module comes from DKMS: build it for this kernel (or reinstall the package), then load it
    assert "`dkms autoinstall -k 6.1.0-28-amd64` (needs linux-headers-6.1.0-28-amd64)" in problem
    assert "`apt-get install --reinstall`" in problem and "then `modprobe nvidia`" in problem
    assert "site.yml --tags driver" not in problem
    # a kernel whose modules.dep cannot be read (no /lib/modules/<kver>) says nothing about the module
    io.files.pop("/lib/modules/6.1.0-28-amd64/modules.dep")
    assert sb.next_boot_problem(sb.boot_facts(sb.capture(io, "Debian"))) is None


def test_stack_check_next_boot():
    check = sc.check_next_boot(sb.boot_facts(sb.capture(dkms_host(newer_built=False))))
    assert check["status"] == "warn" and check["layer"] == "driver"
    assert "dkms autoinstall -k 6.2.0-34-generic" in check["remedy"]
    assert "kernel 6.2.0-34-generic: no nvidia module" in check["evidence"]["lines"]
    check = sc.check_next_boot(sb.boot_facts(sb.capture(dkms_host(newer_built=True))))
    assert check["status"] == "ok" and "kernel 6.2.0-34-generic" in check["summary"]


def test_boot_facts_module_documents_its_options():
    pytest.importorskip("ansible")
    sys.path.insert(0, os.path.join(ROOT, "library"))
    import yaml
    import nvidia_boot_facts as mod
    doc = yaml.safe_load(mod.DOCUMENTATION)
    assert set(doc["options"]) == set(mod.ARGUMENT_SPEC)
    for name, spec in mod.ARGUMENT_SPEC.items():
        assert doc["options"][name]["type"] == spec["type"], name
    assert "nvidia_boot" in yaml.safe_load(mod.RETURN)["ansible_facts"]["contains"]


def test_the_running_kernels_package_names_the_package_a_new_kernel_needs():
    """The corpus' Ubuntu 24.04 dpkg -l (Canonical's signed 550-server modules for 6.8.0-51-generic) with a newer
    kernel installed since: the fix names the per-kernel package of the same branch and variant."""
    dpkg = load("007_dpkg-l_550.127.08-server_ubuntu24.04_linux-modules-nvidia-signed_excerpt.txt", HOST)
    io = BootIO({"/proc/sys/kernel/osrelease": "6.8.0-51-generic\n",
                 "/lib/modules/6.8.0-51-generic/modules.dep": "kernel/nvidia-550srv/nvidia.ko:\n",
                 "/lib/modules/6.8.0-52-generic/modules.dep": "kernel/fs/fat/fat.ko:\n"},
                {"/boot": ["vmlinuz-6.8.0-51-generic", "vmlinuz-6.8.0-52-generic"]},
                {("/usr/bin/dpkg-query",): (0, dpkg, "")})
    facts = sb.boot_facts(sb.capture(io, "Ubuntu"))
    assert facts["module"]["kind"] == sb.SIGNED_PREBUILT
    assert "install linux-modules-nvidia-550-server-6.8.0-52-generic before booting it" in sb.next_boot_problem(facts)


def test_dkms_refusal_under_secure_boot():
    """Debian under Secure Boot (the real efivarfs bytes) with no mokutil to ask about the DKMS key: refused
    with the MOK steps; the enrolled key (real --test-key output) or Secure Boot off: allowed."""
    blob = bytes([6, 0, 0, 0, 1])
    io = BootIO({"/proc/sys/kernel/osrelease": "6.1.0-28-amd64\n"}, blobs={sb.SECUREBOOT_EFIVAR: blob})
    refusal = sb.boot_facts(sb.capture(io, "Debian"))["dkms_refusal"]
    assert refusal.startswith("Secure Boot is on and the module is DKMS-built; whether its key is enrolled is unknown")
    assert "mokutil --import /var/lib/dkms/mok.pub" in refusal and "MokManager at the console" in refusal
    io.commands = {("/usr/bin/mokutil",): (0, load("mokutil-test-key_not-enrolled_dkms-mok.pub_r-pufky-docs.txt"), "")}
    io.files["/var/lib/dkms/mok.pub"] = "pub"
    # mokutil present: its --sb-state answer (here the test key text: no state line) leaves the EFI variable to decide
    assert "is not an enrolled MOK" in sb.boot_facts(sb.capture(io, "Debian"))["dkms_refusal"]
    io.commands = {("/usr/bin/mokutil",): (0, load("mokutil-test-key_enrolled_dkms-mok.pub_r-pufky-docs.txt"), "")}
    assert sb.boot_facts(sb.capture(io, "Debian"))["dkms_refusal"] is None
    io.blobs[sb.SECUREBOOT_EFIVAR] = bytes([6, 0, 0, 0, 0])
    io.commands = {}
    assert sb.boot_facts(sb.capture(io, "Debian"))["dkms_refusal"] is None


def test_modules_dep_decides_the_source_where_modinfo_says_nothing():
    """A DKMS build per the real modules.dep excerpt (Debian forky) with no modinfo to ask."""
    io = BootIO({"/proc/sys/kernel/osrelease": "6.12.48-amd64\n",
                 "/lib/modules/6.12.48-amd64/modules.dep": load(DEP_1517)})
    module = sb.boot_facts(sb.capture(io, "Debian"))["module"]
    assert module["kind"] == sb.DKMS and module["evidence"] == "modules.dep: /lib/modules/6.12.48-amd64/updates/dkms/nvidia.ko.xz"


def test_a_module_not_loaded_because_the_running_kernel_has_none_names_that_cause_first():
    io = BootIO({"/proc/sys/kernel/osrelease": "6.1.0-28-amd64\n",
                 "/lib/modules/6.1.0-28-amd64/modules.dep": "kernel/fs/fat/fat.ko:\n"})
    boot = sb.boot_facts(sb.capture(io, "Debian"))
    facts = {"state": "driver_not_loaded", "nvidia_smi_path": "/usr/bin/nvidia-smi"}
    plain = layers_driver.check_kernel_module(None, facts)
    assert plain["status"] == "fail" and "modprobe nvidia" in plain["remedy"]
    led = layers_driver.stranded_kernel_leads(plain, boot)
    assert led["status"] == "fail"
    assert "no nvidia module is installed for the running kernel 6.1.0-28-amd64" in led["summary"]
    assert led["remedy"].startswith("the running kernel 6.1.0-28-amd64 has no nvidia module")
    assert "dkms autoinstall -k 6.1.0-28-amd64" in led["remedy"]
    assert led["data"]["running_kernel_without_module"] == "6.1.0-28-amd64"
    # no driver installed at all (no nvidia-smi): installing the driver stays the remedy
    bare = layers_driver.check_kernel_module(None, {"state": "no_driver", "nvidia_smi_path": None})
    assert layers_driver.stranded_kernel_leads(bare, boot, driver_installed=False) == bare
    assert "site.yml --tags driver" in bare["remedy"]
    # the running kernel has its module: the plain verdict stands
    io.files["/lib/modules/6.1.0-28-amd64/modules.dep"] = "updates/dkms/nvidia.ko:\n"
    assert layers_driver.stranded_kernel_leads(plain, sb.boot_facts(sb.capture(io, "Debian"))) == plain
