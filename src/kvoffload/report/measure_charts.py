"""Chapter 09's chart: random-read bandwidth of this machine's storage."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd
from IPython.display import Markdown

from kvoffload.report.charting import LIMIT_COLOR, show
from kvoffload.spec.units import format_bytes


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
            color=alt.Color("request:N", title="request size", sort=list(sizes.index)),
            tooltip=[
                "request:N",
                "queue_depth:Q",
                alt.Tooltip("gb_s:Q", title="GB/s", format=".3g"),
                alt.Tooltip("share_of_sequential:Q", format=".1%"),
            ],
        )
    )
    rule = (
        alt.Chart(pd.DataFrame({"y": [0.1], "label": ["the article's 10% line"]}))
        .mark_rule(strokeDash=[6, 4], color=LIMIT_COLOR)
        .encode(y="y:Q", tooltip="label:N")
    )
    return alt.layer(lines, rule)


def random_read_view(rows: list[dict]) -> Any:
    """Return the random-read chart for display, or a note when the profile has no measurements."""
    if not rows:
        return Markdown("_No storage measurements in this profile._")
    return show(random_read_chart(rows))
