"""Mixture-of-experts routing: how many distinct routed experts one decode step touches."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike


def experts_touched(n_experts: ArrayLike, per_token: ArrayLike, batch: ArrayLike) -> np.ndarray:
    """Return the expected distinct routed experts a layer reads for ``batch`` tokens.

    Under uniform routing each token picks ``per_token`` of ``n_experts``, so one expert is missed
    by a token with probability 1 - k/n and by the whole batch with (1 - k/n)^b; the expected
    count touched is n * (1 - (1 - k/n)^b): k at batch 1, growing with the batch, never above n.
    """
    n = np.asarray(n_experts, dtype=np.float64)
    k = np.asarray(per_token, dtype=np.float64)
    b = np.asarray(batch, dtype=np.float64)
    return n * (1.0 - (1.0 - k / n) ** b)


def touched_share(
    n_experts: ArrayLike, per_token: ArrayLike, batch: ArrayLike, effective: ArrayLike | None = None
) -> np.ndarray:
    """Return the share of a layer's routed-expert bytes one step reads (see experts_touched).

    ``effective``: a measured routing skew, as the number of equally popular experts that touch
    as many distinct experts as the real router does (None: uniform over all ``n_experts``).
    """
    n = np.asarray(n_experts, dtype=np.float64)
    pool = n if effective is None else np.minimum(np.asarray(effective, dtype=np.float64), n)
    pool = np.maximum(pool, np.asarray(per_token, dtype=np.float64))
    return experts_touched(pool, per_token, batch) / n


@dataclass(frozen=True)
class Routing:
    """How a MoE model's routing behaves, where measured: its skew and a GPU expert cache.

    ``effective_experts``: see ``touched_share``. ``stream``: what an engine that copies routed
    experts to the GPU moves, 'all' (whole modules) or 'routed' (only the experts the batch
    touches). ``gpu_hit_rate``: with 'routed', the share of touched experts already held in a GPU
    expert cache, which do not cross the link.
    """

    effective_experts: int | None = None
    stream: str = "all"
    gpu_hit_rate: float = 0.0

    def __post_init__(self) -> None:
        if self.stream not in ("all", "routed"):
            raise ValueError(f"stream must be 'all' or 'routed', got {self.stream!r}")
        if not 0.0 <= self.gpu_hit_rate <= 1.0:
            raise ValueError(f"gpu_hit_rate must be from 0 to 1, got {self.gpu_hit_rate!r}")
