"""Every page of the built site on a phone, in headless Chromium, each loaded once at 390 px and
then narrowed to 360 px: no page scrolls sideways and every table is held in a scrolling box with
its key column in view; every chart draws marks inside one numbered caption, with a clean console,
and fits its container at both widths; each per-profile page shows one verdict box under its title
whose numbers are the package's for that profile, and the box fits the screen."""

from __future__ import annotations

import pytest

from kvoffload.bookbuild.profiles import REFERENCE
from kvoffload.bookbuild.runner import chapters, per_profile
from kvoffload.studies import verdict
from tests.support.pages import (
    LAYOUT_JS,
    NARROWEST,
    PHONE,
    chart_pages,
    check_charts,
    check_fit,
    load,
    resize,
    site_pages,
)
from tests.support.paths import BOOK_PROFILES
from tests.support.verdicts import assert_box_shows, chapter_verdict

pytestmark = pytest.mark.slow

# the box comes right after the page's heading
BOX_AFTER_TITLE_JS = (
    "() => { const h = document.querySelector('main h1'), v = document.querySelector('.verdict');"
    " return h && (h.compareDocumentPosition(v) & Node.DOCUMENT_POSITION_FOLLOWING) > 0; }"
)


def _verdict_pages(root):
    """Return {page: (profile, chapter or None)} for the pages that open with a verdict box."""
    every = [c for c in chapters(root) if per_profile(c)]
    out = {f"book/generated/{p}/{c.name}.html": (p, c) for p in BOOK_PROFILES for c in every}
    for p in BOOK_PROFILES:
        out["book/intro.html" if p == REFERENCE else f"book/generated/{p}/index.html"] = (p, None)
    return out


def _check_verdict(page, rel, pid, chapter, monkeypatch) -> None:
    boxes = page.locator(".verdict")
    assert boxes.count() == 1, rel
    box = boxes.first
    assert box.is_visible(), rel
    want = verdict.verdict(pid) if chapter is None else chapter_verdict(chapter, pid, monkeypatch)
    assert_box_shows(box.evaluate("el => el.outerHTML"), want)
    assert page.evaluate(BOX_AFTER_TITLE_JS), rel
    assert box.evaluate("el => el.scrollWidth <= el.clientWidth + 1"), rel


def test_every_page_fits_a_phone_with_its_charts_tables_and_verdict(browser, site, monkeypatch):
    root, base = site
    pages, charted, boxed = site_pages(root), set(chart_pages(root)), _verdict_pages(root)
    assert len(pages) >= 10 and len(charted) >= 8 and set(boxed) <= set(pages)
    wrong: dict[str, list[str]] = {}
    for rel in pages:
        page, messages, offhost = load(browser, f"{base}/{rel}", PHONE)
        if rel in charted:
            check_charts(page, rel, messages, offhost)
            check_fit(page, rel)
        if rel in boxed:
            _check_verdict(page, rel, *boxed[rel], monkeypatch)
        if problems := page.evaluate(LAYOUT_JS):
            wrong[f"{rel} at {PHONE['width']} px"] = problems
        resize(page, NARROWEST)
        if rel in charted:
            check_fit(page, rel)
        if problems := page.evaluate(LAYOUT_JS):
            wrong[f"{rel} at {NARROWEST['width']} px"] = problems
        assert not messages and not offhost, (rel, messages, offhost)
        page.context.close()
    assert not wrong, wrong
