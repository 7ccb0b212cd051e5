"""Chapter 04's charts: each engine's step by resource, and llama.cpp's --n-gpu-layers curve."""

from __future__ import annotations

import altair as alt
import pandas as pd

from kvoffload.report.charting import (
    LIMIT_COLOR,
    MS_LABELS,
    NEUTRAL,
    PALETTE,
    ROW_STEP,
    labelled_rows,
    value_scale,
    with_notes,
)

RESOURCE_COLUMNS = {
    "GPU (ms/step)": "GPU",
    "link (ms/step)": "host↔GPU link",
    "CPU (ms/step)": "CPU",
    "disk (ms/step)": "disk",
}
TPOT_LABEL = "the whole step (TPOT)"


def engine_time_chart(predictions: pd.DataFrame) -> alt.LayerChart:
    """Chart each engine's busy time per step on each resource, and its TPOT, on one axis.

    ``predictions`` is ``studies.engines_compared.engine_predictions``; engines that could not be
    predicted are left out, and those that do not fit the machine say so in their label. A point
    is one resource's busy time (a resource an engine leaves idle has none); the tick is the step,
    which overlap makes shorter than the sum. The axis is logarithmic where the times span a
    decade or more, so the fastest engines are not squashed against zero.
    """
    data = predictions.dropna(subset=["TPOT (ms)"]) if "TPOT (ms)" in predictions else predictions
    if "fits" in data:
        data = data.assign(
            engine=[
                e if f else f"{e} (does not fit)"
                for e, f in zip(data["engine"], data["fits"], strict=True)
            ]
        )
    long = data.melt(
        id_vars=["engine"], value_vars=list(RESOURCE_COLUMNS), var_name="resource", value_name="ms"
    )
    long["resource"] = long["resource"].map(RESOURCE_COLUMNS)
    long = long[long["ms"] > 0]
    step = pd.DataFrame({"engine": data["engine"], "ms": data["TPOT (ms)"], "what": TPOT_LABEL})
    order = list(data["engine"])
    y, names = labelled_rows("engine", order)
    x = alt.X(
        "ms:Q",
        title="time per decode step",
        scale=value_scale(pd.concat([long["ms"], step["ms"]]), nice=False, padding=12),
        axis=alt.Axis(labelExpr=MS_LABELS),
    )
    resources = [r for r in RESOURCE_COLUMNS.values() if r in set(long["resource"])]
    points = (
        alt.Chart(long)
        .mark_point(size=70, filled=True, opacity=0.9)
        .encode(
            y=y,
            x=x,
            color=alt.Color(
                "resource:N",
                title="busy time per step on",
                sort=resources,
                scale=alt.Scale(
                    domain=list(RESOURCE_COLUMNS.values()),
                    range=[PALETTE[0], PALETTE[1], PALETTE[2], PALETTE[4]],
                ),
                legend=alt.Legend(direction="horizontal", values=resources),
            ),
            shape=alt.Shape("resource:N", sort=resources, legend=None),
            tooltip=["engine:N", "resource:N", alt.Tooltip("ms:Q", format=".4g")],
        )
    )
    ticks = (
        alt.Chart(step)
        .mark_point(shape="M0,-1L0,1", size=300, strokeWidth=2.5, color=NEUTRAL, opacity=1)
        .encode(
            y=y,
            x=x,
            tooltip=["engine:N", alt.Tooltip("ms:Q", title="TPOT (ms)", format=".4g")],
        )
    )
    chart = alt.layer(ticks, points, names).properties(height=ROW_STEP * len(order))
    return with_notes(
        chart,
        "A grey tick marks each engine's whole step (TPOT); overlap makes it shorter than the "
        "sum of the points.",
    )


def ngl_chart(ngl: pd.DataFrame) -> alt.LayerChart:
    """Chart llama.cpp's tokens/s against --n-gpu-layers, with the straight line between the ends.

    ``ngl`` is ``studies.engines_compared.ngl_frame``: n_gpu_layers, tokens_per_s, fits. The axes
    stay linear even where tokens/s spans a decade: the chart's point is that the curve is not the
    straight line, which a log axis would bend.
    """
    ends = ngl.iloc[[0, -1]]
    naive = pd.DataFrame(
        {
            "n_gpu_layers": ends["n_gpu_layers"],
            "tokens_per_s": ends["tokens_per_s"],
            "line": "straight line between the ends",
        }
    )
    data = ngl.assign(fits=ngl["fits"].map({True: "fits", False: "does not fit"}))
    curve = (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=20))
        .encode(
            x=alt.X("n_gpu_layers:Q", title="--n-gpu-layers (the output layer counts as one)"),
            y=alt.Y("tokens_per_s:Q", title="tokens/s (decode, batch 1)"),
            color=alt.Color(
                "fits:N",
                title="in GPU memory",
                scale=alt.Scale(domain=["fits", "does not fit"], range=[PALETTE[0], LIMIT_COLOR]),
                legend=alt.Legend(direction="horizontal"),
            ),
            tooltip=["n_gpu_layers:Q", alt.Tooltip("tokens_per_s:Q", format=".3g"), "fits:N"],
        )
    )
    line = (
        alt.Chart(naive)
        .mark_line(strokeDash=[6, 4], color=NEUTRAL)
        .encode(x="n_gpu_layers:Q", y="tokens_per_s:Q", tooltip=["line:N"])
    )
    return alt.layer(curve, line)
