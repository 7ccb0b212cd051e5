"""Small GGUF files for the tests, written with gguf-py's own writer (zeros of the right size)."""

from __future__ import annotations

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter

T = GGMLQuantizationType


def write_model(path, *, layers=2, hidden=256, ffn=512, heads=4, kv=2, vocab=64, split=None):
    """Write a small llama GGUF of IQ4_XS, Q6_K, MXFP4 and F16 tensors (zeros, the right size)."""
    w = GGUFWriter(str(path), "llama")
    w.add_block_count(layers)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_context_length(4096)
    w.add_token_list([f"t{i}" for i in range(vocab)])
    expect: dict[str, int] = {}

    def raw(name, rows, cols, kind, group):
        block, size = GGML_QUANT_SIZES[kind]
        w.add_tensor(name, np.zeros((rows, cols // block * size), np.uint8), raw_dtype=kind)
        expect[group] = expect.get(group, 0) + rows * cols // block * size

    raw("token_embd.weight", vocab, hidden, T.Q6_K, "embeddings")
    for i in range(layers):
        for name, rows, kind in (
            ("attn_q", hidden, T.IQ4_XS), ("attn_k", kv * 64, T.IQ4_XS),
            ("attn_v", kv * 64, T.Q6_K), ("attn_output", hidden, T.IQ4_XS),
        ):  # fmt: skip
            raw(f"blk.{i}.{name}.weight", rows, hidden, kind, "attention")
        raw(f"blk.{i}.ffn_gate.weight", ffn, hidden, T.MXFP4, "mlp")
        raw(f"blk.{i}.ffn_up.weight", ffn, hidden, T.MXFP4, "mlp")
        raw(f"blk.{i}.ffn_down.weight", hidden, ffn, T.F16, "mlp")
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.zeros(hidden, np.float32))
        expect["norms"] = expect.get("norms", 0) + 4 * hidden
    w.add_tensor("output_norm.weight", np.zeros(hidden, np.float32))
    raw("output.weight", vocab, hidden, T.Q6_K, "output")
    expect["output"] += 4 * hidden
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expect
