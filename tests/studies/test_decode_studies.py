"""The decode studies chapter 03 calls: one step's anatomy, hiding, overlap, budgets, spill slopes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model
from kvoffload.model import capacity, decode, kv
from kvoffload.studies import article_figures, decode_budget, decode_step, decode_sweeps

A100 = load_system("a100-80gb-sxm-pcie4")
ARTICLE = load_system("article-reference")
LLAMA = load_model("llama-3-8b")
OFFLOAD = decode.offloaded(A100, LLAMA)
# the machine: 16 GB of bf16 Llama-3.1-8B weights against an 8 GiB card
RTX = load_system("rtx-3070-ti-desktop")
LLAMA31 = load_model("llama-3.1-8b")
# a card too small to stage even one layer's weights: nothing fits, whatever the placement
TINY = load_system(
    {
        "base": "rtx-3070-ti-desktop",
        "id": "tiny-gpu",
        "gpu": {"base": "rtx-3070-ti", "memory": "256 MiB"},
    }
)


def _fits(setup, context, batch=1, overlap=None):
    st = setup.with_overlap(overlap) if overlap else setup
    mem = decode.memory(st, context, batch)
    return bool(np.all(capacity.fits(setup.system, mem.gpu, mem.cpu, mem.disk)))


def _with_gpu_share(setup, gpu):
    return replace(setup, placement=replace(setup.placement, weights=decode.Split(gpu, 1 - gpu, 0)))


def test_weights_that_overflow_the_gpu_are_placed_so_the_step_fits():
    bare = decode.offloaded(RTX, LLAMA31)
    assert not _fits(bare, 32_000)  # what chapter 03 used to time without saying so
    placed = decode_step.place(bare, 32_000)
    assert placed.fits and 0.3 < placed.gpu_share < 0.6
    for mode in decode.OVERLAP_MODES:  # fits however the streams overlap
        assert _fits(placed.setup, 32_000, overlap=mode)
    # the most that fits: one percent more of the weights on the GPU does not
    assert not _fits(
        _with_gpu_share(placed.setup, placed.gpu_share + 0.01), 32_000, overlap="pipeline"
    )
    # the rest is timed, not assumed away: it crosses the link in every step
    streamed = decode.step_weight_bytes(LLAMA31, placed.setup.weights) * (1 - placed.gpu_share)
    assert placed.streamed_bytes == pytest.approx(streamed)
    extra = float(
        decode.step(placed.setup, 32_000).streams["h2d"] - decode.step(bare, 32_000).streams["h2d"]
    )
    assert extra == pytest.approx(streamed / RTX.copy_rate("h2d"), rel=0.05)
    assert (
        "do not fit" in placed.sentence() and f"{100 * placed.gpu_share:.0f}%" in placed.sentence()
    )
    # where the weights fit, nothing moves and the page says they stay
    a100 = decode_step.place(OFFLOAD, 32_000)
    assert a100.setup == OFFLOAD and a100.fits and a100.streamed_bytes == 0
    assert "stay there" in a100.sentence() and a100.weights_phrase == "every weight on the GPU"


def test_a_gpu_too_small_for_any_placement_is_said_not_to_fit():
    placed = decode_step.place(decode.offloaded(TINY, LLAMA31), 32_000)
    assert not placed.fits and placed.gpu_share == 0
    assert "GPU memory needs" in placed.shortfall
    assert "does not fit" in placed.sentence() and "does not fit" in placed.weights_phrase
    # however long the budget, no context fits: none is named
    lim = decode_budget.budget_contexts(placed.setup, 100.0, [1, 4])
    assert lim.no_overlap.tolist() == [0, 0] and lim.perfect_overlap.tolist() == [0, 0]
    assert lim.sentence(100_000).startswith("On this profile no context")
    assert lim.first() == "no context at all, even for one request"


def test_on_the_8_gib_card_no_context_meets_the_budget_and_the_page_says_so():
    placed = decode_step.place(decode.offloaded(RTX, LLAMA31), 32_000)
    lim = decode_budget.budget_contexts(placed.setup, 0.05, [1, 4, 16])
    assert not lim.perfect_overlap.any()
    assert lim.floor_ms > 50  # the streamed weights alone outlast the budget
    assert f"{lim.floor_ms:.1f} ms" in lim.sentence(50)
    h = decode_step.hiding(placed.setup, 32_000)
    assert h.hidden_tokens == 0 and h.layer_weights_ms > h.layer_gpu_ms
    assert "no cache hides" in h.sentence(32_000)
    assert decode_step.anatomy(placed.setup, 32_000).layer_streamed_bytes > 0


def test_the_longest_context_within_budget_is_also_the_longest_that_fits():
    # 1 GB of host memory holds ~7,600 tokens of cache; the 50 ms budget alone allows ~10,000
    small = load_system(
        {
            "base": "article-reference",
            "id": "small-host",
            # nothing reserved for the OS, so the whole 1 GB holds cache
            "host": {"base": "article-ddr5", "memory": "1 GB", "memory_reserved": "0 B"},
        }
    )
    setup = decode.offloaded(small, LLAMA)
    n = int(decode_budget.budget_contexts(setup, 0.05, [1]).no_overlap[0])
    assert 0 < n < int(decode.max_context(setup, 0.05, 1))
    assert _fits(setup, n) and not _fits(setup, n + 1)


def test_anatomy_counts_one_layers_cache_per_request_and_the_steps_streams():
    one, four = decode_step.anatomy(OFFLOAD, 32_000, 1), decode_step.anatomy(OFFLOAD, 32_000, 4)
    assert one.layer_kv_bytes * LLAMA.n_layers == int(kv.request_bytes(LLAMA, 32_000))
    assert four.layer_kv_bytes == 4 * one.layer_kv_bytes
    assert one.layer_weight_bytes < LLAMA.weight_bytes(OFFLOAD.weights).total / LLAMA.n_layers
    step = decode.step(OFFLOAD, 32_000, 1)
    assert one.h2d_ms == pytest.approx(float(step.streams["h2d"]) * 1e3)
    assert one.gpu_ms == pytest.approx(float(step.streams["gpu"]) * 1e3)
    assert one.h2d_ms > 10 * one.gpu_ms  # at 32K tokens the copy is the step


def test_hiding_is_a_share_of_the_context_and_the_knee_is_where_the_copy_overtakes():
    h = decode_step.hiding(OFFLOAD, 32_000)
    assert h.hidden_share_pct == pytest.approx(100 * h.hidden_tokens / 32_000)
    assert 0 < h.hidden_tokens < 32_000
    below = decode.step(OFFLOAD, h.knee_context, 1).streams
    above = decode.step(OFFLOAD, h.knee_context + 1, 1).streams
    assert below["h2d"] <= below["gpu"] and above["h2d"] > above["gpu"]
    assert h.knee_context < 32_000


def test_overlap_tpots_are_the_step_per_mode_and_perfect_is_the_floor():
    t = decode_step.overlap_tpots(OFFLOAD, 32_000)
    for mode in decode.OVERLAP_MODES:
        assert getattr(t, mode) == pytest.approx(
            float(decode.step(OFFLOAD, 32_000, 1, mode).total) * 1e3
        )
    assert t.perfect <= min(t.none, t.pipeline, t.flexgen)
    assert t.saving_pct == pytest.approx(100 * (1 - t.perfect / t.none))
    assert 0 <= t.saving_pct < 20  # the copy, not the compute, is the step


def test_budget_contexts_are_exact_limits_and_overlap_only_lengthens_them():
    lim = decode_budget.budget_contexts(OFFLOAD, 0.05, [1, 4, 16])
    assert np.all(lim.perfect_overlap >= lim.no_overlap)
    assert np.all(np.diff(lim.no_overlap) < 0)  # more requests, shorter contexts
    for b, n in zip(lim.batches, lim.no_overlap, strict=True):
        assert (
            float(decode.step(OFFLOAD, n, b).total)
            <= 0.05
            < float(decode.step(OFFLOAD, n + 1, b).total)
        )
    frame = lim.frame()
    assert frame["longest context, no overlap"].tolist() == lim.no_overlap.tolist()


def test_budget_table_places_the_weights_per_row_and_says_whether_each_fits():
    table = decode_budget.budget_table(ARTICLE, RTX, LLAMA31)
    assert table["fits, this profile"].all() and table["fits, article's figures"].all()
    share = table["weights on the GPU, this profile (%)"]
    assert (share < 60).all() and share.iloc[-1] <= share.iloc[0]  # longer caches, bigger buffers
    bare = decode.offloaded(RTX, LLAMA31)
    for (_, row), n in zip(table.iterrows(), [8_000, 32_000, 128_000], strict=True):
        assert not _fits(bare, n)  # the weights alone overflow the card
        placed = _with_gpu_share(bare, row["weights on the GPU, this profile (%)"] / 100)
        assert row["TPOT, this profile (ms)"] == pytest.approx(
            float(decode.step(placed, n).total) * 1e3
        )
    tiny = decode_budget.budget_table(ARTICLE, TINY, LLAMA31)
    assert not tiny["fits, this profile"].any() and tiny["fits, article's figures"].all()


def test_budget_table_sets_the_articles_rows_beside_the_step_model():
    table = decode_budget.budget_table(ARTICLE, A100, LLAMA)
    assert (table["weights on the GPU, this profile (%)"] == 100).all()
    assert len(table) == len(article_figures.tpot_bound_rows())
    # on the article's own figures, its bound is the link time
    assert np.allclose(table["link time, article's figures (ms)"], table["article (ms)"], rtol=0.1)
    assert (
        table["TPOT, this profile, perfect overlap (ms)"] <= table["TPOT, this profile (ms)"]
    ).all()
    assert article_figures.tpot_bound_numbers().count(" / ") == len(table) - 1


def test_spill_slopes_grow_after_the_gpu_fills():
    batches = np.arange(1, 65)
    s = decode_sweeps.spill_slopes(OFFLOAD, 32_000, batches)
    _, spilled = decode_sweeps.placements(OFFLOAD, 32_000, batches)
    on_gpu = np.asarray(spilled.placement.kv.gpu)
    assert s.full_at == int(batches[np.argmax(on_gpu < 1)]) and 1 < s.full_at < 64
    assert s.slope_after_ms > 20 * s.slope_before_ms > 0
    assert s.slope_after_ms == pytest.approx(s.slope_all_ms, rel=0.1)  # each spilled cache crosses
    assert s.spill_max_ms == pytest.approx(
        float(decode.step(spilled, 32_000, batches).total[-1]) * 1e3
    )


def test_on_a_full_gpu_the_cache_spills_from_the_first_request_and_unfit_batches_are_marked():
    placed = decode_step.place(decode.offloaded(RTX, LLAMA31), 32_000).setup
    batches = np.arange(1, 65)
    s = decode_sweeps.spill_slopes(placed, 32_000, batches)
    assert s.full_from_start and s.slope_before_ms == 0 and s.slope_after_ms > 0
    assert "full from the first request" in s.knee() and "no room" in s.sentence()
    frame = decode_sweeps.batch_frame(placed, 32_000, batches)
    for _, rows in frame.groupby("placement"):
        fits = rows["fits"].to_numpy()
        assert fits[0] and not fits[-1]  # one request fits; 64 caches of 4 GB do not
    both = frame.groupby("batch")["fits"].all()
    assert (
        s.last_fit == int(both[both].index.max()) and f"batch {s.last_fit + 1} on" in s.sentence()
    )
    for b in (s.last_fit, s.last_fit + 1):  # the marks come from the one fit check
        both = decode_sweeps.placements(placed, 32_000, np.array([b]))
        assert all(_fits(st, 32_000, b) for st in both) == (b == s.last_fit)


def test_spill_slopes_without_a_spill_have_no_slope_after():
    batches = np.arange(1, 9)
    s = decode_sweeps.spill_slopes(OFFLOAD, 1_000, batches)
    assert s.full_at == 8 and s.slope_after_ms == 0.0 and s.slope_before_ms > 0


def test_sweep_frames_cover_every_mode_stream_and_placement():
    contexts = np.array([1_000, 32_000, 128_000])
    over = decode_sweeps.overlap_frame(OFFLOAD, contexts)
    assert set(over["overlap"]) == set(decode.OVERLAP_MODES) and len(over) == 4 * len(contexts)
    assert over["fits"].all()  # 128,000 tokens of cache fit the A100's host memory
    assert not decode_sweeps.overlap_frame(OFFLOAD, [5_000_000])["fits"].any()
    layer = decode_sweeps.layer_frame(OFFLOAD, contexts).pivot(
        index="context", columns="stream", values="ms"
    )
    copies = layer["host→GPU copy of its KV"].to_numpy()
    assert np.all(np.diff(copies) > 0)  # the copy grows with the context
    batch = decode_sweeps.batch_frame(OFFLOAD, 32_000, np.arange(1, 9))
    by = batch.pivot(index="batch", columns="placement", values="tpot_ms")
    assert (by["KV on the GPU until it is full"] < by["all KV in host memory"]).all()


def test_the_slope_before_a_spill_is_one_more_cache_read_from_gpu_memory():
    # an RTX 4090 holds two 32,000-token caches beside bf16 Llama 3.1 8B: the slope before it
    # fills is the GPU reading one more cache, not the jump into the first spilled batch
    rtx4090 = load_system("rtx-4090-desktop")
    placed = decode_step.place(decode.offloaded(rtx4090, LLAMA31), 32_000).setup
    s = decode_sweeps.spill_slopes(placed, 32_000, np.arange(1, 65))
    assert s.full_at == 3
    cache = float(kv.batch_bytes(LLAMA31, 32_000, 1, decode.Setup(rtx4090, LLAMA31).kv))
    hbm_ms = cache / rtx4090.gpu.streaming_bandwidth * 1e3
    assert s.slope_before_ms == pytest.approx(hbm_ms, rel=1e-9)  # exactly that read, nothing else
