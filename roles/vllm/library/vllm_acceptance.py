#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ansible module (role vllm): a serving acceptance run per instance - vllm bench serve in its container while
nvidia-smi dmon samples its GPUs - judged by module_utils/serving/acceptance.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_acceptance
short_description: Put a bounded load on each vLLM instance and judge its figures and its GPUs meanwhile
description:
  - For each instance, runs C(vllm bench serve) inside its own container (the image's load generator, over the
    instance's OpenAI API on 127.0.0.1, with the container's C(VLLM_API_KEY) as C(OPENAI_API_KEY), never on a command
    line) with random prompts of O(input_len) tokens and O(output_len) output tokens, O(num_prompts) requests at
    O(max_concurrency), after O(warmups) requests that are not counted.
  - Meanwhile C(nvidia-smi dmon -s pucvm) samples the instance's GPUs every O(sample_interval) seconds.
  - Reports the figures under the keys of C(vllm bench serve)'s C(--save-result) JSON (C(request_throughput),
    C(output_throughput), C(mean/median/p99 _ttft_ms/_tpot_ms/_itl_ms/_e2el_ms) ...) and a verdict - failed requests,
    the instance's own C(acceptance) thresholds (C(min_output_tok_s), C(max_p99_ttft_ms)), a GPU that waited for work
    under load, clocks slowed by the power cap or heat. dmon's C(sm) column is GPU-Util (the share of time a kernel
    ran), so kernels that do not fill the GPU are not judged from it.
  - Changes nothing on the host; in check mode it runs nothing.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  instances:
    description: The resolved instances (the role's C(vllm_resolved)) - name, port, served_model_name, model,
      gpu_indexes and an optional acceptance dict of thresholds.
    type: list
    elements: dict
    required: true
  input_len:
    description: Prompt tokens per request (C(--random-input-len)).
    type: int
    default: 256
  output_len:
    description: Output tokens per request (C(--random-output-len); end-of-sequence ignored).
    type: int
    default: 64
  num_prompts:
    description: Requests counted (C(--num-prompts)).
    type: int
    default: 32
  max_concurrency:
    description: Requests in flight at once (C(--max-concurrency)).
    type: int
    default: 8
  warmups:
    description: Requests sent first and not counted (C(--num-warmups)).
    type: int
    default: 2
  sample_interval:
    description: Seconds between dmon's samples.
    type: int
    default: 1
  models_dir:
    description: Where the container sees the models directory (each instance's tokenizer is read from its model's
      directory there).
    type: str
    default: /models
  timeout:
    description: Seconds one instance's run may take.
    type: int
    default: 900
notes:
  - Supports check mode (nothing runs) and diff mode (nothing to show).
"""

EXAMPLES = r"""
- name: Put a bounded load on each instance and sample its GPUs
  vllm_acceptance:
    instances: "{{ vllm_resolved }}"
    num_prompts: 300
    max_concurrency: 24
    input_len: 2048
    output_len: 512
"""

RETURN = r"""
acceptance:
  description: Per instance, by name - figures (the run's, by their --save-result key), load (per GPU, what dmon's
    samples say), verdict (status pass|warn|fail and findings), samples (dmon's output).
  returned: always
  type: dict
failed_instances:
  description: The instances whose verdict is fail.
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.gpu.nvsmi_common import ParseError
from ansible.module_utils.gpu.nvsmi_dmon import dmon_series, load_summary
from ansible.module_utils.host.runner import ModuleHostIO
from ansible.module_utils.serving.acceptance import judge, under_load
from ansible.module_utils.serving.bench_result import BenchResultError, parse

# The key stays inside the container: the shell reads it from the container's environment.
BENCH_SHELL = 'OPENAI_API_KEY="${VLLM_API_KEY:-}" exec vllm bench serve "$@"'
# The load and the GPUs' samples side by side in one command: dmon in the background into a file, the load in the
# foreground, dmon stopped once the load ends (it writes each sample as it takes it).
SAMPLED_RUN = ('samples=$1; smi=$2; ids=$3; interval=$4; shift 4; '
               '"$smi" dmon -s pucvm -d "$interval" -i "$ids" >"$samples" 2>/dev/null & sampler=$!; '
               '"$@"; rc=$?; kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null; exit $rc')


def bench_argv(inst, params):
    return ["--backend", "openai", "--base-url", "http://127.0.0.1:%s" % inst["port"],
            "--model", inst["served_model_name"], "--tokenizer", "%s/%s" % (params["models_dir"], inst["model"]),
            "--dataset-name", "random", "--random-input-len", str(params["input_len"]),
            "--random-output-len", str(params["output_len"]), "--ignore-eos",
            "--num-prompts", str(params["num_prompts"]), "--max-concurrency", str(params["max_concurrency"]),
            "--num-warmups", str(params["warmups"]),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99"]


def run_one(module, io, docker, smi, inst):
    params = module.params
    gpus = [int(i) for i in inst.get("gpu_indexes") or []]
    load_argv = [docker, "exec", inst["name"], "sh", "-c", BENCH_SHELL, "sh"] + bench_argv(inst, params)
    samples_path = os.path.join(module.tmpdir, "dmon-%s.txt" % inst["name"])
    if smi and gpus:
        rc, out, err = io.run(["sh", "-c", SAMPLED_RUN, "sh", samples_path, smi, ",".join(str(g) for g in gpus),
                               str(params["sample_interval"])] + load_argv)
    else:
        rc, out, err = io.run(load_argv)
    samples = io.read(samples_path) or ""
    entry = {"command": " ".join(load_argv[:3] + ["vllm", "bench", "serve"] + bench_argv(inst, params)),
             "samples": samples, "figures": {}, "load": {}}
    try:
        entry["figures"] = parse(out)
    except BenchResultError as exc:
        tail = " | ".join((out + err).strip().splitlines()[-5:])
        entry["verdict"] = {"status": "fail", "findings": [{"code": "bench_failed", "severity": "fail", "message":
                            "vllm bench serve (rc %s) gave no result: %s; its last lines: %s" % (rc, exc, tail)}]}
        return entry
    try:
        load = dict((k, v) for k, v in load_summary(under_load(dmon_series(samples))).items() if k in gpus)
    except ParseError:
        load = {}
    entry["load"] = dict((str(k), v) for k, v in load.items())
    entry["verdict"] = judge(entry["figures"], load, None, inst.get("acceptance") or {})
    if not entry["load"]:
        entry["verdict"]["findings"].append({"code": "no_samples", "severity": "info", "message":
                                             "nvidia-smi dmon gave no sample of GPU %s during the run"
                                             % ", ".join(str(g) for g in gpus)})
    return entry


def main():
    module = AnsibleModule(argument_spec=dict(
        instances=dict(type="list", elements="dict", required=True),
        input_len=dict(type="int", default=256),
        output_len=dict(type="int", default=64),
        num_prompts=dict(type="int", default=32),
        max_concurrency=dict(type="int", default=8),
        warmups=dict(type="int", default=2),
        sample_interval=dict(type="int", default=1),
        models_dir=dict(type="str", default="/models"),
        timeout=dict(type="int", default=900),
    ), supports_check_mode=True)
    if module.check_mode:
        module.exit_json(changed=False, acceptance={}, failed_instances=[], skipped=True,
                         msg="check mode: no load is put on the instances")
    io = ModuleHostIO(module, timeout=module.params["timeout"])
    docker = module.get_bin_path("docker")
    if not docker:
        module.fail_json(msg="serving layer (vllm_acceptance): no docker on this host: the acceptance run execs "
                             "vllm bench serve in each instance's container")
    smi = module.get_bin_path("nvidia-smi")
    acceptance = {}
    for inst in module.params["instances"]:
        acceptance[inst["name"]] = run_one(module, io, docker, smi, inst)
    failed = sorted(name for name, entry in acceptance.items() if entry["verdict"]["status"] == "fail")
    result = dict(changed=False, acceptance=acceptance, failed_instances=failed)
    if failed:
        module.fail_json(msg="serving layer (vllm_acceptance): %s" % "; ".join(
            "%s: %s" % (name, ", ".join(f["message"] for f in acceptance[name]["verdict"]["findings"]
                                        if f["severity"] == "fail")) for name in failed), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
