"""The report layer shapes what studies return: stable offline charts, formatted tables, Markdown."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kvoffload.model import decode, timeline
from kvoffload.report import (
    charting,
    claims_markdown,
    decode_charts,
    engine_tables,
    kv_tables,
    markdown,
    memory_charts,
    styling,
    tier_tables,
)
from kvoffload.spec.hardware import load_system
from kvoffload.spec.models import load_model
from kvoffload.studies import claims, decode_sweeps, kv_sizing, memory_fit, tiers

A100 = load_system("a100-80gb-sxm-pcie4")
LLAMA = load_model("llama-3-8b")


def test_chart_html_is_offline_and_its_id_follows_the_spec():
    frame = decode_sweeps.overlap_frame(decode.offloaded(A100, LLAMA), np.array([1_000, 32_000]))
    one = charting.to_html(decode_charts.overlap_chart(frame, 50.0))
    assert one == charting.to_html(decode_charts.overlap_chart(frame.copy(), 50.0))
    assert one != charting.to_html(decode_charts.overlap_chart(frame, 40.0))
    assert one.startswith('<div id="kvo-chart-')
    assert "</script>" not in one.split("var spec =")[1].split("function draw")[0]


def test_memory_fit_chart_draws_the_rule_at_the_frames_capacity():
    fit = memory_fit.memory_fit_frame(A100, LLAMA, [1_000, 100_000], [1, 4])
    spec = memory_charts.memory_fit_chart(fit).to_dict()
    rules = [d for d in spec["datasets"].values() if d and "label" in d[0]]
    assert rules[0][0]["capacity_gb"] == pytest.approx(A100.gpu_memory / 1e9)
    assert all(
        "capacity_gb" not in row for d in spec["datasets"].values() for row in d if "batch" in row
    )


def test_gantt_events_frame_keeps_every_event_in_milliseconds():
    setup = decode.Setup(
        A100, LLAMA, placement=decode.Placement(kv=decode.Split(0.5, 0.5, 0), overlap="pipeline")
    )
    events = timeline.simulate(setup, 32_000, 1)
    frame = decode_charts.events_frame(events)
    assert len(frame) == len(events)
    assert frame["ms"].to_numpy() == pytest.approx((frame["end_ms"] - frame["start_ms"]).to_numpy())
    assert frame["end_ms"].max() == pytest.approx(timeline.makespan(events) * 1e3)


def test_tables_format_what_the_studies_computed():
    tier = tier_tables.tier_table(tiers.tier_rates(A100))
    assert tier["per-transfer latency"].iloc[0] == "—" and tier["rated"].str.endswith("/s").all()
    sizes = kv_sizing.model_sizes(128_000, ids=["llama-3-8b", "gemma-2-9b"])
    table = kv_tables.model_kv_table(sizes, 128_000)
    assert table.loc[0, "sliding layers"] == "—" and "window" in table.loc[1, "sliding layers"]
    assert table.loc[0, "per request at 128,000 tokens"].startswith("16.78 GB")
    engines = engine_tables.engine_table(
        pd.DataFrame({"engine": ["a", "b"], "gpu_bytes": [2e9, np.nan], "cpu_bytes": [0.0, np.nan]})
    )
    assert engines["GPU memory"].iloc[0].startswith("2 GB") and pd.isna(
        engines["GPU memory"].iloc[1]
    )
    styled = styling.show(table, "kv").to_html()
    assert 'id="T_kv"' in styled and "kvoffload-table" in styled


def test_claims_markdown_gives_each_section_its_verdicts():
    for section in claims.sections():
        text = claims_markdown.section_text(section)
        n = sum(c.section == section for c in claims.load_claims())
        assert text.count("\n\n---\n\n") == n - 1
        assert sum(text.count(b) for b in claims_markdown.BADGES.values()) >= n
    table = claims_markdown.verdict_table(claims.summary())
    assert table["claims"].sum() == len(claims.load_claims())
    assert markdown.bullets([], empty="Nothing.").data == "- Nothing."
    assert markdown.bullets(["a", "b"], empty="Nothing.").data == "- a\n- b"


def test_random_reads_chart_orders_request_sizes_by_bytes_or_says_there_are_none():
    from kvoffload.report import measure_charts

    rows = [
        {"request_bytes": b, "queue_depth": qd, "share_of_sequential": s, "gb_s": s}
        for b in (1 << 20, 4096, 65536)
        for qd, s in ((1, 0.05), (32, 0.5))
    ]
    spec = measure_charts.random_read_chart(rows).to_dict()
    sort = spec["layer"][0]["encoding"]["color"]["sort"]
    assert sort == ["4 KiB", "64 KiB", "1 MiB"]
    assert isinstance(measure_charts.random_read_view(rows), charting.Embedded)
    assert "No storage measurements" in measure_charts.random_read_view([]).data


def test_validation_chart_plots_every_predicted_row_and_marks_its_role():
    from kvoffload.report import validation_charts
    from kvoffload.studies import validation, validation_findings

    frame = validation_findings.results_frame(validation.run())
    spec = validation_charts.validation_chart(frame).to_dict()
    points = spec["layer"][2]
    assert points["encoding"]["shape"]["field"] == "role"
    plotted = spec["datasets"][points["data"]["name"]]
    assert (
        len(plotted) == frame["ratio"].notna().sum() == len(frame) - (frame["refused"] != "").sum()
    )
