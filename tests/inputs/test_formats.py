"""Weight formats fp32, q6_k, q5_k_m, mxfp4 and nvfp4: bytes as each stores them, checked against
the sizes of published checkpoints.

Tolerance rule. A GGUF file is its tensors plus a header, the tokenizer and other metadata and
alignment padding; a safetensors file is its tensors plus a JSON header. So the model's bytes must
never exceed a published file size and must lie within 2% below it. Where the source prints the
tensor bytes themselves (llama.cpp's "model size" and buffer sizes, a safetensors index's
``total_size``) the model must match to the printed precision. Figures read through third-party
copies are named with the copy; several are cross-checked by an independent second source.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.inputs.errors import InputError
from kvoffload.inputs.models import _gguf_type, from_hf_config, load_model
from kvoffload.inputs.precision import (
    FP4_BLOCKS,
    GGML_BLOCKS,
    WeightFormat,
    fp4_bytes,
    ggml_bytes,
    weight_format,
)

W = WeightFormat
GB, GiB, MiB = 1e9, 2**30, 2**20
NEW = (W.FP32, W.Q6_K, W.Q5_K_M, W.MXFP4, W.NVFP4)


def _within_file(model_bytes: int, file_bytes: int) -> float:
    """Assert the tolerance rule and return the relative gap."""
    assert model_bytes <= file_bytes
    gap = (file_bytes - model_bytes) / file_bytes
    assert gap < 0.02
    return gap


def _gguf_types(ident: str, fmt: WeightFormat) -> Counter:
    m = load_model(ident)
    types: Counter = Counter()
    for t in m.tensors():
        types["f32" if t.vector else _gguf_type(m, t, fmt)] += t.count
    return types


# -- the block arithmetic ---------------------------------------------------------------------
def test_block_sizes_are_ggml_common_h():
    # ggml/src/ggml-common.h (ggml-org/llama.cpp 01243c58): block_q5_K = 2*fp16 + 12 + 32 + 128,
    # block_q6_K = 128 + 64 + 16 + fp16, block_mxfp4 = E8M0 + 16, block_nvfp4 = 4 UE4M3 + 32.
    assert GGML_BLOCKS["q5_k"] == (256, 2 * 2 + 12 + 256 // 8 + 256 // 2)
    assert GGML_BLOCKS["q6_k"] == (256, 256 // 2 + 256 // 4 + 256 // 16 + 2)
    assert GGML_BLOCKS["mxfp4"] == (32, 1 + 32 // 2)
    assert GGML_BLOCKS["nvfp4"] == (64, 64 // 16 + 64 // 2)
    # the checkpoints' FP4 blocks store the same bytes per value as ggml's
    for name, (block, size) in FP4_BLOCKS.items():
        g_block, g_size = GGML_BLOCKS[name]
        assert size * g_block == g_size * block


@pytest.mark.parametrize(("rows", "cols"), [(4096, 4096), (14336, 4096), (5760, 2880)])
def test_fp4_bytes_are_values_plus_one_scale_byte_per_block(rows, cols):
    # MXFP4: 32 values in 16 bytes + one E8M0 scale; NVFP4: 16 values in 8 bytes + one E4M3 scale
    assert fp4_bytes(rows, cols, W.MXFP4) == rows * (cols // 32) * 17
    assert fp4_bytes(rows, cols, W.NVFP4) == rows * (cols // 16) * 9
    if cols % 64 == 0:  # ggml's NVFP4 blocks of 64 hold the same bytes (no per-tensor scale)
        assert fp4_bytes(rows, cols, W.NVFP4) == ggml_bytes(rows, cols, "nvfp4")
    assert fp4_bytes(rows, cols, W.MXFP4) == ggml_bytes(rows, cols, "mxfp4")


def test_bytes_per_value_order_of_the_blocks():
    per_value = {k: size / block for k, (block, size) in GGML_BLOCKS.items()}
    order = ["f32", "f16", "q8_0", "q6_k", "q5_k", "q4_k"]
    assert [per_value[k] for k in order] == sorted((per_value[k] for k in order), reverse=True)
    assert per_value["q6_k"] == 6.5625 / 8 and per_value["q5_k"] == 5.5 / 8
    assert FP4_BLOCKS["mxfp4"][1] * 8 / FP4_BLOCKS["mxfp4"][0] == 4.25
    assert FP4_BLOCKS["nvfp4"][1] * 8 / FP4_BLOCKS["nvfp4"][0] == 4.5


# -- fp32 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("ident", ["llama-3.1-8b", "gpt-oss-20b", "deepseek-v3", "gemma-2-9b"])
def test_fp32_is_four_bytes_per_parameter(ident):
    m = load_model(ident)
    assert m.weight_bytes(W.FP32).total == 4 * m.params == 2 * m.weight_bytes(W.BF16).total


# -- published files: Llama 3.1 8B Instruct, one repository, every quant -------------------------
# File sizes in bytes of bartowski/Meta-Llama-3.1-8B-Instruct-GGUF
# (https://huggingface.co/bartowski/Meta-Llama-3.1-8B-Instruct-GGUF, files -f32, -Q8_0, -Q6_K,
# -Q5_K_M, -Q4_K_M .gguf) and the safetensors total of nvidia/Llama-3.1-8B-Instruct-FP4
# (https://huggingface.co/nvidia/Llama-3.1-8B-Instruct-FP4), as quoted from the Hugging Face API in
# the "VRTX Checker" project's test-vram.mjs (MEASURED table). The card rounds them to f32 32.13GB,
# Q6_K 6.60GB, Q5_K_M 5.73GB (also quoted in a research note found by searching "32.13GB").
LLAMA31_FILES = {
    W.FP32: 32_128_885_888,
    W.Q8_0: 8_540_775_840,
    W.Q6_K: 6_596_011_424,
    W.Q5_K_M: 5_732_992_416,
    W.Q4_K_M: 4_920_739_232,
    W.NVFP4: 6_027_861_376,
}


@pytest.mark.parametrize(("fmt", "file_bytes"), LLAMA31_FILES.items(), ids=str)
def test_llama31_8b_against_the_published_files(fmt, file_bytes):
    m = load_model("llama-3.1-8b")
    gap = _within_file(m.weight_bytes(fmt).total, file_bytes)
    if fmt is W.NVFP4:
        # safetensors: two shards' JSON headers (~1000 tensor entries) are all that is left
        assert file_bytes - m.weight_bytes(fmt).total < 256 * 1024
    else:
        assert gap < 0.0025  # the GGUF metadata, chiefly a 128k-token vocabulary


def test_llama31_8b_gguf_files_differ_from_the_model_by_one_metadata_block():
    """Every quant of one repository carries the same metadata: file - model is one constant."""
    m = load_model("llama-3.1-8b")
    gaps = [b - m.weight_bytes(f).total for f, b in LLAMA31_FILES.items() if f is not W.NVFP4]
    assert max(gaps) - min(gaps) < 1024  # 7,841,184 B for Q8_0/Q6_K/Q5_K_M/Q4_K_M, f32 288 B less
    assert 7 * MiB < min(gaps) < 8 * MiB


# -- q6_k: llama.cpp's own load log -----------------------------------------------------------------
def test_llama3_8b_q6_k_matches_llama_cpp_load_log():
    """llama.cpp loading lmstudio-community's Meta-Llama-3-8B-Instruct-Q6_K.gguf prints
    'type f32: 65 tensors, type q6_K: 226 tensors', 'model ftype = Q6_K',
    'model size = 6.14 GiB (6.56 BPW)' and 'CPU buffer size = 6282.97 MiB'
    (quoted in github.com/neoneye/simon-arc-lab-legacy,
    proof_of_concept/gameoflife_finetune_lab1/readme_finetune_v2.md).
    """
    assert _gguf_types("llama-3-8b", W.Q6_K) == {"f32": 65, "q6_k": 226}
    m = load_model("llama-3-8b")
    w = m.weight_bytes(W.Q6_K)
    assert round(w.total / MiB, 2) == 6282.97
    assert round(w.total / GiB, 2) == 6.14
    assert round(w.total * 8 / m.params, 2) == 6.56


# -- q5_k_m: llama.cpp's load log and TheBloke's file table -----------------------------------------
def test_llama2_7b_q5_k_m_matches_llama_cpp_load_log():
    """llama.cpp loading TheBloke's llama-2-7b-chat.Q5_K_M.gguf prints 'type f32: 65 tensors,
    type q5_K: 193 tensors, type q6_K: 33 tensors', 'model ftype = mostly Q5_K - Medium',
    'model size = 4.45 GiB (5.68 BPW)' (quoted in github.com/danbev/inf-wasi README.md).
    """
    assert _gguf_types("llama-2-7b", W.Q5_K_M) == {"f32": 65, "q5_k": 193, "q6_k": 33}
    m = load_model("llama-2-7b")
    w = m.weight_bytes(W.Q5_K_M)
    assert round(w.total / GiB, 2) == 4.45
    assert round(w.total * 8 / m.params, 2) == 5.68


@pytest.mark.parametrize(("fmt", "gb"), [(W.Q5_K_M, 4.78), (W.Q6_K, 5.53)], ids=str)
def test_llama2_7b_against_thebloke_file_table(fmt, gb):
    # https://huggingface.co/TheBloke/Llama-2-7B-Chat-GGUF "Provided files": Q5_K_M 4.78 GB,
    # Q6_K 5.53 GB (the same two figures head TheBloke's tables for every Llama-2-7B derivative)
    total = load_model("llama-2-7b").weight_bytes(fmt).total
    _within_file(total, int((gb + 0.005) * GB))  # the upper end of the printed rounding
    assert round(total / GB, 2) == gb


def test_q5_k_m_gives_q6_k_to_half_the_attn_v_and_ffn_down_and_the_output():
    """llama-quant.cpp: Q5_K_M is Q5_K with use_more_bits() layers' attn_v/ffn_down in Q6_K."""
    m = load_model("llama-3.1-8b")
    q6 = {(t.role, t.layer) for t in m.tensors() if _gguf_type(m, t, W.Q5_K_M) == "q6_k"}
    assert ("output", None) in q6
    for role in ("attn_v", "ffn_down"):
        layers = sorted(layer for r, layer in q6 if r == role)
        assert len(layers) == 16 and layers[:4] == [0, 1, 2, 3] and layers[-4:] == [28, 29, 30, 31]
    # Q5_K_M and Q4_K_M choose the same tensors for Q6_K
    q6_q4 = {(t.role, t.layer) for t in m.tensors() if _gguf_type(m, t, W.Q4_K_M) == "q6_k"}
    assert q6 == q6_q4


def test_q6_k_is_q6_k_everywhere_but_where_rows_do_not_fit():
    m = load_model("llama-3.1-8b")
    assert {_gguf_type(m, t, W.Q6_K) for t in m.tensors() if not t.vector} == {"q6_k"}
    # gpt-oss rows of 2880 are not a multiple of 256: llama.cpp falls back to q8_0
    g = load_model("gpt-oss-20b")
    attn_q = next(t for t in g.tensors() if t.role == "attn_q")
    assert _gguf_type(g, attn_q, W.Q6_K) == "q6_k"
    assert ggml_bytes(attn_q.rows, attn_q.cols, "q6_k") == ggml_bytes(
        attn_q.rows, attn_q.cols, "q8_0"
    )


# -- mxfp4: gpt-oss-20b as OpenAI ships it ----------------------------------------------------------
def test_gpt_oss_20b_mxfp4_is_the_published_checkpoint_exactly():
    """openai/gpt-oss-20b model.safetensors.index.json: "metadata": {"total_size": 13761264768}
    (https://huggingface.co/openai/gpt-oss-20b/blob/main/model.safetensors.index.json, found
    verbatim by searching the figure; ~13.8 GB, the card's "runs within 16GB of memory").
    total_size counts tensor bytes only, so the match is exact: MoE experts as MXFP4 blocks
    (*_blocks uint8 + *_scales E8M0), everything else bf16 (config.json quantization_config
    modules_to_not_convert = model.layers.*.self_attn, model.layers.*.mlp.router,
    model.embed_tokens, lm_head).
    """
    m = load_model("gpt-oss-20b")
    assert m.weight_bytes(W.MXFP4).total == 13_761_264_768


def test_gpt_oss_120b_mxfp4_moe_is_the_size_llama_bench_prints():
    """llama-bench's size and params columns (tensor bytes in GiB, parameters in billions) for
    ggml-org's gpt-oss-120b GGUF, file type MXFP4 MoE: "gpt-oss 120B MXFP4 MoE | 59.02 GiB |
    116.83 B" (ggml-org/llama.cpp pull request #19922, its baseline table; the same size in
    #19378's). The tensors' bytes, so the match is to the printed precision: experts in MXFP4,
    every other matrix in q8_0 (llama-quantize's MXFP4_MOE), 1-D tensors in f32."""
    m = load_model("gpt-oss-120b")
    assert round(m.weight_bytes(W.MXFP4_MOE).total / GiB, 2) == 59.02
    assert round(sum(t.params for t in m.tensors()) / 1e9, 2) == 116.83


def test_mxfp4_touches_only_the_experts_of_a_moe_model():
    m = load_model("gpt-oss-20b")
    bf, mx = m.weight_bytes(W.BF16), m.weight_bytes(W.MXFP4)
    assert mx.embedding == bf.embedding and mx.output == bf.output
    expert_params = sum(t.params for t in m.tensors() if t.role.startswith("exp_"))
    assert int(mx.experts.sum()) == expert_params * 17 // 32
    assert int((mx.per_layer - mx.experts).sum()) == int((bf.per_layer - bf.experts).sum())


def test_mxfp4_on_a_dense_model_quantises_the_decoder_linears():
    """A dense model has no experts: MXFP4 goes on its decoder linears (attention and MLP), the
    embeddings, lm_head and norms stay bf16 (a no-op format would hide a user's mistake)."""
    m = load_model("llama-3.1-8b")
    bf, mx = m.weight_bytes(W.BF16), m.weight_bytes(W.MXFP4)
    assert mx.embedding == bf.embedding and mx.output == bf.output
    linear = sum(t.params for t in m.tensors() if t.role.startswith(("attn_", "ffn_")))
    norms = sum(t.params for t in m.tensors() if t.layer is not None and t.vector)
    assert int(mx.per_layer.sum()) == linear * 17 // 32 + 2 * norms
    assert int(mx.experts.sum()) == 0


# -- nvfp4: ModelOpt's export -----------------------------------------------------------------------
def test_nvfp4_keeps_lm_head_embeddings_norms_and_router_in_bf16():
    """ModelOpt's NVFP4 export (hf_quant_config.json: quant_algo NVFP4, group_size 16,
    exclude_modules [lm_head], as shown in github.com/elizabetht/language-modeling-from-scratch
    quantization/model-optimizer/LinkedIn_Article_Quantization.md; modelopt's default config
    disables the lm_head and MoE router quantizers): per linear, packed E2M1 weights, one E4M3
    weight_scale per 16 values and two fp32 scalars (weight_scale_2, input_scale).
    """
    m = load_model("llama-3.1-8b")
    bf, nv = m.weight_bytes(W.BF16), m.weight_bytes(W.NVFP4)
    assert nv.embedding == bf.embedding and nv.output == bf.output
    linears = [t for t in m.tensors() if t.role.startswith(("attn_", "ffn_"))]
    norms = sum(t.params for t in m.tensors() if t.layer is not None and t.vector)
    expect = sum(t.rows * t.cols * 9 // 16 + 8 for t in linears) + 2 * norms
    assert int(nv.per_layer.sum()) == expect
    g = load_model("gpt-oss-20b")  # MoE: experts and attention in NVFP4, the router in bf16
    layer0 = [t for t in g.tensors() if t.layer == 0]
    fp4 = [t for t in layer0 if not t.vector and t.role != "router"]
    assert {t.role for t in layer0 if t not in fp4} == {"router", "bias", "norm", "sinks"}
    expect = sum(t.count * (t.rows * t.cols * 9 // 16 + 8) for t in fp4)
    expect += sum(2 * t.params for t in layer0 if t not in fp4)
    assert int(g.weight_bytes(W.NVFP4).per_layer[0]) == expect


# -- order of bytes per value ---------------------------------------------------------------------
ORDER = [W.FP32, W.BF16, W.Q8_0, W.Q6_K, W.Q5_K_M, W.Q4_K_M]


@pytest.mark.parametrize("ident", ["llama-3.1-8b", "llama-2-7b", "mistral-7b-v0.3", "qwen3-8b"])
def test_bytes_per_value_order_on_catalog_models(ident):
    m = load_model(ident)
    sizes = [m.weight_bytes(f).total for f in ORDER]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)
    bf16 = m.weight_bytes(W.BF16).total
    assert m.weight_bytes(W.MXFP4).total < m.weight_bytes(W.NVFP4).total < bf16


@settings(max_examples=60, deadline=None)
@given(
    hidden_blocks=st.integers(4, 48),
    ffn_blocks=st.integers(4, 160),
    layers=st.integers(1, 80),
    kv_heads=st.sampled_from([1, 2, 4, 8]),
    vocab=st.integers(1_000, 260_000),
    tie=st.booleans(),
)
def test_bytes_per_value_order_on_any_dense_model(
    hidden_blocks, ffn_blocks, layers, kv_heads, vocab, tie
):
    hidden = 256 * hidden_blocks  # k-quant rows fit: no fallback evens the formats out
    cfg = {
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": hidden // 128,
        "num_key_value_heads": math.gcd(kv_heads, hidden // 128),
        "head_dim": 128,
        "vocab_size": vocab,
        "intermediate_size": 256 * ffn_blocks,
        "tie_word_embeddings": tie,
    }
    m = from_hf_config(cfg, ident="x")
    sizes = [m.weight_bytes(f).total for f in ORDER]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)
    assert sizes[0] == 2 * sizes[1]
    assert m.weight_bytes(W.MXFP4).total < m.weight_bytes(W.NVFP4).total < sizes[1]


# -- the names reach the commands -----------------------------------------------------------------
def test_unknown_weight_precision_lists_the_new_names():
    with pytest.raises(InputError) as info:
        weight_format("fp4", field="precision.weights")
    for fmt in NEW:
        assert fmt.value in str(info.value)
    assert all(weight_format(f.value.upper()) is f for f in NEW)


def test_models_show_json_lists_every_weight_format(cli):
    r = cli("models", "show", "gpt-oss-20b", "--json")
    assert r.code == 0, r.err
    weights = r.json()["weight_bytes"]
    assert set(weights) == {f.value for f in W if f is not W.GGUF}  # gguf: a .gguf file only
    assert weights["mxfp4"] == 13_761_264_768
    assert weights["fp32"] == 2 * weights["bf16"]


SCENARIO = """
hardware: a100-80gb-sxm-pcie4
model: {model}
engine: generic
precision: {{weights: {weights}, kv: bf16}}
workload: {{batch: 1, prompt: 4096, generate: 1}}
placement:
  weights: {{gpu: 1.0}}
  kv: {{cpu: 1.0}}
attention: gpu
overlap: none
pinned: true
"""


@pytest.mark.parametrize("fmt", NEW, ids=str)
def test_predict_accepts_the_new_weight_precisions(cli, write, fmt):
    model = "gpt-oss-20b" if fmt is W.MXFP4 else "llama-3.1-8b"
    path = write("s.yaml", SCENARIO.format(model=model, weights=fmt.value))
    r = cli("predict", path, "--json")
    assert r.code == 0, r.err
    out = r.json()
    weights = load_model(model).weight_bytes(fmt).total
    assert out["memory"]["gpu_bytes"] == weights + out["memory"]["staging_bytes"]
    assert out["tpot_ms"] > 0
