# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Kubernetes manifests of vLLM servers, and the NVIDIA device plugin's time-slicing config.

Pure functions over parsed YAML; PyYAML is imported by load_documents only (the CLI runs on
the control node, hosts never import this).  What `gpuhost plan --manifest` needs per vLLM
container: replicas, image, model, the engine arguments that size its memory, and the GPU
resource it asks for (seed 003: `nvidia.com/gpu.shared: 1` on a node whose device plugin
time-slices each GPU 4 ways, docs/research/containerd-k3s.md §4c-5).
"""
import os
import re
import shlex

from ansible.module_utils.serving.vllm_args import FLAG, read

WORKLOAD_KINDS = ("Deployment", "StatefulSet")
GPU_RESOURCE = "nvidia.com/gpu"
# renameByDefault appends this (k8s-device-plugin api/config/v1 DefaultSharedRename).
SHARED_SUFFIX = ".shared"
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
SHELLS = ("sh", "bash", "ash", "dash")


class ManifestError(ValueError):
    """A manifest or config the plan cannot read; the message is one line for an operator."""


def load_documents(text, what="manifest"):
    """The mappings of a YAML stream (several `---` documents; a `kind: List` is flattened)."""
    import yaml
    try:
        docs = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        # PyYAML marks are 0-based; the context (what it was reading) is often the line to look at.
        text = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if getattr(exc, "problem_mark", None) is not None:
            text += " at line %d" % (exc.problem_mark.line + 1)
        if getattr(exc, "context", None) and getattr(exc, "context_mark", None) is not None:
            text += " (%s at line %d)" % (exc.context, exc.context_mark.line + 1)
        raise ManifestError("%s is not YAML: %s" % (what, text))
    out = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise ManifestError("%s: document %d is not a mapping" % (what, i + 1))
        if doc.get("kind") == "List":
            out.extend(item for item in doc.get("items") or [] if isinstance(item, dict))
        else:
            out.append(doc)
    return out


# ---------------------------------------------------------------- vLLM containers

def _expand(token, env):
    # Kubernetes expands $(NAME) in command/args from the container's env; $$ escapes.
    return re.sub(r"\$(\$|\(([A-Za-z_][A-Za-z0-9_.-]*)\))",
                  lambda m: "$" if m.group(1) == "$" else env.get(m.group(2), m.group(0)), token)


def command_line(container):
    """command + args as the container runs them ($(VAR) expanded; a `sh -c` script split)."""
    env = {e["name"]: str(e["value"]) for e in container.get("env") or []
           if isinstance(e, dict) and "name" in e and "value" in e}
    tokens = [_expand(str(t), env) for t in (container.get("command") or []) + (container.get("args") or [])]
    if len(tokens) >= 3 and os.path.basename(tokens[0]) in SHELLS and tokens[1] == "-c":
        try:
            tokens = shlex.split(tokens[2])
        except ValueError as exc:
            raise ManifestError("container %s: its sh -c script does not split: %s" % (container.get("name"), exc))
    return tokens


def engine_args(container):
    """(positional model or None, engine arguments) of a vLLM container, or None when it is not one.

    vLLM starts as `vllm serve [MODEL] ...` or `python3 -m vllm.entrypoints.openai.api_server ...`;
    with no command, the vllm/vllm-openai image's ENTRYPOINT (`vllm serve`) takes the args."""
    tokens = command_line(container)
    rest = None
    for i, token in enumerate(tokens):
        if os.path.basename(token) == "vllm" and i + 1 < len(tokens) and tokens[i + 1] == "serve":
            rest = tokens[i + 2:]
            break
        if token == "-m" and i + 1 < len(tokens) and tokens[i + 1] == API_SERVER_MODULE:
            return None, tokens[i + 2:]
    if rest is None:
        if container.get("command") or "vllm" not in str(container.get("image") or ""):
            return None
        rest = tokens
    # Shell scripts may chain commands: the server's arguments end at the first separator.
    for i, token in enumerate(rest):
        if token in ("&&", "||", ";", "|"):
            rest = rest[:i]
            break
    if rest and not rest[0].startswith("-"):
        return rest[0], rest[1:]
    return None, rest


def _number(value, flag, where, cast):
    try:
        return cast(value)
    except (TypeError, ValueError):
        raise ManifestError("%s: %s %r is not a number" % (where, flag, value))


def gpu_request(container, where):
    """(resource name, count) of the container's NVIDIA GPU request: limits first, as Kubernetes
    requires extended resources there (requests, if given, must equal them)."""
    resources = container.get("resources") or {}
    for section in ("limits", "requests"):
        for name, value in (resources.get(section) or {}).items():
            if not str(name).startswith("nvidia.com/"):
                continue
            if name not in (GPU_RESOURCE, GPU_RESOURCE + SHARED_SUFFIX):
                raise ManifestError("%s asks for %s: only nvidia.com/gpu and nvidia.com/gpu.shared are "
                                    "planned (a MIG slice has memory of its own)" % (where, name))
            return name, _number(value, name, where, int)
    raise ManifestError("%s asks for no nvidia.com/gpu in resources.limits: it would get no GPU" % where)


def vllm_container(container, where):
    """What the plan needs of one vLLM container, or None when the container is not vLLM."""
    found = engine_args(container)
    if found is None:
        return None
    model, args = found
    # The engine arguments by setting, read with the table the vllm role writes its command lines from.
    values = read(args)
    util = values.get("gpu_memory_utilization")
    if util is not None:
        util = _number(util, FLAG["gpu_memory_utilization"], where, float)
        if not 0 < util <= 1:
            raise ManifestError("%s: %s %s is not in (0, 1] (a share of the whole device)"
                                % (where, FLAG["gpu_memory_utilization"], util))
    tp = values.get("tensor_parallel_size", "1")
    resource, count = gpu_request(container, where)
    ints = {}
    for setting in ("max_model_len", "max_num_seqs"):
        ints[setting] = _number(values[setting], FLAG[setting], where, int) if values.get(setting) else None
    return {
        "container": container.get("name"),
        "image": container.get("image"),
        "model": values.get("model") or model,
        "gpu_memory_utilization": util,
        "max_model_len": ints["max_model_len"],
        "max_num_seqs": ints["max_num_seqs"],
        "tensor_parallel_size": _number(tp, FLAG["tensor_parallel_size"], where, int),
        "gpu_resource": resource,
        "gpu_count": count,
    }


def workloads(documents):
    """One entry per vLLM container of every Deployment/StatefulSet: {kind, namespace, name,
    replicas, container, image, model, gpu_memory_utilization (None: not given),
    max_model_len, max_num_seqs, tensor_parallel_size, gpu_resource, gpu_count}."""
    out, seen = [], []
    for doc in documents:
        if doc.get("kind") not in WORKLOAD_KINDS:
            continue
        meta = doc.get("metadata") or {}
        spec = doc.get("spec") or {}
        where = "%s %s/%s" % (doc["kind"], meta.get("namespace") or "default", meta.get("name"))
        seen.append(where)
        replicas = spec.get("replicas")
        # Kubernetes' default is 1; an HPA may scale further, which the manifest does not say.
        replicas = 1 if replicas is None else _number(replicas, "replicas", where, int)
        pod = (spec.get("template") or {}).get("spec") or {}
        for container in pod.get("containers") or []:
            found = vllm_container(container, "%s container %s" % (where, container.get("name")))
            if found is not None:
                found.update(kind=doc["kind"], namespace=meta.get("namespace") or "default",
                             name=meta.get("name"), replicas=replicas)
                out.append(found)
    if not out:
        looked = ", ".join(seen) if seen else "no Deployment or StatefulSet"
        raise ManifestError("no vLLM container found (%s); a vLLM container runs `vllm serve`, "
                            "`python3 -m %s`, or a vllm image's own entrypoint" % (looked, API_SERVER_MODULE))
    return out


# ---------------------------------------------------------------- time-slicing

def time_slicing(documents):
    """{resource name as the node advertises it: replicas per GPU} from the device plugin's config
    (version v1: sharing.timeSlicing.renameByDefault / resources[].name, replicas).

    The plugin ignores a per-resource `rename` ("not yet supported", api/config/v1/replicas.go):
    only renameByDefault renames, to <name>.shared."""
    if len(documents) != 1:
        raise ManifestError("time-slicing config: expected one document, found %d" % len(documents))
    sharing = documents[0].get("sharing") or {}
    if sharing.get("mps"):
        raise ManifestError("time-slicing config shares GPUs by MPS, which partitions memory: not planned here")
    slicing = sharing.get("timeSlicing") or {}
    suffix = SHARED_SUFFIX if slicing.get("renameByDefault") else ""
    out = {}
    for i, entry in enumerate(slicing.get("resources") or []):
        if not isinstance(entry, dict) or not entry.get("name"):
            raise ManifestError("time-slicing config: sharing.timeSlicing.resources[%d] has no name" % i)
        replicas = _number(entry.get("replicas"), "replicas", "time-slicing config %s" % entry["name"], int)
        if replicas < 1:
            raise ManifestError("time-slicing config: %s replicas must be >= 1, got %d" % (entry["name"], replicas))
        out[entry["name"] + suffix] = replicas
    if not out:
        raise ManifestError("time-slicing config has no sharing.timeSlicing.resources")
    return out
