"""KV cache sizes: bytes per token and layer, per request at a context, per batch.

Attention layers cache K and V (or MLA's latent) for every token they hold; a sliding-window or
chunked layer holds at most its window. Recurrent layers (gated DeltaNet, Mamba) cache nothing
per token: each request keeps a fixed state there, which counts in every request's bytes at
every context and in none of the bytes per token. A layer may hold both (Falcon-H1: attention
and a Mamba-2 mixer side by side), and an MLP-only block (Nemotron-H's "-") holds neither; each
layer's bytes are its per-token cache plus its state.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
from numpy.typing import ArrayLike

from kvoffload.inputs.limits import MAX_CONTEXT_TOKENS
from kvoffload.inputs.models import Model
from kvoffload.inputs.precision import KvFormat, kv_vector_bytes
from kvoffload.model.search import largest_true

_FULL = np.iinfo(np.int64).max // 4  # stands for "no window" in integer arithmetic


@cache
def attention_layer_token_bytes(model: Model, fmt: KvFormat = KvFormat.BF16) -> int:
    """Return the bytes one token adds to one attention layer's cache (K and V, or the latent)."""
    return sum(count * kv_vector_bytes(length, fmt) for count, length in model.kv_vectors())


def bytes_per_token_per_layer(model: Model, fmt: KvFormat = KvFormat.BF16) -> np.ndarray:
    """Return the bytes one token adds to each layer's cache (0 in a recurrent-state layer)."""
    per_layer = attention_layer_token_bytes(model, fmt)
    return np.where(model.attention_layers, per_layer, 0).astype(np.int64)


def state_value_bytes(fmt: KvFormat = KvFormat.BF16) -> int:
    """Return the bytes of one value of a recurrent layer's state when the KV cache is ``fmt``.

    The state stays in a float format whatever the KV cache is quantised to: vLLM sizes it by
    ``mamba_cache_dtype`` / ``mamba_ssm_cache_dtype``, which default to "auto", the model's own
    dtype, and are set apart from ``kv_cache_dtype`` (vllm/config/cache.py @ c1d86421;
    MambaStateDtypeCalculator in vllm/model_executor/layers/mamba/mamba_utils.py @ 2afe1e85).
    So 4 bytes with an fp32 cache and 2 (bf16, the checkpoints' dtype) with every other format,
    fp8 and the integer formats included. Engines that keep the SSM state in fp32 regardless
    (transformers' torch fallback for gated DeltaNet returns a float32 recurrent state; vLLM
    with ``--mamba-ssm-cache-dtype float32``) hold twice this for the recurrent part.
    """
    return 4 if fmt is KvFormat.FP32 else 2


def state_bytes_per_layer(model: Model, fmt: KvFormat = KvFormat.BF16) -> np.ndarray:
    """Return the fixed state one request keeps in each layer (0 in an attention layer), B."""
    return model.state_values_per_layer() * state_value_bytes(fmt)


def state_bytes_per_request(model: Model, fmt: KvFormat = KvFormat.BF16) -> int:
    """Return the fixed state one request keeps over all recurrent layers (B), at any context."""
    return int(state_bytes_per_layer(model, fmt).sum())


def bytes_per_token(model: Model, fmt: KvFormat = KvFormat.BF16) -> int:
    """Return the bytes one token adds to the whole cache while no window is full."""
    return int(bytes_per_token_per_layer(model, fmt).sum())


def _window_caps(model: Model) -> np.ndarray:
    return np.array([_FULL if w is None else w for w in model.layer_windows], dtype=np.int64)


@cache
def _layer_rows(model: Model, fmt: KvFormat) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return each layer's window cap, bytes per token and state bytes (read-only, per model)."""
    rows = (
        _window_caps(model),
        bytes_per_token_per_layer(model, fmt),
        state_bytes_per_layer(model, fmt),
    )
    for row in rows:
        row.flags.writeable = False
    return rows


def layer_bytes(model: Model, seq: ArrayLike, fmt: KvFormat = KvFormat.BF16) -> np.ndarray:
    """Return each layer's cache bytes for one request at context ``seq``: shape seq.shape + (L,).

    An attention layer holds ``min(seq, window)`` tokens; a recurrent layer its fixed state.
    """
    caps, per_token, state = _layer_rows(model, fmt)
    s = np.asarray(seq, dtype=np.int64)[..., None]
    held = np.minimum(s, caps)  # a sliding-window layer holds at most its window
    return held * per_token + state


def full_layer_bytes(model: Model, tokens: int, fmt: KvFormat = KvFormat.BF16) -> int:
    """Return the K+V bytes of the largest attention layer for one request at ``tokens``."""
    held = np.minimum(int(tokens), _window_caps(model))
    return int((held * bytes_per_token_per_layer(model, fmt)).max())


@cache
def _cap_rows(model: Model, fmt: KvFormat) -> tuple[tuple[tuple[int, int], ...], int]:
    """Return (window cap, bytes per token summed over the layers with that cap) pairs and the state."""
    caps, per_token, state = _layer_rows(model, fmt)
    by_cap: dict[int, int] = {}
    for cap, nbytes in zip(caps.tolist(), per_token.tolist(), strict=True):
        by_cap[cap] = by_cap.get(cap, 0) + nbytes
    return tuple(by_cap.items()), int(state.sum())


def request_bytes(model: Model, seq: ArrayLike, fmt: KvFormat = KvFormat.BF16) -> np.ndarray:
    """Return the cache bytes of one request at context ``seq`` (vectorised over seq)."""
    s = np.asarray(seq, dtype=np.int64)
    # the integer sum over the layers, grouped by window cap (exact: integers add in any order)
    rows, state = _cap_rows(model, fmt)
    if s.ndim:
        total = np.full(s.shape, state, dtype=np.int64)
        for cap, nbytes in rows:
            total += np.minimum(s, cap) * nbytes
        return total
    at = int(s)
    return np.int64(sum(min(at, cap) * nbytes for cap, nbytes in rows) + state)


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
    state_bytes_per_request: int = 0  # fixed recurrent state (gated DeltaNet, Mamba layers)

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
            "state_bytes_per_request": self.state_bytes_per_request,
            "total_bytes": self.total_bytes,
            "total_gb": self.total_bytes / 1e9,
            "total_gib": self.total_bytes / 2**30,
        }


def kv_size(model: Model, seq: int, batch: int = 1, fmt: KvFormat = KvFormat.BF16) -> KvSize:
    """Return the KV cache size summary of ``batch`` requests at context ``seq``."""
    per_layer = bytes_per_token_per_layer(model, fmt)
    per_request = int(request_bytes(model, seq, fmt))
    capped = int(np.sum((_window_caps(model) < seq) & model.attention_layers))
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
        state_bytes_per_request=state_bytes_per_request(model, fmt),
    )


def max_context(
    model: Model,
    budget_bytes: ArrayLike,
    batch: ArrayLike = 1,
    fmt: KvFormat = KvFormat.BF16,
    *,
    limit: int = MAX_CONTEXT_TOKENS,
) -> np.ndarray:
    """Return the longest context whose KV for ``batch`` requests fits in ``budget_bytes``.

    Vectorised over budget and batch (broadcast). 0 means not even one token fits (with every
    request's fixed recurrent state, if the model has one); ``limit`` means the cache stops
    growing before it (every layer slides or is recurrent) or fits up to ``limit`` tokens.
    """
    budget, b = np.broadcast_arrays(
        np.asarray(budget_bytes, dtype=np.float64), np.asarray(batch, dtype=np.int64)
    )
    return largest_true(lambda s: batch_bytes(model, s, b, fmt) <= budget, budget.shape, limit)
