"""The rates at which llama.cpp's attention reads a KV cache, by KV format and device.

GPU. An f16 cache goes to the tensor-core FlashAttention kernels (mma/tile); a cache in a ggml
block format (``-ctk/-ctv q8_0``, ``q4_0``, ``q4_1``, ``q5_0``, ``q5_1``) only to the vector
kernel, which takes each block apart as it reads it: K through ``vec_dot_fattn_vec_KQ_q8_0`` (and
its q4/q5 siblings: Q quantised to q8_1, a dp4a dot per 32 values, the block's scale) and V
through ``dequantize_V_q8_0`` and the like, one value at a time into half2 (ggml-org/llama.cpp
ggml/src/ggml-cuda/fattn-common.cuh and fattn-vec.cuh at 00108827d87949b538ad1821f81a6b111827fcda;
fattn.cu sends quantised K/V to the vector kernel). That work, not the bytes, sets the time: a
cached value in a block format costs ``kv_dequant_gpu`` times what an f16 value does (fitted,
catalog/engine_constants.yaml), so the format's bytes are read at that share of the f16 rate.
The constant is fitted on q8_0; the q4/q5 formats are assumed to cost the same per value (the same
kernel, one dequantised value per multiply), so their fewer bytes buy no time.

CPU. ggml-cpu's flash attention (``ggml_compute_forward_flash_attn_ext_f16``, ggml/src/ggml-cpu/
ops.cpp at the same commit) dots Q (converted to K's ``vec_dot_type``) with each K row through
the type's ``vec_dot`` and dequantises each V row with ``to_float``: a quantised cache is read as
a matvec over that format's blocks, at the CPU's matvec rate for it (model/cpu_rate.py,
catalog/cpu_matvec.yaml); f16 and the other formats are read at the host's streaming rate.

Without flash attention (``flash_attn: off``) the graph takes the classic path
(``build_attn_mha``, src/llama-graph.cpp): ``ggml_mul_mat(k, q)`` writes the scores in f32,
``ggml_soft_max_ext`` reads them and writes the probabilities, and ``ggml_mul_mat(v, kq)`` reads
them: ``SCORE_PASSES`` passes of ``n_head`` f32 values per cached position and query token, on
top of the cache's own bytes. llama.cpp refuses a quantised V cache without flash attention ("V
cache quantization requires flash_attn": ``ggml_is_quantized(type_v)`` with flash attention
disabled, src/llama-context.cpp).
"""

from __future__ import annotations

import numpy as np

from kvoffload.engines.each.llamacpp.options import constants
from kvoffload.engines.each.llamacpp.placement import host_read_rate, placement
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.precision import KvFormat, WeightFormat, kv_vector_bytes
from kvoffload.model import cpu_rate, decode
from kvoffload.model.prediction import Scenario

# the ggml block formats of llama.cpp's KV cache (--cache-type-k/v), each read by the vector kernel
BLOCK_FORMATS = (KvFormat.Q8_0, KvFormat.Q4_0, KvFormat.Q4_1, KvFormat.Q5_0, KvFormat.Q5_1)
# the CPU matvec kernel that reads each, where catalog/cpu_matvec.yaml has one
_CPU_KERNEL = {KvFormat.Q8_0: WeightFormat.Q8_0, KvFormat.Q4_0: WeightFormat.Q4_0}
_F16_BYTES = 2  # bytes of one f16 value
SCORE_PASSES = 4  # without flash attention: scores written, read and written by softmax, read


def flash_attention(sc: Scenario) -> bool:
    """Return whether the scenario runs flash attention (``auto``: on), refusing a quantised V
    cache without it."""
    on = sc.options.flash_attn != "off"
    if not on and sc.setup.kv in BLOCK_FORMATS:
        raise InputError(
            f"llama.cpp needs flash attention for a quantised V cache ({sc.setup.kv.value}): say "
            "flash_attn: on (-fa on) or an f16 cache",
            field="options.flash_attn",
        )
    return on


def score_bytes(sc: Scenario) -> float:
    """Return the bytes the scores of one query token over one cached position move in one
    attention layer: 0 with flash attention, else ``SCORE_PASSES`` x n_head f32 values."""
    return 0.0 if flash_attention(sc) else float(SCORE_PASSES * 4 * sc.model.n_heads)


def kv_dequant_gpu_default() -> float:
    """Return a block-format value's GPU attention time over an f16 value's (fitted)."""
    return float(constants()["kv_dequant_gpu"]["value"])


def value_bytes(fmt: KvFormat) -> float:
    """Return the bytes one cached value takes in ``fmt``, its block's scales included."""
    return kv_vector_bytes(32, fmt) / 32


def gpu_kv_rate(sc: Scenario) -> float:
    """Return the rate (B/s) at which llama.cpp's GPU attention reads the scenario's KV cache."""
    base = sc.system.gpu.attention_rate
    fmt = sc.setup.kv
    if fmt not in BLOCK_FORMATS:
        return base
    return base * value_bytes(fmt) / _F16_BYTES / kv_dequant_gpu_default()


def cpu_kv_rate(sc: Scenario) -> float:
    """Return the rate (B/s) at which llama.cpp's CPU attention reads the scenario's KV cache."""
    weights = _CPU_KERNEL.get(sc.setup.kv)
    if weights is None:
        return host_read_rate(sc)
    o = sc.options
    return cpu_rate.weight_stream_rate(sc.system.host, weights, o.threads, o.numa)


def prefill_score_s(sc: Scenario) -> float:
    """Return the seconds the prefill's scores take without flash attention (0 with it).

    Each ubatch of ``u`` tokens scores every position cached so far, itself included (masked,
    not skipped), up to a sliding layer's window: ``SCORE_PASSES`` f32 passes over ``u`` x
    positions x n_head values in each attention layer, at the GPU's attention rate where the
    layer's KV is on the GPU and at the host's rate where it is not.
    """
    per = score_bytes(sc)
    if not per:
        return 0.0
    lay = decode.layers(sc.model, sc.setup.weights)
    classes = np.array(lay.order[: sc.model.n_layers])
    window = lay.window[classes]
    attends = lay.kv_per_token[classes] > 0
    _, on_gpu = placement(sc)
    gpu_layer = on_gpu[: sc.model.n_layers] & (not sc.options.no_kv_offload)
    u = sc.options.ubatch
    starts = np.arange(0, sc.prompt, u, dtype=np.float64)
    sizes = np.minimum(u, sc.prompt - starts)
    seen = np.minimum((starts + sizes)[:, None], window[None, :])  # ubatch x layer
    per_layer = sc.batch * (sizes[:, None] * seen).sum(axis=0) * per * attends
    rate = np.where(gpu_layer, sc.system.gpu.attention_rate, host_read_rate(sc))
    return float((per_layer / rate).sum())
