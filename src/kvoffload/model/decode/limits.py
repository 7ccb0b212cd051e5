"""The limits of a setup: tokens hidden under compute, the longest context, the largest batch."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numpy.typing import ArrayLike

from kvoffload.inputs.limits import MAX_CONTEXT_TOKENS
from kvoffload.model import capacity
from kvoffload.model.decode.footprint import memory
from kvoffload.model.decode.kv_bytes import _kv_token_bytes
from kvoffload.model.decode.layer_classes import layers
from kvoffload.model.decode.overlap import step
from kvoffload.model.decode.placement import Placement, Setup
from kvoffload.model.decode.streams import stream_times
from kvoffload.model.decode.traffic import weight_traffic
from kvoffload.model.search import largest_true
from kvoffload.model.transfer import link_time


def hidden_tokens(setup: Setup, context: ArrayLike, batch: ArrayLike = 1) -> np.ndarray:
    """Return how many offloaded tokens per layer can cross the link under one layer's GPU work.

    Transfer hides behind compute when the next layer's copy takes no longer than this layer's
    GPU time: tokens x batch x KV bytes per token and layer / link rate <= GPU time of a layer.
    Weights streamed from the host take the link first, so their copy comes off that time.
    """
    sysm = setup.system
    on_gpu = replace(setup, placement=Placement())
    gpu = stream_times(on_gpu, context, batch)["gpu"][..., 0]
    rate = sysm.copy_rate("h2d", pinned=setup.placement.pinned)
    b = np.asarray(batch, dtype=np.float64)
    moved = weight_traffic(setup, layers(setup.model, setup.weights), b[..., None]).moved[..., 0]
    weights_in = np.where(
        moved > 0, link_time(sysm, moved, "h2d", pinned=setup.placement.pinned), 0
    )
    per_token = b * _kv_token_bytes(setup.cache_model, setup.kv)
    return np.floor(np.maximum(gpu - weights_in, 0.0) * rate / per_token)


def max_context(
    setup: Setup, budget_s: ArrayLike, batch: ArrayLike = 1, *, limit: int = MAX_CONTEXT_TOKENS
) -> np.ndarray:
    """Return the longest context whose decode step meets ``budget_s`` (0: none does; limit: all do)."""
    budget, b = np.broadcast_arrays(
        np.asarray(budget_s, dtype=np.float64), np.asarray(batch, dtype=np.float64)
    )
    return largest_true(lambda s: step(setup, s, b).total <= budget, budget.shape, limit)


def max_batch(
    setup: Setup, context: ArrayLike, budget_s: ArrayLike, *, limit: int = 100_000
) -> np.ndarray:
    """Return the largest batch that meets the step budget and fits every tier (0: none does)."""
    ctx, budget = np.broadcast_arrays(
        np.asarray(context, dtype=np.float64), np.asarray(budget_s, dtype=np.float64)
    )

    def ok(b: np.ndarray) -> np.ndarray:
        mem = memory(setup, ctx.astype(np.int64), b)
        fits = capacity.fits(setup.system, mem.gpu, mem.cpu, mem.disk)
        return (b >= 1) & fits & (step(setup, ctx, np.maximum(b, 1)).total <= budget)

    return largest_true(ok, ctx.shape, limit)


def knee_context(
    setup: Setup, batch: ArrayLike = 1, *, limit: int = MAX_CONTEXT_TOKENS
) -> np.ndarray:
    """Return the longest context at which the GPU's own work still outlasts the host→GPU copies."""
    b = np.asarray(batch, dtype=np.float64)

    def ok(s: np.ndarray) -> np.ndarray:
        st = step(setup, s, b).streams
        return st["h2d"] <= st["gpu"]

    return largest_true(ok, b.shape, limit)
