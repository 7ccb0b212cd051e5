"""The verdict each page opens with: its numbers are the step model's, for the right workload."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from kvoffload.inputs.hardware import load_system, system_ids
from kvoffload.inputs.limits import MAX_CONTEXT_TOKENS
from kvoffload.inputs.models import load_model
from kvoffload.model import capacity, decode
from kvoffload.studies import decode_budget, decode_step, verdict
from kvoffload.studies.verdict import HEADLINE, Workload


@pytest.fixture(scope="module")
def ref() -> verdict.Verdict:
    return verdict.verdict("article-reference")


def test_the_headline_numbers_are_one_step_of_the_step_model(ref):
    system, llm = load_system("article-reference"), load_model(HEADLINE.model)
    n = HEADLINE.context
    on_gpu = float(decode.step(decode.Setup(system, llm), n, 1).total) * 1e3
    offloaded = float(decode.step(decode.offloaded(system, llm), n, 1).total) * 1e3
    assert ref.gpu_ms == pytest.approx(on_gpu, rel=1e-12)
    assert ref.offloaded_ms == pytest.approx(offloaded, rel=1e-12)
    assert ref.ratio == pytest.approx(offloaded / on_gpu)
    # the article's own machine: every KV byte over a 32 GB/s link is far slower than HBM
    assert ref.link_gbs == pytest.approx(32.0)
    assert ref.ratio > 5 and ref.gpu_fits and ref.offloaded_fits and ref.weights_fit
    assert ref.meets_on_gpu and not ref.meets_offloaded


def test_the_longest_context_meets_the_budget_and_one_more_token_does_not(ref):
    system, llm = load_system("article-reference"), load_model(HEADLINE.model)
    setup = decode.offloaded(system, llm)
    n = ref.longest_offloaded
    assert 0 < n < HEADLINE.context
    assert float(decode.step(setup, n, 1).total) * 1e3 <= ref.budget_ms
    assert float(decode.step(setup, n + 1, 1).total) * 1e3 > ref.budget_ms
    same = decode_budget.budget_contexts(setup, ref.budget_ms / 1e3, [1]).no_overlap[0]
    assert n == int(same)


def test_the_gpu_holds_the_weights_and_the_cache_up_to_its_memory():
    t4 = verdict.verdict("t4-pcie3")  # 16 GB of bf16 weights on a 16 GB card
    system, llm = load_system("t4-pcie3"), load_model(HEADLINE.model)
    setup = decode.Setup(system, llm)
    n = t4.longest_on_gpu
    assert t4.weights_fit and not t4.gpu_fits and 0 < n < HEADLINE.context
    assert capacity.within(decode.memory(setup, n, 1).gpu, system.gpu_memory)
    assert not capacity.within(decode.memory(setup, n + 1, 1).gpu, system.gpu_memory)
    assert "fit in the GPU's" in t4.fits_sentence() and "cache must move" in t4.fits_sentence()
    # a T4 cannot decode this model within 50 ms at any context with the cache offloaded
    assert t4.longest_offloaded == 0


def test_weights_that_overflow_the_gpu_are_placed_as_chapter_03_places_them():
    small = verdict.verdict("rtx-3070-ti-desktop")  # 8 GB card, 16 GB of weights
    system, llm = load_system("rtx-3070-ti-desktop"), load_model(HEADLINE.model)
    placed = decode_step.place(decode.offloaded(system, llm), HEADLINE.context, 1)
    assert 0 < small.weights_gpu_share < 1 and not small.weights_fit
    assert small.weights_gpu_share == pytest.approx(placed.gpu_share)
    assert small.offloaded_ms == pytest.approx(
        float(decode.step(placed.setup, HEADLINE.context, 1).total) * 1e3
    )
    assert not small.gpu_fits and small.longest_on_gpu == 0
    assert "do not fit" in small.fits_sentence()


def test_a_fast_link_meets_the_budget_with_the_cache_offloaded():
    gh = verdict.verdict("gh200-nvlink-c2c")
    assert gh.meets_offloaded and gh.ratio < verdict.verdict("article-reference").ratio


def test_the_workload_counts_batch_formats_and_budget():
    w = Workload("llama-3.1-8b", 8_000, 4, weights="int4", kv="fp8")
    v = verdict.verdict("article-reference", w, budget_ms=30.0)
    system, llm = load_system("article-reference"), load_model("llama-3.1-8b")
    from kvoffload.inputs.precision import KvFormat, WeightFormat

    setup = decode.Setup(system, llm, WeightFormat.INT4, KvFormat.FP8)
    assert v.gpu_ms == pytest.approx(float(decode.step(setup, 8_000, 4).total) * 1e3)
    off = replace(decode.offloaded(system, llm), weights=WeightFormat.INT4, kv=KvFormat.FP8)
    assert v.offloaded_ms == pytest.approx(float(decode.step(off, 8_000, 4).total) * 1e3)
    assert v.budget_ms == 30.0 and v.workload.batch == 4
    assert verdict.describe(w) == (
        "Llama 3.1 8B, int4 weights, fp8 cache, 8,000 tokens of context, a batch of 4"
    )
    assert verdict.describe(HEADLINE).endswith("32,000 tokens of context, one request")


def test_an_unknown_format_is_refused():
    from kvoffload.inputs.errors import InputError

    with pytest.raises(InputError):
        verdict.verdict("article-reference", Workload("llama-3.1-8b", 1000, weights="bf17"))


def test_the_ngl_workload_is_read_from_the_chart_s_defaults():
    words = verdict.ngl_workload()
    assert words.startswith("Q4_K_M weights") and "512-token prompt" in words


def test_a_machine_row_holds_the_verdicts_at_three_contexts():
    row = verdict.machine_row("a100-80gb-sxm-pcie4")
    for i, c in enumerate(verdict.MACHINE_CONTEXTS):
        v = verdict.verdict("a100-80gb-sxm-pcie4", Workload(HEADLINE.model, c))
        assert row.on_gpu_ms[i] == v.gpu_ms and row.offloaded_ms[i] == v.offloaded_ms
        assert row.fits_on_gpu[i] == v.gpu_fits
    head = verdict.verdict("a100-80gb-sxm-pcie4")
    assert row.longest_offloaded == head.longest_offloaded
    assert row.longest_on_gpu == head.longest_on_gpu
    assert np.all(np.diff(row.offloaded_ms) > 0)  # a longer context costs more


def _predicted_tpot_ms(system: str, w: Workload, placement: dict | None = None) -> float:
    """Return ``kvoffload predict``'s tpot_ms for the workload (the generic engine)."""
    from kvoffload.engines.scenario import parse_scenario, predict

    raw = {
        "hardware": system,
        "model": w.model,
        "precision": {"weights": w.weights, "kv": w.kv},
        "workload": {"batch": w.batch, "prompt": w.context, "generate": w.generate},
        **({"placement": placement} if placement else {}),
    }
    return predict(parse_scenario(raw), check=False).to_json()["tpot_ms"]


@pytest.mark.parametrize("system", system_ids())
def test_the_verdict_s_tpot_is_predict_s_for_the_same_scenario(system):
    w = Workload(HEADLINE.model, 8_000, 2, generate=64)
    v = verdict.verdict(system, w)
    assert v.gpu_ms == pytest.approx(_predicted_tpot_ms(system, w), rel=1e-12)
    share = v.weights_gpu_share
    offloaded = {
        "weights": {"gpu": share, "cpu": 1 - share},
        "kv": {"cpu": 1.0},
    }
    assert v.offloaded_ms == pytest.approx(_predicted_tpot_ms(system, w, offloaded), rel=1e-12)


def test_tpot_over_one_generated_token_is_the_step():
    v = verdict.verdict("article-reference", replace(HEADLINE, generate=1))
    assert v.gpu_ms == verdict.verdict("article-reference").gpu_ms
    longer = verdict.verdict("article-reference", replace(HEADLINE, generate=512))
    assert longer.offloaded_ms > v.offloaded_ms  # the context grows as it generates
    assert "512 tokens generated" in verdict.describe(longer.workload)


LAYOUTS = (
    "llama-3.1-8b",
    "llama-2-7b",
    "mistral-7b-v0.1",
    "deepseek-v3",
    "qwen3-next-80b-a3b",
    "gpt-oss-20b",
)


@pytest.mark.parametrize("system", system_ids())
def test_the_verdict_s_longest_context_on_the_gpu_is_chapter_02_s(system):
    from kvoffload.studies import memory_fit

    hw = load_system(system)
    # dense GQA, MHA, a sliding window that stops the cache (unbounded), MLA, hybrid SSM, MoE
    for ident in LAYOUTS:
        v = verdict.verdict(hw, Workload(ident, 1_000))
        fit = memory_fit.longest_fit(hw, load_model(ident), [1])
        assert v.longest_on_gpu == int(fit.tokens[0]), ident
    unbounded = verdict.verdict(hw, Workload("mistral-7b-v0.1", 1_000))
    if unbounded.weights_fit:  # its cache stops at the 4,096-token window: the search's cap
        assert unbounded.longest_on_gpu == MAX_CONTEXT_TOKENS
