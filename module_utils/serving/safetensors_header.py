# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Weight bytes of a checkpoint from safetensors headers only (never the tensor data).

A .safetensors file is: 8-byte little-endian u64 N, N bytes of JSON
({name: {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}), then raw data.
Reading N + 8 bytes per shard gives the exact size of every tensor, which is what
vLLM puts on the GPU for an unquantised load (quantised checkpoints store packed
integer tensors and scales, so their header sum is the on-GPU size too).

Stdlib only, Python >= 3.9: this file is shipped to managed hosts as module_utils.
"""
import json
import os
import struct

# Bytes per element, by the dtype names the safetensors format defines.
# Sub-byte types are stored packed in U8/I8 tensors by every quantiser in use,
# so they never appear here; F4 is listed for completeness at half a byte.
DTYPE_BYTES = {
    "F64": 8, "I64": 8, "U64": 8,
    "F32": 4, "I32": 4, "U32": 4,
    "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1,
    "F6_E2M3": 0.75, "F6_E3M2": 0.75, "F4": 0.5,
}

# A header is a few MB even for the largest checkpoints; anything far bigger
# means this is not a safetensors file, and we refuse to read it into memory.
MAX_HEADER_BYTES = 256 * 1024 * 1024

INDEX_NAME = "model.safetensors.index.json"


class SafetensorsError(ValueError):
    """The file is not a readable safetensors file."""


def read_header(path):
    """Return the parsed JSON header of one .safetensors file."""
    with open(path, "rb") as handle:
        raw = handle.read(8)
        if len(raw) != 8:
            raise SafetensorsError("%s: too short for a safetensors header" % path)
        (length,) = struct.unpack("<Q", raw)
        if length == 0 or length > MAX_HEADER_BYTES:
            raise SafetensorsError("%s: implausible header length %d" % (path, length))
        blob = handle.read(length)
    if len(blob) != length:
        raise SafetensorsError("%s: header truncated (%d of %d bytes)" % (path, len(blob), length))
    try:
        header = json.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SafetensorsError("%s: header is not JSON: %s" % (path, exc))
    if not isinstance(header, dict):
        raise SafetensorsError("%s: header is not a JSON object" % path)
    return header


def tensor_bytes(entry):
    """Bytes of one tensor described by a header entry."""
    dtype = entry.get("dtype")
    if dtype not in DTYPE_BYTES:
        raise SafetensorsError("unknown safetensors dtype %r" % (dtype,))
    count = 1
    for dim in entry.get("shape") or []:
        count *= int(dim)
    return int(count * DTYPE_BYTES[dtype])


def header_summary(header):
    """(total bytes, {dtype: bytes}) of the tensors in one header."""
    total = 0
    by_dtype = {}
    for name, entry in header.items():
        if name == "__metadata__" or not isinstance(entry, dict):
            continue
        size = tensor_bytes(entry)
        total += size
        by_dtype[entry["dtype"]] = by_dtype.get(entry["dtype"], 0) + size
    return total, by_dtype


def _shard_files(model_dir):
    """The shard files vLLM would load.

    Some repositories carry two copies of the weights (Mistral's
    consolidated.safetensors beside the model-0000N shards): when an index
    exists only the files it names count, else the model*.safetensors files,
    else every *.safetensors file.
    """
    names = sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))
    index_path = os.path.join(model_dir, INDEX_NAME)
    if os.path.isfile(index_path):
        with open(index_path) as handle:
            index = json.load(handle)
        listed = sorted(set((index.get("weight_map") or {}).values()))
        present = [n for n in listed if n in names]
        if present and len(present) == len(listed):
            return present, index
        return [], index
    model_named = [n for n in names if n.startswith("model")]
    return (model_named or names), None


def checkpoint_weight_bytes(model_dir):
    """Weight bytes of a model directory.

    Returns a dict: bytes, source ('safetensors_headers' or 'index_total_size'),
    files (shards read) and by_dtype (bytes per dtype, headers only).
    Raises SafetensorsError when neither shards nor an index total is there.
    """
    files, index = _shard_files(model_dir)
    if files:
        total = 0
        by_dtype = {}
        for name in files:
            size, kinds = header_summary(read_header(os.path.join(model_dir, name)))
            total += size
            for key, value in kinds.items():
                by_dtype[key] = by_dtype.get(key, 0) + value
        return {"bytes": total, "source": "safetensors_headers", "files": files, "by_dtype": by_dtype}
    # Shards not downloaded (yet): the index's metadata.total_size is the
    # data size the shards will have.
    if index is not None:
        size = (index.get("metadata") or {}).get("total_size")
        if isinstance(size, (int, float)) and size > 0:
            return {"bytes": int(size), "source": "index_total_size", "files": [], "by_dtype": {}}
    raise SafetensorsError("%s: no safetensors shards and no %s with metadata.total_size"
                           % (model_dir, INDEX_NAME))
