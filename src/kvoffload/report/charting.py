"""Charts' common ground: one Altair theme, offline HTML with stable ids, shared axes and rules."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import altair as alt
import pandas as pd

PALETTE = ["#1f5a99", "#d9822b", "#3a8f5c", "#b03a48", "#6c4f9c", "#7a7a7a"]
LIMIT_COLOR = "#b03a48"


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


def log_axis(field: str, title: str) -> alt.X:
    """Return a logarithmic quantitative x axis with SI-suffixed labels."""
    return alt.X(f"{field}:Q", scale=alt.Scale(type="log"), title=title, axis=alt.Axis(format="~s"))


def budget_rule(budget_ms: float) -> alt.Chart:
    """Return a dashed horizontal rule at the TPOT budget (ms)."""
    data = pd.DataFrame({"budget_ms": [budget_ms], "label": [f"TPOT budget {budget_ms:g} ms"]})
    return (
        alt.Chart(data)
        .mark_rule(strokeDash=[6, 4], color=LIMIT_COLOR)
        .encode(y="budget_ms:Q", tooltip=[alt.Tooltip("label:N", title="budget")])
    )


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
