"""The prefill: its FLOPs and its time to first token."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from kvoffload.model.decode.kv_bytes import _kv_total
from kvoffload.model.decode.layer_classes import layers, step_weight_bytes
from kvoffload.model.decode.placement import Setup
from kvoffload.spec.models import Model
from kvoffload.spec.precision import WeightFormat


def prefill_flops(model: Model, prompt: ArrayLike, batch: ArrayLike = 1) -> np.ndarray:
    """Return the FLOPs of the prefill: matmuls plus causal attention (windows respected)."""
    lay = layers(model, WeightFormat.BF16)
    s = np.asarray(prompt, dtype=np.float64)[..., None]
    b = np.asarray(batch, dtype=np.float64)[..., None]
    w = lay.window
    # positions attended summed over the prompt: s^2/2 for full layers, capped by the window
    wf = np.minimum(w, s)
    capped = wf * wf / 2 + (s - wf) * wf
    per_class = b * (s * lay.dense_flops + lay.attn_flops * capped)
    return per_class @ lay.count


def ttft(setup: Setup, prompt: ArrayLike, batch: ArrayLike = 1) -> np.ndarray:
    """Return the prefill time (s): compute-bound matmuls and attention, weights streamed once."""
    sysm, p = setup.system, setup.placement
    hbm = sysm.gpu.streaming_bandwidth
    weights = step_weight_bytes(setup.model, setup.weights)
    kv_total = _kv_total(setup, prompt, batch)
    compute = np.maximum(
        prefill_flops(setup.model, prompt, batch) / sysm.compute_rate, weights / hbm
    )
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
