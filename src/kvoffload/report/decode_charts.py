"""Chapter 03's charts: TPOT against context and batch, a layer's two streams, one step's timeline."""

from __future__ import annotations

import altair as alt
import pandas as pd

from kvoffload.model.decode import OVERLAP_MODES
from kvoffload.model.timeline import Event
from kvoffload.report.charting import budget_rule, log_axis, note_coinciding

RESOURCE_ORDER = ["disk_read", "h2d", "cpu", "gpu", "d2h", "disk_write"]


def overlap_chart(frame: pd.DataFrame, budget_ms: float = 50.0) -> alt.LayerChart:
    """Chart TPOT against context for each overlap mode, with the TPOT budget as a rule.

    ``frame`` is ``studies.decode_sweeps.overlap_frame``: overlap, context, tpot_ms, fits; points
    mark the contexts that fit the machine.
    """
    tooltip = [
        "overlap:N",
        alt.Tooltip("context:Q", format=","),
        alt.Tooltip("tpot_ms:Q", title="TPOT (ms)", format=".4g"),
    ]
    if "fits" in frame:
        tooltip.append(alt.Tooltip("fits:N", title="fits this machine"))
    base = alt.Chart(frame).encode(
        x=log_axis("context", "context (tokens)"),
        y=alt.Y("tpot_ms:Q", scale=alt.Scale(type="log"), title="time per output token (ms)"),
        color=alt.Color(
            "overlap:N",
            title="overlap",
            sort=list(OVERLAP_MODES),
            legend=alt.Legend(direction="horizontal"),
        ),
        strokeDash=alt.StrokeDash(
            "overlap:N",
            title="overlap",
            sort=list(OVERLAP_MODES),
            legend=alt.Legend(direction="horizontal"),
        ),
        tooltip=tooltip,
    )
    lines = base.mark_line()
    held = base.transform_filter("datum.fits") if "fits" in frame else base
    chart = alt.layer(lines, held.mark_point(size=12, filled=True), budget_rule(budget_ms))
    return note_coinciding(chart, frame, "overlap", "context", "tpot_ms")


def layer_chart(frame: pd.DataFrame) -> alt.Chart:
    """Chart a layer's GPU time against the time to copy its offloaded KV.

    ``frame`` is ``studies.decode_sweeps.layer_frame``: stream, context, ms.
    """
    chart = (
        alt.Chart(frame)
        .mark_line(point=alt.OverlayMarkDef(size=12))
        .encode(
            x=log_axis("context", "context (tokens)"),
            y=alt.Y("ms:Q", scale=alt.Scale(type="log"), title="time per layer (ms)"),
            color=alt.Color("stream:N", title=None),
            tooltip=[
                "stream:N",
                alt.Tooltip("context:Q", format=","),
                alt.Tooltip("ms:Q", format=".4g"),
            ],
        )
    )
    return note_coinciding(chart, frame, "stream", "context", "ms")


def batch_chart(frame: pd.DataFrame, budget_ms: float = 50.0) -> alt.LayerChart:
    """Chart TPOT against batch size for the two placements.

    ``frame`` is ``studies.decode_sweeps.batch_frame``: placement, batch, tpot_ms, fits; points
    mark the batches that fit the machine.
    """
    tooltip = ["placement:N", "batch:Q", alt.Tooltip("tpot_ms:Q", title="TPOT (ms)", format=".4g")]
    if "fits" in frame:
        tooltip.append(alt.Tooltip("fits:N", title="fits this machine"))
    base = alt.Chart(frame).encode(
        x=alt.X("batch:Q", title="batch (requests)"),
        y=alt.Y("tpot_ms:Q", scale=alt.Scale(type="log"), title="time per output token (ms)"),
        color=alt.Color("placement:N", title=None),
        tooltip=tooltip,
    )
    # points only where the machine holds the batch: the rest of each line only traces the model
    held = base.transform_filter("datum.fits") if "fits" in frame else base
    chart = alt.layer(
        base.mark_line(), held.mark_point(size=12, filled=True), budget_rule(budget_ms)
    )
    return note_coinciding(chart, frame, "placement", "batch", "tpot_ms")


def events_frame(events: list[Event]) -> pd.DataFrame:
    """Return a step's simulated events as a table in milliseconds, for a Gantt chart."""
    return pd.DataFrame(
        [
            {
                "resource": e.resource,
                "layer": e.layer,
                "task": e.task,
                "start_ms": e.start * 1e3,
                "end_ms": e.end * 1e3,
                "ms": (e.end - e.start) * 1e3,
            }
            for e in events
        ]
    )


def gantt_chart(events: list[Event]) -> alt.Chart:
    """Chart a step's timeline: one row per resource, one bar per segment of work."""
    data = events_frame(events)
    present = set(data["resource"])
    return (
        alt.Chart(data)
        .mark_bar(height=14, stroke="white", strokeWidth=0.3)
        .encode(
            x=alt.X("start_ms:Q", title="time within the step (ms)"),
            x2="end_ms:Q",
            y=alt.Y("resource:N", sort=[r for r in RESOURCE_ORDER if r in present], title=None),
            color=alt.Color(
                "task:N",
                title="work",
                sort=["load", "compute", "store"],
                legend=alt.Legend(direction="horizontal"),
            ),
            tooltip=[
                "resource:N",
                "layer:Q",
                "task:N",
                alt.Tooltip("start_ms:Q", format=".3f"),
                alt.Tooltip("ms:Q", title="duration (ms)", format=".3f"),
            ],
        )
        .properties(height=22 * len(present))
    )


def kv_format_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Chart llama.cpp's ms per token against context for each KV format.

    ``frame`` is ``studies.decode_sweeps.kv_format_frame(...).frame``: kv_format, context,
    tpot_ms, fits; points mark the contexts that fit the machine.
    """
    order = list(dict.fromkeys(frame["kv_format"]))
    legend = alt.Legend(direction="horizontal")
    base = alt.Chart(frame).encode(
        x=alt.X("context:Q", title="context (tokens)", axis=alt.Axis(format="~s")),
        y=alt.Y("tpot_ms:Q", title="time per output token (ms)"),
        color=alt.Color("kv_format:N", title="KV format", sort=order, legend=legend),
        strokeDash=alt.StrokeDash("kv_format:N", title="KV format", sort=order, legend=legend),
        tooltip=[
            alt.Tooltip("kv_format:N", title="KV format"),
            alt.Tooltip("context:Q", format=","),
            alt.Tooltip("tpot_ms:Q", title="ms per token", format=".4g"),
            alt.Tooltip("fits:N", title="fits this machine"),
        ],
    )
    return alt.layer(base.mark_line(), base.transform_filter("datum.fits").mark_point(size=12))
