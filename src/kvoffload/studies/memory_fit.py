"""Weights and KV cache against the machine's GPU memory (every GPU of it): what fits, how long."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from kvoffload.model import capacity, decode, kv
from kvoffload.spec.hardware import System
from kvoffload.spec.models import Model
from kvoffload.spec.precision import KvFormat, WeightFormat


def memory_fit_frame(
    system: System,
    model: Model,
    contexts: ArrayLike,
    batches: ArrayLike,
    *,
    weights: WeightFormat = WeightFormat.BF16,
    kv_fmt: KvFormat = KvFormat.BF16,
) -> pd.DataFrame:
    """Return weights + KV (GB) for every (batch, context) and whether it fits the GPU memory."""
    s = np.asarray(contexts, dtype=np.int64)
    b = np.asarray(batches, dtype=np.int64)
    w = decode.resident_weight_bytes(model, weights)
    kv_bytes = kv.batch_bytes(model, s[None, :], b[:, None], kv_fmt)
    # the prefill's working set stands beside them while a long prompt is processed
    total = w + kv_bytes + decode.prefill_reserve(model, b)[:, None]
    gpu_memory = system.gpu_memory
    bb, ss = np.meshgrid(b, s, indexing="ij")
    return pd.DataFrame(
        {
            "batch": bb.ravel(),
            "context": ss.ravel(),
            "weights_gb": w / 1e9,
            "kv_gb": kv_bytes.ravel() / 1e9,
            "total_gb": total.ravel() / 1e9,
            "capacity_gb": gpu_memory / 1e9,
            "fits": capacity.within(total.ravel(), gpu_memory),
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
    w = int(decode.resident_weight_bytes(model, weights))
    gpu_memory = system.gpu_memory
    budget = np.maximum(gpu_memory - w - decode.prefill_reserve(model, b), 0.0)
    tokens = kv.max_context(model, budget, b, kv_fmt)
    return LongestFit(gpu_memory, w, b, np.asarray(tokens))
