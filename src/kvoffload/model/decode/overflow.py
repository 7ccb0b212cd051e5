"""Placements that keep on the GPU what fits and move the rest to host memory (KV, weights)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numpy.typing import ArrayLike

from kvoffload.model import capacity
from kvoffload.model.decode.footprint import memory
from kvoffload.model.decode.kv_bytes import _kv_total
from kvoffload.model.decode.placement import Setup, Split
from kvoffload.model.search import largest_true_linear


def spill(setup: Setup, context: ArrayLike, batch: ArrayLike = 1) -> Setup:
    """Return the setup with KV kept on the GPU while it fits and the rest in host memory.

    The KV shares become arrays over (context, batch): what a server that offloads only on
    overflow would do. The weights' placement is kept.
    """
    p = setup.placement
    kv_total = _kv_total(setup, context, batch)
    # what the GPU holds with every KV byte off it: its weights and the staging buffers, sized
    # for the whole cache streaming (streamed weights and the prefill's working set included)
    held = memory(replace(setup, placement=replace(p, kv=Split(0.0, 1.0, 0.0))), context, batch)
    free = setup.system.gpu_memory - held.gpu
    on_gpu = np.clip(free / np.maximum(kv_total, 1.0), 0.0, 1.0)
    return replace(setup, placement=replace(p, kv=Split(on_gpu, 1.0 - on_gpu, 0.0)))


def spill_weights(setup: Setup, context: float, batch: float = 1, *, iters: int = 40) -> Setup:
    """Return the setup with as much of its GPU weight share kept as fits GPU memory, the rest on the host.

    What an engine does when the weights overflow the GPU (vLLM's ``cpu_offload_gb``, Accelerate's
    device map): the share moved to host memory crosses the link in every step. GPU memory is
    checked with a second staging buffer, so the placement fits in every overlap mode. Unchanged
    when the weights fit; with no weight on the GPU when not even that fits (the caller checks
    ``capacity.fits`` and says so). Host memory is not a reason to keep weights on the GPU.
    """
    p = setup.placement
    if p.groups:
        raise ValueError("spill_weights moves whole-model weight shares, not tensor groups")
    w = p.weights

    def at(gpu: float) -> Setup:
        return replace(setup, placement=replace(p, weights=Split(gpu, w.cpu + w.gpu - gpu, w.disk)))

    def gpu_fits(gpu: float) -> bool:
        mem = memory(at(gpu).with_overlap("pipeline"), context, batch)
        return bool(np.all(capacity.within(mem.gpu, setup.system.gpu_memory)))

    if gpu_fits(w.gpu):
        return setup
    if not gpu_fits(0.0):
        return at(0.0)
    # GPU memory grows with the share kept: the largest fitting share
    return at(largest_true_linear(gpu_fits, 0.0, w.gpu, iters))
