#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Record, or compare with the host, the fingerprint site.yml left on a converged GPU host."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpuhost_converged
short_description: Tell whether a GPU host is still exactly as site.yml's last full run left it
description:
  - A fingerprint is the digests of the roles' inputs and code (given by the play, hashed on the control
    node) and of what they manage on the host - the files and directories in O(paths), the dpkg state of
    the packages in O(packages), the systemd units in O(units), the OS release, the running kernel, the
    loaded NVIDIA driver, a pending reboot, and the serving containers of the host's record.
  - C(mode=record) writes the host's fingerprint now to O(path) (after a full, successful site.yml run).
  - C(mode=compare) reads it back and returns C(match=true) only when nothing differs and every recorded
    serving container is running and answers C(/health) with 200. Then site.yml has nothing to do on the
    host and skips its roles. Every difference is named in C(differences).
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  mode:
    description: C(compare) (read-only) or C(record).
    type: str
    choices: [compare, record]
    default: compare
  code_digest:
    description: Digest of gpuhost's roles, modules and playbooks on the control node.
    type: str
    required: true
  inputs_digest:
    description: Digest of the roles' variables as this run resolves them.
    type: str
    required: true
  path:
    description: Where the fingerprint is kept.
    type: path
    default: /var/lib/gpuhost/converged.json
  record_path:
    description: The roles' record (M(gpuhost_record)); its C(vllm.instances) are the serving containers.
    type: path
    default: /etc/ansible/facts.d/gpuhost.fact
  paths:
    description: Files and directories the roles write (directories are walked).
    type: list
    elements: path
    default: []
  packages:
    description: dpkg-query patterns of the packages the roles install or hold.
    type: list
    elements: str
    default: []
  units:
    description: systemd units whose active and enablement state the roles set.
    type: list
    elements: str
    default: []
  docker_path:
    description: docker CLI for the serving containers; looked up on PATH when not given.
    type: path
  health_timeout:
    description: Seconds each serving container's C(/health) may take (compare only).
    type: int
    default: 5
notes:
  - Supports check mode (C(record) then writes nothing) and diff mode.
  - Any difference means a full run, so a change gpuhost did not make costs time, never correctness.
"""

EXAMPLES = r"""
- name: Is the host as the last full run left it?
  gpuhost_converged:
    code_digest: "{{ gpuhost_code_digest }}"
    inputs_digest: "{{ gpuhost_inputs_digest }}"
    paths: [/etc/docker, /etc/cdi]
    packages: ["*nvidia*", "docker.io"]
    units: [docker.service]
  register: converged

- name: Record it after a full run
  gpuhost_converged:
    mode: record
    code_digest: "{{ gpuhost_code_digest }}"
    inputs_digest: "{{ gpuhost_inputs_digest }}"
    paths: [/etc/docker, /etc/cdi]
"""

RETURN = r"""
match:
  description: compare - the host matches its fingerprint and every serving container is healthy.
  returned: always
  type: bool
differences:
  description: What differs from the recorded fingerprint (empty on a match; on record, what the new one changes).
  returned: always
  type: list
  elements: str
problems:
  description: compare - serving containers not running or not answering /health with 200.
  returned: always
  type: list
  elements: str
fingerprint:
  description: The host's fingerprint now.
  returned: always
  type: dict
"""

import hashlib
import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.runs.atomic_file import read_text, write_atomic
from ansible.module_utils.host.runner import ModuleHostIO
from ansible.module_utils.runs.converged import (
    differences, fingerprint, health_problems, parse_os_release, parse_systemctl_show, path_digests)
from ansible.module_utils.containers.daemon_json import DaemonJsonError, parse
from ansible.module_utils.diagnosis.drift import dpkg_state


def read_json(module, path, what, fix):
    try:
        return parse(read_text(path), path)
    except DaemonJsonError as exc:
        module.fail_json(msg="%s: %s; %s" % (what, exc, fix))
    except (IOError, OSError) as exc:
        module.fail_json(msg="%s: cannot read %s: %s" % (what, path, exc))


def serving_instances(record):
    instances = (record.get("vllm") or {}).get("instances") or {}
    if isinstance(instances, list):
        return {name: {} for name in instances}
    return {name: (spec if isinstance(spec, dict) else {}) for name, spec in instances.items()}


def container_state(io, docker, names):
    """{name: "Id Image HostConfig-digest"} and {name: State.Status} of the serving containers.

    A changed configuration means a new container (a new Id), except what `docker update` changes in
    place (restart policy, resources): hence the HostConfig digest.
    """
    identity, status = {}, {}
    usable = bool(docker) and os.access(docker, os.X_OK)
    for name in sorted(names):
        rc, out, _err = (io.run([docker, "inspect", "-f", "{{.Id}} {{.Image}} {{.State.Status}} {{json .HostConfig}}",
                                 name])
                         if usable else (1, "", ""))
        fields = out.strip().split(" ", 3) if rc == 0 else []
        if len(fields) == 4:
            identity[name] = "%s %s %s" % (fields[0], fields[1], hashlib.sha256(fields[3].encode()).hexdigest()[:16])
            status[name] = fields[2]
        else:
            identity[name], status[name] = "absent", "absent"
    return identity, status


def host_fingerprint(module, instances, docker):
    params = module.params
    io = ModuleHostIO(module)
    packages = dpkg_state(io, params["packages"])
    units = {}
    if params["units"]:
        _rc, out, _err = io.run(["systemctl", "show", "-p", "Id,ActiveState,UnitFileState", "--"] + params["units"])
        units = parse_systemctl_show(out)
    files = {}
    for path in params["paths"]:
        files.update(path_digests(path))
    identity, status = container_state(io, docker, instances)
    loaded = (read_text("/proc/driver/nvidia/version") or "").strip().splitlines()
    current = fingerprint(
        code=params["code_digest"], inputs=params["inputs_digest"],
        os_release="%s kernel %s" % (parse_os_release(read_text("/etc/os-release")), os.uname()[2]),
        driver_loaded=loaded[0] if loaded else None,
        reboot_required=os.path.exists("/var/run/reboot-required"),
        packages=packages, units=units, files=files, containers=identity)
    return current, status


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mode=dict(type="str", choices=["compare", "record"], default="compare"),
            code_digest=dict(type="str", required=True),
            inputs_digest=dict(type="str", required=True),
            path=dict(type="path", default="/var/lib/gpuhost/converged.json"),
            record_path=dict(type="path", default="/etc/ansible/facts.d/gpuhost.fact"),
            paths=dict(type="list", elements="path", default=[]),
            packages=dict(type="list", elements="str", default=[]),
            units=dict(type="list", elements="str", default=[]),
            docker_path=dict(type="path"),
            health_timeout=dict(type="int", default=5),
        ),
        supports_check_mode=True,
    )
    params = module.params
    record = read_json(module, params["record_path"], "gpuhost record", "run site.yml to write it again")
    before_text = read_text(params["path"])
    recorded = read_json(module, params["path"], "gpuhost converged fingerprint",
                         "remove it; the next site.yml run does a full run and writes it again")
    instances = serving_instances(record)
    docker = params["docker_path"] or module.get_bin_path("docker")
    current, status = host_fingerprint(module, instances, docker)
    found = differences(recorded, current)
    result = dict(changed=False, fingerprint=current, differences=found, problems=[], match=False)
    if params["mode"] == "compare":
        result["problems"] = health_problems(instances, status, params["health_timeout"]) if not found else []
        result["match"] = not found and not result["problems"]
        module.exit_json(**result)
    text = json.dumps(current, indent=2, sort_keys=True) + "\n"
    result["changed"] = bool(found)
    if module._diff:
        result["diff"] = dict(before=before_text or "", after=text if found else (before_text or ""),
                              before_header=params["path"], after_header=params["path"])
    if found and not module.check_mode:
        write_atomic(module, params["path"], text, backup=False, mode=0o644)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
