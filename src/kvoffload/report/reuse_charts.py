"""Chapter 11's charts and tables: a prefix hit from host memory against recompute, per link,
hit rates against host cache size, sessions per tier, decode from GPU memory against streaming."""

from __future__ import annotations

import altair as alt
import pandas as pd

from kvoffload.inputs.units import format_bytes, format_number
from kvoffload.report.charting import (
    MS_LABELS,
    NEUTRAL,
    PALETTE,
    ROW_STEP,
    labelled_rows,
    limit_line,
    log_axis,
    note_coinciding,
    value_scale,
)

GB = 1e9
SPEEDUP = "speedup (×)"  # the TTFT table's recompute / host-hit column


def _tokens_axis(field: str, title: str) -> alt.X:
    """Return a log x axis of tokens that ends where the data end (no padding decade)."""
    return alt.X(
        f"{field}:Q",
        scale=alt.Scale(type="log", nice=False),
        title=title,
        axis=alt.Axis(format="~s"),
    )


def _ms_axis(values: pd.Series, title: str) -> alt.Y:
    return alt.Y(
        "ms:Q",
        title=title,
        scale=value_scale(values),
        axis=alt.Axis(labelExpr=MS_LABELS),
    )


def ttft_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Chart TTFT against prompt length: recomputed, and with the prefix reloaded from host memory.

    ``frame`` is ``studies.reuse.ttft_frame``; only the prompts whose model fits the GPU are drawn.
    """
    held = frame[frame["fits"]]
    long = held.melt(
        id_vars=["model", "prompt"],
        value_vars=["recompute (ms)", "host hit (ms)"],
        var_name="how",
        value_name="ms",
    ).assign(
        how=lambda f: f["how"].map({"recompute (ms)": "recompute", "host hit (ms)": "host hit"}),
        series=lambda f: f["model"] + ", " + f["how"],
    )
    base = alt.Chart(long).encode(
        x=_tokens_axis("prompt", "prompt (tokens)"),
        y=_ms_axis(long["ms"], "time to first token"),
        color=alt.Color(
            "how:N", title=None, sort=["recompute", "host hit"], scale=alt.Scale(range=PALETTE[:2])
        ),
        strokeDash=alt.StrokeDash("model:N", title=None, legend=alt.Legend(direction="vertical")),
        detail="series:N",
        tooltip=[
            "model:N",
            "how:N",
            alt.Tooltip("prompt:Q", format=","),
            alt.Tooltip("ms:Q", title="TTFT (ms)", format=".4g"),
        ],
    )
    chart = alt.layer(base.mark_line(), base.mark_point(size=14, filled=True))
    return note_coinciding(chart, long, "series", "prompt", "ms")


def route_chart(frame: pd.DataFrame, context: int) -> alt.LayerChart:
    """Chart, per route to the GPU, a hit's TTFT at ``context`` tokens beside recomputing it.

    ``frame`` is ``studies.reuse.break_even_frame``; one row per route, the recompute TTFT a line.
    """
    col = f"hit at {format_number(context)} (ms)"
    order = list(frame["path"])
    y, names = labelled_rows("path", order)
    recompute = float(frame["recompute (ms)"].iloc[0])
    data = frame.assign(ms=frame[col])
    x = alt.X(
        "ms:Q",
        title=f"time to first token at {format_number(context)} tokens",
        scale=value_scale(pd.concat([data["ms"], pd.Series([recompute])]), nice=False, padding=12),
        axis=alt.Axis(labelExpr=MS_LABELS),
    )
    points = (
        alt.Chart(data)
        .mark_point(size=80, filled=True, color=PALETTE[1])
        .encode(
            y=y,
            x=x,
            tooltip=["path:N", "rate:N", alt.Tooltip("ms:Q", title="TTFT (ms)", format=".4g")],
        )
    )
    return alt.layer(
        points,
        names,
        limit_line(recompute, "recompute", "x", color=NEUTRAL, at="start", side="left"),
    ).properties(height=ROW_STEP * len(order))


def hit_rate_chart(frame: pd.DataFrame, host_memory: float, bytes_for_90: float) -> alt.LayerChart:
    """Chart the share of turns served from host memory against the host cache's size (GB).

    ``frame`` is ``studies.reuse.hit_rate_frame``; this machine's host memory and the size that
    serves 90% of the turns are labelled lines.
    """
    data = frame.assign(gb=frame["host cache"] / GB)
    line = (
        alt.Chart(data)
        .mark_line()
        .encode(
            x=log_axis("gb", "host cache (GB)"),
            y=alt.Y(
                "hit rate:Q",
                title="turns served from host memory",
                axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1]),
            ),
            tooltip=[
                alt.Tooltip("gb:Q", title="host cache (GB)", format=".4g"),
                alt.Tooltip("hit rate:Q", format=".1%"),
            ],
        )
    )
    lines = [
        line,
        limit_line(bytes_for_90 / GB, "90% of turns", "x", color=NEUTRAL, at="start", side="left"),
    ]
    lines.append(limit_line(host_memory / GB, "this machine's host memory", "x", side="left"))
    return alt.layer(*lines)


def decode_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Chart TPOT against context: the cache on the GPU (reuse) against streamed every step.

    ``frame`` is ``studies.reuse.decode_frame``; points mark the contexts that fit the GPU.
    """
    modes = {
        "TPOT, cache on the GPU (ms)": "cache on the GPU, in host memory between turns",
        "TPOT, cache streamed (ms)": "cache in host memory, streamed every step",
    }
    long = frame.melt(
        id_vars=["context", "fits"], value_vars=list(modes), var_name="placement", value_name="ms"
    ).assign(placement=lambda f: f["placement"].map(modes))
    base = alt.Chart(long).encode(
        x=_tokens_axis("context", "context (tokens)"),
        y=_ms_axis(long["ms"], "time per output token"),
        color=alt.Color(
            "placement:N", title=None, sort=list(modes.values()), scale=alt.Scale(range=PALETTE[:2])
        ),
        tooltip=[
            "placement:N",
            alt.Tooltip("context:Q", format=","),
            alt.Tooltip("ms:Q", title="TPOT (ms)", format=".4g"),
        ],
    )
    chart = alt.layer(
        base.mark_line(), base.transform_filter("datum.fits").mark_point(size=14, filled=True)
    )
    return note_coinciding(chart, long, "placement", "context", "ms")


def break_even_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Return the routes' table: rate, its kind and source, the break-even prompt, the TTFTs."""
    return frame.drop(columns=["copy rate"]).rename(
        columns={"path": "route", "break-even prompt": "break-even prompt (tokens)"}
    )


def sessions_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Return the tiers' table with bytes written for people."""
    return frame.assign(
        capacity=frame["capacity"].map(format_bytes),
        **{"per session": frame["per session"].map(format_bytes)},
    )


def ttft_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Return the rows of ``studies.reuse.ttft_frame`` whose model fits, bytes and the speedup's
    unit for people (its column: ``SPEEDUP``)."""
    rows = frame[frame["fits"]]
    out = rows.drop(columns=["fits"]).assign(reloaded=rows["reloaded"].map(format_bytes))
    return out.rename(columns={"speedup": SPEEDUP})
