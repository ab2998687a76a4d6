# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A GPU reference as operators and tools write one, read once for every reader (a vLLM instance's `gpus`,
docker's device requests): a GPU index (`0`), a GPU UUID (`GPU-...`), a MIG device as `GPU:device` (`0:1`,
the `Device N` of `nvidia-smi -L` and the toolkit's CDI name nvidia.com/gpu=0:1) or a MIG UUID (`MIG-...`).

Pure functions, stdlib only, Python >= 3.9 (shipped to hosts as module_utils).
"""
import re

MIG_DEVICE_REF = re.compile(r"^(\d+):(\d+)$")


def parse_gpu_ref(ref):
    """-> {kind: index | uuid | mig | mig_uuid, ref, and gpu (index) / device (MIG device index) / uuid}."""
    ref = str(ref).strip()
    match = MIG_DEVICE_REF.match(ref)
    if match:
        return {"kind": "mig", "ref": ref, "gpu": int(match.group(1)), "device": int(match.group(2))}
    if ref.isdigit():
        return {"kind": "index", "ref": ref, "gpu": int(ref)}
    if ref.startswith("MIG-"):
        return {"kind": "mig_uuid", "ref": ref, "uuid": ref}
    return {"kind": "uuid", "ref": ref, "uuid": ref}


def is_mig_ref(ref):
    """Whether the reference names one MIG device rather than a GPU."""
    return parse_gpu_ref(ref)["kind"] in ("mig", "mig_uuid")


def gpu_named(ref, gpus, whole=False):
    """The GPU fact (index, uuid, mig_devices ...) a reference names: the GPU itself, or for a MIG device the GPU
    that holds it (None with whole=True: such a reference gives no GPU whole). None when this host lacks it."""
    parsed = parse_gpu_ref(ref)
    gpus = [g for g in gpus or [] if g.get("index") is not None]
    if parsed["kind"] in ("mig", "mig_uuid") and whole:
        return None
    if parsed["kind"] == "mig_uuid":
        index = next((d.get("gpu_index", g["index"]) for g in gpus for d in g.get("mig_devices") or []
                      if d.get("uuid") == parsed["uuid"]), None)
        return None if index is None else gpu_named(str(index), gpus)
    if parsed["kind"] == "uuid":
        return next((g for g in gpus if g.get("uuid") == parsed["uuid"]), None)
    return next((g for g in gpus if int(g["index"]) == parsed["gpu"]), None)
