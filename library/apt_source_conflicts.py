#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Find the host's other apt sources of a repository that name it with another Signed-By (read-only)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: apt_source_conflicts
short_description: Refuse other apt sources of a repository with another Signed-By
description:
  - apt refuses every source, and every C(apt-get update), when one repository (URI and suite) is configured twice
    with different C(Signed-By) values ("Conflicting values set for option Signed-By regarding source ...").
    A host set up by hand with NVIDIA's instructions has such a source - cuda-keyring's
    C(/etc/apt/sources.list.d/cuda-<distro>-<arch>.list) names the CUDA repository with its own keyring.
  - Reads O(sources_list) and the C(.list) and C(.sources) files of O(sources_dir), except O(own_path), and
    fails, before the caller adds its own source, when an entry names O(uri) (a trailing slash aside) and
    O(suite) with a Signed-By other than O(signed_by); the message names the O(layer), the files and O(fix).
    Changes nothing.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  uri:
    description: The repository's URI.
    type: str
    required: true
  suite:
    description: The suite (C(/) for a flat repository).
    type: str
    default: /
  signed_by:
    description: The Signed-By the caller's own source gives it.
    type: str
    required: true
  own_path:
    description: The caller's own source file, not counted.
    type: path
  sources_dir:
    description: Directory of the host's source files.
    type: path
    default: /etc/apt/sources.list.d
  sources_list:
    description: The host's one-line sources file.
    type: path
    default: /etc/apt/sources.list
  layer:
    description: The layer that adds the source, named first in the failure.
    type: str
    required: true
  fix:
    description: What an operator does about the other source (how it got there, how it goes).
    type: str
    default: remove that file
  architecture:
    description:
      - The dpkg architecture apt puts for C($(ARCH)) in a URI (NVIDIA's toolkit repository is written with it, or
        with C(amd64) already put in). Default C(dpkg --print-architecture).
    type: str
notes:
  - Supports check mode (it never changes anything). A deb822 file apt cannot read either is skipped.
"""

EXAMPLES = r"""
- name: Refuse a second source of the CUDA repository with another key
  apt_source_conflicts:
    uri: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/
    signed_by: /etc/apt/keyrings/nvidia-cuda.asc
    own_path: /etc/apt/sources.list.d/nvidia-cuda.sources
    layer: nvidia_driver
    fix: apt purge cuda-keyring
"""

RETURN = r"""
architecture:
  description: The dpkg architecture used for C($(ARCH)); null where it could not be told.
  returned: always
  type: str
  sample: amd64
conflicts:
  description: The other entries of the repository with another Signed-By (null where they have none); the task
    fails when there is one.
  returned: always
  type: list
  elements: dict
  sample: [{path: /etc/apt/sources.list.d/cuda-debian12-x86_64.list, line: 1,
            signed_by: /usr/share/keyrings/cuda-archive-keyring.gpg}]
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.runs.atomic_file import read_text
from ansible.module_utils.driver.driver_sources import conflicting_sources
from ansible.module_utils.host.runner import ModuleHostIO


def read_sources(sources_dir, sources_list, own_path=None):
    """{path: text} of the host's source files (unreadable ones left out)."""
    paths = [sources_list]
    if os.path.isdir(sources_dir):
        paths += [os.path.join(sources_dir, name) for name in sorted(os.listdir(sources_dir))
                  if name.endswith((".list", ".sources"))]
    files = {}
    for path in paths:
        if own_path and os.path.abspath(path) == os.path.abspath(own_path):
            continue
        text = read_text(path)
        if text is not None:
            files[path] = text
    return files


def conflict_message(layer, uri, conflicts, fix):
    return ("%s: %s already names the repository %s with Signed-By %s; apt reads no source at all when one "
            "repository has two Signed-By values (\"Conflicting values set for option Signed-By\"), so gpuhost adds "
            "its own, with its checked key, only once that one is gone: %s. Nothing was changed."
            % (layer, ", ".join(sorted(set(c["path"] for c in conflicts))), uri,
               ", ".join(sorted(set(c["signed_by"] or "none" for c in conflicts))), fix))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            uri=dict(type="str", required=True),
            suite=dict(type="str", default="/"),
            signed_by=dict(type="str", required=True),
            own_path=dict(type="path"),
            sources_dir=dict(type="path", default="/etc/apt/sources.list.d"),
            sources_list=dict(type="path", default="/etc/apt/sources.list"),
            layer=dict(type="str", required=True),
            fix=dict(type="str", default="remove that file"),
            architecture=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    arch = p["architecture"]
    dpkg = None if arch else module.get_bin_path("dpkg")
    if dpkg:
        rc, out, _err = ModuleHostIO(module).run([dpkg, "--print-architecture"])
        arch = out.strip() if rc == 0 else None
    files = read_sources(p["sources_dir"], p["sources_list"], p["own_path"])
    conflicts = conflicting_sources(files, p["uri"], p["suite"], p["signed_by"], arch)
    if conflicts:
        module.fail_json(msg=conflict_message(p["layer"], p["uri"], conflicts, p["fix"]), changed=False,
                         architecture=arch, conflicts=conflicts)
    module.exit_json(changed=False, architecture=arch, conflicts=conflicts)


if __name__ == "__main__":
    main()
