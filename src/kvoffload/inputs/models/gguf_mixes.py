"""llama-quantize's other file types: the ggml type it gives each matrix of a model.

As ``llama_tensor_get_type`` and ``llama_model_quantize_impl`` (src/llama-quant.cpp,
ggml-org/llama.cpp 8784689f) choose them, with an importance matrix (the IQ1/IQ2 types cannot be
made without one, and the published files use one). llama.cpp counts attn_v and ffn_down tensors
in the loader's order (by layer, then name), so a dense model's counter is its layer; attn_kv_b is
attention-v-like (``category_is_attn_v``), as in the K_M mixes of tensor_bytes.py. gpt-oss's
routed experts stay MXFP4 whatever the file type: convert_hf_to_gguf.py writes them MXFP4 and the
published gpt-oss GGUFs keep them so.
"""

from __future__ import annotations

from kvoffload.inputs.models.architecture import Architecture, Tensor
from kvoffload.inputs.precision import GGML_BLOCKS, use_more_bits
from kvoffload.inputs.precision import WeightFormat as W

# each file type's default ggml type (llama_model_quantize_impl's switch)
BASE = {
    W.Q2_K: "q2_k", W.Q3_K_S: "q3_k", W.Q3_K_M: "q3_k", W.Q3_K_L: "q3_k", W.Q4_K_S: "q4_k",
    W.Q5_K_S: "q5_k", W.Q6_K_L: "q6_k", W.IQ4_XS: "iq4_xs", W.IQ4_NL: "iq4_nl",
    W.IQ3_M: "iq3_s", W.IQ3_S: "iq3_s", W.IQ3_XXS: "iq3_xxs", W.IQ2_M: "iq2_s",
    W.IQ2_S: "iq2_xs", W.IQ2_XS: "iq2_xs", W.IQ2_XXS: "iq2_xxs", W.IQ1_M: "iq1_m",
    W.IQ1_S: "iq1_s", W.MXFP4_MOE: "mxfp4",
}  # fmt: skip
_LOW_BIT = (W.IQ2_XXS, W.IQ2_XS, W.IQ1_S, W.IQ2_S, W.IQ2_M, W.IQ1_M)
_OUT_Q5_K = (*_LOW_BIT, W.IQ3_XXS)  # output.weight in q5_k
_ATTN_V = ("attn_v", "attn_kv_b")
_DOWN = ("ffn_down", "exp_down", "shexp_down")
# attn_output in q5_k for 8-expert models (Mixtral)
_O_8X = (W.Q2_K, W.IQ3_XXS, W.Q3_K_S, W.Q3_K_M, W.IQ4_NL, W.Q4_K_S, W.IQ3_S, W.IQ3_M, W.IQ4_XS)
_O_DENSE = {W.Q2_K: "q3_k", W.IQ3_XXS: "iq3_s", W.Q3_K_M: "q4_k", W.Q3_K_L: "q5_k", W.IQ3_M: "q4_k"}


def mix_type(m: Architecture, t: Tensor, fmt: W) -> str:
    """Return the ggml type (before the row-length fallback) of matrix ``t`` in file type ``fmt``."""
    base = BASE[fmt]
    if t.role.startswith("exp_") and (fmt is W.MXFP4_MOE or m.model_type == "gpt_oss"):
        return "mxfp4"
    if t.role == "output" or (t.role == "embed" and m.tie_embeddings):
        if fmt in (W.MXFP4_MOE, W.Q6_K_L) or t.cols % GGML_BLOCKS[base][0]:
            return "q8_0"
        return "q5_k" if fmt in _OUT_Q5_K else "q6_k"
    if fmt is W.MXFP4_MOE:
        return "q8_0"
    if t.role == "embed":
        if fmt is W.Q6_K_L:
            return "q8_0"
        if fmt in (W.IQ2_XXS, W.IQ2_XS, W.IQ1_S, W.IQ1_M):
            return "q2_k"
        return "iq3_s" if fmt in (W.IQ2_S, W.IQ2_M, W.IQ3_XXS) else base
    if t.layer is None:
        return base
    if fmt in _LOW_BIT:
        return _low_bit(m, t, fmt, base)
    return _other(m, t, fmt, base)


def _gqa(m: Architecture) -> int:
    return m.n_heads // m.n_kv_heads


def _experts(m: Architecture) -> int:
    return m.moe.n_experts if m.moe else 0


def _low_bit(m: Architecture, t: Tensor, fmt: W, base: str) -> str:
    s_or_m = fmt in (W.IQ2_S, W.IQ2_M)
    if t.role in _ATTN_V:
        if _gqa(m) >= 4 or _experts(m) >= 4:
            return "q4_k"
        return "iq3_s" if s_or_m else "q2_k"
    if _experts(m) == 8 and t.role == "attn_k":
        return "q4_k"
    if t.role in _DOWN:
        # a counter over every ffn_down* tensor in the loader's order, against n_layer / 8
        if _down_index(m, t) < m.n_layers // 8:
            return "iq3_s" if s_or_m else "q2_k"
        return base
    if t.role == "attn_o":
        if _experts(m) == 8:
            return "q5_k"
        if fmt in (W.IQ1_S, W.IQ1_M):
            return "iq2_xxs"
        return "iq3_s" if s_or_m else base
    return base


def _down_index(m: Architecture, t: Tensor) -> int:
    """Return how many ffn_down* tensors come before ``t`` (by layer, then name)."""
    assert t.layer is not None

    def downs(i: int) -> int:
        if not m.has_mlp(i):
            return 0
        if m.moe and m.moe_layers[i]:
            return 1 + (1 if m.moe.n_shared_experts else 0)  # ffn_down_exps, ffn_down_shexp
        return 1

    within = 1 if t.role == "shexp_down" else 0  # ffn_down_exps sorts before ffn_down_shexp
    return sum(downs(i) for i in range(t.layer)) + within


def _other(m: Architecture, t: Tensor, fmt: W, base: str) -> str:
    i, n = t.layer or 0, m.n_layers
    more = use_more_bits(i, n)
    if t.role in _ATTN_V:
        new = base
        gqa4 = _gqa(m) >= 4
        if fmt is W.Q2_K:
            new = "q4_k" if gqa4 else "q3_k"
        elif fmt is W.IQ3_XXS:
            new = "q4_k" if gqa4 else "iq3_xxs"
        elif (fmt is W.IQ3_S and gqa4) or fmt is W.IQ3_M:
            new = "q4_k"
        elif fmt is W.Q3_K_M:
            new = "q5_k" if i < 2 else "q4_k"
        elif (
            fmt is W.Q3_K_L or (fmt in (W.IQ4_NL, W.IQ4_XS) and gqa4) or (fmt is W.Q4_K_S and i < 4)
        ):
            new = "q5_k"
        if m.n_layers == 80 and m.n_heads == 8 * m.n_kv_heads and new in ("q3_k", "q4_k"):
            new = "q5_k"  # LLM_TYPE_70B, as tensor_bytes.py tells a 70B-class model
        return "q8_0" if _experts(m) == 8 else new
    if t.role == "attn_k":
        if _experts(m) == 8:
            return "q8_0"
        return "iq2_s" if fmt is W.IQ3_XXS else base
    if t.role == "attn_q":
        return "iq2_s" if fmt is W.IQ3_XXS else base
    if t.role in _DOWN:
        if fmt is W.Q2_K:
            return "q3_k"
        if fmt is W.Q3_K_M:
            return "q5_k" if i < n // 16 else "q4_k"
        if fmt is W.IQ3_M and (i < n // 8 or (_experts(m) == 8 and more)):
            return "q4_k"
        if fmt is W.Q3_K_L:
            return "q5_k"
        if fmt is W.Q4_K_S and i < n // 8:
            return "q5_k"
        return base
    if t.role == "attn_o":
        if _experts(m) == 8:
            return "q5_k" if fmt in _O_8X else base
        return _O_DENSE.get(fmt, base)
    return base
