"""Mixture-of-experts routing: how many distinct routed experts one decode step touches."""

from __future__ import annotations

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


def touched_share(n_experts: ArrayLike, per_token: ArrayLike, batch: ArrayLike) -> np.ndarray:
    """Return the share of a layer's routed-expert bytes one step reads (see experts_touched)."""
    n = np.asarray(n_experts, dtype=np.float64)
    return experts_touched(n, per_token, batch) / n
