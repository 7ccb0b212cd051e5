"""Storage formats: bytes per weight (HF and GGUF quantisers) and bytes per cached KV vector."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from enum import StrEnum
from typing import Any

from kvoffload.inputs.errors import InputError
from kvoffload.inputs.ggml_types import ggml_types


class WeightFormat(StrEnum):
    """How the weights are stored."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"  # every tensor in fp32 (4 bytes a value)
    FP8 = "fp8"  # FP8 checkpoint: decoder linears in e4m3, per-channel scales
    INT8 = "int8"  # W8A8 checkpoint (SmoothQuant / llm-compressor): per-channel scales
    INT4 = "int4"  # AWQ / GPTQ, group size 128: fp16 scale + 4-bit zero per group
    # DeepSpeed's and FlexGen's group-wise int4: every matrix (embeddings and the output layer
    # too), groups of 64 along the input dimension, an fp16 scale and an fp16 minimum per group
    INT4_G64 = "int4_g64"
    MXFP4 = "mxfp4"  # OCP MX: 32 E2M1 values + one E8M0 scale; gpt-oss puts only experts in it
    NVFP4 = "nvfp4"  # ModelOpt: 16 E2M1 values + one E4M3 scale, fp32 scales per tensor
    Q8_0 = "q8_0"  # GGUF
    Q6_K = "q6_k"  # GGUF k-quant, every matrix in q6_K
    Q5_K_M = "q5_k_m"  # GGUF mixed k-quant
    Q4_0 = "q4_0"  # GGUF
    Q4_K_M = "q4_k_m"  # GGUF mixed k-quant
    # llama-quantize's other file types, each tensor typed as llama_tensor_get_type does
    # (inputs/models/gguf_mixes.py); gpt-oss's routed experts stay MXFP4 in all of them
    Q2_K = "q2_k"
    Q3_K_S = "q3_k_s"
    Q3_K_M = "q3_k_m"
    Q3_K_L = "q3_k_l"
    Q4_K_S = "q4_k_s"
    Q5_K_S = "q5_k_s"
    Q6_K_L = (
        "q6_k_l"  # Q6_K with token_embd and output in q8_0 (--token-embedding/output-tensor-type)
    )
    IQ4_XS = "iq4_xs"
    IQ4_NL = "iq4_nl"
    IQ3_M = "iq3_m"
    IQ3_S = "iq3_s"
    IQ3_XXS = "iq3_xxs"
    IQ2_M = "iq2_m"
    IQ2_S = "iq2_s"
    IQ2_XS = "iq2_xs"
    IQ2_XXS = "iq2_xxs"
    IQ1_M = "iq1_m"
    IQ1_S = "iq1_s"
    MXFP4_MOE = "mxfp4_moe"  # llama-quantize MXFP4_MOE: experts mxfp4, other matrices q8_0
    GGUF = "gguf"  # the types a .gguf file gives each tensor (a model read from that file)

    @property
    def is_gguf(self) -> bool:
        """True for llama.cpp's GGUF formats."""
        return self in _GGUF_FORMATS


_GGUF_FORMATS = frozenset(
    {
        WeightFormat.Q8_0,
        WeightFormat.Q6_K,
        WeightFormat.Q5_K_M,
        WeightFormat.Q4_0,
        WeightFormat.Q4_K_M,
    }
) | frozenset(list(WeightFormat)[list(WeightFormat).index(WeightFormat.Q2_K) :])


class KvFormat(StrEnum):
    """How the KV cache is stored."""

    FP32 = "fp32"  # early llama.cpp builds cached in f32
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"  # one scale per tensor (vLLM): no per-token overhead
    INT8 = "int8"  # per token and head: fp16 scale + fp16 zero (LMDeploy's kv int8)
    INT4 = "int4"  # per token and head: fp16 scale + fp16 zero (LMDeploy's kv int4)
    FP8_E4M3 = "fp8_e4m3"  # vLLM --kv-cache-dtype fp8_e4m3: one byte, per-layer k/v scales
    FP8_E5M2 = "fp8_e5m2"  # vLLM --kv-cache-dtype fp8_e5m2: one byte, no scale
    Q8_0 = "q8_0"  # llama.cpp --cache-type-k/v q8_0: blocks of 32 with an fp16 scale
    Q5_1 = "q5_1"  # llama.cpp q5_1: blocks of 32, fp16 scale and minimum, 4 bytes of high bits
    Q5_0 = "q5_0"  # llama.cpp q5_0: blocks of 32, fp16 scale, 4 bytes of high bits
    Q4_1 = "q4_1"  # llama.cpp q4_1: blocks of 32, fp16 scale and minimum
    Q4_0 = "q4_0"  # llama.cpp q4_0: blocks of 32, 4-bit, fp16 scale


def _choose(kind: type[StrEnum], name: str, what: str, field: str) -> Any:
    try:
        return kind(str(name).lower())
    except ValueError:
        choices = ", ".join(f.value for f in kind)
        raise InputError(f"unknown {what} {name!r}; choose one of {choices}", field=field) from None


def weight_format(name: str, *, field: str = "precision") -> WeightFormat:
    """Return the weight format called ``name`` or raise an InputError listing the choices."""
    return _choose(WeightFormat, name, "weight precision", field)


def kv_format(name: str, *, field: str = "dtype") -> KvFormat:
    """Return the KV format called ``name`` or raise an InputError listing the choices."""
    return _choose(KvFormat, name, "KV precision", field)


def kv_vector_bytes(n: int, fmt: KvFormat) -> int:
    """Return the bytes that one cached vector of ``n`` elements (one head, one token) takes."""
    if fmt is KvFormat.FP32:
        return 4 * n
    if fmt in (KvFormat.BF16, KvFormat.FP16):
        return 2 * n
    if fmt in (KvFormat.FP8, KvFormat.FP8_E4M3, KvFormat.FP8_E5M2):
        return n  # the per-layer scales of fp8_e4m3 are a few bytes per layer, not per token
    if fmt is KvFormat.INT8:
        return n + 4
    if fmt is KvFormat.INT4:
        return math.ceil(n / 2) + 4
    if fmt is KvFormat.Q8_0:
        return math.ceil(n / 32) * 34
    if fmt in (KvFormat.Q4_0, KvFormat.Q4_1, KvFormat.Q5_0, KvFormat.Q5_1):
        # ggml blocks of 32 values (GGML_BLOCKS, ggml-common.h): 18, 20, 22, 24 bytes
        return math.ceil(n / 32) * GGML_BLOCKS[fmt.value][1]
    raise AssertionError(fmt)  # pragma: no cover


class _GgmlBlocks(Mapping[str, tuple[int, int]]):
    """ggml block types by lower-case name: (elements per block, bytes per block).

    Read from catalog/ggml_types.yaml (ggml.c type_traits, ggml-common.h's block structs) when
    first used: block_q5_K = 2 fp16 + 12 scale bytes + 32 high bits + 128 low nibbles = 176;
    block_q6_K = 128 + 64 + 16 scales + fp16 = 210; block_mxfp4 = E8M0 + 16 = 17; block_nvfp4 =
    4 UE4M3 scales + 32 = 36 per 64 (ggml keeps no per-tensor scale).
    """

    def __getitem__(self, name: str) -> tuple[int, int]:
        t = ggml_types()[name]
        return t.block, t.bytes

    def __iter__(self) -> Iterator[str]:
        return iter(ggml_types())

    def __len__(self) -> int:
        return len(ggml_types())


GGML_BLOCKS: Mapping[str, tuple[int, int]] = _GgmlBlocks()

# FP4 checkpoints (safetensors): values per scale block, bytes per block (packed E2M1 + scale).
# MXFP4 (OCP Microscaling, gpt-oss's *_blocks/*_scales): 32 values in 16 bytes + one E8M0 byte.
# NVFP4 (NVIDIA ModelOpt): 16 values in 8 bytes + one FP8 E4M3 byte (weight / weight_scale).
FP4_BLOCKS: dict[str, tuple[int, int]] = {"mxfp4": (32, 17), "nvfp4": (16, 9)}

# llama.cpp falls back when a row length is not a multiple of 256 (llama-quant.cpp).
_K_FALLBACK = {
    "q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0",
    **dict.fromkeys(
        ("iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m", "q2_k", "q3_k", "iq4_xs"),
        "iq4_nl",
    ),
}  # fmt: skip


def ggml_bytes(rows: int, row_len: int, ggml_type: str) -> int:
    """Return the bytes of a rows x row_len tensor stored as ``ggml_type`` (with fallbacks)."""
    block, size = GGML_BLOCKS[ggml_type]
    if block > 1 and row_len % block:
        ggml_type = _K_FALLBACK.get(ggml_type, "f16")
        block, size = GGML_BLOCKS[ggml_type]
        if block > 1 and row_len % block:
            block, size = GGML_BLOCKS["f16"]
    return rows * (row_len // block) * size


def fp4_bytes(rows: int, row_len: int, fmt: WeightFormat) -> int:
    """Return the bytes of a rows x row_len matrix in MXFP4 or NVFP4: values and block scales."""
    block, size = FP4_BLOCKS[fmt.value]
    return rows * math.ceil(row_len / block) * size


def int4_g64_bytes(rows: int, row_len: int) -> int:
    """Return the bytes of ``rows`` rows of ``row_len`` values in group-wise int4 (``int4_g64``).

    Each group of 64 values along a row packs two 4-bit values a byte and keeps an fp16 scale and
    an fp16 minimum (asymmetric): DeepSpeed's ``Quantizer`` (deepspeedai/DeepSpeed
    deepspeed/inference/quantization/utils.py at v0.10.3, 04a6fedffd7672de8b2ca01644419631bd866746:
    ``_quantize_int8`` per group, ``_compress_uint8_to_uint4``, scale and minimum ``.view`` as the
    fp16 dtype) with ZeRO-Inference's ``group_size`` 64 on ``group_dim`` 1 (DeepSpeedExamples
    inference/huggingface/zero_inference/utils.py ``get_quant_config`` at 83757d9c937d), and
    FlexGen's ``CompressionConfig(num_bits=4, group_size=64, symmetric=False)``.
    """
    groups = -(-row_len // 64)
    return rows * ((row_len + 1) // 2 + groups * 4)


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """Return llama.cpp's choice of the layers whose attn_v/ffn_down get more bits in *_K_M."""
    eighth = n_layers // 8
    return i_layer < eighth or i_layer >= 7 * n_layers // 8 or (i_layer - eighth) % 3 == 2
