"""Weights and KV cache against the machine's GPU memory (every GPU of it): what fits, how long.

The one "longest context that fits" of the book: ``longest_context`` bisects ``decode.memory``
(weights, cache and the GPU's buffers: the one footprint) against ``capacity.fits`` (the one fit)
up to ``inputs.limits.MAX_CONTEXT_TOKENS``; chapter 02, the verdict box and chapter 05 call it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from kvoffload.inputs.hardware import System
from kvoffload.inputs.limits import MAX_CONTEXT_TOKENS
from kvoffload.inputs.models import Model
from kvoffload.inputs.precision import KvFormat, WeightFormat
from kvoffload.model import capacity, decode, kv
from kvoffload.model.search import largest_true


def fits(setup: decode.Setup, context: ArrayLike, batch: ArrayLike = 1) -> np.ndarray:
    """Return whether every tier holds ``setup``'s weights, cache and buffers at (context, batch)."""
    mem = decode.memory(setup, context, batch)
    return capacity.fits(setup.system, mem.gpu, mem.cpu, mem.disk)


def longest_context(setup: decode.Setup, batches: ArrayLike = 1) -> np.ndarray:
    """Return, per batch, the longest context (tokens) that ``fits`` (0: not even one token fits).

    ``MAX_CONTEXT_TOKENS`` where the footprint stops growing before it (every layer slides or is
    recurrent) or everything up to it fits.
    """
    b = np.asarray(batches, dtype=np.int64)
    return largest_true(lambda s: fits(setup, s, b), b.shape, MAX_CONTEXT_TOKENS)


def memory_fit_frame(
    system: System,
    model: Model,
    contexts: ArrayLike,
    batches: ArrayLike,
    *,
    weights: WeightFormat = WeightFormat.BF16,
    kv_fmt: KvFormat = KvFormat.BF16,
) -> pd.DataFrame:
    """Return weights + KV + buffers (GB) for every (batch, context) and whether it fits the GPU.

    Everything on the GPU: the total is ``decode.memory``'s GPU bytes, the fit ``capacity.fits``.
    """
    setup = decode.Setup(system, model, weights, kv_fmt)
    bb, ss = np.meshgrid(
        np.asarray(batches, dtype=np.int64), np.asarray(contexts, dtype=np.int64), indexing="ij"
    )
    mem = decode.memory(setup, ss, bb)
    kv_bytes = kv.batch_bytes(setup.cache_model, ss, bb, kv_fmt)
    return pd.DataFrame(
        {
            "batch": bb.ravel(),
            "context": ss.ravel(),
            "weights_gb": decode.resident_weight_bytes(model, weights) / 1e9,
            "kv_gb": kv_bytes.ravel() / 1e9,
            # the prefill's (or the decode's) working set stands beside them
            "buffers_gb": mem.staging.ravel() / 1e9,
            "total_gb": mem.gpu.ravel() / 1e9,
            "capacity_gb": system.gpu_memory / 1e9,
            "fits": np.broadcast_to(
                capacity.fits(system, mem.gpu, mem.cpu, mem.disk), ss.shape
            ).ravel(),
        }
    )


@dataclass(frozen=True)
class LongestFit:
    """The longest context that fits next to the weights in GPU memory, per batch."""

    capacity_bytes: float  # every GPU of the machine
    weight_bytes: int
    batches: np.ndarray
    tokens: np.ndarray  # longest context per batch (0: not even one token fits)

    def frame(self) -> pd.DataFrame:
        """Return the batches and their longest contexts as a table."""
        return pd.DataFrame(
            {"batch": self.batches, "longest context that fits (tokens)": self.tokens}
        )


def longest_fit(
    system: System,
    model: Model,
    batches: ArrayLike,
    *,
    weights: WeightFormat = WeightFormat.BF16,
    kv_fmt: KvFormat = KvFormat.BF16,
) -> LongestFit:
    """Return, per batch, the longest context (tokens) whose KV fits next to the weights."""
    b = np.asarray(batches)
    setup = decode.Setup(system, model, weights, kv_fmt)
    w = int(decode.resident_weight_bytes(model, weights))
    return LongestFit(system.gpu_memory, w, b, np.asarray(longest_context(setup, b)))
