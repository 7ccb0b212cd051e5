"""Nemotron-H (one-module blocks: Mamba-2, attention or MLP) and Falcon-H1 (attention beside
Mamba-2 in every layer): layer kinds, parameters, KV per token, state per request.

Expected figures are worked out by hand from each config and the module shapes of:
- Nemotron-H: transformers' ``NemotronHBlock`` / ``NemotronHMamba2Mixer`` / ``NemotronHAttention``
  / ``NemotronHMLP`` (src/transformers/models/nemotron_h/modeling_nemotron_h.py @
  008d9e9577b0eb0149aa6bb0c44da582b10e0b6e; config class configuration_nemotron_h.py @
  13923c63d59f73faebae79b2ee3fafc7e3a35201) and vLLM's ``NemotronH*DecoderLayer``, whose
  ``hybrid_override_pattern`` maps ``M`` Mamba-2, ``*`` attention, ``-`` MLP, ``E`` MoE
  (vllm/model_executor/models/nemotron_h.py @ 8744bb0924a53c0d16867426b8b17428d41e4002).
- Falcon-H1: transformers' ``FalconH1DecoderLayer`` (input_layernorm, ``mamba`` and ``self_attn``
  on the same input, pre_ff_layernorm, gated ``feed_forward``), ``FalconH1Mixer`` (d_inner =
  mamba_d_ssm, in_proj to d_inner + conv_dim + heads, gated norm only with mamba_rms_norm,
  out_proj bias projectors_bias) and ``FalconH1Attention`` (src/transformers/models/falcon_h1/
  modeling_falcon_h1.py @ 001f85b38fb432858ace93f18622f07cec46d874).
- The Mamba-2 state as vLLM allocates it (MambaStateShapeCalculator.mamba2_state_shape, called
  by get_mamba_state_shape_from_config of NemotronHForCausalLM, nemotron_h.py @ 8744bb09, with
  d_inner = mamba_num_heads x mamba_head_dim, and of FalconH1ForCausalLM,
  vllm/model_executor/models/falcon_h1.py @ 59e459897da422926a8c401c975d8765f0a3e1d1, with
  d_inner = mamba_d_ssm): conv state (conv_kernel - 1) x (d_inner + 2 x n_groups x d_state),
  SSM state heads x head_dim x d_state, in the model's 16-bit dtype (2 B a value).
"""

from __future__ import annotations

import numpy as np
import pytest

from kvoffload.inputs.errors import InputError
from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import from_hf_config, load_model
from kvoffload.inputs.precision import KvFormat
from kvoffload.model import decode, kv

A100 = load_system("a100-80gb-sxm-pcie4")

# -- Nemotron-H-8B-Base-8K (inline) -----------------------------------------------------------------
# No verbatim copy of nvidia/Nemotron-H-8B-Base-8K's config.json was found in public code; these
# are its sizing fields as reproduced in NVIDIA-NeMo/Megatron-Bridge's test fixture
# ``nemotronh_8b_config_dict`` (tests/unit_tests/models/nemotronh/test_nemotron_h_bridge.py @
# 2310230d3bb7687ede368c7a7481f36ca32c664e), leaving out the two keys the fixture adds for its
# mocks ("hidden_act", "n_routed_experts": None). The 56B's file is in the catalog verbatim.
NEMOTRON_H_8B = {
    "architectures": ["NemotronHForCausalLM"],
    "attention_bias": False,
    "attention_head_dim": 128,
    "chunk_size": 128,
    "conv_kernel": 4,
    "expand": 2,
    "hidden_size": 4096,
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "intermediate_size": 21504,
    "layer_norm_epsilon": 1e-05,
    "mamba_head_dim": 64,
    "mamba_hidden_act": "silu",
    "mamba_num_heads": 128,
    "mamba_proj_bias": False,
    "max_position_embeddings": 8192,
    "mlp_bias": False,
    "mlp_hidden_act": "relu2",
    "model_type": "nemotron_h",
    "n_groups": 8,
    "num_attention_heads": 32,
    "num_hidden_layers": 52,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "ssm_state_size": 128,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_bias": False,
    "use_conv_bias": True,
    "vocab_size": 131072,
}
# Nemotron-H-8B: 52 blocks, 24 'M', 4 '*' (at 7, 18, 29, 40), 24 '-'
NH8_ATTENTION = [7, 18, 29, 40]
# Mamba-2 block: d_inner = 128 heads x 64 = 8192; conv channels 8192 + 2 x 8 groups x 128 = 10240
NH8_STATE_VALUES = 128 * 64 * 128 + 3 * 10240  # 1,048,576 + 30,720 = 1,079,296 per block
NH8_STATE_BF16 = 24 * NH8_STATE_VALUES * 2  # 51,806,208 B per request
NH8_KV_PER_TOKEN = 2 * 4 * 8 * 128 * 2  # K and V x 4 attention blocks x 8 KV heads x 128 x 2 B
# parameters per block (each has one RMSNorm of 4096):
#   Mamba-2: in_proj 4096 x (8192 gate + 10240 x|B|C + 128 dt), conv1d 10240 x 4 + bias 10240,
#            dt_bias/A_log/D 3 x 128, gated norm 8192, out_proj 8192 x 4096
NH8_MAMBA = 4096 * (8192 + 10240 + 128) + 10240 * 4 + 10240 + 3 * 128 + 8192 + 8192 * 4096 + 4096
#   attention: q and o 4096 x 4096, k and v 1024 x 4096 (no biases)
NH8_ATTN = 2 * 4096 * 4096 + 2 * 1024 * 4096 + 4096
#   MLP: up and down 21504 x 4096 (relu^2, no gate)
NH8_MLP = 2 * 21504 * 4096 + 4096
# untied embedding and lm_head (131072 x 4096 each) and the final norm
NH8_PARAMS = 24 * NH8_MAMBA + 4 * NH8_ATTN + 24 * NH8_MLP + 2 * 131072 * 4096 + 4096


def _nh8():
    return from_hf_config(NEMOTRON_H_8B, ident="nemotron-h-8b")


def test_nemotron_h_blocks_come_from_the_pattern():
    m = _nh8()
    assert m.n_layers == 52
    assert [i for i, k in enumerate(m.kinds) if k == "attention"] == NH8_ATTENTION
    assert m.kinds.count("mamba") == 24 and m.kinds.count("mlp") == 24
    blocks = {"M": "mamba", "*": "attention", "-": "mlp"}
    assert m.kinds == tuple(blocks[c] for c in NEMOTRON_H_8B["hybrid_override_pattern"])
    # KV only in the attention blocks; state only in the Mamba-2 blocks; an MLP block neither
    assert np.flatnonzero(m.attention_layers).tolist() == NH8_ATTENTION
    assert m.mamba_layers.tolist() == [k == "mamba" for k in m.kinds]
    state = m.state_values_per_layer()
    per_token = kv.bytes_per_token_per_layer(m)
    for i, k in enumerate(m.kinds):
        assert (state[i] > 0) == (k == "mamba")
        assert (per_token[i] > 0) == (k == "attention")
        assert m.layer_windows[i] == (None if k == "attention" else 0)
    assert not m.has_sliding_window


def test_nemotron_h_8b_parameters():
    """nvidia/Nemotron-H-8B-Base-8K: "8B" (model card; NVIDIA Megatron-Bridge docs, Nemotron H 8B
    specifications, https://docs.nvidia.com/nemo/megatron-bridge/latest/models/llm/nemotronh.html)."""
    m = _nh8()
    assert NH8_MAMBA == 109_640_064 and NH8_ATTN == 41_947_136 and NH8_MLP == 176_164_864
    assert m.params == NH8_PARAMS == 8_100_852_736
    assert m.params == pytest.approx(8e9, rel=0.02)
    assert m.active_params == m.params  # dense
    assert m.mlp == "plain" and not m.tie_embeddings and m.norms_per_layer == 1


def test_nemotron_h_blocks_hold_one_module_each():
    m = _nh8()
    roles = {k: {t.role for t in m.tensors() if t.layer == m.kinds.index(k)} for k in set(m.kinds)}
    assert roles["mlp"] == {"ffn_up", "ffn_down", "norm"}  # no token mixer
    assert roles["attention"] == {"attn_q", "attn_k", "attn_v", "attn_o", "norm"}  # no MLP
    assert roles["mamba"] == {"ssm_in", "ssm_conv1d", "ssm_d", "ssm_out", "bias", "norm"}
    layer = {k: sum(t.params for t in m.tensors() if t.layer == m.kinds.index(k)) for k in roles}
    assert layer == {"mamba": NH8_MAMBA, "attention": NH8_ATTN, "mlp": NH8_MLP}


def test_nemotron_h_8b_kv_and_state():
    m = _nh8()
    assert kv.bytes_per_token(m) == NH8_KV_PER_TOKEN == 16_384
    assert m.mamba is not None and m.mamba.state_values == NH8_STATE_VALUES
    assert kv.state_bytes_per_request(m) == NH8_STATE_BF16 == 51_806_208
    assert kv.state_bytes_per_request(m, KvFormat.FP32) == 2 * NH8_STATE_BF16
    assert kv.state_bytes_per_request(m, KvFormat.FP8) == NH8_STATE_BF16  # state stays 16-bit


@pytest.mark.parametrize("fmt", list(KvFormat))
def test_nemotron_h_request_bytes_are_linear_in_context(fmt):
    m = _nh8()
    seqs = np.array([0, 1, 1000, 8192, 131_072, 1_000_000])
    slope, intercept = kv.bytes_per_token(m, fmt), kv.state_bytes_per_request(m, fmt)
    assert slope == 4 * kv.attention_layer_token_bytes(m, fmt)
    assert intercept == 24 * NH8_STATE_VALUES * kv.state_value_bytes(fmt)
    assert np.array_equal(kv.request_bytes(m, seqs, fmt), intercept + slope * seqs)
    # the largest layer at 8192 tokens is an attention block's K and V
    assert kv.full_layer_bytes(m, 8192, fmt) == 8192 * kv.attention_layer_token_bytes(m, fmt)


def test_nemotron_h_block_list_spellings_agree():
    """transformers' NemotronHConfig turns the pattern into layers_block_type, "M" ->
    "linear_attention", "*" -> "full_attention", "-" -> "mlp"; older files say "mamba" and
    "attention". All three spellings are the same model; num_hidden_layers may be absent."""
    names = {"M": "linear_attention", "*": "full_attention", "-": "mlp"}
    legacy = {"M": "mamba", "*": "attention", "-": "mlp"}
    base = {k: v for k, v in NEMOTRON_H_8B.items() if k != "hybrid_override_pattern"}
    pattern = NEMOTRON_H_8B["hybrid_override_pattern"]
    m = _nh8()
    for table in (names, legacy):
        cfg = {**base, "layers_block_type": [table[c] for c in pattern]}
        del cfg["num_hidden_layers"]
        other = from_hf_config(cfg, ident="nh")
        assert other.kinds == m.kinds and other.params == m.params


def test_nemotron_h_head_dim_is_read():
    """NVIDIA-Nemotron-Nano-9B-v2 style: head_dim 128 although hidden / heads = 112."""
    cfg = {**NEMOTRON_H_8B, "hidden_size": 4480, "num_attention_heads": 40, "head_dim": 128}
    del cfg["attention_head_dim"]
    m = from_hf_config(cfg, ident="nano")
    assert m.head_dim == 128
    assert kv.bytes_per_token(m) == 2 * 4 * 8 * 128 * 2


@pytest.mark.parametrize(
    ("change", "field", "fragment"),
    [
        ({"hybrid_override_pattern": "M-M*E-" + "M-" * 23}, "hybrid_override_pattern[4]", "MoE"),
        ({"hybrid_override_pattern": "M-M*"}, "hybrid_override_pattern", "one block per layer"),
        ({"hybrid_override_pattern": "M?" * 26}, "hybrid_override_pattern[1]", "unknown block"),
        ({"hybrid_override_pattern": None}, "hybrid_override_pattern", "missing"),
        ({"model_type": "llama"}, "hybrid_override_pattern", "nemotron_h only"),
    ],
)
def test_nemotron_h_import_errors_name_the_field(change, field, fragment):
    cfg = {k: v for k, v in {**NEMOTRON_H_8B, **change}.items() if v is not None}
    with pytest.raises(InputError, match=fragment) as info:
        from_hf_config(cfg, ident="x")
    assert info.value.field == field


# -- Nemotron-H-56B-Base-8K (catalog) ---------------------------------------------------------------
NH56 = "nemotron-h-56b"
# 118 blocks: 54 'M', 10 '*', 54 '-' (NVIDIA's Nemotron-H page: 54 Mamba-2, 54 MLP and 10
# self-attention layers). Mamba-2: d_inner 256 x 64 = 16384, conv channels 16384 + 2 x 8 x 256
NH56_STATE_VALUES = 256 * 64 * 256 + 3 * (16384 + 2 * 8 * 256)  # 4,194,304 + 61,440 = 4,255,744
NH56_MAMBA = (
    8192 * (16384 + 20480 + 256) + 20480 * 4 + 20480 + 3 * 256 + 16384 + 16384 * 8192 + 8192
)  # 438,432,512
NH56_ATTN = 2 * 8192 * 8192 + 2 * 1024 * 8192 + 8192  # 64 heads x 128, 8 KV heads x 128
NH56_MLP = 2 * 32768 * 8192 + 8192


def test_nemotron_h_56b_catalog():
    m = load_model(NH56)
    assert m.n_layers == 118
    counts = {k: m.kinds.count(k) for k in ("mamba", "attention", "mlp")}
    assert counts == {"mamba": 54, "attention": 10, "mlp": 54}
    assert [i for i, k in enumerate(m.kinds) if k == "attention"] == list(range(7, 107, 11))
    assert NH56_MAMBA == 438_432_512
    params = 54 * NH56_MAMBA + 10 * NH56_ATTN + 54 * NH56_MLP + 2 * 131072 * 8192 + 8192
    assert m.params == params == 56_324_350_464
    assert m.params == pytest.approx(56e9, rel=0.02)  # model card: 56B
    assert kv.bytes_per_token(m) == 2 * 10 * 8 * 128 * 2 == 40_960
    assert kv.state_bytes_per_request(m) == 54 * NH56_STATE_VALUES * 2 == 459_620_352
    assert int(kv.request_bytes(m, 8192)) == 8192 * 40_960 + 459_620_352


# -- Falcon-H1-7B (inline) --------------------------------------------------------------------------
# No verbatim config.json of tiiuae/Falcon-H1-7B-Base/-Instruct was found in public code. These
# sizing fields agree across the trimmed copies found (e.g. a "FALCON_H1_7B_HF" test helper with
# intermediate_size 12288, vocab_size 130048, untied; an mlx-community Falcon-H1-7B-Instruct
# extract) and with transformers' Falcon-H1 table (7B: 44 layers, 3072 wide, 12 attention heads,
# 2 KV, 24 Mamba heads, d_head 128 / 128, d_state 256; docs model_doc/falcon_h1). Keys left out
# take FalconH1Config's defaults (configuration_falcon_h1.py @ 020a37d2: no biases, conv bias,
# mamba_rms_norm false).
FALCON_H1_7B = {
    "model_type": "falcon_h1",
    "hidden_size": 3072,
    "num_hidden_layers": 44,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "intermediate_size": 12288,
    "vocab_size": 130048,
    "tie_word_embeddings": False,
    "mamba_d_ssm": 3072,
    "mamba_n_heads": 24,
    "mamba_d_head": 128,
    "mamba_d_state": 256,
    "mamba_n_groups": 1,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "max_position_embeddings": 262144,
}
# per layer: attention K and V over 2 KV heads x 128, 2 B: 1024 B a token
FH7_KV_PER_TOKEN = 44 * 2 * 2 * 128 * 2  # 45,056
# Mamba-2: d_inner 3072, conv channels 3072 + 2 x 1 x 256 = 3584
FH7_STATE_VALUES = 24 * 128 * 256 + 3 * 3584  # 786,432 + 10,752 = 797,184
FH7_STATE_BF16 = 44 * FH7_STATE_VALUES * 2  # 70,152,192 B per request
FH7_ATTN = 2 * 1536 * 3072 + 2 * 256 * 3072  # q, o: 12 heads x 128; k, v: 2 x 128
FH7_MIXER = 3072 * (3072 + 3584 + 24) + 3584 * 4 + 3584 + 3 * 24 + 3072 * 3072
FH7_MLP = 3 * 12288 * 3072  # gate, up, down
FH7_LAYER = FH7_ATTN + FH7_MIXER + FH7_MLP + 2 * 3072  # + input_layernorm, pre_ff_layernorm
FH7_PARAMS = 44 * FH7_LAYER + 2 * 130048 * 3072 + 3072


def _fh7():
    return from_hf_config(FALCON_H1_7B, ident="falcon-h1-7b")


def test_falcon_h1_layers_hold_kv_and_a_state():
    m = _fh7()
    assert m.parallel_mamba and m.kinds == ("attention",) * 44
    assert m.attention_layers.all() and m.mamba_layers.all()
    assert m.layer_windows == (None,) * 44
    assert np.array_equal(m.state_values_per_layer(), np.full(44, FH7_STATE_VALUES))
    assert m.mamba is not None and m.mamba.d_inner == 3072 and not m.mamba.gated_norm


def test_falcon_h1_7b_parameters():
    """tiiuae/Falcon-H1-7B-Instruct: 7.59B parameters, the Hugging Face Hub count as listed by
    github.com/jakemanger/whatmodel pages/model/falcon-h1-7b-instruct.md ("7.59B params"); the
    model card and the technical report (arXiv 2507.22448) name it "7B"."""
    m = _fh7()
    assert FH7_ATTN == 11_010_048 and FH7_MIXER == 29_976_136 and FH7_MLP == 113_246_208
    assert m.params == FH7_PARAMS == 7_585_513_568
    assert m.params == pytest.approx(7.59e9, rel=0.02)
    layer0 = {t.role for t in m.tensors() if t.layer == 0}
    assert {"attn_q", "attn_k", "attn_v", "attn_o", "ssm_in", "ssm_out", "ffn_gate"} <= layer0


def test_falcon_h1_7b_kv_and_state():
    m = _fh7()
    assert kv.bytes_per_token(m) == FH7_KV_PER_TOKEN == 45_056
    assert kv.state_bytes_per_request(m) == FH7_STATE_BF16 == 70_152_192
    per_layer = kv.layer_bytes(m, 1000)
    assert set(per_layer.tolist()) == {1000 * 1024 + FH7_STATE_VALUES * 2}


@pytest.mark.parametrize("fmt", list(KvFormat))
def test_falcon_h1_request_bytes_are_linear_in_context(fmt):
    m = _fh7()
    seqs = np.array([0, 1, 4096, 262_144, 3_000_000])
    slope, intercept = kv.bytes_per_token(m, fmt), kv.state_bytes_per_request(m, fmt)
    assert slope == 44 * kv.attention_layer_token_bytes(m, fmt)
    assert intercept == 44 * FH7_STATE_VALUES * kv.state_value_bytes(fmt)
    assert np.array_equal(kv.request_bytes(m, seqs, fmt), intercept + slope * seqs)
    s = int(kv.max_context(m, 10e9, 4, fmt))
    assert kv.batch_bytes(m, s, 4, fmt) <= 10e9 < kv.batch_bytes(m, s + 1, 4, fmt)


def test_falcon_h1_options_change_the_mixer():
    cfg = {**FALCON_H1_7B, "mamba_rms_norm": True, "projectors_bias": True, "mamba_proj_bias": True}
    m = from_hf_config(cfg, ident="fh")
    # gated norm over d_inner; in_proj bias (6680) and out_proj bias (3072) in every layer
    assert m.params - _fh7().params == 44 * (3072 + 6680 + 3072)
    no_ssm = {k: v for k, v in FALCON_H1_7B.items() if k != "mamba_d_ssm"}
    wide = from_hf_config({**no_ssm, "mamba_d_head": "auto"}, ident="fh")
    assert wide.mamba is not None and wide.mamba.d_inner == 2 * 3072  # mamba_expand x hidden
    assert wide.mamba.head_dim == 256


def test_falcon_h1_refuses_other_layer_types():
    cfg = {**FALCON_H1_7B, "layers_block_type": ["attention"] * 44}
    with pytest.raises(InputError, match="hybrid") as info:
        from_hf_config(cfg, ident="fh")
    assert info.value.field == "layers_block_type"
    ok = from_hf_config({**FALCON_H1_7B, "layers_block_type": ["hybrid"] * 44}, ident="fh")
    assert ok.params == _fh7().params


# -- the decode step ----------------------------------------------------------------------------------
def test_decode_layer_classes_of_nemotron_h():
    m = _nh8()
    lay = decode.layers(m, decode.Setup(A100, m).weights)
    mamba, mlp, attn = (lay.order[m.kinds.index(k)] for k in ("mamba", "mlp", "attention"))
    assert len({mamba, mlp, attn}) == 3 and len(lay.count) == 4  # three block kinds + the head
    assert lay.count[mamba] == 24 and lay.count[mlp] == 24 and lay.count[attn] == 4
    # an MLP block: no KV, no state, no attention work, only its weights
    assert lay.kv_per_token[mlp] == 0 and lay.state_values[mlp] == 0 and lay.attn_flops[mlp] == 0
    assert lay.window[mlp] == 0
    assert lay.kv_per_token[mamba] == 0 and lay.state_values[mamba] == NH8_STATE_VALUES
    assert lay.kv_per_token[attn] == 1 and lay.state_values[attn] == 0
    assert lay.window[attn] == np.inf
    ctx = np.array([1000, 100_000])
    gpu = decode.stream_times(decode.Setup(A100, m), ctx, 4)["gpu"]
    assert gpu[0, mlp] == gpu[1, mlp] and gpu[0, mamba] == gpu[1, mamba]
    assert gpu[1, attn] > gpu[0, attn]


def test_decode_layer_class_of_falcon_h1_reads_kv_and_state():
    m = _fh7()
    setup = decode.Setup(A100, m)
    lay = decode.layers(m, setup.weights)
    layer = lay.order[0]
    assert lay.count[layer] == 44
    assert lay.kv_per_token[layer] == 1 and lay.state_values[layer] == FH7_STATE_VALUES
    assert lay.window[layer] == np.inf and lay.attn_flops[layer] > 0
    kv_total = decode._kv_total(setup, 1000, 2)
    assert float(kv_total) == 2 * (1000 * FH7_KV_PER_TOKEN + FH7_STATE_BF16)
