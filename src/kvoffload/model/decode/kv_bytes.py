"""The KV bytes a setup stores: per token in one attention layer, and a batch's total."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from kvoffload.inputs.models import Model
from kvoffload.inputs.precision import KvFormat
from kvoffload.model import kv
from kvoffload.model.decode.layer_classes import Layers
from kvoffload.model.decode.placement import Setup


def _kv_token_bytes(model: Model, fmt: KvFormat) -> float:
    """Return one attention layer's KV bytes per token in ``fmt`` (B)."""
    return float(kv.attention_layer_token_bytes(model, fmt))  # one attention layer's, per token


def _kv_class_bytes(setup: Setup, lay: Layers) -> np.ndarray:
    """Return the KV bytes one token adds to one layer of each class of ``lay`` (B, read-only)."""
    return lay.derived(
        ("kv_class_bytes", setup.kv_heads_stored, setup.kv),
        lambda: lay.kv_per_token * _kv_token_bytes(setup.cache_model, setup.kv),
    )


def _kv_total(setup: Setup, context: ArrayLike, batch: ArrayLike) -> np.ndarray:
    """Return the batch's KV bytes at ``context`` as the engine stores them."""
    kv_total = kv.batch_bytes(
        setup.cache_model,
        np.asarray(context, dtype=np.int64),
        np.asarray(batch, dtype=np.int64),
        setup.kv,
    )
    return kv_total.astype(np.float64)
