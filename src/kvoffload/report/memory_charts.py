"""Chapter 02's chart: weights plus KV cache against the machine's GPU memory."""

from __future__ import annotations

import altair as alt
import pandas as pd

from kvoffload.report.charting import limit_line, log_axis, note_coinciding


def memory_fit_chart(fit: pd.DataFrame) -> alt.LayerChart:
    """Chart weights + KV + buffers against context per batch, the GPU memory as a dashed rule.

    ``fit`` is ``studies.memory_fit.memory_fit_frame``; its ``capacity_gb`` is every GPU's memory.
    """
    capacity_gb = float(fit["capacity_gb"].iloc[0])
    lines = (
        alt.Chart(fit.drop(columns="capacity_gb"))
        .mark_line(point=alt.OverlayMarkDef(size=14))
        .encode(
            x=log_axis("context", "context (tokens)"),
            y=alt.Y(
                "total_gb:Q", scale=alt.Scale(type="log"), title="weights + KV cache + buffers (GB)"
            ),
            color=alt.Color("batch:O", title="batch", legend=alt.Legend(direction="horizontal")),
            tooltip=[
                alt.Tooltip("batch:O"),
                alt.Tooltip("context:Q", format=","),
                alt.Tooltip("kv_gb:Q", title="KV (GB)", format=".3g"),
                alt.Tooltip("total_gb:Q", title="weights + KV + buffers (GB)", format=".3g"),
                alt.Tooltip("fits:N", title="fits in GPU memory"),
            ],
        )
    )
    rule = limit_line(capacity_gb, f"GPU memory {capacity_gb:.4g} GB")
    chart = alt.layer(lines, rule)
    return note_coinciding(chart, fit, "batch", "context", "total_gb")
