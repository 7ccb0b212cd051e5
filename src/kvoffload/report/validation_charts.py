"""Chapter 07's chart: predicted over measured for every published row."""

from __future__ import annotations

import altair as alt
import pandas as pd


def validation_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Chart predicted over measured for every predicted row, log scale, with the 2x band.

    ``frame`` is ``studies.validation_findings.results_frame``; checks and calibration rows have
    their own marks, and a refused row (no prediction) has no point.
    """
    frame = frame.dropna(subset=["ratio"])
    band = pd.DataFrame({"lo": [0.5], "hi": [2.0]})
    rule = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(color="#7a7a7a").encode(y="y:Q")
    area = alt.Chart(band).mark_rect(opacity=0.12, color="#3a8f5c").encode(y="lo:Q", y2="hi:Q")
    points = (
        alt.Chart(frame)
        .mark_circle(size=70)
        .encode(
            x=alt.X("row:N", title="published measurement", sort=list(frame["row"])),
            y=alt.Y(
                "ratio:Q",
                scale=alt.Scale(type="log", domain=[0.2, 5]),
                title="predicted / measured",
            ),
            color=alt.Color("engine:N", title="engine"),
            shape=alt.Shape("role:N", title="row"),
            tooltip=[
                "row:N",
                "role:N",
                "engine:N",
                "model:N",
                alt.Tooltip("measured:Q", format=".4g"),
                alt.Tooltip("predicted:Q", format=".4g"),
                alt.Tooltip("ratio:Q", format=".2f"),
            ],
        )
    )
    return alt.layer(area, rule, points)
