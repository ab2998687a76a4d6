# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The NVIDIA kernel modules: which are loaded (`/proc/modules`, `lsmod`), the order they unload in, who holds the
device nodes (`fuser -v /dev/nvidia*`), and what `modprobe -r` said when one would not go.

Pure functions, stdlib only (shipped to hosts as module_utils); tests/fixtures/kernel_modules/ has the real texts.

The order: every module that depends on `nvidia` first, `nvidia` last, as NVIDIA's own driver container and
k8s-driver-manager unload them (nvidia_modeset, nvidia_uvm, nvidia_peermem, nvidia_fs, nvidia_vgpu_vfio, gdrdrv,
then nvidia), with nvidia_drm before nvidia_modeset (it depends on it; the driver container builds without it).
A module's refcount counts the modules that depend on it and every open file of its device nodes; only the
first have names in `Used by`, so the holders are named from `fuser`.
"""
import re

# Unload order (dependents first); load order is the reverse of the part that was loaded.
NVIDIA_MODULES = ("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia_peermem", "nvidia_fs", "nvidia_vgpu_vfio",
                  "gdrdrv", "nvidia")
# /proc/modules: name size refcount holders(,-separated and ending in a comma, or -) state address [taint]
_PROC = re.compile(r"^\s*(\S+)\s+(\d+)\s+(-?\d+)\s+(\S+)\s+(Live|Loading|Unloading)\s+(0x[0-9a-fA-F]+)(?:\s+\((\w+)\))?\s*$")
# lsmod: name size refcount [holders]
_LSMOD = re.compile(r"^\s*([A-Za-z0-9_]+)\s+(\d+)\s+(-?\d+)(?:\s+([A-Za-z0-9_,\[\]]+))?\s*$")
_IN_USE = re.compile(r"(?:modprobe: FATAL: Module (\S+) is in use\.|rmmod: ERROR: Module (\S+) is in use(?: by: (.+))?)")
# fuser -v: "/dev/nvidia0:        aiuser1   1116621 F.... vllm" and continuation lines without the file
_FUSER_FILE = re.compile(r"^(/dev/\S+?):\s*(.*)$")
_FUSER_ROW = re.compile(r"^\s*(\S+)\s+(\d+|kernel)\s+([Fcerfm.]{5}|mount)\s+(.+?)\s*$")


def normal(name):
    """modprobe's spelling of a module name: `nvidia-uvm` and `nvidia_uvm` are one module."""
    return (name or "").strip().replace("-", "_")


def parse_proc_modules(text):
    """/proc/modules -> {name: {size, refcount, holders, state, taint}} (lines of another shape are read past:
    a log around them)."""
    out = {}
    for line in (text or "").splitlines():
        found = _PROC.match(line)
        if not found:
            continue
        holders = [h for h in found.group(4).split(",") if h and h != "-"]
        out[found.group(1)] = {"size": int(found.group(2)), "refcount": int(found.group(3)), "holders": holders,
                               "state": found.group(5), "taint": found.group(7)}
    return out


def parse_lsmod(text):
    """`lsmod` (or a pasted `lsmod | grep nvidia`) -> {name: {size, refcount, holders}}; its header, prompts and
    other lines are read past."""
    out = {}
    for line in (text or "").splitlines():
        if line.strip().startswith("Module ") or "$" in line or "#" in line:
            continue
        found = _LSMOD.match(line)
        if found:
            out[found.group(1)] = {"size": int(found.group(2)), "refcount": int(found.group(3)),
                                   "holders": [h for h in (found.group(4) or "").split(",") if h]}
    return out


def loaded_nvidia(modules):
    """The NVIDIA modules among the loaded ones, in unload order."""
    return [name for name in NVIDIA_MODULES if name in (modules or {})]


def open_references(modules):
    """{module: references that are not another module's}: open device files (persistenced, the fabric manager,
    CUDA processes, DCGM) or, for a module no other loaded module depends on, every reference. A module whose
    count is 0 here can go once its dependents have gone."""
    modules = modules or {}
    out = {}
    for name in loaded_nvidia(modules):
        info = modules[name]
        dependents = [h for h in info.get("holders") or [] if h in modules]
        out[name] = max(0, int(info.get("refcount") or 0) - len(dependents))
    return out


def unloading(modules):
    """Modules stuck in the kernel's Unloading state (an unload that never finished needs a restart)."""
    return [name for name in loaded_nvidia(modules) if (modules[name].get("state") or "Live") == "Unloading"]


def parse_fuser(text):
    """`fuser -v /dev/nvidia*` (its table, which fuser writes to stderr) -> [{file, user, pid, access, command}],
    one per file and process; the kernel's own rows (`kernel mount`) are left out."""
    rows, current = [], None
    for line in (text or "").splitlines():
        if not line.strip() or line.strip().startswith("USER "):
            continue
        found = _FUSER_FILE.match(line.strip())
        if found:
            current, line = found.group(1), found.group(2)
            if not line.strip():
                continue
        found = _FUSER_ROW.match(line)
        if not found or current is None or found.group(2) == "kernel":
            continue
        rows.append({"file": current, "user": found.group(1), "pid": int(found.group(2)), "access": found.group(3),
                     "command": found.group(4)})
    return rows


def holders_by_pid(rows):
    """{pid: {command, files}} of parse_fuser's rows."""
    out = {}
    for row in rows or []:
        entry = out.setdefault(row["pid"], {"pid": row["pid"], "command": row["command"], "user": row["user"],
                                            "files": []})
        entry["files"].append(row["file"])
    return out


def in_use(text):
    """The modules `modprobe -r` / `rmmod` said are in use: [{module, holders}] (holders: the other modules rmmod
    names, [] where only open files hold it)."""
    out = []
    for line in (text or "").splitlines():
        found = _IN_USE.search(line)
        if found:
            name = found.group(1) or found.group(2)
            out.append({"module": normal(name), "holders": (found.group(3) or "").split()})
    return out
