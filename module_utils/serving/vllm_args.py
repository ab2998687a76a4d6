# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The vLLM engine arguments gpuhost writes and reads: one table of their names and forms.

The vllm role's containers are started with the command line `command_line` writes from an instance's
settings (vllm_instances.py); a Kubernetes manifest's container (k8s_manifest.py) and an instance's
extra_args (vllm_host_plan.engine_flags) are read back into the same settings by `read`.
"""
import re

# (setting, long flag, short forms argparse also takes, when the role writes it: "always", "set" (only when
# the instance sets it), or None (read only)). The role writes them in this order, after the model.
ENGINE_ARGS = (
    ("model", "--model", (), None),  # the role gives the model positionally, or as --model (command_line)
    ("served_model_name", "--served-model-name", (), "always"),
    ("host", "--host", (), "always"),
    ("port", "--port", (), "always"),
    ("gpu_memory_utilization", "--gpu-memory-utilization", (), "always"),
    ("tensor_parallel_size", "--tensor-parallel-size", ("-tp",), "always"),
    ("kv_cache_dtype", "--kv-cache-dtype", (), "always"),
    ("max_model_len", "--max-model-len", (), "set"),
    ("max_num_seqs", "--max-num-seqs", (), "set"),
    ("quantization", "--quantization", (), "set"),
    ("max_num_batched_tokens", "--max-num-batched-tokens", (), None),
    ("block_size", "--block-size", (), None),
    ("enforce_eager", "--enforce-eager", (), None),
    ("enable_expert_parallel", "--enable-expert-parallel", (), None),
    ("runner", "--runner", (), None),
    ("task", "--task", (), None),
    # Never written, and refused in extra_args: the key goes in the environment (VLLM_API_KEY).
    ("api_key", "--api-key", (), None),
)

FLAG = dict((setting, flag) for setting, flag, _short, _written in ENGINE_ARGS)


def arg_values(args):
    """{--flag: value} of command-line arguments, `--flag value` and `--flag=value` alike;
    vLLM reads `_` in a flag name as `-`.  A flag with no value maps to ''."""
    args = [str(a) for a in (args or [])]
    values = {}
    for i, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        name, eq, value = arg.partition("=")
        if not eq and i + 1 < len(args) and not args[i + 1].startswith("--"):
            value = args[i + 1]
        values[name.replace("_", "-")] = value
    return values


def read(args):
    """{setting: value (text, '' for a flag without one)} of the table's arguments found in `args`.
    A short form (-tp N) wins over the long one, the last of them over earlier ones."""
    args = [str(a) for a in (args or [])]
    values = arg_values(args)
    out = {}
    for setting, flag, short, _written in ENGINE_ARGS:
        if flag in values:
            out[setting] = values[flag]
        for i, token in enumerate(args[:-1]):
            if token in short:
                out[setting] = args[i + 1]
    return out


def command_line(settings, model_path, model_argument="positional"):
    """The container's command (the image's entrypoint is `vllm serve`): the model, positional or as
    --model, then each argument the table writes, in its order, as text."""
    out = [model_path] if model_argument == "positional" else [FLAG["model"], model_path]
    for setting, flag, _short, written in ENGINE_ARGS:
        value = settings.get(setting)
        if written == "always" or (written == "set" and value):
            out.extend([flag, str(value)])
    return out


def names_flag(args, setting):
    """Whether `args` (extra_args) give the setting's long flag, as `--flag value` or `--flag=value`
    (the name as written: vLLM's `_` spelling is another word to this check)."""
    return FLAG[setting] in [re.sub(r"=.*$", "", str(a)) for a in args or []]
