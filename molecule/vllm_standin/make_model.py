#!/usr/bin/env python3
"""Synthetic model directories for the vLLM stand-in (test harness only, stdlib only).

Each directory is what vLLM reads before it touches a GPU: a config.json with the public
architecture's real values and one model.safetensors whose HEADER declares every tensor of the
checkpoint with its real name, dtype, shape and data offsets. The data section is left out: the
file is the 8-byte header length plus the JSON header (a few hundred KB instead of tens of GB).
Only headers are ever read - by module_utils/serving/safetensors_header.py in the memory plan and by the
stand-in - so the weight bytes both compute are the real checkpoint's. A real safetensors loader
would reject these files (truncated data), which is the point: nothing can load them as weights.

    make_model.py DEST_DIR NAME [NAME...]     # writes DEST_DIR/<directory> for each NAME
    make_model.py --list

Names (directory written, source of the values):
    qwen3-32b              Qwen3-32B          (Qwen/Qwen3-32B config.json), BF16
    qwen3-32b-fp8          Qwen3-32B-FP8      (Qwen/Qwen3-32B-FP8): linear weights F8_E4M3 with
                           128x128 block scales (weight_scale_inv), embeddings/norms/lm_head BF16
    qwen2.5-3b-instruct-awq Qwen2.5-3B-Instruct-AWQ (Qwen/Qwen2.5-3B-Instruct-AWQ, seed 003): AWQ GEMM
                           4-bit, group 128 (qweight/qzeros I32, scales F16), tied embeddings
"""
import json
import os
import struct
import sys

QWEN3_32B = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 5120, "initializer_range": 0.02, "intermediate_size": 25600,
    "max_position_embeddings": 40960, "max_window_layers": 64, "model_type": "qwen3",
    "num_attention_heads": 64, "num_hidden_layers": 64, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}
QWEN25_3B_AWQ = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 11008, "max_position_embeddings": 32768, "max_window_layers": 70,
    "model_type": "qwen2", "num_attention_heads": 16, "num_hidden_layers": 36,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "float16",
    "transformers_version": "4.41.1", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 151936,
    "quantization_config": {"bits": 4, "group_size": 128, "modules_to_not_convert": None,
                            "quant_method": "awq", "version": "gemm", "zero_point": True},
}
FP8_BLOCK = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
             "weight_block_size": [128, 128]}

MODELS = {
    "qwen3-32b": ("Qwen3-32B", QWEN3_32B, None),
    "qwen3-32b-fp8": ("Qwen3-32B-FP8", dict(QWEN3_32B, quantization_config=FP8_BLOCK), "fp8"),
    "qwen2.5-3b-instruct-awq": ("Qwen2.5-3B-Instruct-AWQ", QWEN25_3B_AWQ, "awq"),
}
BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "I32": 4}


def _cdiv(a, b):
    return -(-a // b)


def tensors(config, quant):
    """[(name, dtype, shape)] of the checkpoint, in the order the shards list them."""
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    inter = config["intermediate_size"]
    vocab = config["vocab_size"]
    qwen3 = config["model_type"] == "qwen3"
    dense = "F16" if config["torch_dtype"] == "float16" else "BF16"
    out = [("model.embed_tokens.weight", dense, [vocab, hidden])]

    def linear(prefix, n_out, n_in, bias=False):
        if quant == "fp8":
            out.append((prefix + ".weight", "F8_E4M3", [n_out, n_in]))
            out.append((prefix + ".weight_scale_inv", "F32", [_cdiv(n_out, 128), _cdiv(n_in, 128)]))
        elif quant == "awq":
            group = config["quantization_config"]["group_size"]
            out.append((prefix + ".qweight", "I32", [n_in, n_out // 8]))
            out.append((prefix + ".qzeros", "I32", [n_in // group, n_out // 8]))
            out.append((prefix + ".scales", "F16", [n_in // group, n_out]))
        else:
            out.append((prefix + ".weight", dense, [n_out, n_in]))
        if bias:
            out.append((prefix + ".bias", dense, [n_out]))

    for i in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % i
        out.append((p + "input_layernorm.weight", dense, [hidden]))
        linear(p + "mlp.down_proj", hidden, inter)
        linear(p + "mlp.gate_proj", inter, hidden)
        linear(p + "mlp.up_proj", inter, hidden)
        out.append((p + "post_attention_layernorm.weight", dense, [hidden]))
        if qwen3:
            out.append((p + "self_attn.k_norm.weight", dense, [head_dim]))
        linear(p + "self_attn.k_proj", kv_heads * head_dim, hidden, bias=not qwen3)
        linear(p + "self_attn.o_proj", hidden, heads * head_dim)
        if qwen3:
            out.append((p + "self_attn.q_norm.weight", dense, [head_dim]))
        linear(p + "self_attn.q_proj", heads * head_dim, hidden, bias=not qwen3)
        linear(p + "self_attn.v_proj", kv_heads * head_dim, hidden, bias=not qwen3)
    out.append(("model.norm.weight", dense, [hidden]))
    if not config.get("tie_word_embeddings"):
        out.append(("lm_head.weight", dense, [vocab, hidden]))
    return out


def header(entries):
    """The safetensors header of the entries, data offsets as the real file has them."""
    head = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in entries:
        size = BYTES[dtype]
        for dim in shape:
            size *= dim
        head[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    return head, offset


def write_model(dest, key):
    directory, config, quant = MODELS[key]
    path = os.path.join(dest, directory)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as handle:
        json.dump(config, handle, indent=2, sort_keys=True)
        handle.write("\n")
    head, data_bytes = header(tensors(config, quant))
    blob = json.dumps(head, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the format pads the header to 8 bytes
    with open(os.path.join(path, "model.safetensors"), "wb") as handle:
        handle.write(struct.pack("<Q", len(blob)))
        handle.write(blob)
    return {"path": path, "data_bytes": data_bytes, "file_bytes": 8 + len(blob)}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--list"]:
        for key, (directory, _, quant) in MODELS.items():
            print("%-26s %-26s %s" % (key, directory, quant or "bf16/f16"))
        return 0
    if len(argv) < 2 or any(name not in MODELS for name in argv[1:]):
        sys.stderr.write("usage: make_model.py DEST_DIR NAME [NAME...]  (names: %s)\n" % ", ".join(MODELS))
        return 2
    for key in argv[1:]:
        done = write_model(argv[0], key)
        print("%s: header of %.2f GiB of tensors in %d bytes"
              % (done["path"], done["data_bytes"] / 1024.0 ** 3, done["file_bytes"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
