"""Sphinx tweaks for an offline book: drop the unused Thebe scripts, give the theme a mode, load
the heavy scripts only where a page uses them, add the fallback fonts, make the sidebar toggles
work on a phone.

Jupyter Book 1 always loads sphinx-thebe, which declares a constant pointing at a CDN, twice on
some builds ("Identifier 'THEBE_JS_URL' has already been declared" in the console). The book
theme leaves <html data-mode> empty, which the PyData theme reports as a console error.

The Vega bundle (0.9 MB) loads only on a page that draws a chart, and MathJax (2.1 MB) only on a
page whose own body holds math: Sphinx adds MathJax to a page whose toctree children have math,
which put it on the intro and every index page.

Titles reach pages unescaped in two places, so a profile's name could run script: the book theme
prints ``root_title`` and ``pagetitle`` raw, and Sphinx's search sets section titles from the
index with ``innerHTML``. Both are escaped here.

The theme pair renders each sidebar toggle twice and binds only the first, a hidden one
(pydata-sphinx-theme issue 2451): ``SIDEBARS`` hands a click on the visible one to it.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

_MODE = 'document.documentElement.dataset.mode = localStorage.getItem("mode") || "light";'
VEGA = "vendor/vega-bundle.js"
FONTS_CSS = "fonts/kvoffload-fonts.css"
SIDEBARS = "kvoffload-sidebars.js"
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


# docutils' own escaping of text in HTML (HTMLTranslator.encode): a title escaped here matches
# the one Sphinx renders for the page, so search still boosts document titles
_HTML_TEXT = {
    ord("&"): "&amp;",
    ord("<"): "&lt;",
    ord('"'): "&quot;",
    ord(">"): "&gt;",
    ord("@"): "&#64;",
}


def _escape_theme_titles(app, pagename, templatename, context, doctree):
    """Escape the titles sphinx-book-theme passes to its templates as raw text (sidebar, print).

    The theme sets ``root_title`` and ``pagetitle`` from ``astext()`` and its templates print
    them without ``|e`` (Sphinx's Jinja does not autoescape), so a title holding ``<script>``
    (a profile's name) would run. Runs after the theme's handler (priority 500).
    """
    for key in ("root_title", "pagetitle"):
        if isinstance(context.get(key), str):
            context[key] = context[key].translate(_HTML_TEXT)


def _escape_search_titles() -> None:
    """Escape section titles in the search index, which searchtools.js shows with innerHTML.

    Sphinx 7.4 stores document titles rendered (escaped) but section titles (``alltitles``) as
    raw text, and sets a result's link with ``innerHTML``. An incremental build reads the last
    index back (``load``): titles this wrote escaped (marked ``_ALLTITLES_ESCAPED``) are
    unescaped there, so an unchanged page's titles are not escaped twice.
    """
    from sphinx.search import IndexBuilder

    if getattr(IndexBuilder.freeze, "_kvoffload", False):
        return
    freeze, load = IndexBuilder.freeze, IndexBuilder.load

    def escaped(self: IndexBuilder) -> dict[str, Any]:
        data = freeze(self)
        data["alltitles"] = {k.translate(_HTML_TEXT): v for k, v in data["alltitles"].items()}
        data[_ALLTITLES_ESCAPED] = True
        return data

    def unescaped(self: IndexBuilder, stream: Any, format: Any) -> None:
        seen = _Seen(self.formats[format] if isinstance(format, str) else format)
        load(self, stream, seen)
        if isinstance(seen.frozen, dict) and seen.frozen.get(_ALLTITLES_ESCAPED):
            self._all_titles = {
                doc: [(html.unescape(title), anchor) for title, anchor in titles]
                for doc, titles in self._all_titles.items()
            }

    escaped._kvoffload = True  # type: ignore[attr-defined]
    IndexBuilder.freeze = escaped  # type: ignore[method-assign]
    IndexBuilder.load = unescaped  # type: ignore[method-assign]


_ALLTITLES_ESCAPED = "kvoffload_alltitles_escaped"


def _reindex_whole_documents() -> None:
    """Make an incremental search index equal a clean one: a re-read page's old words go.

    Sphinx 7.4 prunes a changed page from the index it read back but keeps each word it had,
    now naming no page (an empty entry a clean build does not write), and it adds the page's
    words again without removing any: both are cleared here before a page is indexed.
    """
    from sphinx.search import IndexBuilder

    if getattr(IndexBuilder.feed, "_kvoffload", False):
        return
    feed = IndexBuilder.feed

    def refeed(self: IndexBuilder, docname: str, *args: Any, **kwargs: Any) -> None:
        for mapping in (self._mapping, self._title_mapping):
            # the page's own words, and words whose pages were all pruned before re-reading
            for word in [w for w, docs in mapping.items() if docname in docs or not docs]:
                mapping[word].discard(docname)
                if not mapping[word]:
                    del mapping[word]
        feed(self, docname, *args, **kwargs)

    refeed._kvoffload = True  # type: ignore[attr-defined]
    IndexBuilder.feed = refeed  # type: ignore[method-assign]


_FORMATTED = "kvoffload_formatted_entries"  # the build environment's attribute (pickled with it)
_MEMO: dict[str, dict] = {"previous": {}, "current": {}}


def _entry_key(style: Any, label: str, entry: Any) -> tuple | None:
    """Return everything a pybtex style's formatting of ``entry`` depends on (None: unknown)."""
    people = tuple(
        (
            role,
            tuple(
                (
                    tuple(p.first_names),
                    tuple(p.middle_names),
                    tuple(p.prelast_names),
                    tuple(p.last_names),
                    tuple(p.lineage_names),
                )
                for p in persons
            ),
        )
        for role, persons in entry.persons.items()
    )
    fields = tuple(entry.fields.items())
    if not all(isinstance(v, str) for _, v in fields):
        return None
    plugins = (style.name_style, style.label_style, style.sorting_style)
    kinds = tuple(f"{type(x).__module__}.{type(x).__qualname__}" for x in (style, *plugins))
    options = (style.abbreviate_names, style.min_crossrefs)
    return (*kinds, *options, label, entry.key, entry.type, fields, people)


def _remember_formatted_entries() -> None:
    """Format a bibliography entry once, not again on every build.

    sphinxcontrib-bibtex 2.7 formats every cited entry with pybtex (twice: the list and the
    tooltip) whenever any page changed, a prose edit included: most of an incremental build's
    time beyond Sphinx's own. A formatted entry depends only on the style and the entry's
    fields and people, so it is kept under those in the build environment (pickled with it) and
    reused; the entries formatted in one build are all the next one keeps.
    """
    from pybtex.style.formatting import BaseStyle

    if getattr(BaseStyle.format_entry, "_kvoffload", False):
        return
    format_entry = BaseStyle.format_entry

    def remembered(self: Any, label: str, entry: Any, bib_data: Any = None) -> Any:
        key = None if bib_data is not None else _entry_key(self, label, entry)
        if key is None:  # cross-references or rich fields: formatted as usual
            return format_entry(self, label, entry, bib_data)
        current = _MEMO["current"]
        if key not in current:
            found = _MEMO["previous"].get(key)
            current[key] = found if found is not None else format_entry(self, label, entry)
        return current[key]

    remembered._kvoffload = True  # type: ignore[attr-defined]
    BaseStyle.format_entry = remembered  # type: ignore[method-assign]


def _take_formatted_entries(app: Any) -> None:
    """Start a build with the last build's formatted entries and an empty set for this one."""
    _MEMO["previous"] = getattr(app.env, _FORMATTED, None) or {}
    _MEMO["current"] = {}
    setattr(app.env, _FORMATTED, _MEMO["current"])


class _Seen:
    """A search index format that keeps the last data it loaded."""

    def __init__(self, fmt: Any) -> None:
        self.fmt = fmt
        self.frozen: Any = None

    def load(self, stream: Any) -> Any:
        """Load with the wrapped format and keep the result."""
        self.frozen = self.fmt.load(stream)
        return self.frozen


def setup(app):
    _escape_search_titles()
    _reindex_whole_documents()
    _remember_formatted_entries()
    app.connect("builder-inited", _take_formatted_entries)
    app.connect("html-page-context", _escape_theme_titles, priority=600)
    app.connect("config-inited", _add_fonts)
    app.connect("html-page-context", _drop_thebe, priority=900)
    app.connect("html-page-context", _page_scripts, priority=950)
    app.add_js_file(None, body=_MODE, priority=1)
    app.add_js_file(SIDEBARS)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
