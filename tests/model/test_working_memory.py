"""One layer's prefill working set: FlexGen's PyTorch stages, the score matrix, chunked prefill, and
the step model's GPU bytes (the prefill's working set or the decode's buffers, whichever is larger)."""

from __future__ import annotations

import numpy as np
import pytest

from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model
from kvoffload.inputs.precision import WeightFormat
from kvoffload.model import decode, working_memory

OPT_30B = load_model("opt-30b")
LLAMA = load_model("llama-3-8b")
A100 = load_system("a100-80gb-sxm-pcie4")


def test_opt_stages_are_flexgens_tensors_counted_by_hand():
    # pytorch_backend.mha for a GPU batch of b prompts of s tokens, fp16: the input, its normed
    # copy, q, k, v, and the (b * heads, s, s) scores twice at the softmax, the bool mask once
    h, nh, s, b = OPT_30B.hidden, OPT_30B.n_heads, 512, 48
    softmax = b * s * (2 * 5 * h + 2 * 2 * nh * s + s)
    after_value = b * s * (2 * 7 * h + 2 * nh * s + s)  # one score matrix, the value and a copy
    mlp = b * s * 2 * (2 * h + 4 * h)  # input, fc1's 4h activation, output
    attention, ffn = working_memory.prefill_stage_bytes(OPT_30B, s, b)
    assert float(attention) == max(softmax, after_value)
    assert float(ffn) == mlp
    assert float(working_memory.prefill_working_bytes(OPT_30B, s, b)) == max(softmax, mlp)


def test_the_score_matrix_grows_with_the_prompts_square():
    short, long = (float(working_memory.prefill_working_bytes(OPT_30B, s, 1)) for s in (4096, 8192))
    assert 3.5 < long / short < 4  # scores dominate; the per-token rows only double
    scores = 2 * 2 * OPT_30B.n_heads * 8192**2  # two fp16 copies of one request's matrix
    assert scores < long < 1.2 * scores


def test_a_fused_chunked_prefill_holds_one_chunks_rows_whatever_the_prompt():
    chunk = working_memory.CHUNK_TOKENS
    kw = {"chunk": chunk, "scores": False}
    full = working_memory.prefill_working_bytes(LLAMA, 1_000_000, 4, **kw)
    assert float(full) == float(working_memory.prefill_working_bytes(LLAMA, chunk, 1, **kw))
    small = working_memory.prefill_working_bytes(LLAMA, 100, 2, **kw)  # 200 rows, under a chunk
    assert float(small) == pytest.approx(float(full) * 200 / chunk)
    # a gated MLP holds gate, up and their product: 3 x the intermediate width per token
    h, i = LLAMA.hidden, LLAMA.intermediate
    assert float(full) == chunk * 2 * (2 * h + 3 * i)


def test_grouped_heads_and_experts_set_the_widths():
    # Llama 3 8B: 8 KV heads for 32 query heads, so k and v are a quarter of q's width
    h, q = LLAMA.hidden, LLAMA.n_heads * LLAMA.head_dim
    kv = LLAMA.n_kv_heads * LLAMA.head_dim
    att, _ = working_memory.prefill_stage_bytes(LLAMA, 1, 1, scores=False)
    assert float(att) == 2 * (2 * h + q + 2 * kv + 2 * q)  # after the value: value and copy
    # Mixtral: each token runs through 2 of 8 experts, each a gated MLP
    mixtral = load_model("mixtral-8x7b")
    e = mixtral.moe
    _, mlp = working_memory.prefill_stage_bytes(mixtral, 1, 1, scores=False)
    assert float(mlp) == 2 * (2 * mixtral.hidden + 3 * e.experts_per_token * e.expert_intermediate)


def test_arrays_broadcast_like_single_calls():
    prompts = np.array([[128], [512], [2048]])
    batches = np.array([1, 4, 16, 64])
    grid = working_memory.prefill_working_bytes(OPT_30B, prompts, batches)
    assert grid.shape == (3, 4)
    for i, s in enumerate(prompts[:, 0]):
        for j, b in enumerate(batches):
            assert grid[i, j] == float(working_memory.prefill_working_bytes(OPT_30B, s, b))


def test_the_step_models_gpu_holds_the_prefill_working_set_when_nothing_streams():
    setup = decode.Setup(A100, LLAMA)
    mem = decode.memory(setup, 8_000, 4)
    working = working_memory.prefill_working_bytes(
        LLAMA, 8_000, 4, chunk=working_memory.CHUNK_TOKENS, scores=False
    )
    assert float(mem.staging) == float(working) > 0
    weights = decode.resident_weight_bytes(LLAMA, WeightFormat.BF16)
    kv_total = float(decode._kv_total(setup, 8_000, 4))
    assert float(mem.gpu) == pytest.approx(weights + kv_total + float(working), rel=1e-12)


def test_decode_buffers_and_prefill_working_set_alternate_weight_buffers_add():
    # weights half in host memory, streamed: both phases hold two layers' weight buffers; the
    # decode adds the layer's offloaded KV, the prefill its working set: the GPU holds the larger
    half = decode.Placement(
        weights=decode.Split(0.5, 0.5, 0), kv=decode.Split(0, 1, 0), overlap="pipeline"
    )
    setup = decode.Setup(A100, LLAMA, placement=half)
    lay = decode.layers(LLAMA, WeightFormat.BF16)
    kv_token = decode._kv_token_bytes(LLAMA, setup.kv) * lay.kv_per_token
    kw = {"chunk": working_memory.CHUNK_TOKENS, "scores": False}
    deciders = set()
    for context, batch in ((1_000, 1), (200_000, 8)):
        working = float(working_memory.prefill_working_bytes(LLAMA, context, batch, **kw))
        decode_bufs = 2 * float(np.max(lay.weight_bytes * 0.5 + batch * context * kv_token))
        prefill_bufs = 2 * float(np.max(lay.weight_bytes * 0.5)) + working
        staging = float(decode.memory(setup, context, batch).staging)
        assert staging == pytest.approx(max(decode_bufs, prefill_bufs), rel=1e-12)
        deciders.add(decode_bufs > prefill_bufs)
    assert deciders == {True, False}  # a short context: the prefill decides; a long one: decode
