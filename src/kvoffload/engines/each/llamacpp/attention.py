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
"""

from __future__ import annotations

from kvoffload.engines.each.llamacpp.options import constants
from kvoffload.engines.each.llamacpp.placement import host_read_rate
from kvoffload.inputs.precision import KvFormat, WeightFormat, kv_vector_bytes
from kvoffload.model import cpu_rate
from kvoffload.model.prediction import Scenario

# the ggml block formats of llama.cpp's KV cache (--cache-type-k/v), each read by the vector kernel
BLOCK_FORMATS = (KvFormat.Q8_0, KvFormat.Q4_0, KvFormat.Q4_1, KvFormat.Q5_0, KvFormat.Q5_1)
# the CPU matvec kernel that reads each, where catalog/cpu_matvec.yaml has one
_CPU_KERNEL = {KvFormat.Q8_0: WeightFormat.Q8_0, KvFormat.Q4_0: WeightFormat.Q4_0}
_F16_BYTES = 2  # bytes of one f16 value


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
