"""Charts' common ground: one Altair theme, offline HTML with stable ids, numbered captions,
labelled limit lines, and the notes a chart's data call for (series that coincide)."""

from __future__ import annotations

import hashlib
import html
import json
import math
import re
from collections.abc import Sequence
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

PALETTE = ["#1f5a99", "#d9822b", "#3a8f5c", "#b03a48", "#6c4f9c", "#7a7a7a"]
LIMIT_COLOR = "#c23b4e"  # limit lines and their labels: readable on a light and a dark page
NEUTRAL = "#8a8a8a"  # reference lines that are not limits
# a legend's or a row's label may use the plot's whole width, never more: nothing spills out of
# the container on a narrow screen (the SVG's own width is the container's)
LABEL_LIMIT = {"expr": "max(80, width - 24)"}
# two series coincide when, wherever both are drawn, they lie within this share of the y axis's
# span (in decades on a log axis): about 3 px on a 300 px chart, too close to tell apart
COINCIDE_SHARE = 0.01
_NOTES = "kvoffload_notes"


@alt.theme.register("kvoffload", enable=True)
def _theme() -> alt.theme.ThemeConfig:
    return {
        "config": {
            # transparent: the chart is drawn on the page's background, light or dark; the page's
            # stylesheet colours axes, labels and grid from the theme's variables
            "background": "transparent",
            "view": {"continuousWidth": 560, "continuousHeight": 300, "stroke": None},
            "font": "system-ui, -apple-system, 'Segoe UI', sans-serif",
            "axis": {
                "labelFontSize": 11,
                "titleFontSize": 12,
                "titleFontWeight": "normal",
                "grid": True,
                "gridOpacity": 0.4,
                "labelOverlap": True,
            },
            "legend": {
                "orient": "bottom",
                "direction": "vertical",
                "labelFontSize": 11,
                "titleFontSize": 12,
                "titleFontWeight": "normal",
                "labelLimit": LABEL_LIMIT,
                "titleLimit": LABEL_LIMIT,
            },
            "range": {"category": PALETTE},
            "line": {"strokeWidth": 2},
        }
    }


def log_axis(field: str, title: str) -> alt.X:
    """Return a logarithmic quantitative x axis with SI-suffixed labels."""
    return alt.X(f"{field}:Q", scale=alt.Scale(type="log"), title=title, axis=alt.Axis(format="~s"))


def spans_decades(values: Any, decades: float = 1.0) -> bool:
    """Return True when the positive ``values`` span at least ``decades`` powers of ten."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    return v.size > 1 and math.log10(v.max() / v.min()) >= decades


def value_scale(values: Any, decades: float = 1.0, **kwargs: Any) -> alt.Scale:
    """Return a log scale when ``values`` span ``decades`` or more, else a linear one."""
    return alt.Scale(type="log" if spans_decades(values, decades) else "linear", **kwargs)


def limit_line(
    value: float,
    label: str,
    channel: str = "y",
    color: str = LIMIT_COLOR,
    at: str = "end",
    side: str = "right",
) -> alt.LayerChart:
    """Return a dashed rule at ``value`` on ``channel`` ("y": horizontal, "x": vertical) with its
    label written beside it, at the right end (``at="end"``) or left (``"start"``) of a horizontal
    rule, the top (``"end"``) or bottom (``"start"``) of a vertical one, on its ``side`` (a vertical
    rule near the right edge takes ``side="left"``, so its label stays inside the plot)."""
    data = pd.DataFrame({"value": [value], "label": [label]})
    base = alt.Chart(data)
    rule = base.mark_rule(strokeDash=[6, 4], color=color, strokeWidth=1.5).encode(
        **{channel: alt.Y("value:Q") if channel == "y" else alt.X("value:Q")},
        tooltip=[alt.Tooltip("label:N", title="line"), alt.Tooltip("value:Q", format=".4g")],
    )
    if channel == "y":
        text = base.mark_text(
            align="right" if at == "end" else "left",
            baseline="bottom",
            dx=-2 if at == "end" else 2,
            dy=-3,
            color=color,
            fontSize=11,
        ).encode(
            y="value:Q",
            x=alt.value("width") if at == "end" else alt.value(0),
            text="label:N",
        )
    else:
        text = base.mark_text(
            align="left" if side == "right" else "right",
            baseline="top" if at == "end" else "bottom",
            dx=4 if side == "right" else -4,
            dy=2 if at == "end" else -2,
            color=color,
            fontSize=11,
        ).encode(
            x="value:Q",
            y=alt.value(0) if at == "end" else alt.value("height"),
            text="label:N",
        )
    return alt.layer(rule, text)


def budget_rule(budget_ms: float, channel: str = "y", at: str = "end") -> alt.LayerChart:
    """Return the TPOT budget (ms) as a dashed rule labelled "<budget> ms budget"."""
    return limit_line(budget_ms, f"{budget_ms:g} ms budget", channel, at=at)


def coinciding(
    frame: pd.DataFrame,
    series: str,
    x: str,
    y: str,
    log: bool = True,
    share: float = COINCIDE_SHARE,
) -> list[list[str]]:
    """Return the groups of series that a reader cannot tell apart on the chart.

    Two series coincide when, at every ``x`` both have, their ``y`` values differ by at most
    ``share`` of the y axis's span: whole decades around the data on a log axis (as Vega rounds
    it), from zero on a linear one. Groups keep the order in which the series first appear; a
    series that coincides with none is in no group.
    """
    data = frame[[series, x, y]].dropna()
    if log:
        data = data[data[y] > 0].assign(**{y: np.log10(data.loc[data[y] > 0, y])})
    if data.empty:
        return []
    lo, hi = float(data[y].min()), float(data[y].max())
    span = math.ceil(hi) - math.floor(lo) if log else hi - min(lo, 0.0)
    tol = share * span if span > 0 else 0.0
    names = [str(n) for n in pd.unique(data[series])]
    curves = {
        str(n): g.groupby(x, sort=True)[y].mean() for n, g in data.groupby(series, sort=False)
    }
    numeric = pd.api.types.is_numeric_dtype(data[x])
    groups: list[list[str]] = []
    placed: set[str] = set()
    for i, a in enumerate(names):
        if a in placed:
            continue
        group = [a]
        for b in names[i + 1 :]:
            if b not in placed and _within(curves[a], curves[b], tol, numeric):
                group.append(b)
        if len(group) > 1:
            groups.append(group)
            placed.update(group)
    return groups


def _within(a: pd.Series, b: pd.Series, tol: float, numeric: bool) -> bool:
    """Return True when two curves (y by x) lie within ``tol`` of each other wherever both are
    drawn: at the x values they share, or, for numeric x, at every x of either inside the range
    both cover, reading the other by linear interpolation (two such points at least)."""
    if not numeric:
        both = pd.concat([a, b], axis=1, join="inner")
        return len(both) > 0 and bool(((both.iloc[:, 0] - both.iloc[:, 1]).abs() <= tol).all())
    xa, xb = a.index.to_numpy(dtype=float), b.index.to_numpy(dtype=float)
    lo, hi = max(xa.min(), xb.min()), min(xa.max(), xb.max())
    xs = np.union1d(xa, xb)
    xs = xs[(xs >= lo) & (xs <= hi)]
    if xs.size < 2:
        return False
    ya = np.interp(xs, xa, a.to_numpy(dtype=float))
    yb = np.interp(xs, xb, b.to_numpy(dtype=float))
    return bool((np.abs(ya - yb) <= tol + 1e-12).all())


def join_names(items: Sequence[str]) -> str:
    """Return 'a', 'a and b' or 'a, b and c'."""
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def coinciding_note(groups: list[list[str]], what: str = "lines") -> str:
    """Return the sentence that names the series drawn on top of each other, or ''."""
    if not groups:
        return ""
    parts = [join_names([f"“{n}”" for n in g]) for g in groups]
    verb = "coincide" if len(groups) == 1 else "coincide, as do"
    head = f"The {what} for {parts[0]} {verb}"
    rest = "" if len(groups) == 1 else " " + join_names(parts[1:])
    return f"{head}{rest}: one hides the other."


def with_notes(chart: alt.TopLevelMixin, *notes: str) -> alt.TopLevelMixin:
    """Attach sentences about the chart's data that its caption must carry (empty ones dropped)."""
    kept = [n for n in notes if n]
    if not kept:
        return chart
    meta = dict(chart.to_dict().get("usermeta") or {})
    meta[_NOTES] = [*meta.get(_NOTES, []), *kept]
    return chart.properties(usermeta=meta)


def notes(chart: alt.TopLevelMixin) -> list[str]:
    """Return the sentences attached to a chart by :func:`with_notes`."""
    meta = chart.to_dict().get("usermeta") or {}
    return list(meta.get(_NOTES, []))


def note_coinciding(
    chart: alt.TopLevelMixin,
    frame: pd.DataFrame,
    series: str,
    x: str,
    y: str,
    log: bool = True,
    what: str = "lines",
) -> alt.TopLevelMixin:
    """Attach a note naming the series of ``frame`` that coincide on the chart, if any."""
    return with_notes(chart, coinciding_note(coinciding(frame, series, x, y, log=log), what))


def chart_id(spec: dict) -> str:
    """Return a div id derived from the spec, so identical inputs give identical HTML."""
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    return f"kvo-chart-{digest[:16]}"


def responsive_spec(chart: alt.TopLevelMixin) -> dict:
    """Return the chart's spec sized to its container's width (a single or layered view)."""
    spec = chart.to_dict()
    if not any(k in spec for k in ("hconcat", "vconcat", "concat", "facet", "repeat")):
        spec["width"] = "container"
        spec["autosize"] = {"type": "fit-x", "contains": "padding"}
    return spec


def script_json(data: Any) -> str:
    """Return ``data`` as JSON that is safe inside a <script> element: no tag, comment or entity.

    ``<``, ``>`` and ``&`` occur only inside JSON strings, where their \\u escapes mean the same.
    """
    text = json.dumps(data, sort_keys=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def to_html(chart: alt.TopLevelMixin) -> str:
    """Return the chart as an HTML fragment that draws with the page's local Vega bundle."""
    spec = responsive_spec(chart)
    div = chart_id(spec)
    payload = script_json(spec)
    return (
        f'<div id="{div}" class="kvoffload-chart" role="img"></div>\n'
        '<script type="text/javascript">\n'
        "(function () {\n"
        f"  var spec = {payload};\n"
        "  function draw() {\n"
        f'    var el = document.getElementById("{div}");\n'
        '    if (!window.vegaEmbed) { el.textContent = "(chart: the local Vega bundle did not load)"; return; }\n'
        '    var own = spec.width === "container";\n'
        "    var asked = el.clientWidth > 0 ? el.clientWidth : 300;\n"
        "    if (own) { spec = Object.assign({}, spec, {width: asked}); }\n"
        '    window.vegaEmbed(el, spec, {actions: false, renderer: "svg"})\n'
        "      .then(function (result) { if (own) { follow(el, result.view, asked); } })\n"
        "      .catch(function (e) { console.error(e); });\n"
        "  }\n"
        # A container-sized chart takes its box's width here, and again whenever the box changes
        # width, one change at a time. Vega-Lite's own "container" width follows the window's
        # resize events only: a column that changes width after one (a sidebar sliding in as a
        # phone's page widens to a desktop's) left the chart as wide as the column was mid-way,
        # and two resizes close together could leave the plot as wide as the box with its axis
        # past it. A chart still wider than its box once drawn is laid out again (twice at most).
        "  function follow(el, view, asked) {\n"
        "    if (!window.ResizeObserver) { return; }\n"
        "    var busy = false, tries = 0;\n"
        "    function set(w) {\n"
        "      busy = true; asked = w;\n"
        "      var step = view.width() === w ? view.width(w + 1).runAsync() : Promise.resolve();\n"
        "      step.then(function () { return view.width(w).runAsync(); })\n"
        "        .then(function () { window.requestAnimationFrame(check); })\n"
        "        .catch(function (e) { busy = false; console.error(e); });\n"
        "    }\n"
        "    function check() {\n"
        "      busy = false;\n"
        "      var w = el.clientWidth, svg = el.querySelector('svg');\n"
        "      if (w > 0 && w !== asked) { tries = 0; set(w); return; }\n"
        "      if (w > 0 && svg && svg.getBoundingClientRect().width > w + 1 && tries < 2) { tries += 1; set(w); }\n"
        "    }\n"
        "    new ResizeObserver(function () { if (!busy) { check(); } }).observe(el);\n"
        "    window.requestAnimationFrame(check);\n"
        "  }\n"
        '  if (document.readyState === "complete") { draw(); } else { window.addEventListener("load", draw); }\n'
        "})();\n"
        "</script>"
    )


def caption_html(text: str) -> str:
    """Return caption text escaped for HTML, with `backticked` spans set as code."""
    parts = re.split(r"`([^`]+)`", text)
    return "".join(
        f"<code>{html.escape(p)}</code>" if i % 2 else html.escape(p) for i, p in enumerate(parts)
    )


def figure_html(chart: alt.TopLevelMixin, number: str, caption: str) -> str:
    """Return the chart in a numbered figure whose caption ends with the chart's own notes."""
    text = " ".join([caption.strip(), *notes(chart)]).strip()
    anchor = "figure-" + number.replace(".", "-")
    return (
        f'<figure class="kvoffload-figure" id="{anchor}">\n'
        f"{to_html(chart)}\n"
        f'<figcaption><span class="kvoffload-figure-number">Figure {html.escape(number)}:</span> '
        f"{caption_html(text)}</figcaption>\n"
        "</figure>"
    )


class Embedded:
    """A chart that displays in a notebook as offline HTML (and as the spec for other front ends)."""

    def __init__(self, chart: alt.TopLevelMixin, number: str | None = None, caption: str = ""):
        self.chart = chart
        self.number = number
        self.caption = caption

    def html(self) -> str:
        """Return the chart's HTML: a numbered figure when it has a number, else the chart alone."""
        if self.number is None:
            return to_html(self.chart)
        return figure_html(self.chart, self.number, self.caption)

    def _repr_html_(self) -> str:
        return self.html()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict:
        label = f"Figure {self.number}: " if self.number else ""
        return {
            "text/html": self.html(),
            "text/plain": f"<chart {chart_id(responsive_spec(self.chart))}> {label}{self.caption}".strip(),
        }


def show(chart: alt.TopLevelMixin) -> Embedded:
    """Wrap a chart for display in a chapter (offline, stable ids), without a caption."""
    return Embedded(chart)


class Figures:
    """A chapter's numbered figures: ``Figure <chapter>.<n>``, numbered in the order first shown.

    A figure is known by its name, so running its cell again keeps its number.
    """

    def __init__(self, chapter: int):
        self.chapter = chapter
        self.names: list[str] = []

    def number(self, name: str) -> str:
        """Return the figure's number, giving the next one to a name not seen before."""
        if name not in self.names:
            self.names.append(name)
        return f"{self.chapter}.{self.names.index(name) + 1}"

    def show(self, name: str, chart: alt.TopLevelMixin, caption: str) -> Embedded:
        """Return the chart as the chapter's next numbered figure with ``caption`` under it."""
        if not caption.strip():
            raise ValueError(f"figure {name!r} needs a caption saying what to look at")
        return Embedded(chart, self.number(name), caption)


ROW_STEP = 44  # px per labelled row: the label on top, the marks below it
ROW_LABEL = (
    "kvo_row_label"  # the name (and SVG class) of the row labels' layer: the page colours it
)


def labelled_rows(field: str, order: Sequence[str]) -> tuple[alt.Y, alt.Chart]:
    """Return a y encoding for named rows and a layer that writes each name above its row.

    Long names (engines, links) then use the chart's whole width instead of a y axis that
    squeezes the plot on a narrow screen. Layer the returned chart over one with the rows' data.
    """
    y = alt.Y(
        f"{field}:N",
        sort=list(order),
        title=None,
        axis=alt.Axis(labels=False, ticks=False, domain=False, grid=True),
        scale=alt.Scale(type="band", paddingInner=0, paddingOuter=0),
        bandPosition=0.68,
    )
    names = pd.DataFrame({field: list(order)})
    text = (
        alt.Chart(names)
        .mark_text(align="left", baseline="top", dx=2, dy=3, fontSize=11, limit=LABEL_LIMIT)
        .encode(
            y=alt.Y(f"{field}:N", sort=list(order), bandPosition=0),
            x=alt.value(0),
            text=f"{field}:N",
        )
        .properties(name=ROW_LABEL)
    )
    return y, text


WRAP_CHARS = 38  # a legend line of 11 px text this long fits a 360 px screen beside its symbol


def wrap_text(text: str, chars: int = WRAP_CHARS) -> list[str]:
    """Return ``text`` broken at spaces into lines of at most ``chars`` characters (a longer word
    keeps a line to itself)."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= chars:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines or [text]


def wrapped_labels(values: Sequence[str], chars: int = WRAP_CHARS) -> str:
    """Return a Vega ``labelExpr`` that writes each long label in ``values`` on several lines."""
    long = {str(v): wrap_text(str(v), chars) for v in values if len(str(v)) > chars}
    if not long:
        return "datum.label"
    return f"({json.dumps(long, ensure_ascii=False)})[datum.label] || datum.label"


# a time axis in milliseconds that spans many decades reads in the unit of each tick
MS_LABELS = (
    "datum.value >= 1000 ? format(datum.value / 1000, '~g') + ' s'"
    " : datum.value >= 1 ? format(datum.value, '~g') + ' ms'"
    " : datum.value >= 0.001 ? format(datum.value * 1000, '~g') + ' µs'"
    " : format(datum.value * 1e6, '~g') + ' ns'"
)
