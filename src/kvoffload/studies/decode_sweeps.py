"""Decode steps swept over context or batch: per overlap mode, per layer, per cache placement."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from kvoffload.model import decode


def overlap_frame(setup: decode.Setup, contexts: ArrayLike, batch: int = 1) -> pd.DataFrame:
    """Return TPOT (ms) against context for every overlap mode, one vectorised call per mode."""
    contexts = np.asarray(contexts)
    rows = []
    for mode in decode.OVERLAP_MODES:
        t = decode.step(setup, contexts, batch, mode).total * 1e3
        rows += [
            {"overlap": mode, "context": int(c), "tpot_ms": float(v)}
            for c, v in zip(contexts, t, strict=True)
        ]
    return pd.DataFrame(rows)


def layer_frame(setup: decode.Setup, contexts: ArrayLike, batch: int = 1) -> pd.DataFrame:
    """Return one full-attention layer's GPU time and link time (ms) against context."""
    contexts = np.asarray(contexts)
    per = decode.stream_times(setup, contexts, batch)
    rows = []
    for name, key in (("GPU work of the layer", "gpu"), ("host→GPU copy of its KV", "h2d")):
        for c, v in zip(contexts, per[key][..., 0], strict=True):
            rows.append({"stream": name, "context": int(c), "ms": float(v) * 1e3})
    return pd.DataFrame(rows)


def placements(
    setup: decode.Setup, context: int, batches: ArrayLike
) -> tuple[decode.Setup, decode.Setup]:
    """Return two placements over ``batches``: all KV in host memory, and KV spilled when HBM fills."""
    offloaded = decode.Setup(
        setup.system,
        setup.model,
        setup.weights,
        setup.kv,
        decode.Placement(kv=decode.Split(0, 1, 0), overlap=setup.placement.overlap),
    )
    resident = decode.Setup(
        setup.system,
        setup.model,
        setup.weights,
        setup.kv,
        decode.Placement(overlap=setup.placement.overlap),
    )
    return offloaded, decode.spill(resident, context, batches)


def batch_frame(setup: decode.Setup, context: int, batches: ArrayLike) -> pd.DataFrame:
    """Return TPOT (ms) against batch: all KV offloaded, and KV spilled only when HBM is full."""
    batches = np.asarray(batches)
    offloaded, spilled = placements(setup, context, batches)
    rows = []
    for name, st in (
        ("all KV in host memory", offloaded),
        ("KV on the GPU until it is full", spilled),
    ):
        t = decode.step(st, context, batches).total * 1e3
        rows += [
            {"placement": name, "batch": int(b), "tpot_ms": float(v)}
            for b, v in zip(batches, t, strict=True)
        ]
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class SpillSlopes:
    """How TPOT grows with the batch (ms per request), all offloaded and spilled when HBM fills."""

    full_at: int  # the first batch whose cache no longer fits wholly on the GPU (else the last)
    slope_all_ms: float  # all KV in host memory
    slope_before_ms: float  # KV on the GPU, before it fills (0 when it is full from the start)
    slope_after_ms: float  # KV spilled, after the GPU fills (0 when it never fills)
    spill_max_ms: float  # TPOT at the largest batch, spilled


def spill_slopes(setup: decode.Setup, context: int, batches: ArrayLike) -> SpillSlopes:
    """Return the median TPOT slopes before and after GPU memory fills, and with all KV offloaded."""
    batches = np.asarray(batches)
    offloaded, spilled = placements(setup, context, batches)
    on_gpu = np.asarray(spilled.placement.kv.gpu)
    last = len(batches) - 1
    full = int(np.argmax(on_gpu < 1)) if np.any(on_gpu < 1) else last
    t_spill = decode.step(spilled, context, batches).total * 1e3
    t_all = decode.step(offloaded, context, batches).total * 1e3
    return SpillSlopes(
        full_at=int(batches[full]),
        slope_all_ms=float(np.median(np.diff(t_all))),
        slope_before_ms=float(np.median(np.diff(t_spill[: full + 1]))) if full > 0 else 0.0,
        slope_after_ms=float(np.median(np.diff(t_spill[full:]))) if full < last else 0.0,
        spill_max_ms=float(t_spill[-1]),
    )
