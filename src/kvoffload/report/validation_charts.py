"""Chapter 07's chart and tables: predicted over measured for every published row."""

from __future__ import annotations

import altair as alt
import pandas as pd

from kvoffload.inputs.units import format_number
from kvoffload.report.charting import NEUTRAL
from kvoffload.report.styling import Table, show

# a prediction's metric (``Prediction.to_json`` key) -> what the table calls it, and its unit
METRICS = {
    "decode_tokens_per_s": ("decode", "tokens/s"),
    "prefill_tokens_per_s": ("prefill", "tokens/s"),
    "throughput_tokens_per_s": ("throughput", "tokens/s"),
    "ttft_ms": ("TTFT", "ms"),
    "ttft_recompute_ms": ("TTFT, prefix recomputed", "ms"),
}
RESULT_COLUMNS = ["row", "table", "engine", "model", "metric", "measured", "predicted", "ratio"]
RATIO = "predicted / measured (×)"


def results_table(frame: pd.DataFrame, role: str) -> pd.DataFrame:
    """Return one role's rows of ``results_frame`` for the page, every number with its unit.

    When every row has one unit it goes in the measured and predicted headers; rows in mixed
    units carry it in each cell ("36.7 tokens/s", four figures) instead.
    """
    rows = frame.loc[frame["role"] == role, [*RESULT_COLUMNS, "refused", "source"]]
    units = [METRICS[m][1] for m in rows["metric"]]
    out = rows.assign(metric=[METRICS[m][0] for m in rows["metric"]])
    suffix = f" ({units[0]})" if len(set(units)) == 1 else ""
    if len(set(units)) > 1:
        for col in ("measured", "predicted"):
            out[col] = [
                v if pd.isna(v) else f"{format_number(v, 4)} {u}"
                for v, u in zip(out[col], units, strict=True)
            ]
    return out.rename(
        columns={"measured": f"measured{suffix}", "predicted": f"predicted{suffix}", "ratio": RATIO}
    )


def show_results(frame: pd.DataFrame, role: str, name: str) -> Table:
    """Return one role's ``results_table`` styled: four figures, the ratio three, sources folded."""
    table = results_table(frame, role)
    predicted = next(c for c in table.columns if c.startswith("predicted"))
    numbers = [c for c in table.columns if c.startswith("measured")] + [predicted]
    formats = {**{c: "{:.4g}" for c in numbers}, RATIO: "{:.3g}"}
    return show(table, name, formats, notes=["source"], notes_title="Sources", fold=True,
                missing={predicted: "refused"})  # fmt: skip


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
