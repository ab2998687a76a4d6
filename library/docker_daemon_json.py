#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Merge settings into /etc/docker/daemon.json without losing the operator's keys."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: docker_daemon_json
short_description: Merge settings into Docker's daemon.json, never clobbering it
description:
  - Merges O(options) into the JSON object in O(path). Keys already in the file that O(options) does
    not name are kept; nested objects merge key by key; a value of V(null) removes a key.
  - A file that is not a JSON object fails the task naming the file and the parse error, and the file
    is left byte-identical.
  - Writes atomically (temp file + rename) with a timestamped backup, in the format nvidia-ctk uses
    (sorted keys, 4-space indent), so that the NVIDIA Container Toolkit's own rewrites read as no change.
  - Validates the result with C(dockerd --validate --config-file) before writing, where the installed
    engine has that flag (Docker 23+).
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
extends_documentation_fragment:
  - gpuhost_backup
options:
  path:
    description: Path of daemon.json.
    type: path
    default: /etc/docker/daemon.json
  options:
    description: Settings to merge into the file.
    type: dict
    default: {}
  training:
    description:
      - A host that runs training containers. Docker's C(default-ulimits) get C(memlock) unlimited (pinned memory
        for NCCL and data loaders; the default is 64 KB) and C(stack) 64 MiB, as seed 000's
        C(--ulimit memlock=-1 --ulimit stack=67108864), each only where the file sets none (the operator's
        limit is kept).
    type: bool
    default: false
  backup:
    description: Keep a timestamped copy of the file before changing it.
    type: bool
    default: true
  validate:
    description:
      - V(auto) validates with C(dockerd --validate) when the engine is installed and supports it;
        V(always) fails when it cannot validate; V(never) skips validation.
    type: str
    choices: [auto, always, never]
    default: auto
  dockerd_path:
    description: dockerd binary used for validation; looked up on PATH when not given.
    type: path
notes:
  - Supports check mode and diff mode.
"""

EXAMPLES = r"""
- name: Docker daemon settings (before the engine is installed, so its first start uses them)
  docker_daemon_json:
    options:
      log-driver: json-file
      log-opts: {max-size: 100m, max-file: "3"}
      features: {cdi: true}
  notify: Restart docker
"""

RETURN = r"""
config:
  description: The settings in the file after the merge.
  returned: success
  type: dict
changed_keys:
  description: Top-level keys added, changed or removed by this run.
  returned: success
  type: list
  elements: str
validated:
  description: Whether dockerd validated the new file.
  returned: success
  type: bool
backup_file:
  description: Path of the backup made before the change.
  returned: changed and a previous file existed
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.containers.daemon_json import (
    BOM, TRAINING_ULIMITS, DaemonJsonError, changed_keys, engine_accepts_bom, fill_defaults, merge, parse, render)
from ansible.module_utils.runs.atomic_file import read_text, stage_copy, write_atomic
from ansible.module_utils.host.runner import ModuleHostIO


def validate_with_dockerd(module, io, dockerd, text):
    """(ok, supported, message) of `dockerd --validate --config-file` over `text` (staged outside /etc/docker)."""
    tmp = stage_copy(text)
    try:
        rc, out, err = io.run([dockerd, "--validate", "--config-file", tmp])
    finally:
        os.unlink(tmp)
    output = (out + err).strip()
    if rc != 0 and "unknown flag" in output:
        return False, False, output
    return rc == 0, True, output.replace(tmp, module.params["path"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/etc/docker/daemon.json"),
            options=dict(type="dict", default={}),
            training=dict(type="bool", default=False),
            backup=dict(type="bool", default=True),
            backup_dir=dict(type="path", default="/var/backups/gpuhost"),
            validate=dict(type="str", default="auto", choices=["auto", "always", "never"]),
            dockerd_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    io = ModuleHostIO(module)
    path = module.params["path"]
    before_text = read_text(path)
    accepts_bom = True
    if before_text and before_text.startswith(BOM):
        # Read it as the installed engine does: docker >= 23 skips a BOM, older ones refuse the file.
        dockerd = module.params["dockerd_path"] or module.get_bin_path("dockerd")
        if dockerd:
            _rc, out, err = io.run([dockerd, "--version"])
            accepts_bom = engine_accepts_bom(out + err) is not False
    try:
        before = parse(before_text, path, accepts_bom=accepts_bom)
    except DaemonJsonError as exc:
        module.fail_json(msg="docker: %s. Fix or remove the file by hand; it was left untouched." % exc)

    after = merge(before, module.params["options"])
    if module.params["training"]:
        after = fill_defaults(after, TRAINING_ULIMITS)
    keys = changed_keys(before, after)
    after_text = render(after)
    result = dict(changed=bool(keys), config=after, changed_keys=keys, validated=False)
    if module._diff:
        result["diff"] = dict(before=before_text or "", after=after_text if keys else (before_text or ""),
                              before_header=path, after_header=path)
    if not keys or module.check_mode:
        module.exit_json(**result)

    if module.params["validate"] != "never":
        dockerd = module.params["dockerd_path"] or module.get_bin_path("dockerd")
        if dockerd:
            ok, supported, message = validate_with_dockerd(module, io, dockerd, after_text)
            if supported and not ok:
                module.fail_json(msg="docker: dockerd rejects the merged %s (file left untouched): %s" % (path, message),
                                 **result)
            result["validated"] = supported
        if module.params["validate"] == "always" and not result["validated"]:
            module.fail_json(msg="docker: cannot validate %s: no dockerd with --validate found" % path, **result)

    result["backup_file"] = write_atomic(module, path, after_text, backup=module.params["backup"],
                                         backup_dir=module.params["backup_dir"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
