"""KV cache sizes: bytes per token and layer, per request at a context, per batch."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from kvoffload.model.search import largest_true
from kvoffload.spec.models import Model
from kvoffload.spec.precision import KvFormat, kv_vector_bytes

_FULL = np.iinfo(np.int64).max // 4  # stands for "no window" in integer arithmetic


def bytes_per_token_per_layer(model: Model, fmt: KvFormat = KvFormat.BF16) -> np.ndarray:
    """Return the bytes one token adds to each layer's cache (K and V, or the MLA latent)."""
    per_layer = sum(count * kv_vector_bytes(length, fmt) for count, length in model.kv_vectors())
    return np.full(model.n_layers, per_layer, dtype=np.int64)


def bytes_per_token(model: Model, fmt: KvFormat = KvFormat.BF16) -> int:
    """Return the bytes one token adds to the whole cache while no window is full."""
    return int(bytes_per_token_per_layer(model, fmt).sum())


def _window_caps(model: Model) -> np.ndarray:
    return np.array([_FULL if w is None else w for w in model.layer_windows], dtype=np.int64)


def layer_bytes(model: Model, seq: ArrayLike, fmt: KvFormat = KvFormat.BF16) -> np.ndarray:
    """Return each layer's cache bytes for one request at context ``seq``: shape seq.shape + (L,)."""
    s = np.asarray(seq, dtype=np.int64)[..., None]
    held = np.minimum(s, _window_caps(model))  # a sliding-window layer holds at most its window
    return held * bytes_per_token_per_layer(model, fmt)


def full_layer_bytes(model: Model, tokens: int, fmt: KvFormat = KvFormat.BF16) -> int:
    """Return the K+V bytes of one full-attention layer for one request at ``tokens``."""
    return int(layer_bytes(model, tokens, fmt).max())


def request_bytes(model: Model, seq: ArrayLike, fmt: KvFormat = KvFormat.BF16) -> np.ndarray:
    """Return the cache bytes of one request at context ``seq`` (vectorised over seq)."""
    return layer_bytes(model, seq, fmt).sum(axis=-1)


def batch_bytes(
    model: Model, seq: ArrayLike, batch: ArrayLike = 1, fmt: KvFormat = KvFormat.BF16
) -> np.ndarray:
    """Return the cache bytes of ``batch`` requests each at context ``seq`` (broadcasting)."""
    return np.asarray(batch, dtype=np.int64) * request_bytes(model, seq, fmt)


@dataclass(frozen=True)
class KvSize:
    """The KV cache of one batch at one context, with the figures a reader asks for."""

    model: str
    fmt: KvFormat
    seq: int
    batch: int
    bytes_per_token: int
    bytes_per_token_per_layer: tuple[int, ...]
    per_request_bytes: int
    total_bytes: int
    window_capped_layers: int

    def to_json(self) -> dict:
        """Return a JSON-ready dict (integers for byte counts)."""
        return {
            "model": self.model,
            "dtype": self.fmt.value,
            "seq": self.seq,
            "batch": self.batch,
            "bytes_per_token": self.bytes_per_token,
            "bytes_per_token_per_layer": list(self.bytes_per_token_per_layer),
            "layers": len(self.bytes_per_token_per_layer),
            "window_capped_layers": self.window_capped_layers,
            "per_request_bytes": self.per_request_bytes,
            "total_bytes": self.total_bytes,
            "total_gb": self.total_bytes / 1e9,
            "total_gib": self.total_bytes / 2**30,
        }


def kv_size(model: Model, seq: int, batch: int = 1, fmt: KvFormat = KvFormat.BF16) -> KvSize:
    """Return the KV cache size summary of ``batch`` requests at context ``seq``."""
    per_layer = bytes_per_token_per_layer(model, fmt)
    per_request = int(request_bytes(model, seq, fmt))
    capped = int(np.sum(_window_caps(model) < seq))
    return KvSize(
        model=model.id,
        fmt=fmt,
        seq=int(seq),
        batch=int(batch),
        bytes_per_token=int(per_layer.sum()),
        bytes_per_token_per_layer=tuple(int(x) for x in per_layer),
        per_request_bytes=per_request,
        total_bytes=per_request * int(batch),
        window_capped_layers=capped,
    )


def max_context(
    model: Model,
    budget_bytes: ArrayLike,
    batch: ArrayLike = 1,
    fmt: KvFormat = KvFormat.BF16,
    *,
    limit: int = 10**9,
) -> np.ndarray:
    """Return the longest context whose KV for ``batch`` requests fits in ``budget_bytes``.

    Vectorised over budget and batch (broadcast). 0 means not even one token fits; ``limit``
    means the cache stops growing before it (every layer slides) or fits up to ``limit`` tokens.
    """
    budget, b = np.broadcast_arrays(
        np.asarray(budget_bytes, dtype=np.float64), np.asarray(batch, dtype=np.int64)
    )
    return largest_true(lambda s: batch_bytes(model, s, b, fmt) <= budget, budget.shape, limit)
