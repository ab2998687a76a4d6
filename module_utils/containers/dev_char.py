# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""/dev/char links for the NVIDIA device nodes: pure logic, Python stdlib only.

Why: where systemd manages a container's cgroup (docker/containerd with the systemd cgroup driver), the
unit's device allow list names devices by their /dev/char/MAJOR:MINOR path. udev makes those links for the
devices it creates, but the NVIDIA nodes are made by nvidia-modprobe / the driver, not by udev, so they
have none; on the next `systemctl daemon-reload` systemd re-applies the list, drops the devices it cannot
resolve, and every running GPU container loses them: inside, `nvidia-smi` says "Failed to initialize NVML:
Unknown Error" until the container is recreated (NVIDIA/nvidia-container-toolkit#48, #1227).
NVIDIA's workaround: `nvidia-ctk system create-dev-char-symlinks --create-all` and a udev rule that runs it
whenever the driver binds (tests/fixtures/devchar/README.md).

gpuhost makes the same links for the nodes that exist (absolute targets, as nvidia-ctk makes them; a
relative link that resolves to the node, as udev makes them, is as good) and installs NVIDIA's rule for
the ones the driver creates later.
"""
import os
import re

DEV_CHAR = "/dev/char"
# The NVIDIA character devices under /dev: GPUs, control, UVM, modeset, and the MIG capability nodes.
_NODE = re.compile(r"^/dev/(nvidia(\d+|ctl|-uvm|-uvm-tools|-modeset)|nvidia-caps/nvidia-cap\d+)$")


def is_nvidia_node(path):
    return bool(_NODE.match(path or ""))


def link_path(major, minor, dev_char=DEV_CHAR):
    return "%s/%d:%d" % (dev_char.rstrip("/"), major, minor)


def wanted_links(nodes, dev_char=DEV_CHAR):
    """{path: (major, minor)} of character devices -> {link: node path} for the NVIDIA ones."""
    return dict((link_path(major, minor, dev_char), path) for path, (major, minor) in sorted(nodes.items())
                if is_nvidia_node(path))


def resolves_to(link, target, node):
    """Whether a link at `link` with content `target` names `node` (absolute, or relative to the link's
    directory as udev writes them: ../nvidia0)."""
    if target is None:
        return False
    full = target if target.startswith("/") else os.path.join(os.path.dirname(link), target)
    return os.path.normpath(full) == os.path.normpath(node)


def plan(wanted, existing):
    """What to do, given the wanted links and what is at each link path now ({link: readlink text, or
    None when nothing is there, or False when something other than a symlink is}).

    Returns {"create": [(link, node)], "replace": [(link, old target, node)], "conflict": [(link, node)],
    "ok": [link]}: a symlink to elsewhere is replaced (a stale link, e.g. a node renumbered); a file or
    device at the path is someone else's and left alone."""
    out = {"create": [], "replace": [], "conflict": [], "ok": []}
    for link, node in sorted(wanted.items()):
        current = existing.get(link)
        if current is None:
            out["create"].append((link, node))
        elif current is False:
            out["conflict"].append((link, node))
        elif resolves_to(link, current, node):
            out["ok"].append(link)
        else:
            out["replace"].append((link, current, node))
    return out


def missing(wanted, existing):
    """The wanted links that are absent or point elsewhere (what a reload would cost the containers)."""
    todo = plan(wanted, existing)
    return [link for link, _node in todo["create"]] + [link for link, _old, _node in todo["replace"]] + \
        [link for link, _node in todo["conflict"]]
