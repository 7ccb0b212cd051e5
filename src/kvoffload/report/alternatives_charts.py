"""Chapter 05's chart: which alternative meets the TPOT budget with the least GPU memory."""

from __future__ import annotations

import altair as alt
import pandas as pd

from kvoffload.report.charting import with_notes
from kvoffload.studies.alternatives import OPTIONS

NONE = "none"
NONE_COLOR = "#c8c8c8"
# one colour per option on every page, so a profile's chart reads like another's
OPTION_COLORS = dict(
    zip(
        [o.name for o in OPTIONS if not o.window],
        [
            "#5b5b5b",
            "#1f5a99",
            "#3a8f5c",
            "#6c4f9c",
            "#8fb8de",
            "#d9822b",
            "#e3b448",
            "#c77dba",
            "#5fb7a5",
        ],
        strict=True,
    )
)
CELLS = "kvo_cells"  # the cells' layer name (and SVG class): the page draws their borders
ROW_PX = 34


def decision_chart(grid: pd.DataFrame, budget_ms: float) -> alt.Chart:
    """Chart the least-memory option within the TPOT budget, per context and batch.

    ``grid`` is ``studies.alternatives.decision_grid``: context, batch, choice. Each option keeps
    its colour on every page; the legend lists the options the grid uses, in the catalog's order.
    """
    order = sorted(grid["context"].unique())
    present = [n for n in OPTION_COLORS if n in set(grid["choice"])]
    if NONE in set(grid["choice"]):
        present.append(NONE)
    colors = {**OPTION_COLORS, NONE: NONE_COLOR}
    chart = (
        alt.Chart(grid)
        .mark_rect(strokeWidth=1.5)
        .encode(
            x=alt.X(
                "context:O",
                title="context (tokens)",
                sort=order,
                axis=alt.Axis(labelAngle=0, labelExpr="format(datum.value, '~s')", grid=False),
            ),
            y=alt.Y(
                "batch:O", title="batch (requests)", sort="descending", axis=alt.Axis(grid=False)
            ),
            color=alt.Color(
                "choice:N",
                title=f"least GPU memory within {budget_ms:g} ms per token",
                scale=alt.Scale(domain=present, range=[colors[c] for c in present]),
                legend=alt.Legend(symbolType="square", symbolSize=160),
            ),
            tooltip=[
                alt.Tooltip("context:Q", format=","),
                "batch:Q",
                alt.Tooltip("choice:N", title="least memory within the budget"),
            ],
        )
        .properties(name=CELLS, height=ROW_PX * grid["batch"].nunique())
    )
    empty = NONE in set(grid["choice"])
    return with_notes(
        chart, "Grey cells: no option both fits and meets the budget." if empty else ""
    )
