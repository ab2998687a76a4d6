#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ansible module: report on a vLLM startup log (thin shell over module_utils.vllm_log)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_startup_report
short_description: Read a vLLM startup log and say how far the start got
description:
  - Parses a vLLM startup log (v0.2 to v0.2x formats) given as text or read with
    C(docker logs NAME) (stdout and stderr merged, in order).
  - Reports the stages reached (C(engine_start), C(weights_loaded), C(memory_profiled),
    C(kv_cache_allocated), C(graphs_captured), C(api_server_started)) with their
    numbers, whether the start completed, and for a failed start the stage and the
    kind of failure (C(shm_exhausted), C(kv_cache_insufficient),
    C(free_memory_below_utilization), C(cuda_oom), C(gated_model), C(import_error),
    C(argument_error), C(incomplete), C(other)).
  - A log holding several starts is reported on its last one.
  - Read-only; never fails because the start failed - the role decides.
version_added: "0.1.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  log:
    description: The log text. Mutually exclusive with O(container).
    type: str
  container:
    description: Container name or id; the module runs C(docker logs) on it.
    type: str
  tail:
    description: Only the last N lines of the container log (C(docker logs --tail N)).
    type: int
  docker_bin:
    description: Docker CLI to use (name on PATH or absolute path).
    type: str
    default: docker
notes:
  - Supports check mode; the module only reads and always returns C(changed=false).
  - Several ranks printing differing KV figures are reduced to the minimum (the engine
    uses the minimum); weights and graph-capture time to the maximum.
"""

EXAMPLES = r"""
- name: Read what the vLLM container said while starting
  vllm_startup_report:
    container: vllm
  register: vllm_start

- name: Explain a failed start by its layer
  ansible.builtin.fail:
    msg: >-
      vLLM did not start: {{ vllm_start.report.failure.kind }} at
      {{ vllm_start.report.failure.stage }}: {{ vllm_start.report.failure.message }}
  when: not vllm_start.report.started

- name: Parse a saved log
  vllm_startup_report:
    log: "{{ lookup('ansible.builtin.file', 'vllm.log') }}"
"""

RETURN = r"""
changed:
  description: Always false.
  returned: always
  type: bool
report:
  description: What the log says about the (last) start.
  returned: success
  type: dict
  contains:
    started:
      description: "The start completed (API server up; or an embedded/offline engine initialised)."
      type: bool
    engine_ready:
      description: "The engine finished initialising (profile, KV cache, warm-up)."
      type: bool
    mode:
      description: "server (vLLM's API server), embedded (engine without vLLM's server) or unknown."
      type: str
    last_stage:
      description: "Last stage reached, or null before the engine started."
      type: str
    stages:
      description: "Stages reached, in order."
      type: list
      elements: str
    failure:
      description: "For a start that did not complete: {kind, stage, line, message, inferred}; null otherwise."
      type: dict
    kv_cache_tokens:
      description: "KV cache tokens (blocks x block size for old versions; minimum over ranks)."
      type: int
    kv_cache_gib:
      description: "KV cache memory in GiB (minimum over ranks)."
      type: float
    max_concurrency:
      description: "Logged maximum concurrency (minimum over ranks)."
      type: float
    max_model_len:
      description: "The max_model_len of the concurrency line (else of the config)."
      type: int
    weights_gib:
      description: "Weights per GPU (maximum over ranks)."
      type: float
    gpu_memory_utilization:
      description: "As printed in the arguments or profiling lines; null when default."
      type: float
    graph_capture_s:
      description: "CUDA graph capture seconds (maximum over ranks)."
      type: float
    init_engine_s:
      description: "Seconds of 'init engine (profile, create kv cache, warmup model)'."
      type: float
    enforce_eager:
      description: "The config shows enforce_eager=True (no graph capture expected)."
      type: bool
    api_url:
      description: "URL the API server said it listens on."
      type: str
    vllm_version:
      description: "vLLM version, or null when the log does not print it."
      type: str
    warnings:
      description: "Kinds: concurrency_below_1, kernel_fallback, error_after_start, worker_hang_suspected."
      type: list
      elements: str
    warning_details:
      description: "Each {kind, line, message}."
      type: list
      elements: dict
    runs:
      description: "Number of starts found in the log."
      type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.host.runner import ModuleHostIO, command_line
from ansible.module_utils.serving.vllm_log import parse

ARGUMENT_SPEC = dict(
    log=dict(type="str"),
    container=dict(type="str"),
    tail=dict(type="int"),
    docker_bin=dict(type="str", default="docker"),
)


def docker_logs_argv(docker_bin, container, tail=None):
    """`docker logs`, run with stderr merged into stdout in emission order (vLLM logs on stdout, tracebacks
    go to stderr)."""
    parts = [docker_bin, "logs"]
    if tail is not None:
        parts += ["--tail", str(int(tail))]
    parts.append(container)
    return parts


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_one_of=[("log", "container")],
        mutually_exclusive=[("log", "container")],
        supports_check_mode=True,
    )
    params = module.params
    text = params["log"]
    if params["container"]:
        docker = module.get_bin_path(params["docker_bin"]) or params["docker_bin"]
        argv = docker_logs_argv(docker, params["container"], params["tail"])
        rc, out, _err = ModuleHostIO(module, errors="surrogate_then_replace").run(argv, merge_stderr=True)
        if rc != 0:
            module.fail_json(msg="vllm startup report: '%s' failed (rc %d): %s"
                             % (command_line(argv, merge_stderr=True), rc, out.strip()[-500:]), changed=False)
        text = out
    module.exit_json(changed=False, report=parse(text))


if __name__ == "__main__":
    main()
