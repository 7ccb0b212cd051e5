"""The studies chapters 01 and 02 call: tiers, the article's figures, KV sizes, the memory fit."""

from __future__ import annotations

import numpy as np
import pytest

from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.limits import MAX_CONTEXT_TOKENS
from kvoffload.inputs.models import load_model
from kvoffload.inputs.precision import KvFormat
from kvoffload.inputs.units import format_bytes
from kvoffload.model import kv, transfer
from kvoffload.studies import article_figures, kv_sizing, memory_fit, tiers

A100 = load_system("a100-80gb-sxm-pcie4")
ARTICLE = load_system("article-reference")
LLAMA = load_model("llama-3-8b")


def test_tier_rates_never_achieve_more_than_their_rating():
    rates = tiers.tier_rates(A100)
    assert len(rates) == 4
    assert (rates["achievable_bps"] <= rates["rated_bps"]).all()
    assert rates["latency_s"].isna().sum() == 2  # GPU memory and host DRAM carry no latency


def test_transfer_curves_rise_with_the_payload_and_stay_below_the_achievable_rate():
    curves = tiers.transfer_curves(A100, np.logspace(3, 9, 7))
    for tier in transfer.tiers(A100):
        one = curves[curves["tier"] == tier.name]
        assert np.all(np.diff(one["time_ms"]) > 0)
        assert (one["effective_gb_s"] * 1e9 <= tier.achievable.value * (1 + 1e-9)).all()


def test_layer_moves_and_times_agree_and_the_link_is_the_slow_hop():
    moves = tiers.layer_moves(A100, LLAMA, 128_000)
    assert moves["× GPU memory (achievable)"].iloc[0] == 1.0
    times = tiers.layer_times(A100, LLAMA, 128_000)
    assert moves["× GPU memory (achievable)"].iloc[1] == pytest.approx(times.link_ratio)
    assert times.link_ratio > 10 and times.step_link_ms == pytest.approx(times.link_ms * 32)
    rates = tiers.link_against_gpu(A100)
    assert 0 < rates.link_share_pct <= 100 and rates.gpu_over_link > 10


def test_half_rate_payload_is_where_latency_and_streaming_take_equal_time():
    link = transfer.tiers(A100)[1]
    half = tiers.half_rate_bytes(A100)
    assert half / float(link.time(half)) == pytest.approx(link.achievable.value / 2)
    assert tiers.half_rate_bytes(ARTICLE) == 0.0  # the article ignores per-transfer latency
    # the sentence says what a zero means instead of "once its payload is no payload"
    assert "no per-copy latency" in tiers.half_rate_sentence(ARTICLE)
    assert "payload" not in tiers.half_rate_sentence(ARTICLE)
    assert f"payload is {format_bytes(half)}," in tiers.half_rate_sentence(A100)


def test_the_articles_layer_payload_is_its_mib_figure_written_as_mb():
    computed = kv.full_layer_bytes(LLAMA, 128_000)
    payload = article_figures.layer_payload(computed)
    assert payload.article_bytes < computed
    assert payload.article_short_pct == pytest.approx(100 * (1 - 1e6 / 2**20), abs=0.5)
    assert set(article_figures.layer_times()) >= {"gpu", "link"}


def test_model_sizes_are_the_kv_module_and_the_layouts_rank_as_published():
    sizes = kv_sizing.model_sizes(128_000)
    for row in sizes.itertuples():
        assert row.per_request_bytes == int(kv.request_bytes(load_model(row.model), 128_000))
    ratios = kv_sizing.layout_ratios(sizes)
    assert ratios.mha_over_gqa == pytest.approx(4.0)  # 32 KV heads against 8
    assert ratios.gqa_over_mla > 5
    assert ratios.largest_bytes == sizes["per_request_bytes"].max()
    assert (
        sizes.set_index("model").loc[ratios.largest_model, "per_request_bytes"]
        == ratios.largest_bytes
    )


def test_precision_sizes_shrink_with_the_format():
    sizes = kv_sizing.precision_sizes(LLAMA, 128_000).set_index("precision")["per_request_bytes"]
    assert sizes[KvFormat.BF16.value] > sizes[KvFormat.INT8.value] > sizes[KvFormat.INT4.value]
    assert sizes[KvFormat.FP8.value] == sizes[KvFormat.BF16.value] // 2


def test_memory_fit_frame_marks_the_points_above_the_gpu_memory():
    grid = memory_fit.memory_fit_frame(A100, LLAMA, [1_000, 100_000, 1_000_000], [1, 64])
    assert len(grid) == 6
    assert (grid["fits"] == (grid["total_gb"] <= grid["capacity_gb"])).all()
    assert grid["fits"].any() and not grid["fits"].all()
    fit = memory_fit.longest_fit(A100, LLAMA, [1, 64])
    assert fit.frame()["longest context that fits (tokens)"].tolist() == fit.tokens.tolist()


def test_models_shown_beyond_their_context_are_marked():
    from kvoffload.report import kv_tables
    from kvoffload.studies import kv_sizing

    sizes = kv_sizing.model_sizes(128_000, ids=["llama-3-8b", "llama-3.1-8b", "bloom-176b"])
    assert list(sizes["beyond_context"]) == [True, False, False]  # BLOOM (ALiBi) states none
    table = kv_tables.model_kv_table(sizes, 128_000)
    cells = list(table["per request at 128,000 tokens"])
    assert "beyond its 8,192-token context" in cells[0] and "beyond" not in cells[1]


@pytest.mark.parametrize("ident", ["llama-3.1-8b", "qwen3-8b", "mistral-7b-v0.1", "deepseek-v3"])
def test_chapter_02_s_memory_is_the_step_model_s_one_footprint(ident):
    from kvoffload.model import capacity, decode

    m = load_model(ident)
    contexts, batches = np.array([1, 100, 2_047, 2_048, 4_096, 128_000]), np.array([1, 16])
    grid = memory_fit.memory_fit_frame(ARTICLE, m, contexts, batches)
    bb, ss = np.meshgrid(batches, contexts, indexing="ij")
    mem = decode.memory(decode.Setup(ARTICLE, m), ss, bb)
    assert grid["total_gb"].tolist() == (mem.gpu.ravel() / 1e9).tolist()  # below 2,048 tokens too
    fit = capacity.fits(ARTICLE, mem.gpu, mem.cpu, mem.disk).ravel()
    assert grid["fits"].tolist() == fit.tolist()
    longest = memory_fit.longest_fit(ARTICLE, m, batches).tokens
    setup = decode.Setup(ARTICLE, m)
    for b, n in zip(batches, longest, strict=True):
        assert n == 0 or memory_fit.fits(setup, n, b)
        assert n == MAX_CONTEXT_TOKENS or not memory_fit.fits(setup, n + 1, b)


def test_a_cache_that_stops_growing_fits_up_to_the_one_search_cap():
    fit = memory_fit.longest_fit(ARTICLE, load_model("mistral-7b-v0.1"), [1])
    assert int(fit.tokens[0]) == MAX_CONTEXT_TOKENS  # every layer slides: the cap, not 10M
