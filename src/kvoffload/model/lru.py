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

import math
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


def presence(t: ArrayLike, tr: Traffic) -> np.ndarray:
    """Return the share of time a session's object is cached when it stays ``t`` s after a request.

    The rate of requests times the integral of the gap's survival function from 0 to t (at most 1).
    """
    t = np.asarray(t, dtype=np.float64)
    tail = tr.mean_gap - tr.gap_min  # the mean of the gap's exponential part (0: a fixed gap)
    over = np.maximum(t - tr.gap_min, 0.0)
    integral = np.minimum(t, tr.gap_min) + tail * -np.expm1(-over / (tail if tail > 0 else 1.0))
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


# the gap's exponential part at the midpoints of this many equal-probability slices
_GAP_QUANTILES = 256
# past this many other sessions the binomial count is taken as normal (its CDF by erf)
_EXACT_SESSIONS = 4096
_ERF = np.frompyfunc(math.erf, 1, 1)


def _count_below(n: int, q: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Return P(N < c) for N ~ Binomial(n, q) and whole c, shape c.shape + q.shape.

    Exact sums of the binomial's terms up to ``_EXACT_SESSIONS`` sessions, a normal (with half an
    object's continuity correction) past it.
    """
    cc = np.clip(np.asarray(c, dtype=np.float64), 0.0, n + 1.0)[..., None]
    if n <= _EXACT_SESSIONS:
        j = np.arange(n + 1, dtype=np.float64)
        logfact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1)))])
        qc = np.clip(q, 1e-300, 1 - 1e-16)[:, None]
        logpmf = logfact[-1] - logfact - logfact[::-1] + j * np.log(qc) + (n - j) * np.log1p(-qc)
        # cdf[i, m] = P(N < m) at the i-th gap, m = 0 .. n + 1
        cdf = np.concatenate([np.zeros((q.size, 1)), np.cumsum(np.exp(logpmf), axis=1)], axis=1)
        m = np.broadcast_to(cc, (*cc.shape[:-1], q.size)).astype(np.int64)
        return np.minimum(cdf, 1.0)[np.arange(q.size), m]
    mean, sd = n * q, np.sqrt(n * q * (1 - q))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(sd > 0, (cc - 0.5 - mean) / np.where(sd > 0, sd, 1.0), np.inf * (cc - mean))
    return np.where(cc <= 0, 0.0, 0.5 * (1.0 + _ERF(z / math.sqrt(2.0)).astype(np.float64)))


def hit_rate(tr: Traffic, capacity: ArrayLike) -> np.ndarray:
    """Return the share of requests an LRU of each ``capacity`` (bytes) serves: P(gap < eviction).

    Che's approximation takes the eviction time as exactly the characteristic time T. In an LRU
    holding K = floor(capacity / size) sessions it is the time until K distinct others ask again: the
    count over a span of t is binomial, each of the other sessions having asked within it with
    probability q = presence(t), once the gap's random part re-shuffles the sessions between
    rounds; a fixed gap brings them back in the same order each round, and the count is then
    exactly (sessions - 1) q. A request whose gap is g hits when fewer than K others came in it,
    P(N(g) < K), averaged over the gap's distribution (its exponential part at equal-probability
    quantiles). With no spread this is Che's: hit = P(gap < T).
    """
    slots = np.floor(np.asarray(capacity, dtype=np.float64) / tr.size)  # whole sessions held
    return _slot_hit_rate(tr, slots)


def _slot_hit_rate(tr: Traffic, slots: np.ndarray) -> np.ndarray:
    """Return ``hit_rate`` for an LRU holding ``slots`` whole sessions."""
    tail = tr.mean_gap - tr.gap_min
    u = (np.arange(_GAP_QUANTILES) + 0.5) / _GAP_QUANTILES
    gaps = tr.gap_min - tail * np.log1p(-u)  # the gap's quantiles
    q = presence(gaps, tr)
    others = tr.sessions - 1
    shuffled = -np.expm1(-tail * tr.sessions / tr.mean_gap)
    random = _count_below(others, q, slots)
    fixed = np.where(others * q < slots[..., None], 1.0, 0.0)
    # a cache that holds every session serves every turn (after each session's first)
    return np.where(
        slots >= tr.sessions, 1.0, (shuffled * random + (1 - shuffled) * fixed).mean(axis=-1)
    )


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
    best = np.maximum.accumulate(hit_rate(tr, reach))
    served = np.diff(np.concatenate([[0.0], best]))
    return TierHits(hit_rate=served, survival_s=characteristic_time(tr, reach))


def capacity_for(tr: Traffic, target: float) -> float:
    """Return the bytes one LRU tier needs for a ``target`` share of the requests to hit it.

    The smallest capacity whose hit rate reaches it, by bisection: the hit rate
    grows with the capacity; every session's bytes (all fit) when nothing smaller does.
    """
    whole = tr.sessions * tr.size
    if target <= 0:
        return 0.0
    if target >= 1 or hit_rate(tr, whole * (1 - 1e-12)) < target:
        return whole
    if tr.sessions <= _EXACT_SESSIONS:
        # the hit rate steps at whole sessions: every count of them at once, the first that
        # reaches the target (the bisection below converges on the same step)
        hits = _slot_hit_rate(tr, np.arange(tr.sessions, dtype=np.float64))
        return float(int(np.argmax(hits >= target)) * tr.size) if (hits >= target).any() else whole
    lo, hi = 0.0, whole
    for _ in range(_ITERATIONS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if hit_rate(tr, mid) < target else (lo, mid)
    return hi
