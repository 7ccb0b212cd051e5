"""Sphinx tweaks for an offline book: drop the unused Thebe scripts, give the theme a mode.

Jupyter Book 1 always loads sphinx-thebe, which declares a constant pointing at a CDN, twice on
some builds ("Identifier 'THEBE_JS_URL' has already been declared" in the console). The book
theme leaves <html data-mode> empty, which the PyData theme reports as a console error.
"""

from __future__ import annotations

_MODE = 'document.documentElement.dataset.mode = localStorage.getItem("mode") || "light";'


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


def setup(app):
    app.connect("html-page-context", _drop_thebe, priority=900)
    app.add_js_file(None, body=_MODE, priority=1)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
