"""Hit rates of an LRU prefix cache, per tier, from the traffic: the characteristic-time approximation.

Each session keeps one object in the cache: the KV of its context, ``size`` bytes. A session's
turns come as a renewal process: the gap between two turns is at least ``gap_min`` seconds (the
reader reads the answer and types) plus an exponential part, so that the mean gap is ``mean_gap``.
Under LRU an object stays cached for about the *characteristic time* T after its last request, T
being the time the cache takes to fill with other sessions' bytes (Che, Tung and Wang, "Hierarchical
Web caching systems: modeling, design and experimental results", IEEE JSAC 20(7), 2002, eq. 4-6;
for renewal traffic, Martina, Garetto and Leonardi, "A unified approach to the performance analysis
of caching systems", IEEE INFOCOM 2014, §III: the hit probability is the gap's CDF at T, an object's
time-average presence lambda x the integral of the gap's survival function up to T). T solves

    sessions x size x presence(T) = capacity,

and a request hits when its gap is shorter than T: ``hit = P(gap < T)``. The approximation is
accurate for many sessions (Fricker, Robert and Roberts, ITC 24, 2012); tests hold it to an event
simulation of LRU. The first turn of a session is a compulsory miss and is left out (steady state).

Tiers: with write-through (every tier stores each block as it is computed) the tiers are inclusive,
each an LRU of its own capacity over the same requests; with write-back (a tier receives what the
tier above evicts) they are exclusive, tier j holding what fits in the capacity of tiers 0..j. A
request is served by the fastest tier whose T exceeds its gap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

_ITERATIONS = 80  # bisection halvings of the span: far below a microsecond


@dataclass(frozen=True)
class Traffic:
    """Sessions sharing a cache: how many, their object's bytes and the gaps between their turns."""

    sessions: int
    size: float  # bytes each session keeps cached (its context's KV)
    mean_gap: float  # s between two turns of one session, on average (sessions / request rate)
    gap_min: float = 0.0  # s: no turn comes sooner than this after the last

    def __post_init__(self) -> None:
        if not 0 <= self.gap_min <= self.mean_gap:
            raise ValueError(f"gap_min {self.gap_min} must lie in [0, mean_gap {self.mean_gap}]")


def _tail(t: np.ndarray, tr: Traffic) -> np.ndarray:
    """Return the mean of the gap's exponential part (s): mean_gap - gap_min (0: a fixed gap)."""
    return np.full_like(t, tr.mean_gap - tr.gap_min)


def gap_cdf(t: ArrayLike, tr: Traffic) -> np.ndarray:
    """Return P(gap < t): 0 below gap_min, then 1 - exp(-(t - gap_min) / tail)."""
    t = np.asarray(t, dtype=np.float64)
    tail = _tail(t, tr)
    over = np.maximum(t - tr.gap_min, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        expo = np.where(tail > 0, -np.expm1(-over / np.where(tail > 0, tail, 1.0)), 1.0)
    return np.where(t > tr.gap_min, expo, 0.0)


def presence(t: ArrayLike, tr: Traffic) -> np.ndarray:
    """Return the share of time a session's object is cached when it stays ``t`` s after a request.

    The rate of requests times the integral of the gap's survival function from 0 to t (at most 1).
    """
    t = np.asarray(t, dtype=np.float64)
    tail = _tail(t, tr)
    over = np.maximum(t - tr.gap_min, 0.0)
    integral = np.minimum(t, tr.gap_min) + tail * -np.expm1(-over / np.where(tail > 0, tail, 1.0))
    return np.minimum(integral / tr.mean_gap, 1.0)


def characteristic_time(tr: Traffic, capacity: ArrayLike) -> np.ndarray:
    """Return T (s), how long an object stays after its last request (inf: every session fits)."""
    cap = np.asarray(capacity, dtype=np.float64)
    total = tr.sessions * tr.size
    out = np.full(cap.shape, np.inf)
    short = cap < total
    if not np.any(short):
        return out
    # presence rises from 0 (t = 0) to 1: its inverse by bisection, every capacity at once,
    # inside a span long enough for presence to pass any share below 1 that float64 tells apart
    need = cap[short] / total
    lo = np.zeros_like(need)
    hi = np.full_like(need, tr.gap_min + max(tr.mean_gap - tr.gap_min, 1e-9) * 60.0)
    for _ in range(_ITERATIONS):
        mid = (lo + hi) / 2
        under = presence(mid, tr) <= need
        lo, hi = np.where(under, mid, lo), np.where(under, hi, mid)
    out[short] = lo
    return out


@dataclass(frozen=True)
class TierHits:
    """Per tier, in the order given: the share of requests it serves and its characteristic time."""

    hit_rate: np.ndarray  # share of requests served by each tier (the rest recompute)
    survival_s: np.ndarray  # how long a session's object stays in each tier after a turn

    @property
    def miss_rate(self) -> float:
        """Return the share of requests no tier serves."""
        return float(1.0 - self.hit_rate.sum())


def tier_hits(tr: Traffic, capacities: ArrayLike, *, inclusive: bool = True) -> TierHits:
    """Return the hit rate of each tier (fastest first) for the traffic, under LRU.

    ``inclusive``: every tier stores every object (write-through); else each tier holds what the
    tiers above evicted (write-back), so tier j reaches the capacity of tiers 0..j together.
    """
    caps = np.asarray(capacities, dtype=np.float64)
    reach = caps if inclusive else np.cumsum(caps)
    t = characteristic_time(tr, reach)
    cdf = np.where(np.isinf(t), 1.0, gap_cdf(np.where(np.isinf(t), 0.0, t), tr))
    best = np.maximum.accumulate(cdf)
    served = np.diff(np.concatenate([[0.0], best]))
    return TierHits(hit_rate=served, survival_s=t)


def capacity_for(tr: Traffic, hit_rate: float) -> float:
    """Return the bytes one LRU tier needs for ``hit_rate`` of the requests to hit it (inf: never)."""
    if hit_rate <= 0:
        return 0.0
    if hit_rate >= 1:
        return tr.sessions * tr.size
    tail = tr.mean_gap - tr.gap_min
    if tail <= 0:  # a fixed gap: all or nothing
        return tr.sessions * tr.size
    t = tr.gap_min - tail * np.log1p(-hit_rate)  # gap_cdf(t) = hit_rate
    return float(tr.sessions * tr.size * presence(t, tr))
