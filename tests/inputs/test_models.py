"""Model catalog and HF import: shapes, parameter counts, weight bytes as quantisers store them."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kvoffload.inputs import limits
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.models import _gguf_type, from_hf_config, load_model, model_ids
from kvoffload.inputs.precision import (
    GGML_BLOCKS,
    KvFormat,
    WeightFormat,
    int4_g64_bytes,
    kv_vector_bytes,
)
from kvoffload.model import kv

EXPECTED_IDS = set(
    [
        "llama-3-8b",
        "llama-3.1-8b",
        "llama-3.2-1b",
        "llama-3.1-70b",
        "llama-3.1-405b",
        "llama-2-7b",
        "llama-2-70b",
        "llama-7b",
        "mistral-7b-v0.1",
        "mistral-7b-v0.3",
        "qwen2.5-7b",
        "qwen3-8b",
        "opt-6.7b",
        "opt-30b",
        "opt-66b",
        "opt-175b",
        "bloom-176b",
        "deepseek-v3",
        "gpt-oss-20b",
        "gemma-2-9b",
        "mixtral-8x7b",
        "qwen3-30b-a3b",
        "qwen3-235b-a22b",
        "gpt-oss-120b",
        "glm-4.5-air",
        "llama-4-scout",
        "kimi-k2",
        "qwen3-next-80b-a3b",
        "nemotron-h-56b",
    ]
)

# Published totals rounded further than the 2% the test allows: Kimi K2's card says "1T" for
# 1.026 T parameters counted from its config (61 MLA layers, 384 experts + 1 shared, untied).
_PUBLISHED_ROUNDING = {"kimi-k2": 0.03}


def test_catalog_ids_are_the_documented_ones():
    assert set(model_ids()) == EXPECTED_IDS


@pytest.mark.parametrize("ident", sorted(EXPECTED_IDS))
def test_parameter_count_matches_the_published_one(ident):
    m = load_model(ident)
    assert m.published_params, f"{ident}: no published parameter count in the catalog"
    # Llama-2-70B is published as "70B" but has 69.0 B parameters; Llama 4 Scout's 109B counts
    # its vision tower, which the catalog's text model leaves out; the rest are within 1%.
    assert m.params == pytest.approx(m.published_params, rel=_PUBLISHED_ROUNDING.get(ident, 0.02))


@pytest.mark.parametrize("ident", ["deepseek-v3", "gpt-oss-20b", "gpt-oss-120b"])
def test_moe_active_parameters(ident):
    m = load_model(ident)
    # Active parameters leave out the input embedding table (a lookup, not a matmul), as
    # OpenAI's gpt-oss model card (arXiv 2508.10925) counts them: 5.13 B for gpt-oss-120b.
    assert m.active_params == pytest.approx(m.published_active_params, rel=0.03)
    assert m.active_params < m.params - m.vocab * m.hidden


@pytest.mark.parametrize(
    ("ident", "kind"),
    [
        ("llama-2-7b", "mha"),
        ("llama-3.1-8b", "gqa"),
        ("deepseek-v3", "mla"),
        ("opt-175b", "mha"),
        ("qwen2.5-7b", "gqa"),
    ],
)
def test_attention_kind(ident, kind):
    assert load_model(ident).attention_kind == kind


def test_llama31_8b_q4_k_m_matches_llama_cpp_load_log():
    """llama.cpp prints, loading Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf (bartowski's build):

    'type f32: 66 tensors, type q4_K: 193 tensors, type q6_K: 33 tensors',
    'model size = 4.58 GiB (4.89 BPW)', and Ollama's scheduler reports
    'memory.weights.nonrepeating=411.0 MiB' (the q6_K output layer) for the same file.
    """
    m = load_model("llama-3.1-8b")
    types = Counter()
    for t in m.tensors():
        if t.vector:
            types["f32"] += t.count
        else:
            types[_gguf_type(m, t, WeightFormat.Q4_K_M)] += 1
    types["f32"] += 1  # rope_freqs, a llama-3.1 GGUF extra
    assert types == {"f32": 66, "q4_k": 193, "q6_k": 33}
    w = m.weight_bytes(WeightFormat.Q4_K_M)
    assert round(w.total / 2**30, 2) == 4.58
    assert round(w.total * 8 / m.params, 2) == pytest.approx(4.89, abs=0.01)
    assert round(w.output / 2**20, 1) == pytest.approx(411.0, abs=0.1)


def test_bf16_is_two_bytes_per_parameter():
    m = load_model("llama-3.1-8b")
    assert m.weight_bytes(WeightFormat.BF16).total == 2 * m.params


def test_hf_int4_keeps_embeddings_and_lm_head_in_16_bit():
    m = load_model("llama-3.1-8b")
    w4 = m.weight_bytes(WeightFormat.INT4)
    bf = m.weight_bytes(WeightFormat.BF16)
    assert w4.embedding == bf.embedding and w4.output == bf.output
    # decoder linears: 4 bits + an fp16 scale and a 4-bit zero per 128 weights = 4.156 bits
    linear = sum(t.params for t in m.tensors() if t.role.startswith(("attn_", "ffn_")))
    norms = sum(t.params for t in m.tensors() if t.layer is not None and t.vector)
    assert int(w4.per_layer.sum()) == pytest.approx(linear * 4.15625 / 8 + 2 * norms, rel=1e-6)


def test_group_wise_int4_quantises_every_matrix_at_4_5_bits():
    # DeepSpeed's and FlexGen's layout: 64 values in 32 bytes, an fp16 scale and minimum each
    m = load_model("opt-66b")
    w = m.weight_bytes(WeightFormat.INT4_G64)
    bf = m.weight_bytes(WeightFormat.BF16)
    # the token and the learned position embeddings (both nn.Embedding)
    rows = m.vocab + m.learned_positions
    assert w.embedding == rows * m.hidden * 4.5 / 8 < bf.embedding
    matrices = sum(t.params for t in m.tensors() if t.layer is not None and not t.vector)
    vectors = sum(t.params for t in m.tensors() if t.layer is not None and t.vector)
    assert int(w.per_layer.sum()) == matrices * 4.5 / 8 + 2 * vectors
    # a row that is not a whole number of groups still keeps a scale and minimum for its tail
    assert int4_g64_bytes(3, 65) == 3 * (33 + 2 * 4)


def test_gguf_tied_embedding_takes_the_output_type():
    m = load_model("gemma-2-9b")
    assert m.tie_embeddings
    w = m.weight_bytes(WeightFormat.Q4_0)
    block, size = GGML_BLOCKS["q6_k"]
    assert w.embedding == m.vocab * (m.hidden // block) * size


@pytest.mark.parametrize("ident", sorted(EXPECTED_IDS))
def test_quantisation_never_increases_bytes_and_layers_sum_to_total(ident):
    m = load_model(ident)
    bf16 = m.weight_bytes(WeightFormat.BF16).total
    for fmt in WeightFormat:
        if fmt is WeightFormat.GGUF:
            continue  # the types a .gguf file gives: only a model read from one has them
        w = m.weight_bytes(fmt)
        if fmt is WeightFormat.FP32:
            assert w.total == 2 * bf16  # the one format wider than the 16-bit checkpoint
        else:
            assert w.total <= bf16
        assert w.total == int(w.per_layer.sum()) + w.embedding + w.output
        assert w.experts is not None and np.all(w.experts <= w.per_layer)
        assert (int(w.experts.sum()) > 0) == bool(m.moe)
    order = [
        WeightFormat.Q8_0,
        WeightFormat.Q6_K,
        WeightFormat.Q5_K_M,
        WeightFormat.Q4_K_M,
        WeightFormat.Q4_0,
    ]
    sizes = [m.weight_bytes(f).total for f in order]
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[0] > sizes[3] > sizes[4]


# -- import errors ------------------------------------------------------------------------------
GOOD = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "intermediate_size": 14336,
}


@pytest.mark.parametrize(
    ("change", "field", "fragment"),
    [
        ({"hidden_size": None}, "hidden_size", "missing"),
        ({"num_hidden_layers": 0}, "num_hidden_layers", ">= 1"),
        ({"num_attention_heads": "32"}, "num_attention_heads", "integer"),
        ({"num_key_value_heads": 5}, "num_key_value_heads", "not a multiple"),
        (
            {"hidden_size": 4000, "num_attention_heads": 30, "num_key_value_heads": 30},
            "head_dim",
            "divisible",
        ),
        ({"sliding_window": -4}, "sliding_window", "positive"),
        ({"layer_types": ["full_attention"]}, "layer_types", "one type per layer"),
        ({"layer_types": ["rwkv"] * 32}, "layer_types[0]", "unsupported"),
        ({"layer_types": ["mamba"] * 32}, "mamba_n_heads", "missing"),
        ({"layer_types": ["linear_attention"] * 32}, "linear_num_key_heads", "missing"),
        ({"hybrid_override_pattern": "M*M-" * 8}, "hybrid_override_pattern", "nemotron_h only"),
        (
            {"model_type": "nemotron_h", "hybrid_override_pattern": "M*E-" * 8},
            "hybrid_override_pattern[2]",
            "not supported",
        ),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings", "true or false"),
        ({"intermediate_size": None}, "intermediate_size", "missing"),
    ],
)
def test_import_errors_name_the_field(change, field, fragment):
    cfg = {**GOOD, **change}
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with pytest.raises(InputError, match=fragment) as info:
        from_hf_config(cfg, ident="x")
    assert info.value.field == field


# -- KV bytes at the largest accepted shapes: int64 must not wrap ---------------------------


def _big(top: int) -> st.SearchStrategy[int]:
    """Integers from 1 to ``top``, often at or near ``top``."""
    return st.one_of(st.just(top), st.integers(max(1, top - 8), top), st.integers(1, top))


@st.composite
def _huge_models(draw):
    layers = draw(_big(limits.MAX_LAYERS))

    def widest(h: int) -> int:
        return max(kv_vector_bytes(h, f) for f in KvFormat)

    # the widest head one KV head per layer still fits (drawn larger, it is clamped to it: no
    # filtering, and the boundary is drawn often)
    lo, hi = 1, limits.MAX_HEAD_DIM
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (
            (mid, hi)
            if 2 * widest(mid) * layers <= limits.MAX_KV_BYTES_PER_TOKEN
            else (lo, mid - 1)
        )
    head_dim = min(draw(_big(limits.MAX_HEAD_DIM)), lo)
    kv_heads_max = min(
        limits.MAX_HEADS, limits.MAX_KV_BYTES_PER_TOKEN // (2 * widest(head_dim) * layers)
    )
    kv_heads = draw(_big(kv_heads_max))
    heads = kv_heads * draw(st.integers(1, limits.MAX_HEADS // kv_heads))
    window = draw(_big(limits.MAX_CONTEXT_TOKENS))
    # how many layers of each kind, in a shuffled order (drawing a kind per layer, up to a
    # thousand draws an example, took most of this test's time)
    full = draw(st.integers(0, layers))
    sliding = draw(st.integers(0, layers - full))
    kinds = (
        ["full_attention"] * full
        + ["sliding_attention"] * sliding
        + ["linear_attention"] * (layers - full - sliding)
    )
    random.Random(draw(st.integers(0, 2**32 - 1))).shuffle(kinds)  # one draw, not one a layer
    nk = draw(st.integers(1, 64))
    nv = nk * draw(st.integers(1, 16))
    hk, hv = draw(_big(limits.MAX_HEAD_DIM)), draw(_big(limits.MAX_HEAD_DIM))
    taps = draw(st.integers(1, 8)) - 1
    # the recurrent state stays within its bound (fp32, every linear layer): a value head
    # drawn larger is clamped to the largest that fits, the key head halved when none does
    budget = limits.MAX_STATE_BYTES_PER_REQUEST // (4 * max(1, kinds.count("linear_attention")))
    while (hv_max := (budget - taps * 2 * nk * hk) // (nv * hk + taps * nv)) < 1:
        hk //= 2
    hv = min(hv, hv_max)
    cfg = {
        "model_type": "",
        "num_hidden_layers": layers,
        "hidden_size": 256,
        "intermediate_size": 64,
        "vocab_size": 1000,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "sliding_window": window,
        "layer_types": kinds,
        "linear_num_key_heads": nk,
        "linear_num_value_heads": nv,
        "linear_key_head_dim": hk,
        "linear_value_head_dim": hv,
        "linear_conv_kernel_dim": taps + 1,
    }
    return cfg


def _exact_batch_bytes(cfg: dict, seq: int, batch: int, fmt: KvFormat) -> int:
    """The cache of ``batch`` requests at ``seq`` in Python integers, from the config alone."""
    token = 2 * cfg["num_key_value_heads"] * kv_vector_bytes(cfg["head_dim"], fmt)
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    hk, hv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    conv = (cfg["linear_conv_kernel_dim"] - 1) * (2 * nk * hk + nv * hv)
    state = (nv * hk * hv + conv) * (4 if fmt is KvFormat.FP32 else 2)
    total = 0
    for kind in cfg["layer_types"]:
        if kind == "full_attention":
            total += seq * token
        elif kind == "sliding_attention":
            total += min(seq, cfg["sliding_window"]) * token
        else:
            total += state
    return batch * total


@settings(max_examples=150, deadline=None)
@given(
    cfg=_huge_models(),
    seqs=st.lists(_big(limits.MAX_CONTEXT_TOKENS), min_size=1, max_size=4),
    batch=_big(limits.MAX_BATCH),
    fmt=st.sampled_from(list(KvFormat)),
)
def test_kv_bytes_match_exact_integers_at_the_largest_accepted_shapes(cfg, seqs, batch, fmt):
    try:
        model = from_hf_config(cfg, ident="huge")
    except InputError as exc:  # the recurrent state alone may exceed its bound
        assert "recurrent state" in str(exc)
        assume(False)
    got = kv.batch_bytes(model, np.array(seqs), batch, fmt)
    expected = [_exact_batch_bytes(cfg, s, batch, fmt) for s in seqs]
    assert [int(x) for x in got] == expected
    assert all(0 <= e < 2**63 for e in expected)
    assert kv.kv_size(model, seqs[0], batch, fmt).total_bytes == expected[0]
