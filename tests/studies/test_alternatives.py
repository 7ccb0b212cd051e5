"""Alternatives to offload: memory, quantisation, the comparison table and the decision grid."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.inputs import catalog
from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model
from kvoffload.inputs.precision import KvFormat, WeightFormat
from kvoffload.model import decode, kv
from kvoffload.studies import alternatives

ARTICLE = load_system("article-reference")
GH200 = load_system("gh200-nvlink-c2c")
MODELS = [load_model(m) for m in ("llama-3-8b", "qwen2.5-7b", "llama-3.1-70b")]
options = st.sampled_from(alternatives.OPTIONS)
systems = st.sampled_from([ARTICLE, GH200])
models = st.sampled_from(MODELS)


@settings(max_examples=60, deadline=None)
@given(systems, models, options, st.integers(1, 1_000_000), st.integers(1, 64))
def test_memory_is_never_negative(system, model, option, context, batch):
    assert float(alternatives.gpu_bytes(system, model, option, context, batch)) > 0
    assert float(alternatives.host_bytes(system, model, option, context, batch)) >= 0


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_quantised_weights_never_take_more_bytes_than_bf16(model):
    bf16 = model.weight_bytes(WeightFormat.BF16)
    for fmt in (WeightFormat.FP8, WeightFormat.INT8, WeightFormat.INT4, WeightFormat.Q4_K_M):
        q = model.weight_bytes(fmt)
        assert q.total < bf16.total
        assert (q.per_layer <= bf16.per_layer).all()
        assert q.embedding <= bf16.embedding and q.output <= bf16.output


@settings(max_examples=40, deadline=None)
@given(models, st.integers(1, 1_000_000), st.integers(1, 64))
def test_quantised_cache_never_takes_more_bytes(model, context, batch):
    bf16 = float(kv.batch_bytes(model, context, batch, KvFormat.BF16))
    sizes = [
        float(kv.batch_bytes(model, context, batch, f)) for f in (KvFormat.INT8, KvFormat.INT4)
    ]
    assert sizes[0] < bf16 and sizes[1] < sizes[0]
    assert float(kv.batch_bytes(model, context, batch, KvFormat.FP8)) == pytest.approx(bf16 / 2)


def test_awq_keeps_embeddings_and_output_in_16_bits_and_gguf_does_not():
    frame = alternatives.int4_checkpoints(MODELS[0]).set_index("checkpoint")
    bf16, awq, q4km = (frame.iloc[i] for i in range(3))
    assert awq["embeddings"] == bf16["embeddings"] and awq["output layer"] == bf16["output layer"]
    assert q4km["total_bytes"] < awq["total_bytes"]
    # llama.cpp prints 4.58 GiB for its Llama-3-8B Q4_K_M (tools/quantize/quantize.cpp)
    assert q4km["total_bytes"] / 2**30 == pytest.approx(4.58, abs=0.01)
    assert 4.0 < awq["bits per parameter"] < 6.0


@settings(max_examples=30, deadline=None)
@given(systems, models, st.integers(1, 500_000))
def test_rag_caps_the_context_and_so_the_step(system, model, context):
    rag = next(o for o in alternatives.OPTIONS if o.key == "rag8k")
    base = alternatives.OPTIONS[0]
    t_rag = float(alternatives.tpot(system, model, rag, context))
    t_base = float(alternatives.tpot(system, model, base, min(context, rag.window)))
    assert t_rag == pytest.approx(t_base)
    assert alternatives.ttft(system, model, rag, context) >= alternatives.retrieval_latency()


def test_offload_saves_the_cache_and_costs_the_link():
    frame = alternatives.comparison(ARTICLE, MODELS[0], 128_000).set_index("key")
    cache = float(kv.batch_bytes(MODELS[0], 128_000, 1, KvFormat.BF16))
    offload = alternatives.setup(ARTICLE, MODELS[0], alternatives.OPTIONS[1])
    staging = float(decode.memory(offload, 128_000).staging)
    base = alternatives.setup(ARTICLE, MODELS[0], alternatives.OPTIONS[0])
    base_staging = float(decode.memory(base, 128_000).staging)  # the prefill's working set
    assert frame.loc["offload", "saved_bytes"] == pytest.approx(cache + base_staging - staging)
    assert frame.loc["offload", "TPOT change"] > 10  # hundreds of ms against ~16 ms
    for key in ("w4a16", "w8", "kv_fp8", "kv_int8", "kv_int4", "w4_kv8"):
        assert frame.loc[key, "TPOT change"] < 0  # fewer bytes from HBM: a shorter step
        assert frame.loc[key, "saved_bytes"] > 0


@pytest.mark.parametrize("system", [ARTICLE, GH200], ids=["article", "gh200"])
def test_article_table_states_memory_and_tpot_per_option_and_sources_every_quality_figure(system):
    table = alternatives.article_table(system, MODELS[0], 128_000)
    assert len(table) == 4
    assert table["GPU memory saved"].str.contains("%").all()
    assert table["TPOT change"].str.contains("ms").all()
    quality = alternatives.data()["quality"]
    sources = catalog.sources()
    for entry in quality.values():
        if entry["source"]:
            assert entry["source"] in sources
        else:
            assert "not measured" in entry["delta"] or entry["delta"].startswith("none")


def test_longest_context_and_largest_batch_are_exact_limits():
    model = MODELS[0]
    for o in alternatives.OPTIONS:
        if o.window or o.kv_on_host:
            continue
        n = alternatives.largest_batch(ARTICLE, model, o, 32_000)
        assert bool(alternatives.fits(ARTICLE, model, o, 32_000, n)) or n == 0
        assert not bool(alternatives.fits(ARTICLE, model, o, 32_000, n + 1))


def test_decision_grid_picks_an_option_that_meets_the_budget_with_least_memory():
    model = MODELS[0]
    budget = 0.05
    contexts, batches = np.array([8_000, 128_000, 512_000]), np.array([1, 8, 64])
    grid = alternatives.decision_grid(ARTICLE, model, contexts, batches, budget)
    by_name = {o.name: o for o in alternatives.OPTIONS}
    for row in grid.itertuples():
        candidates = [
            o for o in alternatives.OPTIONS
            if not o.window
            and bool(alternatives.fits(ARTICLE, model, o, row.context, row.batch))
            and float(alternatives.tpot(ARTICLE, model, o, row.context, row.batch)) <= budget
        ]  # fmt: skip
        if not candidates:
            assert row.choice == "none"
            continue
        chosen = by_name[row.choice]
        least = min(
            float(alternatives.gpu_bytes(ARTICLE, model, o, row.context, row.batch))
            for o in candidates
        )
        assert float(
            alternatives.gpu_bytes(ARTICLE, model, chosen, row.context, row.batch)
        ) == pytest.approx(least)
    assert set(grid["choice"]) - {"none"}, "some cell must have a choice"


def test_the_pages_sources_table_lists_every_cited_source_once():
    from kvoffload.report import source_tables

    ids = alternatives.source_ids()
    table = source_tables.sources_table([*ids, *ids, "no-such-source"])
    assert list(table["source"]) == list(dict.fromkeys(ids))
    assert table["address"].str.startswith("https://").all()


def test_decision_grid_defaults_and_its_summary_count_the_cells():
    model = MODELS[0]
    grid = alternatives.decision_grid(ARTICLE, model)
    assert len(grid) == len(alternatives.DECISION_CONTEXTS) * len(alternatives.DECISION_BATCHES)
    summary = alternatives.decision_summary(grid)
    counts = grid["choice"].value_counts()
    assert summary.cells == len(grid)
    assert summary.offload_cells == int((grid["choice"] == alternatives.OPTIONS[1].name).sum())
    assert summary.none_cells == int((grid["choice"] == "none").sum())
    top = counts.drop("none", errors="ignore")
    assert summary.top_sentence.startswith(f"{top.index[0]} is the least-memory choice in")
    empty = grid.assign(choice="none")
    assert (
        alternatives.decision_summary(empty).top_sentence
        == "no option meets the budget in any cell"
    )


def test_headline_compares_offload_with_bf16_and_says_how_far_a_smaller_cache_reaches():
    frame = alternatives.comparison(ARTICLE, MODELS[0], 128_000)
    head = alternatives.headline(frame)
    rows = frame.set_index("key")
    assert head.offload_x == pytest.approx(
        rows.loc["offload", "TPOT (ms)"] / rows.loc["bf16", "TPOT (ms)"]
    )
    assert head.offload_x > 1 and head.w4kv8_tpot_ms < head.base_tpot_ms
    longest = alternatives.longest_context(ARTICLE, MODELS[0], alternatives.OPTIONS[0])
    assert f"from {longest:,} to" in head.reach


def test_headline_says_when_bf16_weights_do_not_fit_at_all():
    small = load_system("rtx-4090-desktop")  # 24 GB: Llama 3.1 70B's bf16 weights cannot fit
    frame = alternatives.comparison(small, MODELS[2], 8_000)
    reach = alternatives.headline(frame).reach
    assert reach.startswith("With bf16 weights the model does not fit this GPU at all")
    fitting = frame.loc[frame["fits"], "option"].tolist()
    assert reach.endswith(f"{', '.join(fitting) or 'none'} fit at this context.")


def test_article_four_ranks_the_articles_methods_from_the_comparison():
    frame = alternatives.comparison(ARTICLE, MODELS[0], 128_000)
    four = alternatives.article_four(frame)
    rows = frame.set_index("key").loc[list(alternatives.ARTICLE_ROWS.values())]
    assert four.most_saving == rows.loc[rows["saved_bytes"].idxmax(), "option"]
    slower = rows.loc[rows["TPOT change"] > 0, "option"].tolist()
    assert four.slower == (", ".join(slower) or "none of them")
    assert "offload" in four.slower.lower()
    assert four.quant_gain == pytest.approx(
        -max(rows.loc["w4a16", "TPOT change"], rows.loc["kv_int8", "TPOT change"])
    )
    assert four.quant_gain > 0  # quantising reads fewer bytes, so the step shortens


def test_int4_bits_read_the_checkpoint_table():
    bits = alternatives.int4_bits(MODELS[0])
    table = alternatives.int4_checkpoints(MODELS[0]).set_index("checkpoint")["bits per parameter"]
    assert bits.awq_gptq == table["AWQ/GPTQ int4, group 128"]
    assert bits.q4_k_m == table["GGUF Q4_K_M"]
    assert 4 < bits.q4_k_m < 8 and 4 < bits.awq_gptq < 8
