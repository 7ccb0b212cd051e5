"""The decode studies chapter 03 calls: one step's anatomy, hiding, overlap, budgets, spill slopes."""

from __future__ import annotations

import numpy as np
import pytest

from kvoffload.model import decode, kv
from kvoffload.spec.hardware import load_system
from kvoffload.spec.models import load_model
from kvoffload.studies import article_figures, decode_budget, decode_step, decode_sweeps

A100 = load_system("a100-80gb-sxm-pcie4")
ARTICLE = load_system("article-reference")
LLAMA = load_model("llama-3-8b")
OFFLOAD = decode.offloaded(A100, LLAMA)


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


def test_budget_table_sets_the_articles_rows_beside_the_step_model():
    table = decode_budget.budget_table(ARTICLE, A100, LLAMA)
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


def test_spill_slopes_without_a_spill_have_no_slope_after():
    batches = np.arange(1, 9)
    s = decode_sweeps.spill_slopes(OFFLOAD, 1_000, batches)
    assert s.full_at == 8 and s.slope_after_ms == 0.0 and s.slope_before_ms > 0


def test_sweep_frames_cover_every_mode_stream_and_placement():
    contexts = np.array([1_000, 32_000, 128_000])
    over = decode_sweeps.overlap_frame(OFFLOAD, contexts)
    assert set(over["overlap"]) == set(decode.OVERLAP_MODES) and len(over) == 4 * len(contexts)
    layer = decode_sweeps.layer_frame(OFFLOAD, contexts).pivot(
        index="context", columns="stream", values="ms"
    )
    copies = layer["host→GPU copy of its KV"].to_numpy()
    assert np.all(np.diff(copies) > 0)  # the copy grows with the context
    batch = decode_sweeps.batch_frame(OFFLOAD, 32_000, np.arange(1, 9))
    by = batch.pivot(index="batch", columns="placement", values="tpot_ms")
    assert (by["KV on the GPU until it is full"] < by["all KV in host memory"]).all()
