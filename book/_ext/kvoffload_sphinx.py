"""Sphinx tweaks for an offline book: drop the unused Thebe scripts, give the theme a mode, load
the heavy scripts only where a page uses them, add the fallback fonts.

Jupyter Book 1 always loads sphinx-thebe, which declares a constant pointing at a CDN, twice on
some builds ("Identifier 'THEBE_JS_URL' has already been declared" in the console). The book
theme leaves <html data-mode> empty, which the PyData theme reports as a console error.

The Vega bundle (0.9 MB) loads only on a page that draws a chart, and MathJax (2.1 MB) only on a
page whose own body holds math: Sphinx adds MathJax to a page whose toctree children have math,
which put it on the intro and every index page.
"""

from __future__ import annotations

import re
from pathlib import Path

_MODE = 'document.documentElement.dataset.mode = localStorage.getItem("mode") || "light";'
VEGA = "vendor/vega-bundle.js"
FONTS_CSS = "fonts/kvoffload-fonts.css"
# a chart (report.charting.to_html) or any page that calls Vega-Embed itself
_USES_VEGA = re.compile(r"kvoffload-chart|vegaEmbed|data-kvoffload-vega")
# Sphinx's math nodes render as <span|div class="math notranslate nohighlight">\(...\)</...>
_HAS_MATH = re.compile(r"""class=["'][^"']*\bmath\b|\\\(|\\\[""")


def _drop_thebe(app, pagename, templatename, context, doctree):
    files = context.get("script_files")
    if not files:
        return
    kept = []
    for f in files:
        body = str(getattr(f, "attributes", {}).get("body", ""))
        if "thebe" in str(f).lower() or "THEBE_JS_URL" in body:
            continue
        kept.append(f)
    files[:] = kept


def uses_vega(body: str) -> bool:
    """Return True when a page's body draws a Vega chart."""
    return bool(_USES_VEGA.search(body))


def has_math(body: str) -> bool:
    """Return True when a page's body holds math for MathJax to typeset."""
    return bool(_HAS_MATH.search(body))


def _page_scripts(app, pagename, templatename, context, doctree):
    """Add Vega to pages with a chart; drop MathJax from pages without math of their own."""
    files = context.get("script_files")
    if files is None:
        return
    body = str(context.get("body", ""))
    if uses_vega(body):
        app.builder.add_js_file(VEGA, priority=800)  # this page only: Sphinx resets the list
    if not has_math(body):
        mathjax = {app.config.mathjax_path, "_static/" + app.config.mathjax_path}
        files[:] = [
            f
            for f in files
            if getattr(f, "filename", f) not in mathjax
            and not str(getattr(f, "attributes", {}).get("body", "")).startswith("window.MathJax")
        ]


def _add_fonts(app, config):
    """Link the fallback fonts' stylesheet when a static folder holds it."""
    if any((Path(app.confdir) / d / FONTS_CSS).is_file() for d in config.html_static_path):
        app.add_css_file(FONTS_CSS)


def setup(app):
    app.connect("config-inited", _add_fonts)
    app.connect("html-page-context", _drop_thebe, priority=900)
    app.connect("html-page-context", _page_scripts, priority=950)
    app.add_js_file(None, body=_MODE, priority=1)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
