# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Secure Boot facts of a GPU host and whether its nvidia module can load under them.

Pure stdlib, Python >= 3.9 (shipped to hosts as module_utils). Every parser reads the text (or bytes)
a host command prints and returns plain data; none raises for any input. Sources of every format
(verbatim captures) are in tests/fixtures/secure_boot/README.md; the research behind them is
docs/research/secure-boot-cuda-repo.md.

  parse_sb_state          `mokutil --sb-state` (stdout + stderr: it exits 0 enabled *and* disabled)
  parse_efivar_secureboot /sys/firmware/efi/efivars/SecureBoot-<guid> (4 attribute bytes + 1 data byte),
                          the fallback when mokutil is absent
  parse_lockdown          /sys/kernel/security/lockdown ("[none] integrity confidentiality")
  parse_test_key          `mokutil --test-key <DKMS key>` (its exit status swapped meaning in 2025)
  module_source
                          which package provides the nvidia module: Canonical's signed prebuilt
                          linux-modules-nvidia-* or a DKMS build (modinfo, dpkg -S, dpkg -l)
  kernels_not_booted      kernels installed next to the running one (dkms status, dpkg -l, ls)
  stranded_kernels        those of them with no nvidia module (no DKMS build, no signed package): a reboot
                          into one comes up without the driver
  module_signature_events the kernel's signature verdicts in a kernel log (the error catalogue's rows)
  load_verdict            would the module load under Secure Boot, why, and the fix
"""
import re

from ansible.module_utils.diagnosis import error_catalogue as catalogue
from ansible.module_utils.host.dpkg import installed_versions, parse as parse_dpkg, query_argv as dpkg_query_argv

EFI_GLOBAL_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
SECUREBOOT_EFIVAR = "/sys/firmware/efi/efivars/SecureBoot-" + EFI_GLOBAL_GUID
SETUPMODE_EFIVAR = "/sys/firmware/efi/efivars/SetupMode-" + EFI_GLOBAL_GUID
LOCKDOWN_FILE = "/sys/kernel/security/lockdown"
LOCKDOWN_MODES = ("none", "integrity", "confidentiality")

# The key DKMS signs with (dkms-project/dkms dkms.in prepare_mok(): Ubuntu uses update-secureboot-policy's
# MOK, every other distribution DKMS's own, generated with CN "DKMS module signing key").
DKMS_MOK_UBUNTU = "/var/lib/shim-signed/mok/MOK.der"
DKMS_MOK_DEFAULT = "/var/lib/dkms/mok.pub"
DKMS_SIGNER = "DKMS module signing key"

SIGNED_PREBUILT = "signed-prebuilt"
DKMS = "dkms"

NO_PLAYBOOK = ("no playbook can complete the enrolment: MokManager asks for the password at the console "
               "during the reboot")


def _text(data):
    if data is None:
        return ""
    if isinstance(data, (bytes, bytearray)):
        data = bytes(data).decode("utf-8", "replace")
    if not isinstance(data, str):
        return ""
    return data.replace("\r\n", "\n").replace("\r", "\n")


def _lines(data):
    return [l.strip() for l in _text(data).split("\n") if l.strip()]


# ---------------------------------------------------------------------------------------------
# mokutil --sb-state
#   SecureBoot enabled                         (+ "SecureBoot validation is disabled in shim")
#   SecureBoot disabled                        (+ "Platform is in Setup Mode")
#   Cannot determine secure boot state.
#   stderr: This system doesn't support Secure Boot   (exit 255)
#           EFI variables are not supported on this system   (exit 1: booted without EFI)


def parse_sb_state(text):
    """`mokutil --sb-state` output (stdout and stderr together) ->
    {enabled: True|False|None, enforcing: True|False|None, shim_validation_disabled, setup_mode, efi, line}.

    enabled is the firmware's Secure Boot; enforcing is whether it constrains the kernel: shim with
    validation disabled boots the kernel as if Secure Boot were off (unsigned modules load). efi is False
    when the host booted without EFI (or firmware without Secure Boot support), so Secure Boot is off."""
    lines = _lines(text)
    lower = [l.lower() for l in lines]
    out = {"enabled": None, "enforcing": None, "shim_validation_disabled": False, "setup_mode": False,
           "efi": None, "line": None}
    for line, low in zip(lines, lower):
        if low.startswith("secureboot enabled"):
            out.update(enabled=True, efi=True, line=line)
        elif low.startswith("secureboot disabled"):
            out.update(enabled=False, efi=True, line=line)
        elif "validation is disabled in shim" in low:
            out["shim_validation_disabled"] = True
        elif "platform is in setup mode" in low:
            out["setup_mode"] = True
        elif "efi variables are not supported" in low or "doesn't support secure boot" in low:
            out.update(enabled=False, efi=False, line=line)
        elif "cannot determine secure boot state" in low and out["line"] is None:
            out["line"] = line
    if out["enabled"] is not None:
        out["enforcing"] = bool(out["enabled"] and not out["shim_validation_disabled"])
    return out


# ---------------------------------------------------------------------------------------------
# efivarfs: the file is the variable's 4 attribute bytes (little-endian) then its data; SecureBoot's
# data is one byte, 1 = on (kernel Documentation/filesystems/efivarfs.rst; mokutil treats any other
# size as "Strange data size"). The older sysfs interface (/sys/firmware/efi/vars/<name>-<guid>/data)
# holds the data byte alone.


def _efivar_byte(data):
    if not isinstance(data, (bytes, bytearray, memoryview)):
        return None
    data = bytes(data)
    if len(data) == 5:
        return data[4]
    if len(data) == 1:
        return data[0]
    return None


def parse_efivar_secureboot(data, setup_mode=None):
    """Raw bytes of the SecureBoot EFI variable file -> True (on) | False (off) | None (unreadable or
    not the 5-byte efivarfs / 1-byte sysfs form). Like mokutil, a platform in Setup Mode (the SetupMode
    variable's bytes, when given, = 1) counts as off."""
    value = _efivar_byte(data)
    if value not in (0, 1):
        return None
    if value == 1 and setup_mode is not None and _efivar_byte(setup_mode) == 1:
        return False
    return value == 1


# ---------------------------------------------------------------------------------------------
# /sys/kernel/security/lockdown: "[none] integrity confidentiality" (the bracketed mode is active;
# some kernels list two levels only: "none [integrity]").

_LOCKDOWN_ACTIVE = re.compile(r"\[(none|integrity|confidentiality)\]")


def parse_lockdown(text):
    """'none' | 'integrity' | 'confidentiality' (the bracketed mode), None when the text is not the file."""
    match = _LOCKDOWN_ACTIVE.search(_text(text))
    return match.group(1) if match else None


# ---------------------------------------------------------------------------------------------
# mokutil --test-key <der>: "<file> is already enrolled" / "<file> is not enrolled" (stdout). Its exit
# status means opposite things in mokutil <= 0.7.2 and after 2025-06 (lcp/mokutil 4d2b704, 9ae73db), so
# only the text decides. Other answers (print_skip_message): "is already in the enrollment request"
# (imported, waiting for MokManager at the next boot), "is blocked in dbx", "is already in db"
# (trusted by firmware, not a MOK: the kernel does not use db keys for modules).

_TEST_KEY = re.compile(r"^(?P<key>.+?) is (?P<verdict>already enrolled|not enrolled|already in the enrollment "
                       r"request|blocked in dbx|already in db)\b")


def parse_test_key(text):
    """`mokutil --test-key` output -> {enrolled: True|False|None, pending, key, line}."""
    for line in _lines(text):
        match = _TEST_KEY.match(line)
        if not match:
            continue
        verdict = match.group("verdict")
        enrolled = {"already enrolled": True, "not enrolled": False, "already in the enrollment request": False,
                    "blocked in dbx": False}.get(verdict)
        return {"enrolled": enrolled, "pending": verdict == "already in the enrollment request",
                "key": match.group("key"), "line": line}
    return {"enrolled": None, "pending": False, "key": None, "line": None}


def dkms_mok_certificate(distribution):
    """The certificate DKMS signs with on this distribution (what `mokutil --test-key` must be given)."""
    return DKMS_MOK_UBUNTU if str(distribution or "").lower().startswith("ubuntu") else DKMS_MOK_DEFAULT


# ---------------------------------------------------------------------------------------------
# Which package provides the nvidia module.
#   Canonical's signed prebuilt modules: linux-modules-nvidia-<branch>[-server][-open]-<kver> (+ linux-objects-
#   nvidia-…-<kver>, linux-signatures-nvidia-<kver>), linked at install under /lib/modules/<kver>/kernel/
#   nvidia-<branch>[srv]/ (the signatures package's own layout: …/kernel/nvidia-450srv/bits/nvidia.ko.sig).
#   DKMS: no package owns the built file; Debian/Ubuntu/Arch install it under /lib/modules/<kver>/updates/dkms/
#   (dkms.in override_dest_module_location(); Fedora/RHEL use /extra, which akmods and kmod packages use too).

_SIGNED_PKG = re.compile(r"^linux-(?:modules|objects)-nvidia-(?P<branch>\d{3})(?P<server>-server)?(?P<open>-open)?"
                         r"-(?P<kver>\d+\.\d+\S*)$")
_SIGNED_META = re.compile(r"^linux-modules-nvidia-(?P<branch>\d{3})(?P<server>-server)?(?P<open>-open)?"
                          r"-(?P<flavour>[a-z]\S*)$")
_DKMS_PKG = re.compile(r"^(?:nvidia-dkms(?:-\d{3})?(?:-server)?(?:-open)?|nvidia-kernel-dkms|"
                       r"nvidia-open-kernel-dkms)$")
_PREBUILT_PATH = re.compile(r"/lib/modules/[^/]+/kernel/nvidia-\d{3}[^/]*/")
_DKMS_PATH = re.compile(r"/lib/modules/[^/]+/updates/dkms/")
_MODINFO_FIELD = re.compile(r"^(filename|signer|vermagic|version):\s*(.*?)\s*$")
# dpkg -S / dpkg-query -S: "<package>[, <package>]: <path>"; a path no package owns: "dpkg-query: no path found ..."
_DPKG_S = re.compile(r"^(?P<pkgs>[a-z0-9][a-z0-9.+:, -]*?): (?P<path>/\S+)$")


def parse_modinfo(text):
    """`modinfo nvidia` -> {filename, signer, vermagic, version} (None where absent)."""
    out = {"filename": None, "signer": None, "vermagic": None, "version": None}
    for line in _text(text).split("\n"):
        match = _MODINFO_FIELD.match(line.strip())
        if match and out[match.group(1)] is None:
            out[match.group(1)] = match.group(2)
    return out


def installed_packages(text):
    """{package: version} of the installed ones (held or not) in `dpkg -l` or `dpkg-query -W -f FORMAT` output,
    read by the one dpkg parser (host/dpkg.py): removed (`rc`) and half-installed ones are not."""
    return installed_versions(parse_dpkg(_text(text)))


def _owner(dpkg_s):
    for line in _lines(dpkg_s):
        match = _DPKG_S.match(line)
        if match and re.search(r"/nvidia[\w-]*\.ko", match.group("path")):
            return [p.strip().split(":")[0] for p in match.group("pkgs").split(",")], match.group("path")
    return None, None


def module_path_kind(path):
    """'dkms' for a file under /lib/modules/<kver>/updates/dkms/, 'signed-prebuilt' under Ubuntu's
    /lib/modules/<kver>/kernel/nvidia-<branch>[srv]/, None otherwise (/extra: DKMS on Fedora/RHEL, akmods, kmods)."""
    if not path:
        return None
    if _DKMS_PATH.search(path):
        return DKMS
    if _PREBUILT_PATH.search(path):
        return SIGNED_PREBUILT
    return None


def signed_package(name):
    """A Canonical signed-module package name -> {branch, server, open, kver|flavour}; None otherwise."""
    match = _SIGNED_PKG.match(name or "")
    if match:
        return {"branch": int(match.group("branch")), "server": bool(match.group("server")),
                "open": bool(match.group("open")), "kver": match.group("kver"), "flavour": None}
    match = _SIGNED_META.match(name or "")
    if match:
        return {"branch": int(match.group("branch")), "server": bool(match.group("server")),
                "open": bool(match.group("open")), "kver": None, "flavour": match.group("flavour")}
    return None


def module_source(packages=None, modinfo=None, dpkg_s=None, kver=None, module_file=None):
    """Which package provides the nvidia module -> {kind: 'signed-prebuilt'|'dkms'|None, package, filename,
    signer, evidence}.

    modinfo: `modinfo nvidia` (or `modinfo -k <kver> nvidia`): the file modprobe loads decides first.
    dpkg_s: `dpkg -S <that file>`: its owner (a DKMS build has none).
    packages: `dpkg -l` / `dpkg-query -W` lines: a signed linux-modules-nvidia-*-<kver> for kver, or a DKMS
    package; both installed, or neither, says nothing (modinfo decides).
    module_file: where modules.dep puts the kernel's nvidia module, which decides when modinfo names no file."""
    info = parse_modinfo(modinfo)
    source = "modinfo filename"
    if not info["filename"] and module_file:
        info["filename"], source = module_file, "modules.dep"
    out = {"kind": None, "package": None, "filename": info["filename"], "signer": info["signer"], "evidence": None}
    kind = module_path_kind(info["filename"])
    if kind:
        out.update(kind=kind, evidence="%s: %s" % (source, info["filename"]))
        return out
    if info["signer"] == DKMS_SIGNER:
        out.update(kind=DKMS, evidence="modinfo signer: %s" % DKMS_SIGNER)
        return out
    owners, path = _owner(dpkg_s)
    if owners:
        signed = [p for p in owners if signed_package(p)]
        if signed:
            out.update(kind=SIGNED_PREBUILT, package=signed[0], filename=out["filename"] or path,
                       evidence="dpkg -S: %s owns %s" % (signed[0], path))
            return out
    installed = installed_packages(packages)
    signed = sorted(p for p in installed if (signed_package(p) or {}).get("kver")
                    and (kver is None or signed_package(p)["kver"] == kver) and p.startswith("linux-modules-"))
    dkms = sorted(p for p in installed if _DKMS_PKG.match(p))
    if signed and not dkms:
        out.update(kind=SIGNED_PREBUILT, package=signed[-1], evidence="installed: %s" % signed[-1])
    elif dkms and not signed:
        out.update(kind=DKMS, package=dkms[0], evidence="installed: %s" % dkms[0])
    elif signed and dkms:
        out["evidence"] = "both installed (%s, %s): `modinfo nvidia` says which one loads" % (signed[-1], dkms[0])
    return out


def signed_modules_metapackage(branch, flavour="generic", open_modules=False, server=True):
    """The Ubuntu metapackage that keeps Canonical-signed nvidia modules for every kernel of a flavour:
    linux-modules-nvidia-<branch>[-server][-open]-<flavour> (as `ubuntu-drivers list --gpgpu` names it). Given a
    kernel release instead of a flavour, the same shape names that kernel's own package (..-6.8.0-149-generic)."""
    return "linux-modules-nvidia-%s%s%s-%s" % (branch, "-server" if server else "", "-open" if open_modules else "",
                                               flavour or "generic")


# ---------------------------------------------------------------------------------------------
# Kernels installed but not booted.

_KVER = r"\d+\.\d+(?:\.\d+)?(?:[-.+~][0-9A-Za-z_]+)*"
_KVER_LINE = (
    # dkms status: "nvidia/535.113.01, 6.2.0-34-generic, x86_64: installed" (dkms < 3: "nvidia, 535.113.01, ...")
    re.compile(r"^[^,\s/]+(?:/|,\s*)[^,\s]+,\s*(?P<kver>" + _KVER + r"),"),
    # dpkg -l: "ii  linux-image-6.8.0-51-generic  6.8.0-51.52 ..."; apt: "Setting up linux-image-6.8.0-51-generic (...)"
    re.compile(r"(?:^|[\s/])linux-image-(?:unsigned-)?(?P<kver>" + _KVER + r")(?::[a-z0-9]+)?(?:\s|$)"),
    re.compile(r"(?:^|[\s/])vmlinuz-(?P<kver>" + _KVER + r")\s*$"),           # ls /boot
    re.compile(r"^(?:/lib/modules/)?(?P<kver>" + _KVER + r")/?$"),            # ls /lib/modules
)
# dpkg -l status of a package that is not installed ("rc": removed, its configuration kept)
_DPKG_NOT_INSTALLED = re.compile(r"^(?![ih]i\s)[a-z][a-zA-Z]\s+\S")


def kernel_key(kver):
    """Sort key of a kernel release: its leading numeric fields ('6.2.0-34-generic' -> (6, 2, 0, 34))."""
    parts = []
    for field in re.split(r"[.\-+~]", str(kver or "")):
        if not field.isdigit():
            break
        parts.append(int(field))
    return tuple(parts)


def installed_kernels(text):
    """Kernel releases named in `dkms status`, `dpkg -l 'linux-image-*'`, `ls /boot` or `ls /lib/modules` output
    (or a list of releases), in version order, each once."""
    items = text if isinstance(text, (list, tuple, set)) else _lines(text)
    found = set()
    for item in items:
        line = str(item).strip()
        if _DPKG_NOT_INSTALLED.match(line):
            continue
        for regex in _KVER_LINE:
            match = regex.search(line)
            if match:
                found.add(match.group("kver"))
                break
    return sorted(found, key=lambda k: (kernel_key(k), k))


def kernels_not_booted(installed, running_kver):
    """The installed kernels other than the running one: [{kver, newer}] in version order; newer = a later
    release than the running kernel (the one the next reboot most likely starts)."""
    running = str(running_kver or "").strip()
    out = []
    for kver in installed_kernels(installed):
        if kver == running:
            continue
        out.append({"kver": kver, "newer": bool(running) and kernel_key(kver) > kernel_key(running)})
    return out


# dkms status: "nvidia/535.113.01, 6.2.0-34-generic, x86_64: installed" (dkms < 3: "nvidia, 535.113.01, ...")
_DKMS_STATUS = re.compile(r"^(?P<module>[^,\s/]+)(?:/|,\s*)(?P<version>[^,\s]+),\s*(?P<kver>" + _KVER
                          + r"),\s*[^:]+:\s*(?P<state>\w+)")


def dkms_installed_kernels(text, module="nvidia"):
    """Kernels `dkms status` says `module` is installed for (state "installed"; "added"/"built" are not)."""
    out = set()
    for line in _lines(text):
        match = _DKMS_STATUS.match(line.strip())
        if match and match.group("module") == module and match.group("state") == "installed":
            out.add(match.group("kver"))
    return out


def signed_module_kernels(packages):
    """Kernels an installed Canonical signed-module package (linux-modules-nvidia-<branch>...-<kver>) serves."""
    return {signed_package(p)["kver"] for p in installed_packages(packages)
            if p.startswith("linux-modules-nvidia-") and (signed_package(p) or {}).get("kver")}


def stranded_kernels(installed, running_kver, dkms_status=None, packages=None, module_kind=None, branch=None,
                     open_modules=False, server=True, module_kernels=()):
    """The kernels the host could boot next that have no nvidia module: [{kver, newer, fix}] in version order.

    installed, running_kver: as kernels_not_booted(). dkms_status: `dkms status`; packages: `dpkg -l`.
    module_kind: how the running kernel gets its module (module_source()'s kind): a DKMS host needs a DKMS
    build for each kernel, a signed-prebuilt host Canonical's linux-modules-nvidia-<branch>...-<kver>.
    module_kernels: kernels whose modules.dep lists an nvidia module (whatever put it there)."""
    served = set(module_kernels or ())
    if module_kind in (None, DKMS):
        served |= dkms_installed_kernels(dkms_status)
    if module_kind in (None, SIGNED_PREBUILT):
        served |= signed_module_kernels(packages)
    out = []
    for kernel in kernels_not_booted(installed, running_kver):
        if kernel["kver"] in served:
            continue
        if module_kind == SIGNED_PREBUILT:
            fix = ("install %s before booting it (or the metapackage for its flavour, which follows every kernel)"
                   % (signed_modules_metapackage(branch, kernel["kver"], open_modules, server) if branch else
                      "linux-modules-nvidia-<branch>-server-%s" % kernel["kver"]))
        else:
            fix = ("build the module for it before booting it: `dkms autoinstall -k %s` (needs linux-headers-%s); "
                   "under Secure Boot the build is signed with the DKMS key, which must be enrolled" % (kernel["kver"],
                                                                                                        kernel["kver"]))
        out.append(dict(kernel, fix=fix))
    return out


# ---------------------------------------------------------------------------------------------
# The kernel log: which signature verdicts it holds.


def module_signature_events(text):
    """Signature verdicts in a kernel log / journal / modprobe output -> {rejected: [{kind, state, line}],
    unsigned_loaded: [{module, line}], rejected_kind}. rejected comes from the error catalogue's rows of
    scope "kernel"; unsigned_loaded are modules that loaded without a valid signature (nothing enforced)."""
    entries = catalogue.in_scope("kernel")
    rejected, tainted = [], []
    for line in _lines(text):
        lower = line.lower()
        for state, entry in entries:
            if catalogue.matches(entry, line, lower):
                rejected.append({"kind": entry["kind"], "state": state, "line": line})
                break
        else:
            taint = catalogue.MODULE_SIG_TAINT.search(line)
            if taint:
                tainted.append({"module": taint.group(1), "line": line})
    return {"rejected": rejected, "unsigned_loaded": tainted,
            "rejected_kind": rejected[0]["kind"] if rejected else None}


# ---------------------------------------------------------------------------------------------
# Would the module load?


def _fix(distribution, branch, flavour, open_modules):
    ubuntu = str(distribution or "").lower().startswith("ubuntu")
    key = dkms_mok_certificate(distribution)
    enrol = ("enrol the DKMS key as a MOK: `mokutil --import %s` (it asks for a one-time password), reboot, and "
             "confirm the key in MokManager at the console with that password; %s" % (key, NO_PLAYBOOK))
    if ubuntu:
        package = signed_modules_metapackage(branch if branch else "<branch>", flavour or "<flavour>", open_modules)
        return ("install Canonical's signed prebuilt modules instead of DKMS: `%s` (signed for every kernel of the "
                "flavour; needs no MOK); or %s" % (package, enrol))
    return enrol + "; or turn Secure Boot off in the firmware"


def load_verdict(sb_state, module_kind, mok_enrolled=None, distribution=None, branch=None, flavour=None,
                 open_modules=False):
    """Would the nvidia module load under this host's Secure Boot -> {loads: True|False|None, reason, fix,
    console_required}.

    sb_state: parse_sb_state()'s dict, or True/False/None (Secure Boot enforcing). module_kind: 'signed-
    prebuilt' | 'dkms' | None (module_source()'s kind). mok_enrolled: parse_test_key()'s enrolled for the DKMS key.
    distribution/branch/flavour/open_modules name the fix (Ubuntu's signed linux-modules-nvidia-<branch>-
    server[-open]-<flavour>)."""
    if isinstance(sb_state, dict):
        enforcing = sb_state.get("enforcing")
        shim_off = sb_state.get("shim_validation_disabled")
    else:
        enforcing, shim_off = sb_state, False
    out = {"loads": None, "reason": None, "fix": None, "console_required": False}
    if enforcing is None:
        out["reason"] = "the Secure Boot state is unknown (`mokutil --sb-state`, or the SecureBoot EFI variable)"
        return out
    if not enforcing:
        out.update(loads=True, reason="Secure Boot is enabled but shim's validation is disabled: the kernel does "
                   "not enforce module signatures" if shim_off else "Secure Boot is off: the kernel loads "
                   "unsigned modules")
        return out
    if module_kind == SIGNED_PREBUILT:
        out.update(loads=True, reason="Secure Boot is on and the module is Canonical's signed prebuilt one, "
                   "signed with a key the Ubuntu kernel trusts")
        return out
    if module_kind == DKMS:
        if mok_enrolled is True:
            out.update(loads=True, reason="Secure Boot is on and the key DKMS signs with is an enrolled MOK")
            return out
        fix = _fix(distribution, branch, flavour, open_modules)
        if mok_enrolled is False:
            out.update(loads=False, reason="Secure Boot is on and the module is DKMS-built, but the key DKMS "
                       "signs with is not an enrolled MOK: the kernel rejects it (\"Key was rejected by service\")",
                       fix=fix, console_required=not str(distribution or "").lower().startswith("ubuntu"))
            return out
        out.update(reason="Secure Boot is on and the module is DKMS-built; whether its key is enrolled is unknown: "
                   "`mokutil --test-key %s`" % dkms_mok_certificate(distribution), fix=fix)
        return out
    out["reason"] = ("Secure Boot is on and which package provides the module is unknown (`modinfo nvidia`: "
                     "/updates/dkms/ is a DKMS build)")
    return out


# ---------------------------------------------------------------------------------------------
# The host: what a reboot would boot, and what the facts module / stack check report.

# modules.dep: "updates/dkms/nvidia-current.ko.xz: ..." (Debian), "kernel/nvidia-580srv/nvidia.ko: ..." (Ubuntu's
# signed prebuilt), "kernel/drivers/video/nvidia.ko.zst: ..." (a distribution kernel's own).
# depmod names a module only where its file is, as a line's own module or as another's dependency.
_DEP_NVIDIA = re.compile(r"(?:^|\s)(?P<path>(?:\S*/)?(?:nvidia|nvidia-current)\.ko(?:\.(?:xz|zst|gz))?)(?::|\s|$)")
_VMLINUZ = re.compile(r"^vmlinuz-(?P<kver>" + _KVER + r")$")


def dep_module_path(dep_text):
    """The nvidia module's path in a kernel's modules.dep (relative to /lib/modules/<kver>), or None."""
    for line in _lines(dep_text):
        match = _DEP_NVIDIA.search(line)
        if match:
            return match.group("path")
    return None


def boot_kernels(boot_names, running_kver=None):
    """The kernels in /boot (vmlinuz-<kver>: what the boot loader can start) and the running one, in version
    order."""
    found = {m.group("kver") for m in (_VMLINUZ.match(str(n)) for n in boot_names or ()) if m}
    if running_kver:
        found.add(running_kver)
    return sorted(found, key=lambda k: (kernel_key(k), k))


def next_boot_kernel(installed):
    """The kernel a reboot starts: the newest installed one (GRUB's default entry on Debian and Ubuntu sorts
    the kernels by version, newest first)."""
    kernels = sorted(installed or (), key=lambda k: (kernel_key(k), k))
    return kernels[-1] if kernels else None


def os_release_id(text):
    """ID= of /etc/os-release ('ubuntu', 'debian'), or None."""
    for line in _lines(text):
        if line.startswith("ID="):
            return line[3:].strip().strip('"').strip("'") or None
    return None


def capture(io, distribution=None):
    """Read-only: what boot_facts() needs, through the modules' HostIO (run/which/read/listdir/exists, and
    read_bytes where it has one, for the EFI variables)."""
    caps = {"running": (io.read("/proc/sys/kernel/osrelease") or "").strip() or None,
            "distribution": distribution or os_release_id(io.read("/etc/os-release"))}
    mokutil = io.which("mokutil")
    if mokutil:
        _rc, out, err = io.run([mokutil, "--sb-state"])
        caps["sb_state"] = (out or "") + (err or "")
        cert = dkms_mok_certificate(caps["distribution"])
        if io.exists(cert):
            _rc, out, err = io.run([mokutil, "--test-key", cert])
            caps["test_key"] = (out or "") + (err or "")
    read_bytes = getattr(io, "read_bytes", None)
    if read_bytes is not None:
        caps["efivar"] = read_bytes(SECUREBOOT_EFIVAR)
        caps["setup_mode"] = read_bytes(SETUPMODE_EFIVAR)
    caps["lockdown"] = io.read(LOCKDOWN_FILE)
    modinfo = io.which("modinfo")
    if modinfo:
        rc, out, _err = io.run([modinfo, "nvidia"])
        caps["modinfo"] = out if rc == 0 else None
    dpkg_query = io.which("dpkg-query")
    if dpkg_query:
        rc, out, _err = io.run(dpkg_query_argv(dpkg_query))
        caps["packages"] = out if rc == 0 else None
    dkms = io.which("dkms")
    if dkms:
        rc, out, _err = io.run([dkms, "status"])
        caps["dkms_status"] = out if rc == 0 else None
    caps["boot"] = io.listdir("/boot") or []
    caps["modules_dep"] = dict((kver, io.read("/lib/modules/%s/modules.dep" % kver))
                               for kver in boot_kernels(caps["boot"], caps["running"]))
    return caps


def effective_state(sb_state=None, efivar=None, setup_mode=None, lockdown=None):
    """(Secure Boot state, lockdown mode) as the kernel enforces them: `mokutil --sb-state` where it said
    something, else the SecureBoot EFI variable's bytes; a kernel in lockdown (/sys/kernel/security/lockdown)
    loads only signed modules, Secure Boot or not, so it counts as enforcing."""
    parsed = parse_sb_state(sb_state) if sb_state is not None else None
    if parsed is not None and parsed["line"]:
        state = dict(parsed, source="mokutil --sb-state")
    else:
        enforcing = parse_efivar_secureboot(efivar, setup_mode)
        state = {"enabled": enforcing, "enforcing": enforcing, "shim_validation_disabled": False,
                 "setup_mode": False, "efi": None if efivar is None and enforcing is None else True, "line": None,
                 "source": "SecureBoot EFI variable" if enforcing is not None else None}
    mode = parse_lockdown(lockdown)
    if mode in ("integrity", "confidentiality") and not state.get("enforcing"):
        state = dict(state, enforcing=True)
    return state, mode


def boot_facts(caps, branch=None):
    """captures -> {secure_boot, lockdown, module, mok, loads, reason, fix, console_required, kernels}.

    kernels: {running, installed, with_module, next_boot, next_boot_has_module, stranded: [{kver, newer,
    fix}]}; next_boot is the kernel a reboot starts, stranded the installed kernels without an nvidia module
    (modules.dep, a DKMS build, a signed package), the running one included when its module is gone."""
    state, lockdown = effective_state(caps.get("sb_state"), caps.get("efivar"), caps.get("setup_mode"),
                                      caps.get("lockdown"))
    running = caps.get("running")
    deps = caps.get("modules_dep") or {}
    paths = dict((k, dep_module_path(t)) for k, t in deps.items())
    running_path = paths.get(running)
    source = module_source(packages=caps.get("packages"), modinfo=caps.get("modinfo"), kver=running,
                           module_file="/lib/modules/%s/%s" % (running, running_path) if running_path else None)
    test_key = parse_test_key(caps["test_key"]) if caps.get("test_key") else None
    signed = signed_package(source.get("package")) or {}
    if not signed and source["kind"] == SIGNED_PREBUILT:
        # The running kernel's package, else the flavour's metapackage, names the branch and variant the other
        # kernels need.
        names = [p for p in installed_packages(caps.get("packages")) if p.startswith("linux-modules-nvidia-")]
        own = sorted(p for p in names if (signed_package(p) or {}).get("kver") == running)
        metas = sorted(p for p in names if (signed_package(p) or {}).get("flavour"))
        signed = signed_package((own or metas or [None])[-1]) or {}
    branch = signed.get("branch") or branch
    verdict = load_verdict(state, source["kind"], test_key["enrolled"] if test_key else None,
                           caps.get("distribution"), branch, None, signed.get("open", False))
    installed = boot_kernels(caps.get("boot"), running)
    stranded = stranded_kernels(installed, running, dkms_status=caps.get("dkms_status"),
                                packages=caps.get("packages"), module_kind=source["kind"], branch=branch,
                                open_modules=signed.get("open", False), server=signed.get("server", True),
                                module_kernels=[k for k in installed if paths.get(k)])
    without = set(k["kver"] for k in stranded)
    with_module = [k for k in installed if paths.get(k) or (k != running and k not in without)]
    if running and deps.get(running) is not None and not running_path:
        stranded.insert(0, {"kver": running, "newer": False, "fix": running_kernel_fix(
            running, source["kind"], branch, signed.get("open", False), signed.get("server", True))})
    dkms = load_verdict(state, DKMS, test_key["enrolled"] if test_key else None, caps.get("distribution"), branch,
                        None, signed.get("open", False))
    next_boot = next_boot_kernel(installed)
    if next_boot is None:
        has_module = None
    elif next_boot in with_module:
        has_module = True
    else:
        # The running kernel's modules.dep unread (no /lib/modules/<kver> here) tells nothing.
        has_module = None if next_boot == running and deps.get(running) is None else False
    return {"secure_boot": state, "lockdown": lockdown, "module": source, "mok": test_key,
            "loads": verdict["loads"], "reason": verdict["reason"], "fix": verdict["fix"],
            "console_required": verdict["console_required"], "distribution": caps.get("distribution"),
            "dkms_refusal": dkms_refusal(state, dkms),
            "kernels": {"running": running, "installed": installed, "with_module": with_module,
                        "next_boot": next_boot, "next_boot_has_module": has_module, "stranded": stranded}}


def running_kernel_fix(running, module_kind, branch=None, open_modules=False, server=True):
    """How the running kernel, whose modules.dep lists no nvidia module, gets one back: built or installed for
    that kernel, then loaded; no reboot (the same kernel would come up without it again)."""
    if module_kind == SIGNED_PREBUILT:
        get = "install %s" % (signed_modules_metapackage(branch, running, open_modules, server) if branch else
                              "linux-modules-nvidia-<branch>-server-%s" % running)
    else:
        get = ("build it: `dkms autoinstall -k %s` (needs linux-headers-%s), or reinstall the driver's DKMS "
               "package (`apt-get install --reinstall` of it), which builds for the running kernel" % (running, running))
    return ("the running kernel %s has no nvidia module (modules.dep lists none): %s, then `modprobe nvidia`; "
            "`dkms status` says whether a build failed" % (running, get))


def dkms_refusal(state, dkms_verdict):
    """Why a DKMS-built module must not be installed here, or None: Secure Boot enforces signatures and the key
    DKMS signs with is not known to be an enrolled MOK (the kernel would reject the module at load, and only
    someone at the console can enrol a key)."""
    if not (state or {}).get("enforcing") or dkms_verdict.get("loads") is True:
        return None
    return "%s. Fix: %s" % (dkms_verdict.get("reason"), dkms_verdict.get("fix") or
                            "enrol the DKMS key as a MOK at the console, or turn Secure Boot off")


def next_boot_problem(facts):
    """One sentence when the kernel a reboot starts would come up without the nvidia module (its fix
    included), else None."""
    kernels = (facts or {}).get("kernels") or {}
    target = kernels.get("next_boot")
    if not target or kernels.get("next_boot_has_module") is not False:
        return None
    hit = next((k for k in kernels.get("stranded") or [] if k["kver"] == target), None)
    fix = hit["fix"] if hit else "install the nvidia module for it"
    return ("the next boot starts kernel %s%s, which has no nvidia module: %s"
            % (target, "" if target == kernels.get("running") else " (newer than the running %s)"
               % kernels.get("running"), fix))
