"""Chapter 05's chart: which alternative meets the TPOT budget with the least GPU memory."""

from __future__ import annotations

import altair as alt
import pandas as pd


def decision_chart(grid: pd.DataFrame, budget_ms: float) -> alt.Chart:
    """Chart the least-memory option within the TPOT budget, per context and batch.

    ``grid`` is ``studies.alternatives.decision_grid``: context, batch, choice.
    """
    order = sorted(grid["context"].unique())
    return (
        alt.Chart(grid)
        .mark_rect(stroke="white", strokeWidth=1)
        .encode(
            x=alt.X(
                "context:O",
                title="context (tokens)",
                sort=order,
                axis=alt.Axis(labelAngle=0, labelExpr="format(datum.value, '~s')"),
            ),
            y=alt.Y("batch:O", title="batch (requests)", sort="descending"),
            color=alt.Color(
                "choice:N",
                title=f"least GPU memory within {budget_ms:g} ms per token",
                legend=alt.Legend(orient="bottom", columns=2, labelLimit=320),
            ),
            tooltip=["context:Q", "batch:Q", "choice:N"],
        )
    )
