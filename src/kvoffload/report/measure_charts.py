"""Chapter 09's chart: random-read bandwidth of this machine's storage."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd
from IPython.display import Markdown

from kvoffload.inputs.units import format_bytes
from kvoffload.report.charting import Figures, limit_line, note_coinciding, show


def random_read_chart(rows: list[dict]) -> alt.LayerChart:
    """Chart random-read bandwidth as a share of sequential, per request size and queue depth."""
    data = pd.DataFrame(rows)
    data["request"] = [format_bytes(b, binary=True) for b in data["request_bytes"]]
    sizes = data.groupby("request")["request_bytes"].first().sort_values()
    lines = (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=30))
        .encode(
            x=alt.X(
                "queue_depth:Q",
                scale=alt.Scale(type="log", base=2),
                title="requests in flight (queue depth)",
            ),
            y=alt.Y(
                "share_of_sequential:Q",
                title="share of sequential read bandwidth",
                axis=alt.Axis(format="%"),
            ),
            color=alt.Color(
                "request:N",
                title="request size",
                sort=list(sizes.index),
                legend=alt.Legend(direction="horizontal"),
            ),
            tooltip=[
                "request:N",
                "queue_depth:Q",
                alt.Tooltip("gb_s:Q", title="GB/s", format=".3g"),
                alt.Tooltip("share_of_sequential:Q", format=".1%"),
            ],
        )
    )
    chart = alt.layer(lines, limit_line(0.1, "the article's 10% line"))
    return note_coinciding(chart, data, "request", "queue_depth", "share_of_sequential", log=False)


def random_read_view(
    rows: list[dict], figures: Figures | None = None, caption: str = "", name: str = "random-reads"
) -> Any:
    """Return the random-read chart for display (a numbered figure when ``figures`` is given), or
    a note when the profile has no measurements."""
    if not rows:
        return Markdown("_No storage measurements in this profile._")
    chart = random_read_chart(rows)
    return figures.show(name, chart, caption) if figures else show(chart)
