"""Chapter 07's chart: predicted over measured for every published row."""

from __future__ import annotations

import altair as alt
import pandas as pd

from kvoffload.report.charting import NEUTRAL


def validation_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Chart predicted over measured for every predicted row, log scale, with the 2x band.

    ``frame`` is ``studies.validation_findings.results_frame``; checks and calibration rows have
    their own marks, and a refused row (no prediction) has no point.
    """
    frame = frame.dropna(subset=["ratio"])
    band = pd.DataFrame({"lo": [0.5], "hi": [2.0]})
    rule = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(color=NEUTRAL).encode(y="y:Q")
    area = alt.Chart(band).mark_rect(opacity=0.12, color="#3a8f5c").encode(y="lo:Q", y2="hi:Q")
    points = (
        alt.Chart(frame)
        .mark_point(size=70, filled=True, opacity=0.85)
        .encode(
            x=alt.X(
                "row:N",
                title="published measurement",
                sort=list(frame["row"]),
                axis=alt.Axis(labelAngle=-60, labelLimit=110, grid=False),
            ),
            y=alt.Y(
                "ratio:Q",
                scale=alt.Scale(type="log", domain=[0.2, 5]),
                title="predicted / measured",
            ),
            color=alt.Color("engine:N", title="engine", legend=alt.Legend(columns=2)),
            shape=alt.Shape(
                "role:N", title="row", legend=alt.Legend(orient="top", direction="horizontal")
            ),
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
    labels = (
        alt.Chart(pd.DataFrame({"y": [2.0], "text": ["2× band"]}))
        .mark_text(align="left", baseline="bottom", dx=2, dy=-2, fontSize=11, color=NEUTRAL)
        .encode(y="y:Q", x=alt.value(0), text="text:N")
    )
    return alt.layer(area, rule, points, labels).properties(height=340)
