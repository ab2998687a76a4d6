#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
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
  - With O(engine_compat=auto) it reads the versions of the engines installed (C(docker version), else
    C(dockerd --version); C(containerd --version); C(podman --version); read-only) and the toolkit's
    (C(nvidia-ctk --version)). Toolkit 1.19.1 and later write CDI spec 0.7.0 where a device node is
    group-owned and not world read/writable (C(additionalGids)); docker before 26.1, containerd before
    1.7.16 and podman before 5.1 read only older specs. Where such an engine is installed, the spec is
    generated with C(--feature-flag no-additional-gids-for-device-nodes), as NVIDIA's release notes advise.
  - A generated spec that an installed engine still cannot read is reported in RV(too_new_for) and as a
    warning.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
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
  engine_compat:
    description:
      - V(auto) reads the installed engines' versions and generates with
        C(--feature-flag no-additional-gids-for-device-nodes) where one of them cannot read the spec
        version the toolkit would write.
      - V(off) reads no engine and passes no feature flag.
    type: str
    choices: [auto, "off"]
    default: auto
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
spec_version:
  description: The cdiVersion of the spec at O(output) after the run (in check mode, of the spec it would write).
  returned: success
  type: str
  sample: 0.5.0
toolkit_version:
  description: The version C(nvidia-ctk --version) reports.
  returned: success
  type: str
engines:
  description: The engines installed, with the version each reports and the highest CDI spec version it reads
    (null for a release without CDI support or a version that could not be read). Empty with O(engine_compat=off).
  returned: success
  type: dict
  sample: {"docker": {"version": "26.1.5+dfsg1", "reads": "0.7.0"}, "podman": {"version": "4.9.3", "reads": "0.6.0"}}
feature_flags:
  description: The feature flags passed to C(nvidia-ctk cdi generate).
  returned: success
  type: list
  elements: str
  sample: [no-additional-gids-for-device-nodes]
refresh_feature_flags:
  description: The feature flags C(nvidia-cdi-refresh) should generate with (C(NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS)),
    chosen from the engines alone, so that a toolkit upgrade that regenerates the spec before the next run
    still writes one they read. Toolkit 1.18 ignores a flag name it does not know.
  returned: success
  type: list
  elements: str
engine_compat_reasons:
  description: Why the feature flags were chosen, naming each engine and version.
  returned: success
  type: list
  elements: str
too_new_for:
  description: "For each installed engine that cannot read the spec at O(output) after the run,
    C(spec version too new for <engine> <version>: ...)."
  returned: success
  type: list
  elements: str
"""

import glob
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.runs.atomic_file import backup_copy, read_text
from ansible.module_utils.host.runner import ModuleHostIO
from ansible.module_utils.containers.cdi_spec import (
    CDI_DIRS, FEATURE_NO_ADDITIONAL_GIDS, CdiSpecError, engine_compat, engine_reads, parse_cdi_list, read_spec,
    shadowing, staleness, too_new_for, too_new_message)
from ansible.module_utils.containers.versions import ctk_version, engine_version
from ansible.module_utils.gpu.host_parse import HostParseError, parse_proc_version


def loaded_version(module):
    if module.params["loaded_driver_version"]:
        return module.params["loaded_driver_version"]
    try:
        return parse_proc_version(read_text(module.params["proc_version_path"]) or "")["version"]
    except HostParseError:
        return None


def last_error(stderr):
    lines = [l for l in stderr.splitlines() if "level=error" in l] or stderr.strip().splitlines()[-1:]
    return lines[-1] if lines else ""


def _first_line(text):
    lines = [l.strip() for l in (text or "").splitlines() if l.strip()]
    return lines[0] if lines else None


def engine_versions(module, io):
    """{engine: version or None} of the engines installed; read-only commands, each only where installed."""
    found = {}
    docker = module.get_bin_path("docker")
    if docker:
        rc, out, _err = io.run([docker, "version", "--format", "{{.Server.Version}}"])
        version = engine_version(_first_line(out)) if rc == 0 else None
        if not version:
            # No daemon: the CLI still prints the client part (and exits 1).
            _rc, out, _err = io.run([docker, "version", "--format", "{{.Client.Version}}"])
            version = engine_version(_first_line(out))
        found["docker"] = version
    elif module.get_bin_path("dockerd"):
        _rc, out, _err = io.run([module.get_bin_path("dockerd"), "--version"])
        found["docker"] = engine_version(out)
    for engine in ("containerd", "podman"):
        path = module.get_bin_path(engine)
        if path:
            _rc, out, _err = io.run([path, "--version"])
            found[engine] = engine_version(out)
    return found


def spec_version_after(module, current, fresh_text, changed):
    """cdiVersion of the spec at output after the run; in check mode, of the one it would write."""
    if module.check_mode and changed:
        try:
            return read_spec(fresh_text)["cdi_version"]
        except CdiSpecError:
            return None
    return (current or {}).get("cdi_version")


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
            engine_compat=dict(type="str", default="auto", choices=["auto", "off"]),
        ),
        supports_check_mode=True,
    )
    output = module.params["output"]
    ctk = module.params["nvidia_ctk_path"] or module.get_bin_path("nvidia-ctk")
    if not ctk:
        module.fail_json(msg="toolkit: nvidia-ctk not found — install nvidia-container-toolkit (role nvidia_container_toolkit)")
    io = ModuleHostIO(module)
    version = loaded_version(module)
    _rc, out, _err = io.run([ctk, "--version"])
    toolkit = ctk_version(out)
    engines = engine_versions(module, io) if module.params["engine_compat"] == "auto" else {}
    compat = engine_compat(toolkit, engines) if engines else {"feature_flags": [], "reasons": [],
                                                              "refresh_feature_flags": []}

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
        for flag in compat["feature_flags"]:
            cmd.append("--feature-flag=%s" % flag)
        rc, out, err = io.run(cmd)
        if rc != 0:
            module.fail_json(msg="cdi: `nvidia-ctk cdi generate` failed (rc %d): %s — the driver layer must work "
                                 "first (nvidia-smi on the host)" % (rc, last_error(err)), stale_reasons=reasons)
        fresh_text = read_text(fresh_path) or ""
        if before_text is not None and before is not None and fresh_text != before_text and not reasons:
            reasons.append("a fresh generation differs from %s" % output)
        changed = bool(reasons)
        result = dict(changed=changed, loaded_driver_version=version, stale_reasons=reasons,
                      spec_driver_versions=(before or {}).get("driver_versions", []), toolkit_version=toolkit,
                      feature_flags=compat["feature_flags"], engine_compat_reasons=compat["reasons"],
                      refresh_feature_flags=compat["refresh_feature_flags"],
                      engines=dict((e, {"version": v, "reads": engine_reads(e, v)}) for e, v in engines.items()))
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

    rc, out, err = io.run([ctk, "cdi", "list"])
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
    result["spec_version"] = spec_version_after(module, specs.get(output), fresh_text, result["changed"])
    result["too_new_for"] = []
    for engine, engine_version, reads in too_new_for(result["spec_version"], engines):
        message = too_new_message(engine, engine_version, reads, result["spec_version"], output)
        result["too_new_for"].append(message)
        module.warn("%s — upgrade %s, or generate the spec with --feature-flag %s (engine_compat: auto does "
                    "where the toolkit has that flag)" % (message, engine, FEATURE_NO_ADDITIONAL_GIDS))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
