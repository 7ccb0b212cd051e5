"""Chapter 06's chart: TPOT with the whole cache in host memory, per link."""

from __future__ import annotations

import altair as alt
import pandas as pd

from kvoffload.report.charting import (
    COINCIDE_SHARE,
    MS_LABELS,
    NEUTRAL,
    PALETTE,
    ROW_STEP,
    budget_rule,
    coinciding,
    join_names,
    labelled_rows,
    limit_line,
    value_scale,
    with_notes,
)

MODES = {"TPOT, no overlap (ms)": "no overlap", "TPOT, perfect overlap (ms)": "perfect overlap"}


def link_chart(links: pd.DataFrame, hbm_ms: float, budget_ms: float) -> alt.LayerChart:
    """Chart TPOT with the whole cache in host memory, per link, beside the all-in-HBM step.

    ``links`` is ``studies.beyond.link_rows``. One row per link, a point per overlap mode on a
    log axis (bars on a log axis would need a zero it does not have), with the all-in-HBM step
    and the budget as labelled vertical lines. The caption's notes say where the two modes draw
    on top of each other and which links give the same TPOT.
    """
    long = links.melt(
        id_vars=["link"], value_vars=list(MODES), var_name="overlap", value_name="ms"
    ).assign(overlap=lambda f: f["overlap"].map(MODES))
    order = list(links["link"])
    y, names = labelled_rows("link", order)
    values = pd.concat([long["ms"], pd.Series([hbm_ms, budget_ms])])
    x = alt.X(
        "ms:Q",
        title="TPOT with every cache byte in host memory",
        scale=value_scale(values, nice=False, padding=12),
        axis=alt.Axis(labelExpr=MS_LABELS),
    )
    span = (
        alt.Chart(links)
        .mark_rule(color=NEUTRAL, strokeWidth=1.5)
        .encode(y=y, x="TPOT, perfect overlap (ms):Q", x2="TPOT, no overlap (ms):Q")
    )
    points = (
        alt.Chart(long)
        .mark_point(size=80, filled=True, opacity=0.85)
        .encode(
            y=y,
            x=x,
            color=alt.Color(
                "overlap:N",
                title=None,
                sort=list(MODES.values()),
                scale=alt.Scale(range=PALETTE[:2]),
                legend=alt.Legend(direction="horizontal"),
            ),
            shape=alt.Shape("overlap:N", sort=list(MODES.values()), legend=None),
            tooltip=["link:N", "overlap:N", alt.Tooltip("ms:Q", format=".4g")],
        )
    )
    chart = alt.layer(
        span,
        points,
        names,
        limit_line(hbm_ms, "all in HBM", "x", color=NEUTRAL, at="start"),
        budget_rule(budget_ms, "x", at="start"),
    ).properties(height=ROW_STEP * len(order))
    return with_notes(chart, *link_notes(links))


def link_notes(links: pd.DataFrame) -> list[str]:
    """Return the sentences that say which points coincide: the two overlap modes, equal links."""
    notes = []
    long = links.melt(id_vars=["link"], value_vars=list(MODES), var_name="overlap", value_name="ms")
    modes = coinciding(long, "overlap", "link", "ms")
    if modes:
        notes.append(
            f"On every link the two overlap modes lie within {COINCIDE_SHARE:.0%} of the axis of "
            "each other: one point hides the other, because the copy is nearly the whole step."
        )
    same = coinciding(
        links.melt(id_vars=["link"], value_vars=list(MODES), var_name="mode", value_name="ms"),
        "link",
        "mode",
        "ms",
        share=0.0,
    )
    for group in same:
        notes.append(f"{join_names(group)} give the same TPOT.")
    return notes
