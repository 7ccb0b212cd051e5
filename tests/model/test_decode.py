"""The decode-step model: the article's worked numbers, invariants, overlap modes, solvers."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model
from kvoffload.model import decode, kv, timeline

ARTICLE = load_system("article-reference")
A100 = load_system("a100-80gb-sxm-pcie4")
LLAMA = load_model("llama-3-8b")


def offloaded(system=ARTICLE, model=LLAMA, overlap="none", attention="gpu"):
    return decode.Setup(
        system,
        model,
        placement=decode.Placement(kv=decode.Split(0, 1, 0), overlap=overlap, attention=attention),
    )


@pytest.mark.parametrize(("tokens", "article_ms"), [(8000, 33), (32000, 130), (128000, 524)])
def test_articles_tpot_table_is_the_link_time_on_its_own_figures(tokens, article_ms):
    # "seq_len x 4.096 us": 131,072 B per token over all layers at 32 GB/s
    link_ms = float(decode.step(offloaded(), tokens).streams["h2d"]) * 1e3
    assert link_ms == pytest.approx(tokens * 131_072 / 32e9 * 1e3, rel=1e-3)
    assert link_ms == pytest.approx(article_ms, rel=0.02)


def test_article_per_layer_move_over_pcie():
    # one layer of K+V at 128,000 tokens over 32 GB/s: 16.4 ms (the article's 15.6 ms used 500 MB)
    per_layer = kv.full_layer_bytes(LLAMA, 128_000) / 32e9
    assert per_layer * 1e3 == pytest.approx(16.384)


def test_real_a100_follows_the_achievable_rate():
    h2d = float(decode.step(offloaded(A100), 128_000).streams["h2d"])
    rate = min(A100.link.h2d_bandwidth.value, A100.host.memory_bandwidth.value)
    # one copy per layer (the output head has no cache), each paying the per-transfer latency
    assert h2d == pytest.approx(
        16_777_216_000 / rate + A100.link.latency.value * LLAMA.n_layers, rel=1e-9
    )


def test_nothing_offloaded_moves_nothing():
    s = decode.step(decode.Setup(A100, LLAMA), np.array([1000, 100_000]), np.array([1, 8]))
    for key in ("h2d", "d2h", "cpu", "disk_read", "disk_write"):
        assert np.all(s.streams[key] == 0)
    assert np.all(s.total > 0)


def test_all_on_gpu_is_memory_bound_at_batch_one():
    s = decode.step(decode.Setup(A100, LLAMA), 1000, 1)
    w = LLAMA.weight_bytes(decode.Setup(A100, LLAMA).weights)
    hbm = A100.gpu.memory_bandwidth_achievable.value
    # every layer's weights and the output head are read; the embedding table is only looked up
    read = w.total - w.embedding + 1000 * 131_072
    assert float(s.total) == pytest.approx(read / hbm, rel=1e-9)


# -- invariants over random placements -------------------------------------------------------------
splits = st.tuples(st.floats(0, 1), st.floats(0, 1)).map(
    lambda t: decode.Split(t[0] * (1 - t[1]), (1 - t[0]) * (1 - t[1]), t[1])
)
systems = st.sampled_from([ARTICLE, A100, load_system("t4-pcie3"), load_system("gh200-nvlink-c2c")])
models = st.sampled_from(
    [
        LLAMA,
        load_model("gemma-2-9b"),
        load_model("deepseek-v3"),
        load_model("opt-30b"),
        load_model("gpt-oss-20b"),
    ]
)
setups = st.builds(
    lambda system, model, w, c, att, pinned: decode.Setup(
        system, model, placement=decode.Placement(w, c, att, "none", pinned)
    ),
    systems,
    models,
    splits,
    splits,
    st.sampled_from(["gpu", "cpu"]),
    st.booleans(),
)


@settings(max_examples=80, deadline=None)
@given(setups, st.lists(st.integers(1, 1_000_000), min_size=2, max_size=8), st.integers(1, 256))
def test_tpot_non_decreasing_in_context(setup, contexts, batch):
    ctx = np.sort(np.array(contexts))
    for mode in decode.OVERLAP_MODES:
        t = decode.step(setup, ctx, batch, mode).total
        assert np.all(np.diff(t) >= -1e-12 * t[:-1])


@settings(max_examples=80, deadline=None)
@given(setups, st.integers(1, 1_000_000), st.lists(st.integers(1, 512), min_size=2, max_size=8))
def test_tpot_non_decreasing_in_batch(setup, context, batches):
    b = np.sort(np.array(batches))
    for mode in decode.OVERLAP_MODES:
        t = decode.step(setup, context, b, mode).total
        assert np.all(np.diff(t) >= -1e-12 * t[:-1])


@settings(max_examples=80, deadline=None)
@given(setups, st.integers(1, 1_000_000), st.integers(1, 256), st.floats(1.01, 10))
def test_tpot_non_increasing_in_link_bandwidth(setup, context, batch, factor):
    s = setup.system
    faster_link = msgspec.structs.replace(
        s.link,
        **{
            k: getattr(s.link, k).__class__(
                **{**vars(getattr(s.link, k)), "value": getattr(s.link, k).value * factor}
            )
            for k in ("h2d_bandwidth", "d2h_bandwidth", "raw_bandwidth")
        },
    )
    faster = decode.Setup(
        msgspec.structs.replace(s, link=faster_link),
        setup.model,
        setup.weights,
        setup.kv,
        setup.placement,
    )
    for mode in decode.OVERLAP_MODES:
        assert decode.step(faster, context, batch, mode).total <= decode.step(
            setup, context, batch, mode
        ).total * (1 + 1e-12)


@settings(max_examples=80, deadline=None)
@given(setups, st.integers(1, 1_000_000), st.integers(1, 256))
def test_overlap_ordering(setup, context, batch):
    t = {m: float(decode.step(setup, context, batch, m).total) for m in decode.OVERLAP_MODES}
    eps = 1e-12 * t["none"]
    assert t["perfect"] <= t["pipeline"] + eps
    assert t["pipeline"] <= t["none"] + eps
    assert t["perfect"] <= t["flexgen"] + eps <= t["none"] + 2 * eps


@settings(max_examples=40, deadline=None)
@given(setups, st.integers(1, 200_000), st.integers(1, 64), st.sampled_from(decode.OVERLAP_MODES))
def test_timeline_matches_the_closed_form(setup, context, batch, mode):
    closed = float(decode.step(setup, context, batch, mode).total)
    simulated = timeline.makespan(timeline.simulate(setup, context, batch, mode))
    assert simulated == pytest.approx(closed, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(setups, st.integers(1, 200_000), st.integers(1, 64))
def test_bytes_are_conserved_across_tiers(setup, context, batch):
    mem = decode.memory(setup, context, batch)
    weights = decode.resident_weight_bytes(setup.model, setup.weights)
    # every tensor is held exactly once, the embedding table included
    assert weights == pytest.approx(setup.model.weight_bytes(setup.weights).total, rel=1e-12)
    from kvoffload.model import kv

    kv_total = float(kv.batch_bytes(setup.model, context, batch, setup.kv))
    assert float(mem.gpu - mem.staging + mem.cpu + mem.disk) == pytest.approx(
        weights + kv_total, rel=1e-9
    )
    assert min(float(mem.gpu), float(mem.cpu), float(mem.disk), float(mem.staging)) >= 0


# -- solvers ------------------------------------------------------------------------------------------
def test_max_context_meets_its_budget_and_one_more_token_does_not():
    setup = offloaded(A100)
    budgets = np.array([0.02, 0.05, 0.2])
    s = decode.max_context(setup, budgets, 1)
    assert np.all(decode.step(setup, s, 1).total <= budgets)
    assert np.all(decode.step(setup, s + 1, 1).total > budgets)


def test_max_batch_meets_budget_and_memory():
    setup = decode.Setup(A100, LLAMA)
    b = int(decode.max_batch(setup, 32_000, 0.05))
    assert b >= 1
    mem = decode.memory(setup, 32_000, b + 1)
    too_big = decode.step(setup, 32_000, b + 1).total > 0.05 or mem.gpu > A100.gpu_memory
    assert too_big


def test_batching_with_all_kv_offloaded_is_linear_not_stepped():
    b = np.arange(1, 65)
    t = decode.step(offloaded(A100), 32_000, b).total
    d = np.diff(t)
    assert np.allclose(d, d[0], rtol=0.02)


def test_spilling_when_hbm_fills_makes_one_knee_not_a_staircase():
    b = np.arange(1, 65)
    sp = decode.spill(decode.Setup(A100, LLAMA), 32_000, b)
    t = decode.step(sp, 32_000, b).total
    full = int(np.argmax(np.asarray(sp.placement.kv.gpu) < 1))  # index of the first spilled batch
    before = np.diff(t[:full])
    after = np.diff(t[full + 1 :])
    assert np.allclose(before, before.mean(), rtol=0.05)  # HBM-bound: a gentle straight line
    assert np.allclose(after, after.mean(), rtol=0.05)  # link-bound: a steep straight line
    assert after.mean() > 20 * before.mean()


def test_pipeline_reads_the_disk_beside_the_link_copy():
    # weights on disk: the disk reads layer i+2 while the link copies i+1 and i computes
    t4, opt = load_system("t4-pcie3"), load_model("opt-30b")
    setup = decode.Setup(
        t4, opt, placement=decode.Placement(weights=decode.Split(0, 0, 1), overlap="pipeline")
    )
    per = decode.stream_times(setup, 512, 4)
    lay = decode.layers(opt, setup.weights)
    step = float(decode.step(setup, 512, 4).total)
    serial_load = float((per["disk_read"] + per["h2d"]) @ lay.count)
    assert step < serial_load  # the two hops of a load overlap across layers
    slowest = float(np.maximum(per["disk_read"], per["h2d"]) @ lay.count)
    assert step >= slowest  # but neither resource is ever faster than its own work


def test_each_kind_of_copy_pays_the_link_latency_once():
    # weights streamed and cache offloaded: two copies host->GPU per layer, so two latencies
    both = decode.Setup(
        A100,
        LLAMA,
        placement=decode.Placement(weights=decode.Split(0.5, 0.5, 0), kv=decode.Split(0, 1, 0)),
    )
    cache_only = decode.Setup(A100, LLAMA, placement=decode.Placement(kv=decode.Split(0, 1, 0)))
    ctx, lat = np.array([4000.0]), A100.link.latency.value
    rate = A100.copy_rate("h2d", pinned=True)
    per_layer_both = decode.stream_times(both, ctx, 1)["h2d"][0]
    per_layer_cache = decode.stream_times(cache_only, ctx, 1)["h2d"][0]
    moved = decode.weight_traffic(both, decode.layers(LLAMA, both.weights), np.ones(1)).moved
    extra = per_layer_both - per_layer_cache  # the weights' bytes and one more latency
    assert lat > 0
    assert extra == pytest.approx(moved / rate + lat, rel=1e-6)
