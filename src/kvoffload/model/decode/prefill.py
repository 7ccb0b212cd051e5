"""The prefill: its FLOPs and its time to first token."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from kvoffload.inputs.models import Model
from kvoffload.inputs.precision import WeightFormat
from kvoffload.model.decode.kv_bytes import _kv_total
from kvoffload.model.decode.layer_classes import layers, step_weight_bytes
from kvoffload.model.decode.placement import Setup


def _attended(s: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Return the positions attended, summed over the first ``s`` tokens (s^2/2, or the window's)."""
    wf = np.minimum(w, s)
    return wf * wf / 2 + (s - wf) * wf


def prefill_flops(
    model: Model, prompt: ArrayLike, batch: ArrayLike = 1, cached: ArrayLike = 0
) -> np.ndarray:
    """Return the FLOPs of the prefill: matmuls plus causal attention (windows respected).

    ``cached``: the first tokens' KV is already there (a prefix-cache hit): only the tokens after
    them pass the matmuls, and their attention still reads every position before them.
    """
    lay = layers(model, WeightFormat.BF16)
    s = np.asarray(prompt, dtype=np.float64)[..., None]
    b = np.asarray(batch, dtype=np.float64)[..., None]
    w = lay.window
    if not np.any(cached):
        per_class = b * (s * lay.dense_flops + lay.attn_flops * _attended(s, w))
        return per_class @ lay.count
    c = np.asarray(cached, dtype=np.float64)[..., None]
    per_class = b * (
        (s - c) * lay.dense_flops + lay.attn_flops * (_attended(s, w) - _attended(c, w))
    )
    return per_class @ lay.count


def prefill_attention_flops(
    model: Model, prompt: ArrayLike, batch: ArrayLike = 1, cached: ArrayLike = 0
) -> np.ndarray:
    """Return the part of ``prefill_flops`` that is causal attention (scores and values)."""
    lay = layers(model, WeightFormat.BF16)
    s = np.asarray(prompt, dtype=np.float64)[..., None]
    c = np.asarray(cached, dtype=np.float64)[..., None]
    b = np.asarray(batch, dtype=np.float64)[..., None]
    w = lay.window
    return (b * lay.attn_flops * (_attended(s, w) - _attended(c, w))) @ lay.count


def ttft(
    setup: Setup,
    prompt: ArrayLike,
    batch: ArrayLike = 1,
    cached: ArrayLike = 0,
    *,
    rate: float | None = None,
    gpu_weight_bytes: float | None = None,
) -> np.ndarray:
    """Return the prefill time (s): compute-bound matmuls and attention, weights streamed once.

    ``cached``: the prompt's first tokens are already in GPU memory (a prefix-cache hit, reloaded
    or kept): the new tokens are computed, their attention reads the cached KV once from GPU
    memory, and only the new tokens' KV is written out where the placement offloads it.
    ``rate``: the FLOP/s the engine's prefill matmuls reach (default: ``system.compute_rate``);
    attention runs at the GPU's measured attention rate where the catalog has one, else at
    ``rate``; ``gpu_weight_bytes``: the weight bytes the GPU reads (default: every weight).
    """
    sysm, p = setup.system, setup.placement
    hbm = sysm.gpu.streaming_bandwidth
    weights = step_weight_bytes(setup.model, setup.weights)
    gpu_weights = weights if gpu_weight_bytes is None else gpu_weight_bytes
    kv_total = _kv_total(setup, prompt, batch)
    reads = gpu_weights / hbm
    if np.any(cached):
        c = np.asarray(cached, dtype=np.int64)
        prefix = _kv_total(setup, c, batch) - _kv_total(setup, np.zeros_like(c), batch)
        reads = reads + prefix / sysm.gpu.attention_rate
        kv_total = kv_total - prefix
    matmul_rate = rate or sysm.compute_rate
    flops = prefill_flops(setup.model, prompt, batch, cached)
    if sysm.gpu.attention_flops is None:
        compute = np.maximum(flops / matmul_rate, reads)
    else:
        attention = prefill_attention_flops(setup.model, prompt, batch, cached)
        attention_rate = sysm.gpu.attention_flops.value
        compute = np.maximum((flops - attention) / matmul_rate + attention / attention_rate, reads)
    rate_in = sysm.copy_rate("h2d", pinned=p.pinned)
    rate_out = sysm.copy_rate("d2h", pinned=p.pinned)
    w_in = (
        weights * p.weights.off / rate_in
        + weights * p.weights.disk / sysm.storage.read_bandwidth.value
    )
    kv_out = (
        kv_total * p.kv.off / rate_out + kv_total * p.kv.disk / sysm.storage.write_bandwidth.value
    )
    if p.overlap == "none":
        return compute + w_in + kv_out
    return np.maximum(compute, np.maximum(w_in, kv_out))
