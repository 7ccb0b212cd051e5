"""The two monotone searches against brute force, and the searches built on them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model
from kvoffload.model import decode, kv
from kvoffload.model.search import largest_true, smallest_true_log
from kvoffload.studies import alternatives as alt

thresholds = st.lists(st.integers(-5, 2100), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(thresholds, st.integers(0, 2000))
def test_largest_true_finds_each_threshold_and_asks_only_inside_the_range(ts, limit):
    t = np.array(ts, dtype=np.int64)
    asked: list[np.ndarray] = []

    def ok(n: np.ndarray) -> np.ndarray:
        assert n.dtype == np.int64 and n.shape == t.shape
        asked.append(n.copy())
        return n <= t

    got = largest_true(ok, t.shape, limit)
    brute = np.array([max([n for n in range(1, limit + 1) if n <= x], default=0) for x in ts])
    assert np.array_equal(got, brute)
    assert all(np.all((n >= 0) & (n <= limit)) for n in asked)
    assert len(asked) <= math.ceil(math.log2(limit + 1))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=300),
    st.lists(st.integers(-10, 6000), min_size=1, max_size=6),
)
def test_largest_true_matches_a_scan_over_a_monotone_cost(steps, budgets):
    cost = np.cumsum([0, *steps])  # non-decreasing: cost[n] for n in 0..len(steps)
    limit = len(steps)
    b = np.array(budgets)
    got = largest_true(lambda n: cost[n] <= b, b.shape, limit)
    brute = [max([n for n in range(1, limit + 1) if cost[n] <= x], default=0) for x in budgets]
    assert got.tolist() == brute


def test_largest_true_of_an_empty_range_is_zero_without_asking():
    def never(n: np.ndarray) -> np.ndarray:
        raise AssertionError("asked")

    assert largest_true(never, (3,), 0).tolist() == [0, 0, 0]


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 12.0), st.integers(4, 80))
def test_smallest_true_log_brackets_the_threshold_like_a_grid_scan(log_t, iters):
    lo, hi = 1e6, 1e16
    t = 10.0 ** (6 + log_t * 10 / 12)  # log-uniform over [lo, ~hi * 1.0]
    calls: list[float] = []

    def pred(x: float) -> bool:
        calls.append(x)
        return x >= t

    got = smallest_true_log(pred, lo, hi, iters)
    assert len(calls) == iters + 1 and all(lo < x <= hi for x in calls)
    resolution = (hi / lo) ** (2.0**-iters)
    assert pred(got) and got / resolution < t * (1 + 1e-9)  # passes; one bracket lower fails
    # brute force: the first of a fine geometric grid that passes is within a bracket of it
    grid = np.geomspace(lo, hi, 4001)
    first = grid[grid >= t][0]
    assert got <= first * resolution * (1 + 1e-9)
    assert first <= got * (hi / lo) ** (1 / 4000) * (1 + 1e-9)


def test_smallest_true_log_is_inf_when_even_the_top_fails():
    assert smallest_true_log(lambda x: x >= 2e16, 1e6, 1e16) == math.inf
    assert smallest_true_log(lambda x: True, 1e6, 1e16, iters=80) == pytest.approx(1e6, rel=1e-12)


# -- the searches built on them ---------------------------------------------------------------
A100 = load_system("a100-80gb-sxm-pcie4")
LLAMA = load_model("llama-3.1-8b")


@settings(max_examples=30, deadline=None)
@given(st.floats(0, 2e11), st.integers(1, 64))
def test_kv_max_context_is_the_last_context_that_fits(budget, batch):
    s = int(kv.max_context(LLAMA, budget, batch, limit=10**7))
    assert s == 0 or float(kv.batch_bytes(LLAMA, s, batch)) <= budget
    assert s == 10**7 or float(kv.batch_bytes(LLAMA, s + 1, batch)) > budget


@pytest.mark.parametrize("key", ["bf16", "offload", "kv_int4", "rag8k"])
def test_largest_batch_fits_and_one_more_does_not(key):
    option = next(o for o in alt.OPTIONS if o.key == key)
    for context in (4_000, 128_000):
        b = alt.largest_batch(A100, LLAMA, option, context)
        assert b == 0 or bool(alt.fits(A100, LLAMA, option, context, b))
        assert not bool(alt.fits(A100, LLAMA, option, context, b + 1))


def test_knee_context_is_where_the_copy_starts_to_outlast_the_gpu():
    setup = decode.offloaded(A100, LLAMA)
    s = int(decode.knee_context(setup, 1))
    below, above = decode.step(setup, s, 1).streams, decode.step(setup, s + 1, 1).streams
    assert below["h2d"] <= below["gpu"] and above["h2d"] > above["gpu"]


def test_largest_true_linear_finds_the_threshold_from_below():
    from kvoffload.model.search import largest_true_linear

    x = largest_true_linear(lambda v: v <= 0.3, 0.0, 1.0, iters=40)
    assert 0.3 - 1e-9 < x <= 0.3
    assert largest_true_linear(lambda v: v <= 2.0, 0.0, 1.0) == 1.0
