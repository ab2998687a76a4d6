#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_dev_char_links
short_description: Create the /dev/char links of the NVIDIA device nodes, so systemd reloads keep containers' GPUs
description:
  - Links C(/dev/char/MAJOR:MINOR) to each NVIDIA character device that exists (C(/dev/nvidiaN), C(/dev/nvidiactl),
    C(/dev/nvidia-uvm), C(/dev/nvidia-uvm-tools), C(/dev/nvidia-modeset), C(/dev/nvidia-caps/nvidia-capN)), as
    C(nvidia-ctk system create-dev-char-symlinks) does.
  - Without them, where systemd manages the containers' cgroups, a C(systemctl daemon-reload) takes the GPU
    devices away from every running GPU container ("Failed to initialize NVML - Unknown Error" inside) until it
    is recreated (NVIDIA/nvidia-container-toolkit#48).
  - A link that already resolves to its node (absolute, or relative as udev writes them) is kept; a symlink to
    anything else is replaced; a file or device at a link's path is reported and left alone.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  path:
    description: The directory of the links.
    type: path
    default: /dev/char
  dev:
    description: Where the NVIDIA device nodes are.
    type: path
    default: /dev
notes:
  - Supports check mode and diff mode.
  - The links live in C(/dev), a tmpfs; NVIDIA's udev rule (role nvidia_container_toolkit) makes them again at
    every boot and driver load.
"""

EXAMPLES = r"""
- name: Create the /dev/char links of the NVIDIA device nodes
  nvidia_dev_char_links:
"""

RETURN = r"""
links:
  description: Every link the NVIDIA nodes need, link path to node path.
  returned: always
  type: dict
  sample: {"/dev/char/195:0": "/dev/nvidia0", "/dev/char/195:255": "/dev/nvidiactl"}
created:
  description: Links created or replaced (would be, in check mode).
  returned: always
  type: list
  elements: str
conflicts:
  description: Link paths held by something other than a symlink (left alone).
  returned: always
  type: list
  elements: str
"""

import os
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.containers.dev_char import is_nvidia_node, plan, wanted_links


def char_nodes(dev):
    """{path: (major, minor)} of the NVIDIA character devices under dev (and dev/nvidia-caps)."""
    found = {}
    for directory in (dev, os.path.join(dev, "nvidia-caps")):
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            full = os.path.join(directory, name)
            shown = "/dev/" + os.path.relpath(full, dev)
            if not is_nvidia_node(shown):
                continue
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode):
                found[shown] = (os.major(st.st_rdev), os.minor(st.st_rdev))
    return found


def current(link):
    try:
        return os.readlink(link)
    except OSError:
        return False if os.path.lexists(link) else None


def main():
    module = AnsibleModule(argument_spec=dict(path=dict(type="path", default="/dev/char"),
                                              dev=dict(type="path", default="/dev")),
                           supports_check_mode=True)
    path, dev = module.params["path"], module.params["dev"]
    wanted = wanted_links(char_nodes(dev), path)
    # The links name the nodes by their /dev path, wherever dev is (a test passes another directory).
    wanted = dict((link, node if dev == "/dev" else os.path.join(dev, node[len("/dev/"):]))
                  for link, node in wanted.items())
    todo = plan(wanted, dict((link, current(link)) for link in wanted))
    created = [link for link, _node in todo["create"]] + [link for link, _old, _node in todo["replace"]]
    result = {"changed": bool(created), "links": wanted, "created": created,
              "conflicts": [link for link, _node in todo["conflict"]],
              "diff": {"before": "".join("%s -> %s\n" % (l, t) for l, t, _n in todo["replace"]),
                       "after": "".join("%s -> %s\n" % (l, wanted[l]) for l in created)}}
    if todo["conflict"]:
        module.warn("left alone (not a symlink): %s" % ", ".join(result["conflicts"]))
    if created and not module.check_mode:
        try:
            if not os.path.isdir(path):
                os.makedirs(path, 0o755)
            for link, _old, _node in todo["replace"]:
                os.unlink(link)
            for link in created:
                os.symlink(wanted[link], link)
        except OSError as exc:
            module.fail_json(msg="container toolkit layer: could not create %s: %s - create the links with "
                                 "`nvidia-ctk system create-dev-char-symlinks --create-all`" % (path, exc), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
