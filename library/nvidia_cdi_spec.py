#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Keep the NVIDIA CDI spec fresh for the loaded driver."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_cdi_spec
short_description: Generate the NVIDIA CDI spec when it is missing or stale
description:
  - Generates a fresh spec with C(nvidia-ctk cdi generate) into a temporary file next to O(output) and
    replaces O(output) (atomically, with a backup) only when the two differ, so C(changed) is truthful.
  - A spec is stale when the driver version it embeds (versioned C(libcuda.so) mounts,
    C(--host-driver-version)) differs from the loaded driver, or when a fresh generation differs.
  - A spec at O(output) that is not a CDI spec fails the task and is left as it is, unless
    O(replace_malformed) is set.
  - Reports specs of the same kind in a later CDI directory (C(/var/run/cdi)) that shadow O(output).
version_added: "1.0.0"
author: gpuhost
extends_documentation_fragment:
  - gpuhost_backup
options:
  output:
    description: The managed spec.
    type: path
    default: /etc/cdi/nvidia.yaml
  loaded_driver_version:
    description: Version of the loaded kernel module; read from O(proc_version_path) when not given.
    type: str
  proc_version_path:
    description: Where the loaded module's version is read.
    type: path
    default: /proc/driver/nvidia/version
  replace_malformed:
    description: Replace a file at O(output) that is not a CDI spec (a backup is kept).
    type: bool
    default: false
  backup:
    description: Back up the previous spec before replacing it.
    type: bool
    default: true
  nvidia_ctk_path:
    description: Path of nvidia-ctk; looked up on PATH when not given.
    type: path
notes:
  - Supports check mode (it generates into a temporary file and reports, changing nothing) and diff mode.
"""

EXAMPLES = r"""
- name: CDI spec fresh for the loaded driver
  nvidia_cdi_spec:
    output: /etc/cdi/nvidia.yaml
  register: cdi
"""

RETURN = r"""
devices:
  description: Devices of the spec, fully qualified (C(nvidia.com/gpu=0), ...), from C(nvidia-ctk cdi list).
  returned: success
  type: list
  elements: str
loaded_driver_version:
  description: Driver version the spec must match.
  returned: success
  type: str
spec_driver_versions:
  description: Driver versions the spec embedded before this run.
  returned: success
  type: list
  elements: str
stale_reasons:
  description: Why the previous spec was replaced (empty when it was fresh).
  returned: success
  type: list
  elements: str
shadowed_by:
  description: Specs in later CDI directories that override devices of O(output).
  returned: success
  type: list
  elements: str
"""

import glob
import os
import re
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.atomic_file import backup_copy, read_text
from ansible.module_utils.cdi_spec import CDI_DIRS, CdiSpecError, parse_cdi_list, read_spec, shadowing, staleness

_NVRM = re.compile(r"NVRM version:.*?\s(\d+\.\d+(?:\.\d+)?)\s")


def loaded_version(module):
    if module.params["loaded_driver_version"]:
        return module.params["loaded_driver_version"]
    match = _NVRM.search(read_text(module.params["proc_version_path"]) or "")
    return match.group(1) if match else None


def last_error(stderr):
    lines = [l for l in stderr.splitlines() if "level=error" in l] or stderr.strip().splitlines()[-1:]
    return lines[-1] if lines else ""


def other_specs(output):
    found = {}
    for directory in CDI_DIRS:
        for path in sorted(glob.glob(os.path.join(directory, "*.yaml")) + glob.glob(os.path.join(directory, "*.json"))):
            if os.path.realpath(path) == os.path.realpath(output):
                continue
            try:
                found[path] = read_spec(read_text(path))
            except (CdiSpecError, OSError):
                continue
    return found


def main():
    module = AnsibleModule(
        argument_spec=dict(
            output=dict(type="path", default="/etc/cdi/nvidia.yaml"),
            loaded_driver_version=dict(type="str"),
            proc_version_path=dict(type="path", default="/proc/driver/nvidia/version"),
            replace_malformed=dict(type="bool", default=False),
            backup=dict(type="bool", default=True),
            backup_dir=dict(type="path", default="/var/backups/gpuhost"),
            nvidia_ctk_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    output = module.params["output"]
    ctk = module.params["nvidia_ctk_path"] or module.get_bin_path("nvidia-ctk")
    if not ctk:
        module.fail_json(msg="toolkit: nvidia-ctk not found — install nvidia-container-toolkit (role nvidia_container_toolkit)")
    version = loaded_version(module)

    before_text = read_text(output)
    before, reasons = None, []
    if before_text is None:
        reasons.append("no spec at %s" % output)
    else:
        try:
            before = read_spec(before_text)
        except CdiSpecError as exc:
            if not module.params["replace_malformed"]:
                module.fail_json(msg="cdi: %s is not a CDI spec (%s); it was left untouched — fix or remove it, "
                                     "or set replace_malformed" % (output, exc))
            reasons.append("%s is not a CDI spec (%s)" % (output, exc))
        else:
            reasons.extend(staleness(before, version))

    directory = os.path.dirname(output)
    # Generated outside the spec directories: the engines read every spec there, and a check-mode run
    # must leave them alone. atomic_move still makes the final rename inside `directory`.
    stage_dir = tempfile.mkdtemp(prefix="gpuhost-cdi-")
    fresh_path = os.path.join(stage_dir, os.path.basename(output))
    try:
        cmd = [ctk, "cdi", "generate", "--output=%s" % fresh_path]
        rc, out, err = module.run_command(cmd)
        if rc != 0:
            module.fail_json(msg="cdi: `nvidia-ctk cdi generate` failed (rc %d): %s — the driver layer must work "
                                 "first (nvidia-smi on the host)" % (rc, last_error(err)), stale_reasons=reasons)
        fresh_text = read_text(fresh_path) or ""
        if before_text is not None and before is not None and fresh_text != before_text and not reasons:
            reasons.append("a fresh generation differs from %s" % output)
        changed = bool(reasons)
        result = dict(changed=changed, loaded_driver_version=version, stale_reasons=reasons,
                      spec_driver_versions=(before or {}).get("driver_versions", []))
        if module._diff:
            result["diff"] = dict(before=before_text or "", after=fresh_text if changed else (before_text or ""),
                                  before_header=output, after_header=output)
        if changed and not module.check_mode:
            os.makedirs(directory, 0o755, exist_ok=True)
            if module.params["backup"] and before_text is not None:
                result["backup_file"] = backup_copy(output, module.params["backup_dir"])
            os.chmod(fresh_path, 0o644)
            module.atomic_move(fresh_path, output)
    finally:
        shutil.rmtree(stage_dir, ignore_errors=True)

    rc, out, err = module.run_command([ctk, "cdi", "list"])
    result["devices"] = parse_cdi_list(out) if rc == 0 else []
    specs = other_specs(output)
    if os.path.exists(output):
        try:
            specs[output] = read_spec(read_text(output))
        except CdiSpecError:
            pass
    elif module.check_mode:
        specs[output] = read_spec(fresh_text)
    result["shadowed_by"] = shadowing(specs, output)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
