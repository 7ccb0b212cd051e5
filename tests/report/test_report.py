"""The report layer shapes what studies return: stable offline charts, formatted tables, Markdown."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model
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
    assert rules[0][0]["value"] == pytest.approx(A100.gpu_memory / 1e9)
    assert rules[0][0]["label"].startswith("GPU memory")
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


# --- charts: responsive, captioned, labelled limit lines, log axes, coinciding series ----------


def _marks(spec: dict, data: dict | None = None) -> list[tuple[str, dict]]:
    """Return (mark type, unit spec with the data it inherits) for every unit of a layered spec."""
    data = spec.get("data", data)
    if "layer" in spec:
        return [m for layer in spec["layer"] for m in _marks(layer, data)]
    mark = spec.get("mark")
    if not mark:
        return []
    return [(mark["type"] if isinstance(mark, dict) else mark, {"data": data, **spec})]


def _texts(spec: dict) -> list[str]:
    """Return every string a text mark of the spec draws from its data."""
    out = []
    for kind, unit in _marks(spec):
        if kind == "text":
            field = unit["encoding"]["text"]["field"]
            out += [row[field] for row in spec["datasets"].get(unit["data"]["name"], [])]
    return out


def test_every_chart_is_sized_by_its_container_whatever_width_it_asked_for():
    chart = decode_charts.gantt_chart(
        timeline.simulate(decode.Setup(A100, LLAMA), 8_000, 1)
    ).properties(width=800)
    spec = charting.responsive_spec(chart)
    assert spec["width"] == "container" and spec["autosize"]["type"] == "fit-x"
    assert '"width": "container"' in charting.to_html(chart)
    config = charting._theme()["config"]
    assert config["background"] == "transparent"
    assert config["legend"]["labelLimit"] == charting.LABEL_LIMIT


def test_coinciding_finds_series_drawn_on_top_of_each_other_and_only_those():
    x = np.logspace(2, 6, 9)
    frame = pd.concat(
        [
            pd.DataFrame({"s": "a", "x": x, "y": x / 10}),
            pd.DataFrame({"s": "b", "x": x, "y": x / 10 * 1.001}),  # 0.04% of a decade away
            pd.DataFrame({"s": "c", "x": x, "y": x}),
            pd.DataFrame({"s": "d", "x": x, "y": x / 10 * np.where(x > 1e5, 3, 1)}),  # parts once
        ]
    )
    assert charting.coinciding(frame, "s", "x", "y") == [["a", "b"]]
    assert charting.coinciding(frame, "s", "x", "y", share=0.0) == []
    # series on different x grids are compared by interpolation, never on one shared point
    apart = pd.DataFrame({"s": ["p", "p", "q", "q"], "x": [0, 10, 10, 20], "y": [5, 9, 9, 1]})
    assert charting.coinciding(apart, "s", "x", "y", log=False) == []
    note = charting.coinciding_note([["none", "flexgen"], ["pipeline", "perfect"]])
    assert "“none” and “flexgen” coincide, as do “pipeline” and “perfect”" in note
    assert charting.coinciding_note([]) == ""


def test_overlap_chart_says_which_modes_coincide_from_its_data():
    frame = decode_sweeps.overlap_frame(decode.offloaded(A100, LLAMA), np.logspace(3, 6, 7))
    same = frame.copy()
    none = same.loc[same["overlap"] == "none", "tpot_ms"].to_numpy()
    same.loc[same["overlap"] == "pipeline", "tpot_ms"] = none
    notes = charting.notes(decode_charts.overlap_chart(same, 50.0))
    assert any("“none”" in n and "“pipeline”" in n for n in notes)
    apart = frame.assign(
        tpot_ms=frame["tpot_ms"]
        * frame["overlap"].map({"none": 1, "pipeline": 2, "flexgen": 4, "perfect": 8})
    )
    assert charting.notes(decode_charts.overlap_chart(apart, 50.0)) == []


def test_budget_and_limit_lines_are_labelled():
    frame = decode_sweeps.batch_frame(decode.offloaded(A100, LLAMA), 32_000, np.arange(1, 9))
    spec = decode_charts.batch_chart(frame, 40.0).to_dict()
    assert "40 ms budget" in _texts(spec)
    fit = memory_fit.memory_fit_frame(A100, LLAMA, [1_000, 100_000], [1, 4])
    assert any(
        t.startswith("GPU memory") for t in _texts(memory_charts.memory_fit_chart(fit).to_dict())
    )


def test_link_chart_draws_points_on_a_log_axis_with_labelled_lines():
    from kvoffload.report import link_charts
    from kvoffload.studies import beyond

    links = beyond.link_rows(A100, LLAMA, 128_000)
    spec = link_charts.link_chart(links, 12.0, 50.0).to_dict()
    kinds = [k for k, _ in _marks(spec)]
    assert "bar" not in kinds  # a bar on a log axis starts at zero, which Vega-Lite refuses
    points = next(u for k, u in _marks(spec) if k == "point")
    assert points["encoding"]["x"]["scale"]["type"] == "log"
    plotted = spec["datasets"][points["data"]["name"]]
    assert len(plotted) == 2 * len(links) and all(r["ms"] > 0 for r in plotted)
    assert {"all in HBM", "50 ms budget"} <= set(_texts(spec))
    assert set(links["link"]) <= set(_texts(spec))  # every link named in full above its row


def test_link_notes_name_links_that_give_the_same_tpot():
    from kvoffload.report import link_charts

    links = pd.DataFrame(
        {
            "link": ["slow", "twin a", "twin b"],
            "TPOT, no overlap (ms)": [1000.0, 210.0, 210.0],
            "TPOT, perfect overlap (ms)": [990.0, 100.0, 100.0],
        }
    )
    notes = link_charts.link_notes(links)
    assert "twin a and twin b give the same TPOT." in notes
    assert not any("hides the other" in n for n in notes)  # 210 against 100 is not one point


def test_engine_time_chart_uses_a_log_axis_when_times_span_decades():
    from kvoffload.report import engine_charts

    frame = pd.DataFrame(
        {
            "engine": ["fast", "slow"],
            "TPOT (ms)": [8.0, 1500.0],
            "GPU (ms/step)": [7.5, 9.6],
            "link (ms/step)": [0.2, 1500.0],
            "CPU (ms/step)": [0.0, 0.0],
            "disk (ms/step)": [0.0, 0.0],
            "fits": [True, False],
        }
    )
    spec = engine_charts.engine_time_chart(frame).to_dict()
    points = [u for k, u in _marks(spec) if k == "point"]
    assert all(u["encoding"]["x"]["scale"]["type"] == "log" for u in points)
    resources = spec["datasets"][points[1]["data"]["name"]]
    assert {r["resource"] for r in resources} == {"GPU", "host↔GPU link"}  # idle ones dropped
    assert "slow (does not fit)" in _texts(spec)
    flat = frame.assign(**{"TPOT (ms)": [8.0, 9.0], "link (ms/step)": [4.0, 6.0]})
    assert charting.value_scale(flat[["GPU (ms/step)", "link (ms/step)"]].stack()).type == "linear"


def test_decision_chart_keeps_each_options_colour_and_grows_with_its_rows():
    from kvoffload.report import alternatives_charts

    grid = pd.DataFrame(
        {
            "context": [4000, 8000, 4000, 8000],
            "batch": [1, 1, 2, 2],
            "choice": ["INT4 KV cache", "none", "KV cache offloaded to host memory", "none"],
        }
    )
    spec = alternatives_charts.decision_chart(grid, 50.0).to_dict()
    scale = spec["encoding"]["color"]["scale"]
    colours = dict(zip(scale["domain"], scale["range"], strict=True))
    assert colours["INT4 KV cache"] == alternatives_charts.OPTION_COLORS["INT4 KV cache"]
    assert colours["none"] == alternatives_charts.NONE_COLOR
    assert scale["domain"][-1] == "none" and spec["height"] == 2 * alternatives_charts.ROW_PX
    assert any(
        "Grey cells" in n for n in charting.notes(alternatives_charts.decision_chart(grid, 50.0))
    )


def test_figures_are_numbered_per_chapter_with_escaped_captions_and_the_charts_notes():
    frame = decode_sweeps.overlap_frame(decode.offloaded(A100, LLAMA), np.array([1_000, 32_000]))
    chart = charting.with_notes(decode_charts.overlap_chart(frame, 50.0), "A note from the data.")
    figures = charting.Figures(3)
    first = figures.show("overlap", chart, "Look at <this> & `--n-gpu-layers`.")
    second = figures.show("other", chart, "Another.")
    again = figures.show("overlap", chart, "Look at <this> & `--n-gpu-layers`.")
    assert (first.number, second.number, again.number) == ("3.1", "3.2", "3.1")
    html = first._repr_html_()
    assert html.startswith('<figure class="kvoffload-figure" id="figure-3-1">')
    assert "Figure 3.1:</span> Look at &lt;this&gt; &amp; <code>--n-gpu-layers</code>." in html
    assert html.rstrip().endswith("A note from the data.</figcaption>\n</figure>")
    with pytest.raises(ValueError, match="caption"):
        figures.show("empty", chart, " ")


def test_long_legend_labels_wrap_to_fit_a_phone():
    labels = ["short", "experts the batch touches (llama.cpp reads; an engine streaming moves)"]
    expr = charting.wrapped_labels(labels)
    table = json.loads(expr[1 : expr.index(")[datum.label]")])
    assert list(table) == [labels[1]]
    assert all(len(line) <= charting.WRAP_CHARS for line in table[labels[1]])
    assert " ".join(table[labels[1]]) == labels[1]
    assert charting.wrapped_labels(["short"]) == "datum.label"
