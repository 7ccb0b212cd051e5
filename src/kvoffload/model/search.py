"""Monotone searches: the largest integer that passes a test, the smallest rate that meets a budget.

Every "longest context", "largest batch" and "slowest link that still meets a budget" in the
package is one of these two bisections over a monotone test.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def largest_true(
    ok: Callable[[np.ndarray], np.ndarray], shape: tuple[int, ...], limit: int
) -> np.ndarray:
    """Return, per element, the largest integer n in [0, ``limit``] with ``ok(n)`` (0: none is).

    ``ok`` takes an int64 array of ``shape`` and returns booleans of that shape; it must be
    monotone (true up to some n, false above it), accept any n in [0, ``limit``], and its answer
    at 0 is never used. Bisection: ceil(log2(limit + 1)) calls at most, all elements at once.
    """
    lo = np.zeros(shape, dtype=np.int64)
    hi = np.full(shape, int(limit), dtype=np.int64)
    while np.any(lo < hi):
        mid = (lo + hi + 1) // 2  # lo < mid <= hi where the search is still open
        good = np.broadcast_to(np.asarray(ok(mid), dtype=bool), shape)
        lo = np.where(good, mid, lo)
        hi = np.where(good, hi, mid - 1)
    return lo


def smallest_true_log(
    pred: Callable[[float], bool], lo: float, hi: float, iters: int = 80
) -> float:
    """Return the smallest x in (``lo``, ``hi``] with ``pred(x)``, bisected in log space; inf if none.

    ``pred`` must be monotone (false below some x, true from it on); ``lo`` is never asked. After
    ``iters`` halvings of log(hi/lo) the result is within a factor (hi/lo)**(2**-iters) above the
    true threshold, and ``pred`` holds at it.
    """
    if not pred(hi):
        return float("inf")
    for _ in range(iters):
        mid = float(np.sqrt(lo * hi))
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return hi


def largest_true_linear(
    pred: Callable[[float], bool], lo: float, hi: float, iters: int = 40
) -> float:
    """Return the largest x in [``lo``, ``hi``] with ``pred(x)``, bisected linearly.

    ``pred`` must be monotone (true up to some x, false above it) and hold at ``lo``, which the
    caller checks; ``hi`` is returned when it holds there. After ``iters`` halvings the result is
    within (hi - lo) / 2**iters below the true threshold, and ``pred`` holds at it.
    """
    if pred(hi):
        return hi
    for _ in range(iters):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if pred(mid) else (lo, mid)
    return lo
