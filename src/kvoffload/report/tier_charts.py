"""Chapter 01's chart: the time to move a payload over each memory tier."""

from __future__ import annotations

import altair as alt
import pandas as pd

from kvoffload.report.charting import MS_LABELS, log_axis, note_coinciding, wrapped_labels


def transfer_time_chart(curves: pd.DataFrame) -> alt.Chart:
    """Chart transfer time against payload size per tier, log-log, latency visible at the left.

    ``curves`` is ``studies.tiers.transfer_curves``: tier, payload_bytes, time_ms, effective_gb_s.
    """
    chart = (
        alt.Chart(curves)
        .mark_line(point=alt.OverlayMarkDef(size=12))
        .encode(
            x=log_axis("payload_bytes", "payload (bytes)"),
            y=alt.Y(
                "time_ms:Q",
                scale=alt.Scale(type="log"),
                title="time for one transfer",
                axis=alt.Axis(labelExpr=MS_LABELS),
            ),
            color=alt.Color(
                "tier:N",
                title="tier",
                legend=alt.Legend(labelExpr=wrapped_labels(curves["tier"].unique())),
            ),
            tooltip=[
                alt.Tooltip("tier:N"),
                alt.Tooltip("payload_bytes:Q", title="payload (B)", format=",.0f"),
                alt.Tooltip("time_ms:Q", title="time (ms)", format=".4g"),
                alt.Tooltip("effective_gb_s:Q", title="effective rate (GB/s)", format=".3g"),
            ],
        )
    )
    return note_coinciding(chart, curves, "tier", "payload_bytes", "time_ms")
