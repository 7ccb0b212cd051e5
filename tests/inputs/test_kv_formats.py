"""KV cache formats as the engines store them: vLLM's fp8 variants, llama.cpp's block types."""

import pytest

from kvoffload.inputs.models import load_model
from kvoffload.inputs.precision import KvFormat, kv_format
from kvoffload.model import kv


@pytest.mark.parametrize(
    ("fmt", "per_head"),
    [
        # vLLM --kv-cache-dtype fp8_e4m3 / fp8_e5m2: one byte per value; e4m3's k/v scales are one
        # float per layer, not per token
        (KvFormat.FP8_E4M3, 128),
        (KvFormat.FP8_E5M2, 128),
        # llama.cpp --cache-type-k/v, ggml-common.h blocks of 32 values: q4_1 = 2 fp16 + 16 B of
        # nibbles = 20; q5_0 = fp16 + 4 B high bits + 16 = 22; q5_1 = 2 fp16 + 4 + 16 = 24
        (KvFormat.Q4_1, 80),
        (KvFormat.Q5_0, 88),
        (KvFormat.Q5_1, 96),
    ],
)
def test_engine_kv_formats_store_what_their_blocks_hold(fmt, per_head):
    m = load_model("llama-3.1-8b")  # 32 layers, 8 KV heads of 128
    assert kv.bytes_per_token(m, fmt) == 2 * 32 * 8 * per_head


def test_kv_formats_are_ordered_by_bits_and_named_as_the_engines_name_them():
    m = load_model("llama-3.1-8b")
    order = ["fp32", "bf16", "q8_0", "fp8_e4m3", "q5_1", "q5_0", "q4_1", "q4_0"]
    sizes = [kv.bytes_per_token(m, kv_format(f)) for f in order]
    assert sizes == sorted(sizes, reverse=True)
    assert len(set(sizes[3:])) == len(sizes[3:])
