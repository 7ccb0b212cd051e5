"""Chapter 04's charts: each engine's step by resource, and llama.cpp's --n-gpu-layers curve."""

from __future__ import annotations

import altair as alt
import pandas as pd

from kvoffload.report.charting import LIMIT_COLOR, PALETTE

RESOURCE_COLUMNS = {
    "GPU (ms/step)": "GPU",
    "link (ms/step)": "host↔GPU link",
    "CPU (ms/step)": "CPU",
    "disk (ms/step)": "disk",
}


def engine_time_chart(predictions: pd.DataFrame) -> alt.Chart:
    """Chart each engine's busy time per step by resource (stacked), for one workload.

    ``predictions`` is ``studies.engines_compared.engine_predictions``; engines that could not be
    predicted are left out, and those that do not fit the machine say so in their label.
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
    return (
        alt.Chart(long)
        .mark_bar()
        .encode(
            y=alt.Y("engine:N", title=None, sort=list(data["engine"])),
            x=alt.X("ms:Q", title="busy time per decode step, by resource (ms)"),
            color=alt.Color("resource:N", title="resource", legend=alt.Legend(orient="bottom")),
            tooltip=["engine:N", "resource:N", alt.Tooltip("ms:Q", format=".4g")],
        )
    )


def ngl_chart(ngl: pd.DataFrame) -> alt.LayerChart:
    """Chart llama.cpp's tokens/s against --n-gpu-layers, with the straight line between the ends.

    ``ngl`` is ``studies.engines_compared.ngl_frame``: n_gpu_layers, tokens_per_s, fits.
    """
    ends = ngl.iloc[[0, -1]]
    naive = pd.DataFrame(
        {
            "n_gpu_layers": ends["n_gpu_layers"],
            "tokens_per_s": ends["tokens_per_s"],
            "line": "straight line between the ends",
        }
    )
    curve = (
        alt.Chart(ngl)
        .mark_line(point=alt.OverlayMarkDef(size=20))
        .encode(
            x=alt.X("n_gpu_layers:Q", title="--n-gpu-layers (the output layer counts as one)"),
            y=alt.Y("tokens_per_s:Q", title="tokens/s (decode, batch 1)"),
            color=alt.Color(
                "fits:N",
                title="fits in GPU memory",
                scale=alt.Scale(domain=[True, False], range=[PALETTE[0], LIMIT_COLOR]),
            ),
            tooltip=["n_gpu_layers:Q", alt.Tooltip("tokens_per_s:Q", format=".3g"), "fits:N"],
        )
    )
    line = (
        alt.Chart(naive)
        .mark_line(strokeDash=[6, 4], color="#7a7a7a")
        .encode(x="n_gpu_layers:Q", y="tokens_per_s:Q", tooltip=["line:N"])
    )
    return alt.layer(curve, line)
