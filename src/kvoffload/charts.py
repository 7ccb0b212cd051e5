"""Charts: one Altair theme, an offline HTML embedding with stable ids, the chapters' charts."""

from __future__ import annotations

import hashlib
import html
import json
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from kvoffload import kv, transfer
from kvoffload.hardware import System
from kvoffload.models import Model
from kvoffload.precision import KvFormat, WeightFormat

PALETTE = ["#1f5a99", "#d9822b", "#3a8f5c", "#b03a48", "#6c4f9c", "#7a7a7a"]


@alt.theme.register("kvoffload", enable=True)
def _theme() -> alt.theme.ThemeConfig:
    return {
        "config": {
            "view": {"continuousWidth": 560, "continuousHeight": 320, "stroke": None},
            "font": "system-ui, -apple-system, 'Segoe UI', sans-serif",
            "axis": {
                "labelFontSize": 11,
                "titleFontSize": 12,
                "titleFontWeight": "normal",
                "grid": True,
                "gridOpacity": 0.4,
            },
            "legend": {"labelFontSize": 11, "titleFontSize": 12, "titleFontWeight": "normal"},
            "range": {"category": PALETTE},
            "line": {"strokeWidth": 2},
        }
    }


def chart_id(spec: dict) -> str:
    """Return a div id derived from the spec, so identical inputs give identical HTML."""
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    return f"kvo-chart-{digest[:16]}"


def to_html(chart: alt.TopLevelMixin) -> str:
    """Return the chart as an HTML fragment that draws with the page's local Vega bundle."""
    spec = chart.to_dict()
    div = chart_id(spec)
    payload = json.dumps(spec, sort_keys=True).replace("</", "<\\/")
    return (
        f'<div id="{div}" class="kvoffload-chart" role="img"></div>\n'
        '<script type="text/javascript">\n'
        "(function () {\n"
        f"  var spec = {payload};\n"
        "  function draw() {\n"
        f'    var el = document.getElementById("{div}");\n'
        '    if (!window.vegaEmbed) { el.textContent = "(chart: the local Vega bundle did not load)"; return; }\n'
        '    window.vegaEmbed(el, spec, {actions: false, renderer: "svg"}).catch(function (e) { console.error(e); });\n'
        "  }\n"
        '  if (document.readyState === "complete") { draw(); } else { window.addEventListener("load", draw); }\n'
        "})();\n"
        "</script>"
    )


class Embedded:
    """A chart that displays in a notebook as offline HTML (and as the spec for other front ends)."""

    def __init__(self, chart: alt.TopLevelMixin):
        self.chart = chart

    def _repr_html_(self) -> str:
        return to_html(self.chart)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict:
        return {
            "text/html": to_html(self.chart),
            "text/plain": f"<chart {chart_id(self.chart.to_dict())}>",
        }


def show(chart: alt.TopLevelMixin) -> Embedded:
    """Wrap a chart for display in a chapter (offline, stable ids)."""
    return Embedded(chart)


def escape(text: str) -> str:
    """Escape text for HTML."""
    return html.escape(text, quote=True)


# -- chapter 01: memory tiers ------------------------------------------------------------------
def transfer_curves(system: System, sizes_bytes: np.ndarray | None = None) -> pd.DataFrame:
    """Return time and effective rate to move each payload size over each tier (one transfer)."""
    sizes = np.logspace(3, 10, 57) if sizes_bytes is None else np.asarray(sizes_bytes, float)
    rows = []
    for tier in transfer.tiers(system):
        t = tier.time(sizes)
        for size, seconds in zip(sizes, t, strict=True):
            rows.append(
                {
                    "tier": tier.name,
                    "payload_bytes": float(size),
                    "time_ms": float(seconds) * 1e3,
                    "effective_gb_s": float(size / seconds) / 1e9,
                }
            )
    return pd.DataFrame(rows)


def transfer_time_chart(system: System) -> alt.Chart:
    """Chart transfer time against payload size per tier, log-log, latency visible at the left."""
    data = transfer_curves(system)
    return (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=12))
        .encode(
            x=alt.X(
                "payload_bytes:Q",
                scale=alt.Scale(type="log"),
                title="payload (bytes)",
                axis=alt.Axis(format="~s"),
            ),
            y=alt.Y("time_ms:Q", scale=alt.Scale(type="log"), title="time for one transfer (ms)"),
            color=alt.Color(
                "tier:N",
                title="tier",
                legend=alt.Legend(orient="bottom", columns=2, labelLimit=360),
            ),
            tooltip=[
                alt.Tooltip("tier:N"),
                alt.Tooltip("payload_bytes:Q", title="payload (B)", format=",.0f"),
                alt.Tooltip("time_ms:Q", title="time (ms)", format=".4g"),
                alt.Tooltip("effective_gb_s:Q", title="effective rate (GB/s)", format=".3g"),
            ],
        )
    )


# -- chapter 02: KV sizing -------------------------------------------------------------------------
def memory_fit_frame(
    system: System,
    model: Model,
    contexts: np.ndarray,
    batches: np.ndarray,
    *,
    weights: WeightFormat = WeightFormat.BF16,
    kv_fmt: KvFormat = KvFormat.BF16,
) -> pd.DataFrame:
    """Return weights + KV bytes on the GPU for every (batch, context), in one vectorised call."""
    s = np.asarray(contexts, dtype=np.int64)
    b = np.asarray(batches, dtype=np.int64)
    w = model.weight_bytes(weights).total
    kv_bytes = kv.batch_bytes(model, s[None, :], b[:, None], kv_fmt)
    total = w + kv_bytes
    capacity = system.gpu.memory.value
    bb, ss = np.meshgrid(b, s, indexing="ij")
    return pd.DataFrame(
        {
            "batch": bb.ravel(),
            "context": ss.ravel(),
            "weights_gb": w / 1e9,
            "kv_gb": kv_bytes.ravel() / 1e9,
            "total_gb": total.ravel() / 1e9,
            "fits": total.ravel() <= capacity,
        }
    )


def memory_fit_chart(
    system: System, model: Model, contexts: np.ndarray, batches: np.ndarray, **kw: Any
) -> alt.LayerChart:
    """Chart weights + KV against context per batch, with the GPU's capacity as a rule."""
    data = memory_fit_frame(system, model, contexts, batches, **kw)
    capacity_gb = system.gpu.memory.value / 1e9
    lines = (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=14))
        .encode(
            x=alt.X(
                "context:Q",
                scale=alt.Scale(type="log"),
                title="context (tokens)",
                axis=alt.Axis(format="~s"),
            ),
            y=alt.Y("total_gb:Q", scale=alt.Scale(type="log"), title="weights + KV cache (GB)"),
            color=alt.Color("batch:O", title="batch"),
            tooltip=[
                alt.Tooltip("batch:O"),
                alt.Tooltip("context:Q", format=","),
                alt.Tooltip("kv_gb:Q", title="KV (GB)", format=".3g"),
                alt.Tooltip("total_gb:Q", title="weights + KV (GB)", format=".3g"),
                alt.Tooltip("fits:N", title="fits in GPU memory"),
            ],
        )
    )
    rule_data = pd.DataFrame(
        {"capacity_gb": [capacity_gb], "label": [f"GPU memory {capacity_gb:.4g} GB"]}
    )
    rule = (
        alt.Chart(rule_data)
        .mark_rule(strokeDash=[6, 4], color="#b03a48")
        .encode(y="capacity_gb:Q", tooltip=[alt.Tooltip("label:N", title="limit")])
    )
    text = (
        alt.Chart(rule_data)
        .mark_text(align="left", dx=4, dy=-6, color="#b03a48")
        .encode(y="capacity_gb:Q", x=alt.value(0), text="label:N")
    )
    return alt.layer(lines, rule, text)
