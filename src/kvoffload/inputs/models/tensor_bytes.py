"""The bytes of one weight tensor in each format, as each quantiser stores it."""

from __future__ import annotations

from kvoffload.inputs.errors import InputError
from kvoffload.inputs.models.architecture import Architecture, Tensor
from kvoffload.inputs.models.gguf_mixes import BASE, mix_type
from kvoffload.inputs.precision import (
    WeightFormat,
    fp4_bytes,
    ggml_bytes,
    int4_g64_bytes,
    use_more_bits,
)

_DECODER_LINEAR = (
    "attn_", "ffn_", "exp_", "shexp_", "ssm_",
)  # fmt: skip
_GGUF_BASE = {
    WeightFormat.Q8_0: "q8_0",
    WeightFormat.Q6_K: "q6_k",
    WeightFormat.Q5_K_M: "q5_k",
    WeightFormat.Q4_0: "q4_0",
    WeightFormat.Q4_K_M: "q4_k",
}
_K_M = (WeightFormat.Q4_K_M, WeightFormat.Q5_K_M)
# llama.cpp's "attention-v-like" tensors (category_is_attn_v in src/llama-quant.cpp)
_ATTN_V = ("attn_v", "attn_kv_b")
_FFN_DOWN = ("ffn_down", "exp_down", "shexp_down")
# ModelOpt NVFP4 exports two fp32 scalars per quantised matrix: weight_scale_2 and input_scale.
_NVFP4_TENSOR_SCALES = 8


def _tensor_bytes(m: Architecture, t: Tensor, fmt: WeightFormat) -> int:
    if fmt is WeightFormat.FP32:
        return 4 * t.params
    if fmt in (WeightFormat.BF16, WeightFormat.FP16):
        return 2 * t.params
    if fmt is WeightFormat.GGUF:
        raise InputError(
            "weights 'gguf' are the types a .gguf file gives its tensors; this model was not "
            "read from one (give --model path/to/file.gguf)",
            field="precision.weights",
        )
    if fmt.is_gguf:
        if t.vector or t.role == "router":
            return 4 * t.params  # llama.cpp keeps 1-D tensors and the MoE router in f32
        return t.count * ggml_bytes(t.rows, t.cols, _gguf_type(m, t, fmt))
    if fmt in (WeightFormat.MXFP4, WeightFormat.NVFP4):
        if t.vector or not _fp4_tensor(m, t, fmt):
            return 2 * t.params  # everything else stays bf16 in these checkpoints
        scalars = _NVFP4_TENSOR_SCALES if fmt is WeightFormat.NVFP4 else 0
        return t.count * (fp4_bytes(t.rows, t.cols, fmt) + scalars)
    if fmt is WeightFormat.INT4_G64:
        # every nn.Linear and nn.Embedding weight (DeepSpeed's WEIGHT_QUANTIZATION_LAYERS): the
        # embeddings, the output layer and the router too; norms and biases stay 16-bit
        return 2 * t.params if t.vector else t.count * int4_g64_bytes(t.rows, t.cols)
    linear = t.role.startswith(_DECODER_LINEAR) and not t.vector
    if not linear:
        return 2 * t.params  # embeddings, lm_head, norms, router stay 16-bit in HF checkpoints
    if fmt in (WeightFormat.FP8, WeightFormat.INT8):
        return t.count * t.rows * (t.cols + 2)  # one byte per weight, one 16-bit scale per row
    # int4, group 128: 4-bit weights, an fp16 scale and a 4-bit zero point per group
    groups = -(-t.cols // 128)
    return t.count * t.rows * (t.cols // 2 + groups * 2 + (groups + 1) // 2)


def _fp4_tensor(m: Architecture, t: Tensor, fmt: WeightFormat) -> bool:
    """True when an FP4 checkpoint of ``m`` stores the matrix ``t`` in FP4.

    MXFP4 as gpt-oss ships it: only the routed experts (config.json quantization_config
    modules_to_not_convert = self_attn, mlp.router, embed_tokens, lm_head); a dense model has no
    experts, so its decoder linears take MXFP4 instead (Quark's MXFP4 configs, exclude [lm_head]).
    NVFP4 as NVIDIA ModelOpt exports it: every decoder linear; its default config disables the
    quantizers of lm_head and the MoE routers, and embeddings and norms are not linears.
    """
    if fmt is WeightFormat.MXFP4 and m.moe:
        return t.role.startswith("exp_")
    return t.role.startswith(_DECODER_LINEAR)


def _gguf_type(m: Architecture, t: Tensor, fmt: WeightFormat) -> str:
    """Return llama.cpp's ggml type for a matrix (llama_tensor_get_type, src/llama-quant.cpp)."""
    if fmt in BASE:
        return mix_type(m, t, fmt)
    base = _GGUF_BASE[fmt]
    if t.role == "output" or (t.role == "embed" and m.tie_embeddings):
        return "q8_0" if fmt is WeightFormat.Q8_0 else "q6_k"
    if t.layer is None:
        return base
    eight_experts = m.moe is not None and m.moe.n_experts == 8
    if eight_experts and t.role in ("attn_k", *_ATTN_V):
        return "q8_0"  # llama.cpp bumps 8-expert models' (Mixtral's) attn_k and attn_v to q8_0
    if fmt not in _K_M:
        return base
    more = use_more_bits(t.layer, m.n_layers)
    if t.role in _ATTN_V:
        if more:
            return "q6_k"
        # llama.cpp gives 70B-class models (8 query heads per KV head) q5_k for a q4_k attn_v
        seventy_b = m.n_layers == 80 and m.n_heads == 8 * m.n_kv_heads
        return "q5_k" if seventy_b and fmt is WeightFormat.Q4_K_M else base
    if t.role in _FFN_DOWN and more:
        return "q6_k"
    if eight_experts and t.role == "attn_o" and fmt is WeightFormat.Q4_K_M:
        return "q5_k"
    return base
