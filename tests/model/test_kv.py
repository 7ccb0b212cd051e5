"""KV sizing: the formula, conformance vectors for the catalog, properties over any shape."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.inputs.limits import MAX_CONTEXT_TOKENS
from kvoffload.inputs.models import from_hf_config, load_model, model_ids
from kvoffload.inputs.precision import KvFormat
from kvoffload.model import kv

# Bytes of K+V per token over all layers, bf16, worked out by hand from each config.json:
# 2 (K and V) x layers x KV heads x head_dim x 2 bytes; MLA caches one latent of
# kv_lora_rank + qk_rope_head_dim per layer; OPT/BLOOM are MHA (KV heads = heads).
CONFORMANCE = {
    "llama-3-8b": 2 * 32 * 8 * 128 * 2,
    "llama-3.1-8b": 2 * 32 * 8 * 128 * 2,
    "llama-3.1-70b": 2 * 80 * 8 * 128 * 2,
    "llama-3.1-405b": 2 * 126 * 8 * 128 * 2,
    "llama-3.2-1b": 2 * 16 * 8 * 64 * 2,  # 32 KiB: the vLLM blog's 0.5 MB per 16-token block
    "llama-2-7b": 2 * 32 * 32 * 128 * 2,
    "llama-2-70b": 2 * 80 * 8 * 128 * 2,
    "llama-7b": 2 * 32 * 32 * 128 * 2,
    "mistral-7b-v0.1": 2 * 32 * 8 * 128 * 2,
    "mistral-7b-v0.3": 2 * 32 * 8 * 128 * 2,
    "qwen2.5-7b": 2 * 28 * 4 * 128 * 2,
    "qwen3-8b": 2 * 36 * 8 * 128 * 2,
    "opt-6.7b": 2 * 32 * 4096 * 2,
    "opt-30b": 2 * 48 * 7168 * 2,
    "opt-66b": 2 * 64 * 9216 * 2,
    "opt-175b": 2 * 96 * 12288 * 2,
    "bloom-176b": 2 * 70 * 14336 * 2,
    "deepseek-v3": 61 * (512 + 64) * 2,
    "gpt-oss-20b": 2 * 24 * 8 * 64 * 2,
    "gemma-2-9b": 2 * 42 * 8 * 256 * 2,
    # MoE and hybrid models, by hand from the config.json in each catalog file (GQA: 2 x layers
    # x KV heads x head_dim x 2 B over the attention layers only; recurrent layers add none)
    "mixtral-8x7b": 2 * 32 * 8 * 128 * 2,  # 131,072
    "qwen3-30b-a3b": 2 * 48 * 4 * 128 * 2,  # 98,304
    "qwen3-235b-a22b": 2 * 94 * 4 * 128 * 2,  # 192,512
    "gpt-oss-120b": 2 * 36 * 8 * 64 * 2,  # 73,728: 18 full + 18 sliding layers, none full yet
    "glm-4.5-air": 2 * 46 * 8 * 128 * 2,  # 188,416 (the MTP layer is not a decoder layer)
    "llama-4-scout": 2 * 48 * 8 * 128 * 2,  # 196,608: 12 global + 36 chunked layers
    "kimi-k2": 61 * (512 + 64) * 2,  # 70,272: MLA latent, as DeepSeek-V3
    "qwen3-next-80b-a3b": 2 * 12 * 2 * 256 * 2,  # 24,576: 12 attention layers; 36 are DeltaNet
    # 40,960: the 10 '*' blocks of 118; 54 Mamba-2 blocks keep a state, 54 MLP blocks nothing
    "nemotron-h-56b": 2 * 10 * 8 * 128 * 2,
}

# Layers that slide (or attend within a chunk), and their window, from each config.
WINDOWS = {
    "mistral-7b-v0.1": (32, 4096),
    "gpt-oss-20b": (12, 128),
    "gemma-2-9b": (21, 4096),
    "gpt-oss-120b": (18, 128),
    "llama-4-scout": (36, 8192),  # chunked: attention_chunk_size, an upper bound on what it holds
}


def test_every_catalog_model_has_a_conformance_vector():
    assert set(CONFORMANCE) == set(model_ids())


@pytest.mark.parametrize("ident", sorted(CONFORMANCE))
def test_bytes_per_token(ident):
    assert kv.bytes_per_token(load_model(ident)) == CONFORMANCE[ident]


@pytest.mark.parametrize("ident", sorted(CONFORMANCE))
def test_sliding_layers_are_those_of_the_config(ident):
    model = load_model(ident)
    sliding = [w for w in model.layer_windows if w]  # None: full attention; 0: recurrent state
    n, window = WINDOWS.get(ident, (0, None))
    assert len(sliding) == n
    assert set(sliding) <= {window}


def test_acceptance_llama31_8b_128000():
    # 131072 B/token x 128000 tokens
    assert int(kv.batch_bytes(load_model("llama-3.1-8b"), 128_000, 1)) == 16_777_216_000


def test_sliding_window_caps_gemma2():
    m = load_model("gemma-2-9b")
    per_layer = 2 * 8 * 256 * 2
    seq = 128_000
    expected = 21 * seq * per_layer + 21 * 4096 * per_layer
    assert int(kv.request_bytes(m, seq)) == expected


@pytest.mark.parametrize(
    ("fmt", "per_head"),
    [
        (KvFormat.BF16, 256),
        (KvFormat.FP16, 256),
        (KvFormat.FP8, 128),
        (KvFormat.INT8, 132),  # 128 B + fp16 scale + fp16 zero per token and head
        (KvFormat.INT4, 68),
        (KvFormat.Q8_0, 136),  # 4 blocks of 32 at 34 B
        (KvFormat.Q4_0, 72),  # 4 blocks of 32 at 18 B
    ],
)
def test_kv_precision_bytes(fmt, per_head):
    m = load_model("llama-3.1-8b")
    assert kv.bytes_per_token(m, fmt) == 2 * 32 * 8 * per_head


# -- configs the catalog has never seen ---------------------------------------------------------
def _cfg(**kw):
    base = {"model_type": "llama", "vocab_size": 32000, "intermediate_size": 8192}
    return {**base, **kw}


def test_explicit_head_dim_that_differs_from_hidden_over_heads():
    cfg = _cfg(
        model_type="qwen3",
        hidden_size=2560,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
    )
    m = from_hf_config(cfg, ident="unseen")
    assert 2560 // 32 == 80 and m.head_dim == 128
    assert kv.bytes_per_token(m) == 2 * 36 * 8 * 128 * 2


def test_mla_caches_the_latent_not_the_heads():
    cfg = _cfg(
        model_type="deepseek_v2",
        hidden_size=2048,
        num_hidden_layers=27,
        num_attention_heads=16,
        num_key_value_heads=16,
        kv_lora_rank=512,
        q_lora_rank=None,
        qk_rope_head_dim=64,
        qk_nope_head_dim=128,
        v_head_dim=128,
        n_routed_experts=64,
        num_experts_per_tok=6,
        moe_intermediate_size=1408,
        n_shared_experts=2,
        first_k_dense_replace=1,
        intermediate_size=10944,
        vocab_size=102400,
    )
    m = from_hf_config(cfg, ident="deepseek-v2-lite")
    assert m.attention_kind == "mla"
    assert kv.bytes_per_token(m) == 27 * (512 + 64) * 2
    # DeepSeek-V2-Lite: 15.7 B total, 2.4 B active (model card)
    assert m.params == pytest.approx(15.7e9, rel=0.02)


def test_alternating_sliding_layers_from_layer_types():
    types = ["sliding_attention"] * 5 + ["full_attention"]
    cfg = _cfg(
        model_type="gemma3_text",
        hidden_size=1152,
        num_hidden_layers=12,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=256,
        sliding_window=512,
        layer_types=types * 2,
    )
    m = from_hf_config(cfg, ident="alt")
    assert m.attention_kind == "mqa"
    per_layer = 2 * 1 * 256 * 2
    assert int(kv.request_bytes(m, 100)) == 12 * 100 * per_layer
    assert int(kv.request_bytes(m, 10_000)) == (10 * 512 + 2 * 10_000) * per_layer


def test_gemma3_style_pattern_without_layer_types():
    cfg = _cfg(
        hidden_size=2560,
        num_hidden_layers=12,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=256,
        sliding_window=1024,
        sliding_window_pattern=6,
        model_type="gemma3_text",
    )
    m = from_hf_config(cfg, ident="g3")
    assert [w is None for w in m.layer_windows].count(True) == 2


def test_cli_on_unseen_config(cli, write):
    path = write(
        "config.json",
        json.dumps(
            _cfg(
                hidden_size=2560,
                num_hidden_layers=36,
                num_attention_heads=32,
                num_key_value_heads=8,
                head_dim=128,
                model_type="qwen3",
            )
        ),
    )
    r = cli("kv", path, "--seq", "4096", "--batch", "3", "--json")
    assert r.code == 0, r.err
    out = r.json()
    assert out["bytes_per_token"] == 147456
    assert out["total_bytes"] == 147456 * 4096 * 3


# -- properties ---------------------------------------------------------------------------------
shapes = st.fixed_dictionaries(
    {
        "num_hidden_layers": st.integers(1, 96),
        "num_attention_heads": st.sampled_from([8, 16, 32, 64]),
        "kv_div": st.sampled_from([1, 2, 4, 8]),
        "head_dim": st.sampled_from([64, 96, 128, 256]),
        "window": st.one_of(st.none(), st.integers(16, 8192)),
        "pattern": st.integers(1, 6),
    }
)


def _model(s):
    layer_types = None
    if s["window"] is not None:
        layer_types = [
            "full_attention" if (i + 1) % s["pattern"] == 0 else "sliding_attention"
            for i in range(s["num_hidden_layers"])
        ]
    cfg = _cfg(
        hidden_size=s["num_attention_heads"] * s["head_dim"],
        num_hidden_layers=s["num_hidden_layers"],
        num_attention_heads=s["num_attention_heads"],
        num_key_value_heads=s["num_attention_heads"] // s["kv_div"],
        head_dim=s["head_dim"],
        sliding_window=s["window"],
        layer_types=layer_types,
    )
    return from_hf_config(cfg, ident="prop")


@settings(max_examples=60, deadline=None)
@given(shapes, st.integers(1, 300_000), st.integers(1, 512), st.sampled_from(list(KvFormat)))
def test_kv_is_linear_in_batch(shape, seq, batch, fmt):
    m = _model(shape)
    one = int(kv.batch_bytes(m, seq, 1, fmt))
    assert int(kv.batch_bytes(m, seq, batch, fmt)) == batch * one


@settings(max_examples=60, deadline=None)
@given(
    shapes,
    st.lists(st.integers(1, 300_000), min_size=2, max_size=20),
    st.sampled_from(list(KvFormat)),
)
def test_kv_is_non_decreasing_in_context(shape, seqs, fmt):
    m = _model(shape)
    seqs = np.sort(np.array(seqs))
    sizes = kv.request_bytes(m, seqs, fmt)
    assert np.all(np.diff(sizes) >= 0)


@settings(max_examples=60, deadline=None)
@given(shapes, st.integers(1, 100_000))
def test_sliding_layers_stop_growing_at_their_window(shape, extra):
    m = _model(shape)
    if not m.has_sliding_window:
        return
    w = max(x for x in m.layer_windows if x is not None)
    a = kv.layer_bytes(m, w)
    b = kv.layer_bytes(m, w + extra)
    sliding = np.array([x is not None for x in m.layer_windows])
    assert np.array_equal(a[sliding], b[sliding])
    assert np.all(b[~sliding] > a[~sliding])


@settings(max_examples=60, deadline=None)
@given(shapes, st.integers(1, 300_000), st.sampled_from(list(KvFormat)))
def test_bytes_are_conserved_and_quantised_formats_are_smaller(shape, seq, fmt):
    m = _model(shape)
    layers = kv.layer_bytes(m, seq, fmt)
    assert int(layers.sum()) == int(kv.request_bytes(m, seq, fmt))
    assert int(kv.request_bytes(m, seq, fmt)) <= int(kv.request_bytes(m, seq, KvFormat.FP32))
    if fmt is not KvFormat.FP32:
        assert int(kv.request_bytes(m, seq, fmt)) <= int(kv.request_bytes(m, seq, KvFormat.BF16))


def test_vectorised_over_a_grid():
    m = load_model("llama-3.1-8b")
    seq = np.array([[1000], [128_000]])
    batch = np.array([1, 2, 4])
    out = kv.batch_bytes(m, seq, batch)
    assert out.shape == (2, 3)
    assert out[1, 2] == 4 * 16_777_216_000


@settings(max_examples=60, deadline=None)
@given(shapes, st.floats(1e6, 1e12), st.integers(1, 64))
def test_max_context_is_the_longest_that_fits(shape, budget, batch):
    m = _model(shape)
    s = int(kv.max_context(m, budget, batch))
    if s < MAX_CONTEXT_TOKENS:
        assert kv.batch_bytes(m, s + 1, batch) > budget
    if s > 0:
        assert kv.batch_bytes(m, s, batch) <= budget


def test_max_context_vectorised_over_batch():
    m = load_model("llama-3.1-8b")
    out = kv.max_context(m, 40e9, np.array([1, 2, 4]))
    assert list(out) == [40_000_000_000 // 131_072 // b for b in (1, 2, 4)]
