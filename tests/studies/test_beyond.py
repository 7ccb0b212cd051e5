"""Links past PCIe 4: TPOT against link rate, the bandwidth solver, the GPU floor."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.inputs import catalog
from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model
from kvoffload.model import decode
from kvoffload.studies import beyond

ARTICLE = load_system("article-reference")
GH200 = load_system("gh200-nvlink-c2c")
LLAMA = load_model("llama-3-8b")
systems = st.sampled_from([ARTICLE, GH200, load_system("t4-pcie3")])
overlaps = st.sampled_from(["none", "perfect"])


@settings(max_examples=50, deadline=None)
@given(
    systems,
    st.integers(1_000, 256_000),
    st.integers(1, 16),
    st.floats(1e9, 1e12),
    st.floats(1.01, 10.0),
    overlaps,
)
def test_tpot_never_rises_with_link_bandwidth(system, context, batch, rate, factor, overlap):
    slow = beyond.tpot_with_link(system, LLAMA, context, batch, rate, overlap)
    fast = beyond.tpot_with_link(system, LLAMA, context, batch, rate * factor, overlap)
    assert fast <= slow * (1 + 1e-12)


@settings(max_examples=30, deadline=None)
@given(
    systems,
    st.integers(1_000, 256_000),
    st.integers(1, 16),
    st.floats(0.005, 0.5),
    overlaps,
)
def test_required_link_meets_its_budget_and_a_slower_one_does_not(
    system, context, batch, budget, overlap
):
    rate = beyond.required_link(system, LLAMA, context, batch, budget, overlap)
    if math.isinf(rate):
        floor = beyond.tpot_with_link(system, LLAMA, context, batch, beyond.UNLIMITED, overlap)
        assert floor > budget
        return
    assert beyond.tpot_with_link(system, LLAMA, context, batch, rate, overlap) <= budget
    if rate > 2e6:  # the bisection's lower end
        assert beyond.tpot_with_link(system, LLAMA, context, batch, rate * 0.99, overlap) > budget


def test_the_floor_is_the_gpu_work_when_the_link_is_unlimited():
    for c, b in ((32_000, 1), (128_000, 16)):
        floor = beyond.tpot_with_link(ARTICLE, LLAMA, c, b, beyond.UNLIMITED)
        hbm = float(decode.step(decode.Setup(ARTICLE, LLAMA), c, b).total)
        per_copy = ARTICLE.link.latency.value * (LLAMA.n_layers + 1)
        assert hbm <= floor <= (hbm + per_copy) * (1 + 1e-3)  # 1e16 B/s still takes a few µs


def test_required_table_names_the_gpu_floor_where_no_link_suffices():
    table = beyond.required_table(ARTICLE, LLAMA)
    assert len(table) == 6
    floor = table[table["limit"] == "GPU work, layer after layer"]
    assert not floor.empty
    assert (floor["GPU work, all in HBM (ms)"] > 50).all()
    finite = table[table["limit"] != "GPU work, layer after layer"]
    assert (finite["needed, perfect overlap (GB/s)"] <= finite["needed, no overlap (GB/s)"]).all()


def test_c2c_changes_the_conclusion_on_gh200_and_pcie_does_not_on_the_article_machine():
    gh = beyond.verdict(GH200, LLAMA, 128_000, 1, 0.05)
    assert gh["changes"] and gh["own_perfect_ms"] < 50 < gh["pcie4_perfect_ms"]
    art = beyond.verdict(ARTICLE, LLAMA, 128_000, 1, 0.05)
    assert not art["changes"]


def test_link_rows_cover_every_link_and_the_cxl_expander():
    rows = beyond.link_rows(GH200, LLAMA)
    assert len(rows) == len(beyond.LINK_IDS) + 1
    assert rows["link"].str.contains("CXL").any()
    by = rows.set_index("link")
    assert (
        by.loc["PCIe 5.0 x16", "TPOT, no overlap (ms)"]
        < by.loc["PCIe 4.0 x16", "TPOT, no overlap (ms)"]
    )
    assert (rows["TPOT, perfect overlap (ms)"] <= rows["TPOT, no overlap (ms)"]).all()
    assert set(beyond.source_ids()) == {"cxl-spec-x8", "cxl-real-world-2024", "micron-cz120"}
    assert all(s in catalog.sources() for s in beyond.source_ids())


def test_link_findings_read_the_pcie_and_c2c_rows():
    rows = beyond.link_rows(ARTICLE, LLAMA)
    found = beyond.link_findings(rows)
    by = rows.set_index("link")
    assert found.pcie4_ms == by.loc["PCIe 4.0 x16", "TPOT, no overlap (ms)"]
    assert found.pcie5_gain == found.pcie4_ms / found.pcie5_ms > 1
    assert found.c2c_ratio < found.pcie5_ratio  # the faster wire leaves less link per GPU work
    assert found.c2c_ms < found.pcie5_ms


def test_need_findings_count_the_cases_no_link_can_serve():
    need = beyond.required_table(ARTICLE, LLAMA, budget_s=0.05)
    found = beyond.need_findings(need, context=128_000, batch=1)
    assert found.n_rows == len(need)
    assert found.n_floor == sum(math.isinf(v) for v in need["needed, perfect overlap (GB/s)"])
    assert found.perfect_gbs <= found.none_gbs  # overlap never needs a faster link
    assert found.own_gbs == pytest.approx(ARTICLE.copy_rate("h2d") / 1e9)


def test_verdict_words_follow_the_verdict():
    gh = beyond.verdict_words(beyond.verdict(GH200, LLAMA, 128_000, 1, 0.05))
    assert (gh.own_meets, gh.pcie4_meets, gh.changes) == (
        "meets",
        "misses",
        "changes the conclusion",
    )
    art = beyond.verdict_words(beyond.verdict(ARTICLE, LLAMA, 128_000, 1, 0.05))
    assert art.changes == "does not change the conclusion"
