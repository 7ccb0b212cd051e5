"""The exact mean of a convex, piecewise linear quantity over a run of token steps."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

# token_mean: sweeps of at most this many token steps are evaluated token by token, in one call
BRUTE_STEPS = 4096
_CHUNK = 8192  # intervals evaluated per call on the fast path (keeps the temporaries in cache)
_SHORT = 16  # a kinked interval this short is evaluated token by token
_TOL = 1e-13  # a midpoint this close (relative) to the chord: the interval is linear


def token_mean(
    fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
    prompt: ArrayLike,
    generate: int,
    windows: ArrayLike = (),
) -> np.ndarray:
    """Return the exact mean of ``fn`` over the contexts prompt, prompt + 1, ..., prompt + generate - 1.

    ``fn(point, context)`` returns K quantities, shape (K,) + context.shape, at ``context`` tokens
    (an (m, j) array) for the sweep points ``point`` (m indices into the flattened ``prompt``).
    The result has shape (K,) + prompt.shape. Each quantity must be continuous, convex and
    piecewise linear in the context between the ``windows`` and above 0, as every step-model
    quantity is (sums and maxima of terms linear in min(context, window)): then a midpoint on the
    chord proves an interval of tokens linear, and its mean is the chord's. Intervals with a kink
    are split at the crossing of the tangents at their ends until every piece is linear.
    """
    g = int(generate)
    if g < 1:
        raise ValueError(f"generate must be at least 1, got {generate!r}")
    p = np.asarray(prompt, dtype=np.float64)
    shape, p = p.shape, p.ravel()
    n_points = p.size
    if n_points * g <= BRUTE_STEPS:
        out = fn(np.arange(n_points), p[:, None] + np.arange(g, dtype=np.float64))
        return out.mean(axis=-1).reshape(out.shape[:1] + shape)
    # each point's tokens split where the context passes 0 or a window: the linear segments
    w = np.asarray(windows, dtype=np.float64).ravel()
    bounds = np.unique(np.concatenate([[0.0], w[np.isfinite(w) & (w > 0)]]))
    last = np.clip(np.floor(bounds - p[:, None]), -1, g - 1).astype(np.int64)  # last at or below
    lo = np.concatenate([np.zeros((n_points, 1), np.int64), last + 1], axis=1)
    hi = np.concatenate([last, np.full((n_points, 1), g - 1, np.int64)], axis=1)
    pt, seg = np.nonzero(lo <= hi)
    lo, hi = lo[pt, seg], hi[pt, seg]
    parts: list[tuple[np.ndarray, np.ndarray]] = []  # (points, sums over their intervals)
    kinked = []
    for start in range(0, pt.size, _CHUNK):
        sl = slice(start, start + _CHUNK)
        i, j = lo[sl], hi[sl]
        f = fn(pt[sl], p[pt[sl], None] + np.stack([i, (i + j) / 2, j], axis=1))
        kinked.append(_settle(pt[sl], i, j, f[..., 0], f[..., 2], f[..., 1], parts))
    todo = tuple(np.concatenate(x, axis=-1) for x in zip(*kinked, strict=True))
    while todo[0].size:
        todo = _split(fn, p, *todo, parts)
    points = np.concatenate([x for x, _ in parts])
    sums = np.concatenate([s for _, s in parts], axis=1)
    total = np.stack([np.bincount(points, weights=s, minlength=n_points) for s in sums])
    return (total / g).reshape(total.shape[:1] + shape)


def _settle(
    pt: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    f_lo: np.ndarray,
    f_hi: np.ndarray,
    f_mid: np.ndarray,
    parts: list,
) -> tuple[np.ndarray, ...]:
    """Add the sums of the linear intervals to ``parts``; return the kinked ones with their values."""
    chord = (f_lo + f_hi) / 2
    scale = np.maximum(np.maximum(np.abs(f_lo), np.abs(f_hi)), np.abs(f_mid))
    n = hi - lo + 1
    linear = np.all(np.abs(f_mid - chord) <= _TOL * scale, axis=0) | (n <= 2)
    parts.append((pt[linear], n[linear] * chord[:, linear]))
    k = ~linear
    return pt[k], lo[k], hi[k], f_lo[:, k], f_hi[:, k], f_mid[:, k]


def _split(
    fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
    p: np.ndarray,
    pt: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    f_lo: np.ndarray,
    f_hi: np.ndarray,
    f_mid: np.ndarray,
    parts: list,
) -> tuple[np.ndarray, ...]:
    """Resolve kinked intervals: short ones token by token, the rest split in two at a kink."""
    n = hi - lo + 1
    short = n <= _SHORT
    if np.any(short):
        q, a, m = pt[short], lo[short, None], n[short, None]
        steps = np.arange(_SHORT)
        f = fn(q, p[q, None] + np.minimum(a + steps, a + m - 1))
        parts.append((q, np.where(steps < m, f, 0.0).sum(axis=-1)))
    k = ~short
    pt, lo, hi, f_lo, f_hi, f_mid = pt[k], lo[k], hi[k], f_lo[:, k], f_hi[:, k], f_mid[:, k]
    if not pt.size:
        return (pt,)
    # the quantity furthest off its chord; its tangents at both ends cross at its kink
    scale = np.maximum(np.abs(f_lo), np.abs(f_hi)) + np.finfo(np.float64).tiny
    worst = np.argmax(np.abs(f_mid - (f_lo + f_hi) / 2) / scale, axis=0)
    near = fn(pt, p[pt, None] + np.stack([lo + 1, hi - 1], axis=1))
    cols = np.arange(pt.size)
    a, b = f_lo[worst, cols], f_hi[worst, cols]
    slope_lo, slope_hi = near[worst, cols, 0] - a, b - near[worst, cols, 1]
    length = hi - lo
    with np.errstate(divide="ignore", invalid="ignore"):
        x = (b - a - slope_hi * length) / (slope_lo - slope_hi)
    x = np.where(np.isfinite(x), x, length / 2)
    cut = lo + np.clip(np.floor(x), 0, length - 1).astype(np.int64)
    f_cut = fn(pt, p[pt, None] + np.stack([cut, cut + 1], axis=1))
    pt2 = np.concatenate([pt, pt])
    lo2, hi2 = np.concatenate([lo, cut + 1]), np.concatenate([cut, hi])
    f_lo2 = np.concatenate([f_lo, f_cut[..., 1]], axis=1)
    f_hi2 = np.concatenate([f_cut[..., 0], f_hi], axis=1)
    f_mid2 = fn(pt2, p[pt2, None] + ((lo2 + hi2) / 2)[:, None])[..., 0]
    return _settle(pt2, lo2, hi2, f_lo2, f_hi2, f_mid2, parts)
