#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
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
  - For containerd (toolkit >= 1.18) the tool writes the drop-in O(drop_in) into a scratch directory from
    a copy of the root config (C(--config-source=file), so the drop-in gets the root's config version); the
    module compares it with the drop-in on the host and adds the drop-in's directory to the root config's
    C(imports) itself, editing only that statement (the tool would re-render the whole file, dropping
    comments). C(changed) is true only when the drop-in or the C(imports) statement changes.
  - A containerd root config that is not TOML, has no C(version) (version 1 cannot import drop-ins), or whose
    version differs from the drop-in's makes the module fail naming the file and the fix; the file is left
    byte-identical.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
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
  drop_in:
    description:
      - containerd only. The drop-in the nvidia runtime goes into (C(--drop-in-config)); its directory
        + C(/*.toml) is what the root config imports. Given explicitly, so toolkit 1.18.0 (which defaults to
        C(/etc/containerd/config.d/)) and later versions write the same file.
    type: path
    default: /etc/containerd/conf.d/99-nvidia.toml
  set_as_default:
    description:
      - Make nvidia the engine's default runtime (C(--set-as-default)). For containerd this is the CRI
        plugin's C(default_runtime_name) in the drop-in.
    type: bool
    default: false
  cdi_enabled:
    description:
      - Enable CDI (C(--cdi.enabled)), that is docker's C(features.cdi) or containerd's C(enable_cdi) in the CRI
        plugin (default off in containerd 1.7, on from 2.0; containerd 1.6 has no such setting).
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
  - Supports check mode and diff mode (for containerd the diff shows the drop-in and the root config).
    It never restarts the engine; notify a handler on C(changed).
  - containerd needs toolkit >= 1.18 (C(--drop-in-config)). On Python < 3.11 (no C(tomllib)) the root
    config is read only as far as its top-level statements; nvidia-ctk still refuses a file that is not TOML.
"""

EXAMPLES = r"""
- name: Register the nvidia runtime with docker
  nvidia_ctk_runtime:
    runtime: docker
    cdi_enabled: true
  notify: Restart docker

- name: Register the nvidia runtime with containerd (drop-in + imports)
  nvidia_ctk_runtime:
    runtime: containerd
    config: /etc/containerd/config.toml
    set_as_default: true
  notify: Restart containerd
"""

RETURN = r"""
config:
  description: Docker settings after the change (docker only).
  returned: runtime is docker
  type: dict
command:
  description: The nvidia-ctk command line that computed the result (with the host's paths).
  returned: always
  type: list
  elements: str
backup_file:
  description: Backup of the previous file (for containerd, of the root config).
  returned: changed and a previous file existed
  type: str
drop_in:
  description: The drop-in holding the nvidia runtime.
  returned: runtime is containerd
  type: str
drop_in_changed:
  description: Whether the drop-in differs (or would differ, in check mode) from the one on the host.
  returned: runtime is containerd
  type: bool
drop_in_backup_file:
  description: Backup of the previous drop-in.
  returned: runtime is containerd, the drop-in changed and a previous one existed
  type: str
config_changed:
  description: Whether the root config's C(imports) statement was (or would be) added or edited.
  returned: runtime is containerd
  type: bool
config_version:
  description: The root config's version (2 when the file is missing or empty), which the drop-in has too.
  returned: runtime is containerd
  type: int
imports:
  description: The root config's C(imports) after the change.
  returned: runtime is containerd
  type: list
  elements: str
"""

import glob
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.containers.containerd_config import (
    DEFAULT_DROP_IN, ContainerdConfigError, config_version, imports_cover, other_dropins_above, parse_root, plan)
from ansible.module_utils.containers.daemon_json import DaemonJsonError, keep_features, parse, render
from ansible.module_utils.runs.atomic_file import read_text, write_atomic
from ansible.module_utils.host.runner import ModuleHostIO


def ctk_dry_run(module, ctk, runtime, config_path, extra):
    cmd = [ctk, "runtime", "configure", "--runtime=%s" % runtime, "--config=%s" % config_path, "--dry-run"] + extra
    rc, out, err = ModuleHostIO(module).run(cmd)
    if rc != 0:
        module.fail_json(msg="toolkit configuration: `%s` failed (rc %d): %s"
                         % (" ".join(cmd), rc, (err or out).strip()), command=cmd)
    return cmd, out


def ctk_flags(params):
    """The flags of `nvidia-ctk runtime configure` that both engines take."""
    return ((["--set-as-default"] if params["set_as_default"] else [])
            + (["--cdi.enabled"] if params["cdi_enabled"] else []))


def configure_docker(module, ctk):
    path = module.params["config"] or "/etc/docker/daemon.json"
    before_text = read_text(path)
    try:
        before = parse(before_text, path)
    except DaemonJsonError as exc:
        module.fail_json(msg="docker: %s. Fix or remove the file by hand; it was left untouched." % exc)
    extra = ctk_flags(module.params)
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


def containerd_fail(module, path, exc, **extra):
    module.fail_json(msg="container engine (containerd): %s. Fix it by hand (or restore a backup from %s) and "
                         "rerun; the file was left untouched." % (exc, module.params["backup_dir"]), path=path, **extra)


def configure_containerd(module, ctk):
    path = module.params["config"] or "/etc/containerd/config.toml"
    drop_in = module.params["drop_in"]
    # newline="": a CRLF file must come back byte-identical.
    root_text = read_text(path, newline="")
    # Refuse a file the module must not touch before the tool reads it.
    try:
        root = None if root_text is None else parse_root(root_text, path)
        config_version(root, path)
    except ContainerdConfigError as exc:
        containerd_fail(module, path, exc)
    flags = ctk_flags(module.params)
    # The tool writes into a scratch copy: it re-renders the root config whole, so its own write never
    # reaches the host; only its drop-in is kept.
    workdir = tempfile.mkdtemp(prefix="gpuhost-ctk-")
    try:
        staged_root = os.path.join(workdir, "config.toml")
        staged_drop_in = os.path.join(workdir, "conf.d", os.path.basename(drop_in))
        if root_text is not None:
            with open(staged_root, "w", encoding="utf-8", newline="") as handle:
                handle.write(root_text)
        cmd = [ctk, "runtime", "configure", "--runtime=containerd", "--config=%s" % staged_root,
               "--drop-in-config=%s" % staged_drop_in, "--config-source=file"] + flags
        rc, out, err = ModuleHostIO(module).run(cmd)
        shown = [c.replace(staged_root, path).replace(staged_drop_in, drop_in) for c in cmd]
        if rc != 0:
            hint = ""
            if "drop-in-config" in (err or out):
                hint = " (containerd drop-ins need nvidia-container-toolkit >= 1.18)"
            module.fail_json(msg="toolkit configuration: `%s` failed (rc %d): %s%s"
                             % (" ".join(shown), rc, (err or out).strip(), hint), command=shown)
        wanted = read_text(staged_drop_in, newline="")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if wanted is None:
        module.fail_json(msg="toolkit configuration: `%s` wrote no drop-in" % " ".join(shown), command=shown)
    current = read_text(drop_in, newline="")
    try:
        decided = plan(path, root_text, drop_in, current, wanted, root=root)
    except ContainerdConfigError as exc:
        containerd_fail(module, path, exc, command=shown)
    # Other files the same glob imports: one with a higher version stops containerd 2.3.0-2.3.4.
    others = {}
    for other in glob.glob(os.path.join(os.path.dirname(drop_in), "*.toml")):
        if os.path.abspath(other) != os.path.abspath(drop_in):
            others[other] = read_text(other) or ""
    for other, version in other_dropins_above(decided["config_version"], others):
        module.warn("container engine (containerd): %s has config version %d, higher than %s's %d: containerd "
                    "2.3.0-2.3.4 refuse to start on it; write it as version %d"
                    % (other, version, path, decided["config_version"], decided["config_version"]))
    # Toolkit 1.18.0 wrote <dir>/config.d/99-nvidia.toml and imported that directory: two nvidia runtimes.
    legacy = os.path.join(os.path.dirname(os.path.dirname(drop_in)), "config.d", os.path.basename(drop_in))
    if legacy != drop_in and os.path.exists(legacy) and imports_cover(decided["imports"], legacy, path):
        module.warn("container engine (containerd): %s imports %s, which toolkit 1.18.0 wrote; remove that file "
                    "and its imports entry, so that only %s defines the nvidia runtime" % (path, legacy, drop_in))
    result = dict(changed=decided["changed"], command=shown, drop_in=drop_in,
                  drop_in_changed=decided["drop_in_changed"], config_changed=decided["config_changed"],
                  config_version=decided["config_version"], imports=decided["imports"])
    if module._diff:
        result["diff"] = [
            dict(before=current or "", after=wanted, before_header=drop_in, after_header=drop_in),
            dict(before=root_text or "", after=decided["config_after"], before_header=path, after_header=path),
        ]
    if decided["changed"] and not module.check_mode:
        # The drop-in first: the root then never imports a runtime that is not written yet.
        if decided["drop_in_changed"]:
            result["drop_in_backup_file"] = write_atomic(module, drop_in, wanted, backup=module.params["backup"],
                                                         backup_dir=module.params["backup_dir"])
        if decided["config_changed"]:
            result["backup_file"] = write_atomic(module, path, decided["config_after"],
                                                 backup=module.params["backup"],
                                                 backup_dir=module.params["backup_dir"])
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            runtime=dict(type="str", default="docker", choices=["docker", "containerd"]),
            config=dict(type="path"),
            drop_in=dict(type="path", default=DEFAULT_DROP_IN),
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
