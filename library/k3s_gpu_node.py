#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read a k3s GPU node: its version, whether k3s's containerd has the nvidia runtime, what to write."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: k3s_gpu_node
short_description: Read what a k3s node's containerd has of the NVIDIA runtime, and render the node's GPU manifests
description:
  - k3s runs its own containerd and regenerates its config at every start, adding the C(nvidia),
    C(nvidia-experimental) and C(nvidia-cdi) runtimes itself when it finds them on its PATH. This module
    reads C(k3s --version) and the generated C(config.toml) and says whether the runtime is there, or
    whether k3s must restart to find it (the toolkit is installed, the runtime is not in the config).
  - Renders the RuntimeClass pods name in C(runtimeClassName) and, when asked, the NVIDIA device plugin's
    time-slicing config as a ConfigMap, for the role to write into the server's auto-deploy manifests.
  - Read-only; writes nothing.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  data_dir:
    description: k3s's data directory.
    type: path
    default: /var/lib/rancher/k3s
  time_slicing_replicas:
    description: Pods each GPU is handed to by the device plugin (0 for no time-slicing).
    type: int
    default: 0
  time_slicing_rename_by_default:
    description: Advertise shared GPUs as C(nvidia.com/gpu.shared) (C(renameByDefault)).
    type: bool
    default: false
  time_slicing_config_map:
    description: Name, namespace and key of the ConfigMap the device plugin reads its config from.
    type: dict
    default: {name: time-slicing-config, namespace: kube-system, key: any}
notes:
  - Supports check mode.
"""

EXAMPLES = r"""
- name: Read the k3s node
  k3s_gpu_node:
    time_slicing_replicas: 4
    time_slicing_rename_by_default: true
  register: k3s_node
"""

RETURN = r"""
version:
  description: k3s's version (v1.N.P+k3sR).
  returned: always
  type: str
schema:
  description: The containerd config version k3s renders (2 on containerd 1.x, 3 on 2.x).
  returned: always
  type: int
template:
  description: The template file k3s would read instead of its own, and whether an operator's exists.
  returned: always
  type: dict
runtimes:
  description: The NVIDIA runtimes in k3s's generated containerd config.
  returned: always
  type: list
  elements: str
ok:
  description: Whether the C(nvidia) runtime is there.
  returned: always
  type: bool
restart:
  description: Whether k3s must restart to find the runtime (the toolkit is installed, the runtime is not in the config).
  returned: always
  type: bool
server:
  description: Whether this node is a k3s server (it applies the manifests directory).
  returned: always
  type: bool
unit:
  description: The systemd unit that runs k3s here (k3s on servers, k3s-agent on agents).
  returned: always
  type: str
manifests_dir:
  description: The server's auto-deploy manifests directory.
  returned: always
  type: str
runtime_class:
  description: The RuntimeClass manifest.
  returned: always
  type: dict
time_slicing:
  description: The device plugin's config, its ConfigMap and the resource name pods ask for; null without time-slicing.
  returned: always
  type: dict
message:
  description: One line on the runtime.
  returned: always
  type: str
"""

import os

from ansible.module_utils.runs.atomic_file import read_text
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host.runner import ModuleHostIO
from ansible.module_utils.containers.k3s_node import (
    K3sError, advertised_resource, config_map, parse_version, runtime_class, runtime_state, time_slicing_config)


def yaml_text(data):
    # The device plugin reads its config from the ConfigMap's value as YAML; JSON is YAML.
    import json
    return json.dumps(data, indent=2, sort_keys=False) + "\n"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            data_dir=dict(type="path", default="/var/lib/rancher/k3s"),
            time_slicing_replicas=dict(type="int", default=0),
            time_slicing_rename_by_default=dict(type="bool", default=False),
            time_slicing_config_map=dict(type="dict", default=dict(name="time-slicing-config", namespace="kube-system",
                                                                   key="any")),
        ),
        supports_check_mode=True,
    )
    p = module.params
    k3s = module.get_bin_path("k3s")
    if not k3s:
        module.fail_json(msg="container engine (k3s): no k3s binary on PATH: install k3s first, or set "
                             "nvidia_container_toolkit_runtimes without k3s")
    rc, out, err = ModuleHostIO(module).run([k3s, "--version"])
    containerd_dir = os.path.join(p["data_dir"], "agent", "etc", "containerd")
    try:
        version = parse_version(out if rc == 0 else out + err)
        state = runtime_state(read_text(os.path.join(containerd_dir, "config.toml")) or "", version,
                              toolkit_installed=bool(module.get_bin_path("nvidia-container-runtime")))
        slicing = None
        if p["time_slicing_replicas"]:
            config = time_slicing_config(p["time_slicing_replicas"], p["time_slicing_rename_by_default"])
            where = p["time_slicing_config_map"]
            slicing = {"config": config, "resource": advertised_resource(config),
                       "config_map": config_map(where.get("name"), where.get("namespace"), where.get("key"),
                                                yaml_text(config))}
    except K3sError as exc:
        module.fail_json(msg="container engine (k3s): %s" % exc)
    server = os.path.isdir(os.path.join(p["data_dir"], "server"))
    template = os.path.join(containerd_dir, state["template"])
    module.exit_json(
        changed=False, version="v1.%d.%d+k3s%d" % version, schema=state["schema"],
        template={"path": template, "exists": os.path.exists(template)},
        runtimes=state["runtimes"], ok=state["ok"], restart=state["restart"], message=state["message"],
        server=server, unit="k3s" if server else "k3s-agent",
        manifests_dir=os.path.join(p["data_dir"], "server", "manifests"),
        runtime_class=runtime_class(), time_slicing=slicing)


if __name__ == "__main__":
    main()
