# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parsers for host-side GPU evidence: /proc/driver/nvidia/version, `lspci -nn`, sysfs PCI
attributes and `ubuntu-drivers devices`.

Pure stdlib, no Ansible imports. Every public parser returns plain data or raises
HostParseError; nothing else escapes for any input.
"""
import re

from ansible.module_utils.gpu.gpu_arch import lookup as arch_lookup


class HostParseError(ValueError):
    """The input is not the host output this parser reads."""


NVIDIA_VENDOR_ID = "10de"
# PCI class 03xx is "display controller": 0300 VGA (workstation cards with outputs), 0302 3D
# (datacenter cards), 0380 other display. The audio function (0403) and NVSwitch bridges
# (0680) of the same vendor are not GPUs.
GPU_CLASS_CODES = ("0300", "0302", "0380")


def _text(data):
    if isinstance(data, (bytes, bytearray)):
        data = bytes(data).decode("utf-8", "replace")
    if not isinstance(data, str):
        raise HostParseError("input is not text")
    return data.replace("\r\n", "\n").replace("\r", "\n")


# ---------------------------------------------------------------------------------------------
# /proc/driver/nvidia/version
#   NVRM version: NVIDIA UNIX x86_64 Kernel Module  590.48.01  Mon Dec ...        (proprietary)
#   NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build ...  (open)
#   NVRM version: NVIDIA UNIX Kernel Module for aarch64  34.1.1  Release Build ...  (Tegra)
#   GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)

_NVRM_OPEN = re.compile(r"NVRM version:\s*NVIDIA UNIX Open Kernel Module for (\S+)\s+(\d+(?:\.\d+)+)")
_NVRM_PROPRIETARY = re.compile(r"NVRM version:\s*NVIDIA UNIX (\S+) Kernel Module\s+(\d+(?:\.\d+)+)")
_NVRM_FOR_ARCH = re.compile(r"NVRM version:\s*NVIDIA UNIX Kernel Module for (\S+)\s+(\d+(?:\.\d+)+)")
_GCC = re.compile(r"^GCC version:\s*(.*?)\s*$", re.M)


def parse_proc_version(data):
    """/proc/driver/nvidia/version -> {version, flavor ('open'|'proprietary'), arch, nvrm_line, gcc}."""
    text = _text(data)
    for regex, flavor in ((_NVRM_OPEN, "open"), (_NVRM_FOR_ARCH, "proprietary"),
                          (_NVRM_PROPRIETARY, "proprietary")):
        match = regex.search(text)
        if match:
            line = next((l.strip() for l in text.split("\n") if l.strip().startswith("NVRM version:")), "")
            gcc = _GCC.search(text)
            return {"version": match.group(2), "flavor": flavor, "arch": match.group(1),
                    "nvrm_line": line, "gcc": gcc.group(1) if gcc else None}
    raise HostParseError("no 'NVRM version: NVIDIA UNIX ... Kernel Module <version>' line")


_DRIVER_BRANCH = re.compile(r"^\s*(?:\d*:)?(\d{3,4})\.")


def driver_branch(version):
    """The branch of an NVIDIA driver version, however a tool prints it (the one parser of it): nvidia-smi and
    /proc/driver/nvidia/version '580.95.05' -> 580; dpkg and apt, with an epoch and a Debian revision,
    '1:580.95.05-0ubuntu0.24.04.1' and '580.105.08-1' -> 580; a four-digit branch '1000.12' -> 1000. None
    when it is not a driver version (Tegra's '34.1.1', '0.9.7.6ubuntu3.2', None)."""
    if not isinstance(version, str):
        return None
    match = _DRIVER_BRANCH.match(version)
    return int(match.group(1)) if match else None


# ---------------------------------------------------------------------------------------------
# lspci -nn (optionally -D, -k, -v)
#   0000:38:00.0 3D controller [0302]: NVIDIA Corporation GB202GL [RTX PRO 6000 Blackwell Server Edition] [10de:2bb5] (rev a1)
#   01:00.0 VGA compatible controller [0300]: NVIDIA Corporation Device [10de:2bb1] (rev a1)

_LSPCI = re.compile(
    r"^(?P<addr>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+"
    r"(?P<cls>.*?)\s*\[(?P<code>[0-9a-fA-F]{4})\]:\s*(?P<desc>.*?)\s*"
    r"\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\](?P<rest>.*)$")
# `lspci -n` (numeric only): "00:04.0 0302: 10de:20b0 (rev a1)"
_LSPCI_NUMERIC = re.compile(
    r"^(?P<addr>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<code>[0-9a-fA-F]{4}):\s+"
    r"(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})(?P<rest>.*)$")
_REV = re.compile(r"\(rev ([0-9a-fA-F]+)\)")
_KERNEL_LINE = re.compile(r"^\s+Kernel (driver in use|modules):\s*(.*?)\s*$")


def canonical_pci_address(address):
    """'38:00.0' / '0000:38:00.0' / '00000000:38:00.0' -> '0000:38:00.0'."""
    match = re.match(r"^\s*(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])\s*$",
                     address or "")
    if not match:
        return None
    return "%04x:%s:%s.%s" % (int(match.group(1) or "0", 16), match.group(2).lower(),
                              match.group(3).lower(), match.group(4))


def _pci_device(address, class_name, class_code, vendor_id, device_id, description, revision):
    vendor_id, device_id, class_code = vendor_id.lower(), device_id.lower(), class_code.lower()
    bracket = re.findall(r"\[([^\]]+)\]", description or "")
    product = bracket[-1] if bracket else None
    device = {
        "pci_address": canonical_pci_address(address), "class_name": class_name,
        "class_code": class_code, "vendor_id": vendor_id, "device_id": device_id,
        "pci_id": "%s:%s" % (vendor_id, device_id), "description": description,
        "product": product, "revision": revision, "kernel_driver": None, "kernel_modules": None,
        "is_nvidia_gpu": vendor_id == NVIDIA_VENDOR_ID and class_code in GPU_CLASS_CODES,
        "architecture": None, "compute_capability": None, "open_kernel_modules_required": None,
        "min_driver_branch": None,
    }
    if device["is_nvidia_gpu"]:
        arch = arch_lookup(device_id, product)
        if arch:
            for key in ("architecture", "compute_capability", "open_kernel_modules_required",
                        "min_driver_branch"):
                device[key] = arch[key]
    return device


def parse_lspci(data):
    """`lspci -nn` or `lspci -n` (with or without -D/-k) -> list of PCI device dicts (every device)."""
    devices = []
    for line in _text(data).split("\n"):
        match = _LSPCI.match(line)
        numeric = None if match else _LSPCI_NUMERIC.match(line)
        if match or numeric:
            found = match or numeric
            rev = _REV.search(found.group("rest"))
            devices.append(_pci_device(found.group("addr"), match.group("cls").strip() if match else None,
                                       found.group("code"), found.group("vendor"), found.group("device"),
                                       match.group("desc").strip() if match else None,
                                       rev.group(1) if rev else None))
            continue
        kernel = _KERNEL_LINE.match(line)
        if kernel and devices:
            key = "kernel_driver" if kernel.group(1) == "driver in use" else "kernel_modules"
            devices[-1][key] = kernel.group(2)
    if not devices and _text(data).strip():
        raise HostParseError("no 'BB:DD.F class [cccc]: ... [vvvv:dddd]' line (was -nn given?)")
    return devices


def nvidia_gpus(devices):
    """Only the NVIDIA GPU functions (vendor 10de, class 0300/0302/0380)."""
    return [d for d in devices if d.get("is_nvidia_gpu")]


def pci_device_from_sysfs(address, vendor, device, pci_class):
    """A device dict from /sys/bus/pci/devices/<addr>/{vendor,device,class} contents
    ('0x10de', '0x2bb5', '0x030200'); None when the values are not PCI ids."""
    values = []
    for raw, width in ((vendor, 4), (device, 4), (pci_class, 6)):
        text = _text(raw).strip().lower()
        text = text[2:] if text.startswith("0x") else text
        if not re.match(r"^[0-9a-f]{%d}$" % width, text):
            return None
        values.append(text)
    return _pci_device(address, None, values[2][:4], values[0], values[1], None, None)


# ---------------------------------------------------------------------------------------------
# ubuntu-drivers devices
#   == /sys/devices/pci0000:00/0000:00:1e.0 ==
#   modalias : pci:v000010DEd00001EB8sv000010DEsd000012A2bc03sc02i00
#   vendor   : NVIDIA Corporation
#   model    : TU104GL [Tesla T4]
#   manual_install: True
#   driver   : nvidia-driver-580-server-open - distro non-free recommended
#   driver   : xserver-xorg-video-nouveau - distro free builtin

_UD_HEADER = re.compile(r"^==\s*(\S.*?)\s*==\s*$")
_UD_FIELD = re.compile(r"^([a-z_]+)\s*:\s*(.*?)\s*$")
_MODALIAS = re.compile(r"^pci:v0000([0-9A-Fa-f]{4})d0000([0-9A-Fa-f]{4})")
_DRIVER_PKG = re.compile(r"^(\S+)\s+-\s+(.*)$")


def package_traits(package):
    """'nvidia-driver-580-server-open' -> {'branch': 580, 'server': True, 'open': True}."""
    match = re.match(r"^nvidia-(?:driver-|headless-(?:no-dkms-)?)?(\d{3})(\S*)$", package or "")
    if not match:
        return {"branch": None, "server": False, "open": False}
    suffix = match.group(2)
    return {"branch": int(match.group(1)), "server": "-server" in suffix, "open": "-open" in suffix}


def _ud_driver(value):
    match = _DRIVER_PKG.match(value)
    package, flags = (match.group(1), match.group(2).split()) if match else (value.split()[0], [])
    entry = {"package": package, "source": flags[0] if flags else None,
             "free": "free" in flags, "recommended": "recommended" in flags,
             "builtin": "builtin" in flags}
    entry.update(package_traits(package))
    return entry


def _new_ud_device(path):
    return {"sysfs_path": path, "modalias": None, "vendor": None, "model": None,
            "vendor_id": None, "device_id": None, "manual_install": None, "drivers": [],
            "recommended": None}


def parse_ubuntu_drivers_devices(data):
    """`ubuntu-drivers devices` -> list of devices, each with its candidate driver packages.

    Noise such as 'ERROR:root:aplay command not found' is skipped; a block without the
    '== path ==' header (older releases) still counts as one device.
    """
    devices = []
    current = None
    for line in _text(data).split("\n"):
        stripped = line.strip()
        header = _UD_HEADER.match(stripped)
        if header:
            current = _new_ud_device(header.group(1))
            devices.append(current)
            continue
        field = _UD_FIELD.match(stripped)
        if not field or field.group(1) not in ("modalias", "vendor", "model", "driver", "manual_install"):
            continue
        key, value = field.group(1), field.group(2)
        if current is None:
            current = _new_ud_device(None)
            devices.append(current)
        if key == "driver":
            if value:
                entry = _ud_driver(value)
                current["drivers"].append(entry)
                if entry["recommended"]:
                    current["recommended"] = entry["package"]
        elif key == "modalias":
            current["modalias"] = value
            ids = _MODALIAS.match(value)
            if ids:
                current["vendor_id"], current["device_id"] = ids.group(1).lower(), ids.group(2).lower()
        elif key == "manual_install":
            current["manual_install"] = value.lower() == "true"
        else:
            current[key] = value
    if not devices and _text(data).strip():
        raise HostParseError("no '== <sysfs path> ==' block or 'driver : <package>' line")
    return devices
