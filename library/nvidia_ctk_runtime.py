#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Register the NVIDIA runtime with docker or containerd through nvidia-ctk, idempotently."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_ctk_runtime
short_description: Run C(nvidia-ctk runtime configure) only when it would change something
description:
  - The real C(nvidia-ctk runtime configure) rewrites the engine's config on every run. This module asks
    it for the result with C(--dry-run), compares that with the file, and writes (atomically, with a
    backup) only on a difference, so C(changed) is true only when the runtime entry really changed.
  - For docker, C(--cdi.enabled) in toolkit <= 1.20.0 replaces the whole C(features) map; with
    O(keep_features) the other feature keys already in the file are put back.
  - For containerd the toolkit writes a drop-in (C(/etc/containerd/conf.d/99-nvidia.toml)) and an
    C(imports) line in the main config; the module runs the tool only when that drop-in would change.
version_added: "1.0.0"
author: gpuhost
extends_documentation_fragment:
  - gpuhost_backup
options:
  runtime:
    description: Engine to configure.
    type: str
    choices: [docker, containerd]
    default: docker
  config:
    description: The engine's config file. Defaults to C(/etc/docker/daemon.json) or C(/etc/containerd/config.toml).
    type: path
  set_as_default:
    description: Make nvidia the engine's default runtime (C(--set-as-default)).
    type: bool
    default: false
  cdi_enabled:
    description: Enable CDI in docker (C(--cdi.enabled), docker only).
    type: bool
    default: false
  keep_features:
    description: Put back the C(features) keys that C(--cdi.enabled) drops.
    type: bool
    default: true
  backup:
    description: Back up the file before changing it.
    type: bool
    default: true
  nvidia_ctk_path:
    description: Path of nvidia-ctk; looked up on PATH when not given.
    type: path
notes:
  - Supports check mode and diff mode. It never restarts the engine; notify a handler on C(changed).
"""

EXAMPLES = r"""
- name: Register the nvidia runtime with docker
  nvidia_ctk_runtime:
    runtime: docker
    cdi_enabled: true
  notify: Restart docker
"""

RETURN = r"""
config:
  description: Docker settings after the change (docker only).
  returned: runtime is docker
  type: dict
command:
  description: The nvidia-ctk command line that computed the result.
  returned: always
  type: list
  elements: str
backup_file:
  description: Backup of the previous file.
  returned: changed and a previous file existed
  type: str
"""

import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.daemon_json import DaemonJsonError, keep_features, parse, render
from ansible.module_utils.atomic_file import backup_copy, read_text, write_atomic

CONTAINERD_DROPIN = "/etc/containerd/conf.d/99-nvidia.toml"


def ctk_dry_run(module, ctk, runtime, config_path, extra):
    cmd = [ctk, "runtime", "configure", "--runtime=%s" % runtime, "--config=%s" % config_path, "--dry-run"] + extra
    rc, out, err = module.run_command(cmd)
    if rc != 0:
        module.fail_json(msg="toolkit configuration: `%s` failed (rc %d): %s"
                         % (" ".join(cmd), rc, (err or out).strip()), command=cmd)
    return cmd, out


def configure_docker(module, ctk):
    path = module.params["config"] or "/etc/docker/daemon.json"
    before_text = read_text(path)
    try:
        before = parse(before_text, path)
    except DaemonJsonError as exc:
        module.fail_json(msg="docker: %s. Fix or remove the file by hand; it was left untouched." % exc)
    extra = []
    if module.params["set_as_default"]:
        extra.append("--set-as-default")
    if module.params["cdi_enabled"]:
        extra.append("--cdi.enabled")
    # The tool reads a staged copy: it fails on an empty file, and must never touch the real one.
    workdir = tempfile.mkdtemp(prefix="gpuhost-ctk-")
    try:
        staged = os.path.join(workdir, "daemon.json")
        if before:
            with open(staged, "w") as handle:
                handle.write(render(before))
        cmd, out = ctk_dry_run(module, ctk, "docker", staged, extra)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    try:
        after = parse(out, "nvidia-ctk --dry-run output")
    except DaemonJsonError as exc:
        module.fail_json(msg="toolkit configuration: unexpected nvidia-ctk output: %s" % exc, command=cmd)
    if module.params["keep_features"]:
        after = keep_features(before, after)
    cmd = [c if c != "--config=%s" % staged else "--config=%s" % path for c in cmd]
    changed = after != before
    after_text = render(after)
    result = dict(changed=changed, config=after, command=cmd)
    if module._diff:
        result["diff"] = dict(before=before_text or "", after=after_text if changed else (before_text or ""),
                              before_header=path, after_header=path)
    if changed and not module.check_mode:
        result["backup_file"] = write_atomic(module, path, after_text, backup=module.params["backup"],
                                             backup_dir=module.params["backup_dir"])
    module.exit_json(**result)


def configure_containerd(module, ctk):
    path = module.params["config"] or "/etc/containerd/config.toml"
    cmd, wanted = ctk_dry_run(module, ctk, "containerd", path, [])
    current = read_text(CONTAINERD_DROPIN)
    changed = current is None or current.strip() != wanted.strip()
    result = dict(changed=changed, command=cmd)
    if module._diff:
        result["diff"] = dict(before=current or "", after=wanted, before_header=CONTAINERD_DROPIN,
                              after_header=CONTAINERD_DROPIN)
    if changed and not module.check_mode:
        if module.params["backup"] and os.path.exists(path):
            result["backup_file"] = backup_copy(path, module.params["backup_dir"])
        run = [c for c in cmd if c != "--dry-run"]
        rc, out, err = module.run_command(run)
        if rc != 0:
            module.fail_json(msg="toolkit configuration: `%s` failed (rc %d): %s" % (" ".join(run), rc, err.strip()))
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            runtime=dict(type="str", default="docker", choices=["docker", "containerd"]),
            config=dict(type="path"),
            set_as_default=dict(type="bool", default=False),
            cdi_enabled=dict(type="bool", default=False),
            keep_features=dict(type="bool", default=True),
            backup=dict(type="bool", default=True),
            backup_dir=dict(type="path", default="/var/backups/gpuhost"),
            nvidia_ctk_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    ctk = module.params["nvidia_ctk_path"] or module.get_bin_path("nvidia-ctk")
    if not ctk:
        module.fail_json(msg="toolkit: nvidia-ctk not found — install nvidia-container-toolkit "
                             "(role nvidia_container_toolkit)")
    if module.params["runtime"] == "docker":
        configure_docker(module, ctk)
    configure_containerd(module, ctk)


if __name__ == "__main__":
    main()
