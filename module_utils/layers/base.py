# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What every layer's checks share: the result and evidence shapes, the engine's words, the defaults of the
stack check's options, and summarise() (checks -> layers -> the first failing required layer).

A check result is a dict:
    name, layer, status (ok|warn|fail|skipped), summary, remedy (None when nothing to do),
    evidence {command, rc, lines} (the command run and the output lines that decided), data.
"""
import re
import shlex

# The checks compare an rc with it.
from ansible.module_utils.host.runner import TIMEOUT_RC  # noqa: F401  # pylint: disable=unused-import
from ansible.module_utils.layers.registry import (
    DEFAULT_REQUIRED_LAYERS, STACK_LAYERS as LAYERS, TOOLKIT_PACKAGES, titles as layer_titles)
from ansible.module_utils.gpu.nvsmi_common import clean_text

STATUSES = ("ok", "warn", "fail", "skipped")
DEFAULT_CHECK_IMAGE = "nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04"
# NVIDIA's CUDA sample image (the vectorAdd the GPU Operator's validator also runs): nvidia-smi needs no
# CUDA, so only a CUDA program proves that CUDA initialises in a container (nvidia-uvm, the driver's CUDA).
DEFAULT_CUDA_PROBE_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
DEFAULT_CUDA_PROBE_COMMAND = ("/cuda-samples/vectorAdd",)
DEFAULT_TOOLKIT_PACKAGES = TOOLKIT_PACKAGES
DEFAULT_CDI_SPEC = "/etc/cdi/nvidia.yaml"
DEFAULT_DOCKER_CONFIG = "/etc/docker/daemon.json"
DEFAULT_PROC_VERSION = "/proc/driver/nvidia/version"
MAX_EVIDENCE_LINES = 20
MAX_LINE = 300
REMEDY_CONFIGURE = "run `nvidia-ctk runtime configure --runtime=docker` and restart docker"
REMEDY_INSTALL_TOOLKIT = ("install the NVIDIA Container Toolkit: site.yml --tags toolkit "
                          "(role nvidia_container_toolkit)")
DEFAULT_RUNTIME_BINARY = "/usr/bin/nvidia-container-runtime"
DEFAULT_CONTAINERD_NAMESPACE = "default"
ENGINE_WORDS = {
    "docker": {
        "configure": REMEDY_CONFIGURE, "restart": "restart docker",
        "load": "`docker load -i <tarball>`", "gpus": "--gpus all", "run": "docker run --rm",
    },
    "containerd": {
        "configure": "run `nvidia-ctk runtime configure --runtime=containerd` (site.yml --tags toolkit with "
                     "nvidia_container_toolkit_runtimes: [containerd]) and restart containerd",
        "restart": "restart containerd",
        "load": "`ctr images import <tarball>`", "gpus": "nvidia-runtime", "run": "ctr run --rm",
    },
}


def _clip(line):
    line = line.rstrip("\r\n")
    return line if len(line) <= MAX_LINE else line[:MAX_LINE - 3] + "..."


def evidence(command=None, lines=(), rc=None):
    """The command that was run (a string) and the output lines that decided."""
    if isinstance(command, (list, tuple)):
        command = " ".join(shlex.quote(str(part)) for part in command)
    kept = [_clip(l) for l in lines if l is not None and str(l).strip()][:MAX_EVIDENCE_LINES]
    return {"command": command, "rc": rc, "lines": kept}


def result(name, layer, status, summary, remedy=None, ev=None, data=None):
    if status not in STATUSES:
        raise ValueError("bad status %r" % status)
    if layer not in LAYERS:
        raise ValueError("bad layer %r" % layer)
    return {"name": name, "layer": layer, "status": status, "summary": summary,
            "remedy": remedy if status in ("warn", "fail") else None,
            "evidence": ev or evidence(), "data": data or {}}


def _lines(text):
    return [l for l in clean_text(text or "").split("\n") if l.strip()]


def _grep(text, pattern, flags=re.I):
    regex = re.compile(pattern, flags)
    return [l.strip() for l in _lines(text) if regex.search(l)]


def _out(cap):
    """stdout + stderr of a captured command."""
    if not cap:
        return ""
    return (cap.get("stdout") or "") + "\n" + (cap.get("stderr") or "")


def _cmd(cap):
    return cap.get("argv") if cap else None


def _kernel_log_unread(cap, name, layer, command):
    """The result of a kernel-log check whose log was not read (skipped) or could not be (warn); None
    when the log is there to read."""
    if cap is None:
        return result(name, layer, "skipped", "kernel log not read", ev=evidence(command))
    if cap.get("rc") != 0:
        lines = _lines(_out(cap))[:3]
        return result(name, layer, "warn", "could not read the kernel log: %s"
                      % (lines[0] if lines else "exit status %s" % cap.get("rc")),
                      remedy="run the check as root, or set kernel_log_command (e.g. `journalctl -k -b --no-pager`)",
                      ev=evidence(_cmd(cap), lines, cap.get("rc")))
    return None


def summarise(checks, required_layers=DEFAULT_REQUIRED_LAYERS, titles=None):
    """Layers, first failing required layer and the message. Fails in layers that are not required
    are reported as warn (the check keeps `required: false`). titles: the engine's titles of layers,
    over the registry's."""
    titles = dict(layer_titles(), **(titles or {}))
    required = set(required_layers)
    out_checks = []
    for check in checks:
        check = dict(check)
        check["required"] = check["layer"] in required
        if check["status"] == "fail" and not check["required"]:
            check["status"] = "warn"
            check["summary"] = check["summary"] + " (layer not required: reported as warn)"
        out_checks.append(check)
    layers = {}
    for layer in LAYERS:
        mine = [c for c in out_checks if c["layer"] == layer]
        statuses = [c["status"] for c in mine]
        if "fail" in statuses:
            status = "fail"
        elif "warn" in statuses:
            status = "warn"
        elif statuses and all(s == "skipped" for s in statuses):
            status = "skipped"
        elif statuses:
            status = "ok"
        else:
            status = "skipped"
        first = next((c for c in mine if c["status"] == status and status in ("fail", "warn")), None)
        layers[layer] = {"status": status, "required": layer in required, "title": titles[layer],
                         "checks": [c["name"] for c in mine],
                         "summary": first["summary"] if first else
                         "; ".join(c["summary"] for c in mine if c["status"] == "ok")[:400],
                         "remedy": first["remedy"] if first else None}
    failed_layer = next((l for l in LAYERS if layers[l]["status"] == "fail"), None)
    if failed_layer:
        first = next(c for c in out_checks if c["layer"] == failed_layer and c["status"] == "fail")
        message = "%s: %s — %s" % (titles[failed_layer], first["summary"], first["remedy"])
        remedy = first["remedy"]
    else:
        warned = [l for l in LAYERS if layers[l]["status"] == "warn"]
        remedy = None
        if warned:
            message = "every required layer works; warnings: %s" % "; ".join(
                "%s: %s" % (titles[l], layers[l]["summary"]) for l in warned)
        else:
            message = "every layer works"
    counts = dict((s, len([c for c in out_checks if c["status"] == s])) for s in STATUSES)
    return {"ok": failed_layer is None, "failed_layer": failed_layer, "message": message, "remedy": remedy,
            "layers": layers, "checks": out_checks, "counts": counts, "required_layers": [l for l in LAYERS
                                                                                          if l in required]}


def guarded(name, layer, fn, *args, **kwargs):
    """fn(*args) or, when it raises (a bug here, not the host), a warning saying so: one broken check
    never hides the others or fails the task."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - reported as the check's result
        return result(name, layer, "warn", "gpu_stack_check internal error in check %s: %s: %s"
                      % (name, type(exc).__name__, exc), remedy="report this as a gpuhost bug, with the evidence",
                      ev=evidence("(internal)"))


class Context(object):
    """What a layer's checks read: the captures, the GPU facts, the options, the engine and its words, and
    the other checks' results (a check may decide from another's: the engine up, the CUDA probe), each
    computed once whatever the order they are asked in."""

    def __init__(self, captures, opts, facts, implementations):
        self.captures = captures
        self.opts = opts
        self.facts = facts
        self.gpu = captures["gpu"]
        self.engine = captures.get("engine") or "docker"
        self.words = ENGINE_WORDS[self.engine]
        self._implementations = implementations
        self._done = {}

    def get(self, key, default=None):
        return self.captures.get(key, default)

    def check(self, name):
        if name not in self._done:
            self._done[name] = self._implementations[name](self)
        return self._done[name]

    def memo(self, key, compute):
        """compute() once per diagnosis (what several layers' checks read, e.g. the generic checks' inputs)."""
        key = "memo:" + key
        if key not in self._done:
            self._done[key] = compute()
        return self._done[key]
