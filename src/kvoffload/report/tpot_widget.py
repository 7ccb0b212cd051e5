"""Chapter 03's try-it widget: TPOT against context, recomputed in the browser as sliders move.

The widget is one HTML fragment: the step model's one browser mirror (``calculator/model.js``,
the calculator page's own) and its chart, inlined, over ``studies.calculator_data.setup_data``'s
export of one setup. Sliders set the link's bandwidth, the batch and the context; every TPOT it
shows is ``decode.tpot`` for that setup, computed in the page. It loads nothing and needs no
kernel, so it works offline and from ``file://``.
"""

from __future__ import annotations

import hashlib
from html import escape
from typing import Any

from kvoffload.model import decode
from kvoffload.report.calculator_page import MODEL_MODULES, modules_script, script_json
from kvoffload.report.charting import LIMIT_COLOR, PALETTE, caption_html
from kvoffload.studies import calculator_data

WIDGET_MODULES = (*MODEL_MODULES, "widget.js")

_STYLE = f"""
.kvo-tpot {{ max-width: 100%; }}
.kvo-tpot-controls {{ display: grid; grid-template-columns: repeat(auto-fit, minmax(15rem, 1fr));
  gap: 0.25rem 1rem; margin: 0 0 0.4rem; }}
.kvo-tpot-controls label {{ display: grid; grid-template-columns: 1fr auto; align-items: center;
  gap: 0 0.5rem; font-size: 0.9em; min-width: 0; }}
.kvo-tpot-controls input {{ grid-column: 1 / -1; width: 100%; margin: 0; }}
.kvo-tpot-controls output {{ font-variant-numeric: tabular-nums; font-weight: 600; }}
.kvo-tpot-readout {{ margin: 0.2rem 0 0.4rem; font-size: 0.95em; }}
.kvo-tpot-chart {{ width: 100%; min-height: 240px; }}
.kvo-tpot-chart svg {{ display: block; max-width: 100%; height: auto; font-size: 12px; }}
.kvo-tpot .kvo-grid line {{ stroke: currentColor; stroke-opacity: 0.15; stroke-width: 1; }}
.kvo-tpot .kvo-grid text, .kvo-tpot .kvo-axis-title {{ fill: currentColor; fill-opacity: 0.75; }}
.kvo-tpot .kvo-line-a {{ stroke: {PALETTE[0]}; stroke-width: 2.5; }}
.kvo-tpot .kvo-line-b {{ stroke: {PALETTE[1]}; stroke-width: 2; }}
.kvo-tpot .kvo-nofit {{ stroke-dasharray: 5 4; opacity: 0.6; }}
.kvo-tpot .kvo-line-a-dot {{ fill: {PALETTE[0]}; }}
.kvo-tpot .kvo-line-b-dot {{ fill: {PALETTE[1]}; }}
.kvo-tpot .kvo-budget {{ stroke: {LIMIT_COLOR}; stroke-width: 1.5; stroke-dasharray: 6 4; }}
.kvo-tpot .kvo-budget-label {{ fill: {LIMIT_COLOR}; }}
.kvo-tpot-key {{ display: flex; flex-wrap: wrap; gap: 0 1rem; margin: 0.2rem 0 0; font-size: 0.85em; }}
.kvo-tpot-key span::before {{ content: ""; display: inline-block; width: 1.4em; height: 0;
  vertical-align: middle; margin-right: 0.35em; border-top: 3px solid var(--kvo-key); }}
"""


def _slider(widget: str, key: str, label: str, low: int) -> str:
    """Return one slider (``widget``-``key``) and the output that shows the value it stands for."""
    ident = f"{widget}-{key}"
    return (
        f'<label for="{ident}"><span>{escape(label)}</span>'
        f'<output data-kvo="{key}" for="{ident}"></output>'
        f'<input id="{ident}" data-kvo="{key}_slider" type="range" min="{low}" step="1"></label>'
    )


class Widget:
    """The try-it widget as a notebook output: a numbered figure of offline HTML."""

    def __init__(self, body: str, number: str, caption: str):
        self.body = body
        self.number = number
        self.caption = caption

    def html(self) -> str:
        """Return the widget in a numbered figure with its caption under it."""
        anchor = "figure-" + self.number.replace(".", "-")
        return (
            f'<figure class="kvoffload-figure" id="{anchor}">\n{self.body}\n'
            f'<figcaption><span class="kvoffload-figure-number">Figure {escape(self.number)}:</span> '
            f"{caption_html(self.caption)}</figcaption>\n</figure>"
        )

    def _repr_html_(self) -> str:
        return self.html()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict:
        return {"text/html": self.html(), "text/plain": f"Figure {self.number}: {self.caption}"}


def widget_html(
    setup: decode.Setup, context: int, batch: int = 1, budget_ms: float = 50.0, generate: int = 1
) -> str:
    """Return the widget's HTML for ``setup``: the sliders start at its link, ``batch``, ``context``.

    TPOT is the mean step over ``generate`` tokens after the context, as ``decode.tpot`` gives it,
    with no overlap and with perfect overlap, against ``budget_ms``.
    """
    data = script_json(calculator_data.setup_data(setup))
    view = script_json(
        {"context": int(context), "batch": int(batch), "generate": int(generate),
         "budget_ms": float(budget_ms)}
    )  # fmt: skip
    ident = "kvo-tpot-" + hashlib.sha256((data + view).encode()).hexdigest()[:12]
    key = "".join(
        f'<span style="--kvo-key: {color}">{name}</span>'
        for color, name in ((PALETTE[0], "no overlap"), (PALETTE[1], "perfect overlap"))
    )
    return f"""<div class="kvo-tpot" id="{ident}">
<style>{_STYLE}</style>
<div class="kvo-tpot-controls">
{_slider(ident, "link", "link bandwidth, each way", 0)}
{_slider(ident, "batch", "batch (requests)", 1)}
{_slider(ident, "context", "context", 0)}
</div>
<p class="kvo-tpot-readout" aria-live="polite">TPOT: <strong data-kvo="tpot_none_ms"></strong>
with no overlap, <strong data-kvo="tpot_perfect_ms"></strong> with perfect overlap:
<span data-kvo="verdict"></span>.<span data-kvo="fits"></span></p>
<div class="kvo-tpot-chart" data-kvo="chart"></div>
<p class="kvo-tpot-key">{key}</p>
<script>
{modules_script(WIDGET_MODULES)}
</script>
<script>
window.KvoTpotWidget.mount(document.getElementById("{ident}"), {data}, {view});
</script>
</div>"""


def figure(
    number: str,
    setup: decode.Setup,
    caption: str,
    *,
    context: int,
    batch: int = 1,
    budget_ms: float = 50.0,
    generate: int = 1,
) -> Widget:
    """Return the widget as figure ``number`` (``charting.Figures.number``) with ``caption``."""
    if not caption.strip():
        raise ValueError(f"figure {number} needs a caption saying what to look at")
    return Widget(widget_html(setup, context, batch, budget_ms, generate), number, caption)
