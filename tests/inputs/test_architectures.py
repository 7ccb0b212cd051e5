"""Hybrid and MoE architectures: recurrent-state layers, chunked attention, sinks, active params.

Expected figures are worked out by hand from each config.json (the ``config:`` block of the
catalog file) and the module shapes of Hugging Face transformers:
- Qwen3-Next: ``Qwen3NextGatedDeltaNet`` / ``Qwen3NextAttention`` in
  src/transformers/models/qwen3_next/modeling_qwen3_next.py @ 01cdc6081c7500f9e50c98b1b943c90ecb665db3;
  layer_types from ``Qwen3NextConfig.__post_init__`` (configuration_qwen3_next.py @ 008e5743).
- Llama 4: ``Llama4TextConfig.__post_init__`` (configuration_llama4.py @
  008e574391258935f3ecc3035c882e73bbcac419: no_rope_layers, layer_types, tie_word_embeddings
  False) and ``Llama4TextMoe`` (modeling_llama4.py @ 63210d0e: a shared expert of
  intermediate_size beside the routed ones).
- GLM-4.5: ``Glm4MoeAttention`` (modeling_glm4_moe.py @ a0699c97): q/k/v take attention_bias,
  o_proj has none; ``Glm4MoeTopkRouter`` keeps an e_score_correction_bias per expert.
- Recurrent state as vLLM allocates it: ``MambaStateShapeCalculator`` in
  vllm/model_executor/layers/mamba/mamba_utils.py @ 2afe1e8573cf51b73569ae1d35f59078a2032a91.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.inputs.errors import InputError
from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.limits import MAX_CONTEXT_TOKENS
from kvoffload.inputs.models import from_hf_config, load_model
from kvoffload.inputs.precision import KvFormat
from kvoffload.model import decode, kv
from kvoffload.model.routing import touched_share

A100 = load_system("a100-80gb-sxm-pcie4")


# -- Qwen3-Next: gated DeltaNet + gated attention ------------------------------------------------
QWEN3_NEXT = "qwen3-next-80b-a3b"
# per DeltaNet layer: recurrent state num_v_heads x head_k_dim x head_v_dim = 32 x 128 x 128, and
# conv state (kernel - 1) x conv channels = 3 x (2 x 16 x 128 + 32 x 128) = 3 x 8192
GDN_STATE_VALUES = 32 * 128 * 128 + 3 * 8192  # 548,864
GDN_STATE_BF16 = 36 * GDN_STATE_VALUES * 2  # 39,518,208 B per request, at any context


def test_qwen3_next_layers_come_from_full_attention_interval():
    m = load_model(QWEN3_NEXT)
    full = [i for i, k in enumerate(m.kinds) if k == "attention"]
    assert full == list(range(3, 48, 4))  # 12 layers: (i + 1) % 4 == 0
    assert m.kinds.count("linear_attention") == 36
    assert [m.layer_windows[i] for i in full] == [None] * 12
    assert {m.layer_windows[i] for i in range(48) if i not in full} == {0}
    assert not m.has_sliding_window


def test_qwen3_next_kv_and_state():
    m = load_model(QWEN3_NEXT)
    # 12 layers x 2 (K, V) x 2 KV heads x 256 x 2 B; the output gate is not cached
    assert kv.bytes_per_token(m) == 24_576
    assert m.deltanet is not None and m.deltanet.state_values == GDN_STATE_VALUES
    assert kv.state_bytes_per_request(m) == GDN_STATE_BF16 == 39_518_208
    assert kv.state_bytes_per_request(m, KvFormat.FP32) == 2 * GDN_STATE_BF16
    # vLLM keeps the state in the model dtype whatever kv_cache_dtype is
    assert kv.state_bytes_per_request(m, KvFormat.FP8) == GDN_STATE_BF16
    assert int(kv.request_bytes(m, 32_768)) == 805_306_368 + 39_518_208
    assert int(kv.batch_bytes(m, 32_768, 4)) == 4 * 844_824_576
    per_layer = kv.layer_bytes(m, 1000)
    assert set(per_layer[m.kinds.index("linear_attention") :: 4]) == {GDN_STATE_VALUES * 2}


def test_qwen3_next_parameters():
    m = load_model(QWEN3_NEXT)
    # hand count from the module shapes: 12 x 27,263,488 (attention, q_proj doubled by the output
    # gate) + 36 x 33,718,464 (DeltaNet) + 48 x 1,614,809,088 (MoE: 512 experts, shared expert
    # and its gate) + norms + embedding and lm_head of 311,164,928 each
    assert m.params == 79_674_391_296
    assert m.params == pytest.approx(79.67e9, rel=0.02)
    assert m.params == pytest.approx(80e9, rel=0.02)  # model card: 80B


def test_qwen3_next_kv_json(cli):
    r = cli("kv", QWEN3_NEXT, "--seq", "32768", "--json")
    assert r.code == 0, r.err
    out = r.json()
    assert out["bytes_per_token"] == 24_576
    assert out["state_bytes_per_request"] == GDN_STATE_BF16
    assert out["per_request_bytes"] == out["total_bytes"] == 844_824_576
    assert out["window_capped_layers"] == 0  # DeltaNet layers hold no tokens to cap
    assert out["bytes_per_token_per_layer"].count(0) == 36
    for key in ("model", "dtype", "seq", "batch", "layers", "total_gb", "total_gib"):
        assert key in out


def test_max_context_counts_the_state_once_per_request():
    m = load_model(QWEN3_NEXT)
    budget = 40e9
    for batch in (1, 8):
        s = int(kv.max_context(m, budget, batch))
        assert s == int((budget - batch * GDN_STATE_BF16) // (batch * 24_576))
        assert kv.batch_bytes(m, s, batch) <= budget < kv.batch_bytes(m, s + 1, batch)
    assert int(kv.max_context(m, GDN_STATE_BF16 - 1)) == 0  # not even the state fits


# -- Llama 4 Scout: chunked attention, a shared expert, untied embeddings -----------------------
def test_llama4_scout_layers():
    m = load_model("llama-4-scout")
    assert [i for i, w in enumerate(m.layer_windows) if w is None] == list(range(3, 48, 4))
    assert sum(w == 8192 for w in m.layer_windows) == 36
    # 12 global layers at the full context, 36 chunked layers at most one 8192-token chunk
    assert int(kv.request_bytes(m, 32_768)) == 2_818_572_288
    assert 2_818_572_288 == 12 * 4096 * 32_768 + 36 * 4096 * 8192


def test_llama4_scout_parameters():
    m = load_model("llama-4-scout")
    assert not m.tie_embeddings
    assert m.moe is not None and m.moe.n_shared_experts == 1
    assert m.moe.shared_intermediate == 8192 and all(m.moe_layers)
    # text model: 48 x (attention 62.9M + 16 experts + 1 shared expert) + untied embed/lm_head;
    # the card's 109B adds the vision tower and projector
    assert m.params == 107_769_861_120
    assert m.params == pytest.approx(107.77e9, rel=0.01)


def test_llama4_chunking_follows_no_rope_layers():
    base = load_model("llama-4-scout")
    cfg = {
        "model_type": "llama4_text",
        "hidden_size": 512,
        "intermediate_size": 1024,
        "intermediate_size_mlp": 2048,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "num_local_experts": 4,
        "num_experts_per_tok": 1,
        "vocab_size": 1000,
        "attention_chunk_size": 1024,
        "no_rope_layers": [1, 0, 1, 0],
    }
    m = from_hf_config(cfg, ident="l4")
    assert m.layer_windows == (1024, None, 1024, None)
    no_chunks = from_hf_config({**cfg, "attention_chunk_size": None}, ident="l4")
    assert no_chunks.layer_windows == (None,) * 4
    assert base.n_layers == 48


# -- gpt-oss: attention sinks, sliding layers, active parameters ---------------------------------
def test_gpt_oss_120b_active_parameters():
    m = load_model("gpt-oss-120b")
    # OpenAI's model card paper (arXiv 2508.10925) table: 116.83B total, 5.13B active; the input
    # embedding (579,133,440) is not active, the unembedding is; top-4 of 128 experts
    assert m.active_params == 5_132_849_472
    assert m.active_params == pytest.approx(5.13e9, rel=0.01)
    assert m.params == pytest.approx(116.83e9, rel=0.001)


def test_attention_sinks_need_no_kv():
    m = load_model("gpt-oss-120b")
    assert m.attention_sinks and any(t.role == "sinks" for t in m.tensors())
    plain = replace(m, attention_sinks=False)
    for seq in (100, 128, 32_768):
        assert int(kv.request_bytes(m, seq)) == int(kv.request_bytes(plain, seq))
    # 18 full layers at the context, 18 sliding layers at most their 128-token window
    assert int(kv.request_bytes(m, 32_768)) == 18 * 2048 * 32_768 + 18 * 2048 * 128


# -- GLM-4.5-Air -----------------------------------------------------------------------------------
def test_glm45_air_parameters():
    """zai-org/GLM-4.5-Air model card: 106B total, 12B active parameters.

    Counted from the module shapes: 106,852,251,264 (q/k/v biases, no o_proj bias, a router
    e_score_correction_bias per MoE layer; the MTP layer is not a decoder layer). The active
    count without the input embedding is 12.80B, and 12.18B also without the lm_head: "12B"
    is a rounded figure, so the second is checked to 2%.
    """
    m = load_model("glm-4.5-air")
    assert m.params == 106_852_251_264
    assert m.params == pytest.approx(106e9, rel=0.01)
    q, kv_width = 96 * 128, 8 * 128
    layer0 = [t for t in m.tensors() if t.layer == 0]
    biases = [t for t in layer0 if t.role == "bias"]
    assert [t.params for t in biases] == [q + 2 * kv_width]  # q, k, v only
    lm_head = m.vocab * m.hidden
    assert m.active_params == 12_803_372_672
    assert m.active_params - lm_head == pytest.approx(12e9, rel=0.02)


# -- every recurrent model: state per request, linear in context ----------------------------------
shapes = st.fixed_dictionaries(
    {
        "layers": st.integers(1, 64),
        "interval": st.integers(1, 8),
        "kv_heads": st.sampled_from([1, 2, 4]),
        "head_dim": st.sampled_from([64, 128, 256]),
        "k_heads": st.sampled_from([4, 8, 16]),
        "v_mult": st.sampled_from([1, 2]),
        "k_dim": st.sampled_from([64, 128]),
        "conv": st.integers(2, 6),
    }
)


def _hybrid(s):
    cfg = {
        "model_type": "qwen3_next",
        "hidden_size": 1024,
        "num_hidden_layers": s["layers"],
        "num_attention_heads": 8,
        "num_key_value_heads": s["kv_heads"],
        "head_dim": s["head_dim"],
        "intermediate_size": 2048,
        "vocab_size": 1000,
        "full_attention_interval": s["interval"],
        "linear_num_key_heads": s["k_heads"],
        "linear_num_value_heads": s["k_heads"] * s["v_mult"],
        "linear_key_head_dim": s["k_dim"],
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": s["conv"],
    }
    return from_hf_config(cfg, ident="hybrid")


@settings(max_examples=60, deadline=None)
@given(shapes, st.lists(st.integers(0, 500_000), min_size=2, max_size=8), st.sampled_from(KvFormat))
def test_request_bytes_are_linear_in_context(shape, seqs, fmt):
    """Slope: the attention layers' bytes per token; intercept: the recurrent state."""
    m = _hybrid(shape)
    slope, intercept = kv.bytes_per_token(m, fmt), kv.state_bytes_per_request(m, fmt)
    seqs = np.array(seqs)
    assert np.array_equal(kv.request_bytes(m, seqs, fmt), intercept + slope * seqs)
    n_attn = shape["layers"] // shape["interval"]
    assert slope == n_attn * kv.attention_layer_token_bytes(m, fmt)
    n_gdn = shape["layers"] - n_attn
    nv = shape["k_heads"] * shape["v_mult"]
    conv_channels = 2 * shape["k_heads"] * shape["k_dim"] + nv * 128
    values = nv * shape["k_dim"] * 128 + (shape["conv"] - 1) * conv_channels
    assert intercept == n_gdn * values * kv.state_value_bytes(fmt)


@settings(max_examples=40, deadline=None)
@given(shapes, st.floats(1e6, 1e11), st.integers(1, 32))
def test_max_context_of_a_hybrid_is_the_longest_that_fits(shape, budget, batch):
    m = _hybrid(shape)
    s = int(kv.max_context(m, budget, batch))
    if s < MAX_CONTEXT_TOKENS:
        assert kv.batch_bytes(m, s + 1, batch) > budget
    if s > 0:
        assert kv.batch_bytes(m, s, batch) <= budget


# -- Mamba-2 (layer_types "mamba") and Mamba-1 (Jamba) ---------------------------------------------
MAMBA2 = {  # GraniteMoeHybrid keys (configuration_granitemoehybrid.py @ 4f7e1d46)
    "model_type": "granitemoehybrid",
    "hidden_size": 1536,
    "num_hidden_layers": 8,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "intermediate_size": 512,
    "shared_intermediate_size": 4096,
    "num_local_experts": 0,
    "vocab_size": 100_352,
    "layer_types": ["mamba", "mamba", "mamba", "attention"] * 2,
    "mamba_n_heads": 48,
    "mamba_d_head": 64,
    "mamba_d_state": 128,
    "mamba_n_groups": 1,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "tie_word_embeddings": True,
}


def test_mamba2_state_and_weights():
    m = from_hf_config(MAMBA2, ident="m2")
    assert m.kinds.count("mamba") == 6 and m.moe is None and m.intermediate == 4096
    d_inner, conv_dim = 2 * 1536, 2 * 1536 + 2 * 1 * 128
    # SSM state heads x head_dim x d_state; conv state (d_conv - 1) x (d_inner + 2 G N)
    per_layer = 48 * 64 * 128 + 3 * conv_dim
    assert kv.state_bytes_per_request(m) == 6 * per_layer * 2
    assert kv.bytes_per_token(m) == 2 * 2 * 4 * 128 * 2
    mixer = [t for t in m.tensors() if t.layer == 0 and t.role.startswith(("ssm_", "bias"))]
    # in_proj (gate, x|B|C, dt), conv1d weight and bias, dt_bias/A_log/D, gated norm, out_proj
    expected = (
        1536 * (d_inner + conv_dim + 48) + conv_dim * 4 + conv_dim + 3 * 48 + d_inner
    ) + d_inner * 1536
    assert sum(t.params for t in mixer) == expected


def test_mamba1_jamba():
    """AI21-Jamba-1.5-Mini config.json (as copied verbatim in a public model-zoo test helper,
    index id 32223319525): 52B total, 12B active (AI21's model card)."""
    cfg = {
        "model_type": "jamba",
        "attn_layer_offset": 4,
        "attn_layer_period": 8,
        "expert_layer_offset": 1,
        "expert_layer_period": 2,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "mamba_conv_bias": True,
        "mamba_d_conv": 4,
        "mamba_d_state": 16,
        "mamba_dt_rank": 256,
        "mamba_expand": 2,
        "mamba_proj_bias": False,
        "num_attention_heads": 32,
        "num_experts": 16,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "vocab_size": 65536,
    }
    m = from_hf_config(cfg, ident="jamba")
    assert [i for i, k in enumerate(m.kinds) if k == "attention"] == [4, 12, 20, 28]
    assert m.moe_layers == tuple(i % 2 == 1 for i in range(32))
    assert m.params == pytest.approx(52e9, rel=0.01)
    assert m.active_params == pytest.approx(12e9, rel=0.02)
    # 28 Mamba layers x (conv 3 x 8192 + SSM 8192 x 16) x 2 B; 4 attention layers of GQA
    assert kv.state_bytes_per_request(m) == 28 * (3 * 8192 + 8192 * 16) * 2
    assert kv.bytes_per_token(m) == 4 * 2 * 8 * 128 * 2


def test_bamba_names_its_attention_layers_by_index():
    cfg = {k: v for k, v in MAMBA2.items() if k != "layer_types"}
    cfg.update(model_type="bamba", attn_layer_indices=[3, 7], intermediate_size=4096)
    m = from_hf_config(cfg, ident="bamba")
    assert [i for i, k in enumerate(m.kinds) if k == "attention"] == [3, 7]
    assert kv.state_bytes_per_request(m) == kv.state_bytes_per_request(
        from_hf_config(MAMBA2, ident="m2")
    )


def test_nemotron_h_moe_blocks_are_refused_naming_the_position():
    # Nemotron 3's 'E' (MoE) blocks are not modelled; the refusal names the pattern position
    cfg = {
        **MAMBA2,
        "model_type": "nemotron_h",
        "layer_types": None,
        "hybrid_override_pattern": "MEM*" * 2,
    }
    with pytest.raises(InputError, match="MoE") as err:
        from_hf_config(cfg, ident="nh-moe")
    assert "hybrid_override_pattern[1]" in str(err.value)


# -- the decode step --------------------------------------------------------------------------------
def test_decode_layer_classes_of_a_hybrid():
    m = load_model(QWEN3_NEXT)
    lay = decode.layers(m, decode.Setup(A100, m).weights)
    linear = lay.order[0]  # layer 0 is gated DeltaNet
    attn = lay.order[3]
    assert lay.window[linear] == 0 and lay.kv_per_token[linear] == 0
    assert lay.attn_flops[linear] == 0 and lay.state_values[linear] == GDN_STATE_VALUES
    assert lay.window[attn] == np.inf and lay.state_values[attn] == 0
    assert lay.count[linear] == 36 and lay.count[attn] == 12
    assert lay.state_values[-1] == 0 and lay.kv_per_token[-1] == 0  # the output head


def test_decode_reads_the_state_once_per_request_at_any_context():
    m = load_model(QWEN3_NEXT)
    on_gpu = decode.Setup(A100, m)
    lay = decode.layers(m, on_gpu.weights)
    linear, attn = lay.order[0], lay.order[3]
    ctx = np.array([1000, 100_000])
    gpu = decode.stream_times(on_gpu, ctx, 4)["gpu"]
    assert gpu[0, linear] == gpu[1, linear]  # the state does not grow with the context
    assert gpu[1, attn] > gpu[0, attn]
    # the GPU reads the layer's weights (the experts the batch routes to) and reads and writes
    # each request's state at the attention rate; at batch 4 it is memory-bound
    k, n = lay.expert_use
    w_read = lay.weight_bytes[linear] - lay.expert_bytes[linear] * (1 - touched_share(n, k, 4))
    state = 4 * GDN_STATE_VALUES * 2
    expect = w_read / A100.gpu.streaming_bandwidth + 2 * state / A100.gpu.attention_rate
    assert gpu[0, linear] == pytest.approx(expect, rel=1e-9)
    # offloaded, the state crosses the link both ways every step
    off = decode.Setup(A100, m, placement=decode.Placement(kv=decode.Split(0, 1, 0)))
    st_off = decode.stream_times(off, ctx, 1)
    assert st_off["h2d"][0, linear] == st_off["h2d"][1, linear] > 0
    assert st_off["d2h"][0, linear] > 0
    kv_total = decode._kv_total(off, 1000, 2)
    assert float(kv_total) == 2 * (1000 * 24_576 + GDN_STATE_BF16)


def test_dense_models_have_no_state_in_the_step():
    m = load_model("llama-3.1-8b")
    lay = decode.layers(m, decode.Setup(A100, m).weights)
    assert np.all(lay.state_values == 0)
    assert kv.state_bytes_per_request(m) == 0
    assert json.loads(json.dumps(kv.kv_size(m, 1000).to_json()))["state_bytes_per_request"] == 0
