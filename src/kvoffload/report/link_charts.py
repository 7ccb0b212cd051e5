"""Chapter 06's chart: TPOT with the whole cache in host memory, link by link."""

from __future__ import annotations

import altair as alt
import pandas as pd

from kvoffload.report.charting import LIMIT_COLOR


def link_chart(links: pd.DataFrame, hbm_ms: float, budget_ms: float) -> alt.LayerChart:
    """Chart TPOT with the whole cache in host memory, per link, beside the all-in-HBM step.

    ``links`` is ``studies.beyond.link_rows``.
    """
    long = links.melt(
        id_vars=["link"],
        value_vars=["TPOT, no overlap (ms)", "TPOT, perfect overlap (ms)"],
        var_name="overlap",
        value_name="ms",
    )
    bars = (
        alt.Chart(long)
        .mark_bar()
        .encode(
            y=alt.Y("link:N", title=None, sort=list(links["link"])),
            yOffset="overlap:N",
            x=alt.X(
                "ms:Q",
                title="TPOT with every cache byte in host memory (ms, log)",
                scale=alt.Scale(type="log"),
            ),
            color=alt.Color("overlap:N", title=None, legend=alt.Legend(orient="bottom")),
            tooltip=["link:N", "overlap:N", alt.Tooltip("ms:Q", format=".4g")],
        )
    )
    rules = (
        alt.Chart(
            pd.DataFrame(
                {
                    "ms": [hbm_ms, budget_ms],
                    "label": ["everything in HBM", f"{budget_ms:g} ms budget"],
                }
            )
        )
        .mark_rule(strokeDash=[6, 4])
        .encode(
            x="ms:Q",
            color=alt.value(LIMIT_COLOR),
            tooltip=["label:N", alt.Tooltip("ms:Q", format=".4g")],
        )
    )
    return alt.layer(bars, rules)
