# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Who may create a CUDA context on a GPU, by its compute mode (nvidia-smi's "Compute Mode", `-c`): Default, any
number of processes; Exclusive_Process, one process at a time; Prohibited, none. An MPS server holding an
Exclusive_Process GPU is the usual MPS set-up: its clients share the server's context. MIG-enabled GPUs do not
take Exclusive_Process (nvidia-smi refuses to set it there), so a MIG device is never judged here.

Pure functions, stdlib only (shipped to hosts as module_utils).
"""

DEFAULT = "Default"
EXCLUSIVE_PROCESS = "Exclusive_Process"
PROHIBITED = "Prohibited"
MPS_SERVER = "nvidia-cuda-mps-server"


def restore_shared(index):
    return "`nvidia-smi -i %s -c DEFAULT` (as root) lets processes share it again" % index


def _holder_text(holders):
    return ", ".join("pid %s (%s)" % (p.get("pid"), p.get("name") or "unknown") for p in holders)


def mps_served(holders):
    """Whether an MPS server holds the GPU (its clients share its context)."""
    return any((p.get("name") or "").rsplit("/", 1)[-1] == MPS_SERVER for p in holders or [])


def context_blocked(gpu, holders=(), newcomers=1):
    """Why `newcomers` new processes cannot each create a CUDA context on `gpu`: {"reason", "fix"}, or None when they
    can.

    gpu: GPU facts (index, compute_mode, mig_mode: true when enabled); holders: the processes on the GPU that are
    not among the newcomers ({pid, name}). A GPU whose compute mode is unknown is not judged."""
    mode = gpu.get("compute_mode")
    index = gpu.get("index")
    if gpu.get("mig_mode") is True:
        return None
    if mode == PROHIBITED:
        return {"reason": "GPU %s is in compute mode Prohibited: no process may create a CUDA context on it (CUDA "
                          "reports 'all CUDA-capable devices are busy or unavailable')" % index,
                "fix": restore_shared(index)}
    if mode != EXCLUSIVE_PROCESS or mps_served(holders):
        return None
    holders = list(holders or [])
    if holders:
        return {"reason": "GPU %s is in compute mode Exclusive_Process and %s holds it: no other process may create "
                          "a CUDA context there while it runs" % (index, _holder_text(holders)),
                "fix": "stop it, or %s" % restore_shared(index)}
    if newcomers > 1:
        return {"reason": "GPU %s is in compute mode Exclusive_Process (one process at a time) and %d instances are "
                          "placed on it: only the first to start gets it" % (index, newcomers),
                "fix": "give each its own GPU, or %s" % restore_shared(index)}
    return None


def blocked_text(blocked):
    """One line for a refusal: the reason, then the fix."""
    return "%s; fix: %s" % (blocked["reason"], blocked["fix"])


def processes_by_gpu(processes):
    """{gpu index: [process]} from the GPU facts' processes."""
    out = {}
    for proc in processes or []:
        if proc.get("gpu_index") is None:
            continue
        out.setdefault(int(proc["gpu_index"]), []).append(proc)
    return out
