# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A k3s GPU node: what k3s does itself, and the few files gpuhost writes for it.

Pure functions, stdlib only (shipped to hosts as module_utils). Facts (docs/research/containerd-k3s.md §4):
- k3s runs its own containerd and regenerates /var/lib/rancher/k3s/agent/etc/containerd/config.toml on
  every start, from its built-in template or the operator's config.toml.tmpl / config-v3.toml.tmpl: a
  file gpuhost wrote there would be lost, so gpuhost writes none and never runs `nvidia-ctk runtime
  configure` against it.
- k3s adds the `nvidia`, `nvidia-experimental` (and, in later releases, `nvidia-cdi`) runtimes itself
  when it finds nvidia-container-runtime* on its PATH at start (pkg/agent/containerd/runtimes.go): after
  the toolkit is installed, k3s must restart once; pods then need `runtimeClassName: nvidia` and a
  RuntimeClass of that name (docs: advanced.md).
- containerd 2.0 (config schema version 3, CRI plugin `io.containerd.cri.v1.runtime`) came with
  v1.31.6+k3s1 and v1.32.2+k3s1; a template for it is config-v3.toml.tmpl (k3s-io/k3s#11626).
- On server nodes every file in /var/lib/rancher/k3s/server/manifests is applied like `kubectl apply`,
  at start and when it changes (docs: "Auto-Deploying Manifests (AddOns)").
"""
import re

from ansible.module_utils.containers.containerd_config import runtimes_in
from ansible.module_utils.serving.k8s_manifest import GPU_RESOURCE, SHARED_SUFFIX

DATA_DIR = "/var/lib/rancher/k3s"
# The first k3s release of each minor line on containerd 2.0; every minor line after 1.32 has it.
CONTAINERD_2_FROM = {31: 6, 32: 2}
NVIDIA_RUNTIMES = ("nvidia", "nvidia-experimental", "nvidia-cdi")
RUNTIME_CLASS_NAME = "nvidia"

_VERSION = re.compile(r"\bv?1\.(\d+)\.(\d+)\+k3s(\d+)\b")


class K3sError(ValueError):
    """A k3s fact gpuhost cannot read, or a setting it refuses; one line for an operator."""


def parse_version(text):
    """(minor, patch, k3s release) from `k3s --version` ("k3s version v1.31.6+k3s1 (6ab750f9)")."""
    match = _VERSION.search(text or "")
    if not match:
        raise K3sError("no k3s version (v1.N.P+k3sR) in %r: is k3s installed?" % (text or "")[:120])
    return tuple(int(part) for part in match.groups())


def config_schema(version):
    """The containerd config version k3s renders: 3 on containerd 2.x, 2 before."""
    minor, patch, _suffix = version
    first = CONTAINERD_2_FROM.get(minor)
    if minor > 32 or (first is not None and patch >= first):
        return 3
    return 2


def template_name(version):
    """The template file k3s reads instead of its own (gpuhost writes none; an operator's may exist)."""
    return "config-v3.toml.tmpl" if config_schema(version) == 3 else "config.toml.tmpl"


def nvidia_runtimes(config_text):
    """The NVIDIA runtimes k3s put in its generated config, in NVIDIA_RUNTIMES order."""
    found = runtimes_in(config_text)
    return [name for name in NVIDIA_RUNTIMES if name in found]


def runtime_state(config_text, version, toolkit_installed=True):
    """Whether the node's containerd has the nvidia runtime, and what to do when it has not.

    Returns {schema, template, runtimes, ok, restart, message}: restart is True where the toolkit is
    installed but k3s's config has no nvidia runtime (k3s looks for it only when it starts).
    """
    schema = config_schema(version)
    runtimes = nvidia_runtimes(config_text)
    state = {"schema": schema, "template": template_name(version), "runtimes": runtimes,
             "ok": RUNTIME_CLASS_NAME in runtimes, "restart": False}
    if state["ok"]:
        state["message"] = ("k3s containerd (config version %d) has the %s runtime%s" %
                            (schema, ", ".join(runtimes), "s" if len(runtimes) > 1 else ""))
    elif toolkit_installed:
        state["restart"] = True
        state["message"] = ("k3s containerd has no nvidia runtime: k3s adds it when it finds "
                            "nvidia-container-runtime at start; restart k3s (or k3s-agent)")
    else:
        state["message"] = "k3s containerd has no nvidia runtime: install nvidia-container-toolkit, then restart k3s"
    return state


def runtime_class(name=RUNTIME_CLASS_NAME, handler=RUNTIME_CLASS_NAME):
    """The RuntimeClass pods name in runtimeClassName (k3s docs' definition)."""
    return {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": handler}


def _whole(value, what, minimum):
    if isinstance(value, bool):
        raise K3sError("%s must be a whole number, got %r" % (what, value))
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise K3sError("%s must be a whole number, got %r" % (what, value))
    if number != value and str(number) != str(value).strip():
        raise K3sError("%s must be a whole number, got %r" % (what, value))
    if number < minimum:
        raise K3sError("%s must be >= %d, got %d" % (what, minimum, number))
    return number


def time_slicing_config(replicas, rename_by_default=False, resource=GPU_RESOURCE, fail_requests_greater_than_one=None):
    """The NVIDIA device plugin's config (version v1) that hands each GPU to `replicas` pods.

    Time-slicing divides no memory: every pod sees the whole GPU, so each vLLM replica's
    --gpu-memory-utilization is its own share of the device (`gpuhost plan --manifest` checks them).
    """
    replicas = _whole(replicas, "time-slicing replicas", 2)
    if not isinstance(rename_by_default, bool):
        raise K3sError("renameByDefault must be true or false, got %r" % (rename_by_default,))
    if not resource or not isinstance(resource, str):
        raise K3sError("time-slicing resource must be a resource name such as %s" % GPU_RESOURCE)
    slicing = {}
    if rename_by_default:
        slicing["renameByDefault"] = True
    if fail_requests_greater_than_one is not None:
        if not isinstance(fail_requests_greater_than_one, bool):
            raise K3sError("failRequestsGreaterThanOne must be true or false, got %r"
                           % (fail_requests_greater_than_one,))
        slicing["failRequestsGreaterThanOne"] = fail_requests_greater_than_one
    slicing["resources"] = [{"name": resource, "replicas": replicas}]
    return {"version": "v1", "sharing": {"timeSlicing": slicing}}


def advertised_resource(config):
    """The resource name pods ask for under this config (<name>.shared with renameByDefault)."""
    slicing = config["sharing"]["timeSlicing"]
    name = slicing["resources"][0]["name"]
    return name + SHARED_SUFFIX if slicing.get("renameByDefault") else name


def config_map(name, namespace, key, config_text):
    """The ConfigMap the device plugin reads its config from (its Helm chart's config.name)."""
    for value, what in ((name, "name"), (namespace, "namespace"), (key, "key")):
        if not value or not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", value):
            raise K3sError("time-slicing ConfigMap %s %r is not a lowercase DNS name" % (what, value))
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": {key: config_text}}
