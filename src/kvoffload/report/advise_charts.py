"""Chapter 12's chart: each catalog model's fastest configuration that fits, in tokens/s."""

from __future__ import annotations

import altair as alt
import pandas as pd

from kvoffload.report.charting import PALETTE, ROW_STEP, labelled_rows, value_scale, with_notes

WHOLE = "fits with no offload"
OFFLOADED = "fits with offload"
NONE_FITS = " (nothing fits)"  # after the name of a model with no configuration that fits


def fastest_chart(speeds: pd.DataFrame) -> alt.LayerChart:
    """Chart each model's fastest tokens/s, coloured by whether it offloads to fit.

    ``speeds`` is ``studies.advise.speed_frame``, one row per model, fastest first. A point per
    model on a log axis where the rates span a decade (bars on a log axis would need a zero it
    does not have); a model with no configuration that fits keeps its row, its name marked
    ``NONE_FITS``, and no point.
    """
    data = speeds.assign(
        row=[
            m if f else m + NONE_FITS for m, f in zip(speeds["model"], speeds["fits"], strict=True)
        ],
        placement=[OFFLOADED if o else WHOLE for o in speeds["offloads"]],
    )
    order = list(data.sort_values("tokens_per_s", ascending=False, na_position="last")["row"])
    y, names = labelled_rows("row", order)
    fitting = data[data["fits"]]
    points = (
        alt.Chart(fitting)
        .mark_point(size=70, filled=True, opacity=0.9)
        .encode(
            y=y,
            x=alt.X(
                "tokens_per_s:Q",
                title="tokens/s (decode, its fastest configuration)",
                scale=value_scale(fitting["tokens_per_s"], nice=False, padding=12),
                axis=alt.Axis(format="~g"),
            ),
            color=alt.Color(
                "placement:N",
                title=None,
                scale=alt.Scale(domain=[WHOLE, OFFLOADED], range=[PALETTE[0], PALETTE[1]]),
                legend=alt.Legend(direction="horizontal", orient="top"),
            ),
            shape=alt.Shape("placement:N", title=None, scale=alt.Scale(domain=[WHOLE, OFFLOADED])),
            tooltip=[
                alt.Tooltip("model:N"),
                alt.Tooltip("tokens_per_s:Q", title="tokens/s", format=".3g"),
                alt.Tooltip("engine:N"),
                alt.Tooltip("weights:N"),
                alt.Tooltip("offload:N"),
            ],
        )
    )
    chart = alt.layer(points, names).properties(height=ROW_STEP * len(order))
    if data["fits"].all():
        return chart
    return with_notes(
        chart,
        f"A model named with “{NONE_FITS.strip()}” has no configuration that fits, so no point.",
    )
