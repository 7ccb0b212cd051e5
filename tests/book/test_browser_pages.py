"""Every page of the built site in headless Chromium, each loaded once on a 390 px phone (one tab
reads them all, as a reader's would), then
narrowed to 360 px and widened to a 1440 px desktop (a page load is the expensive part): on the
phones no page scrolls sideways and every table is held in a scrolling box with its key column in
view; at every width each chart draws marks inside one numbered caption, with a clean console, and
fits its container; each per-profile page shows one verdict box under its title whose numbers are
the package's for that profile, and the box fits the phone's screen."""

from __future__ import annotations

import pytest

from kvoffload.bookbuild.profiles import REFERENCE
from kvoffload.bookbuild.runner import chapters, per_profile
from kvoffload.studies import verdict
from tests.support.pages import (
    DESKTOP,
    LAYOUT_JS,
    NARROWEST,
    PHONE,
    chart_pages,
    check_charts,
    check_fit,
    check_marks,
    load,
    reader,
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


# the pages in three shares, each a test of its own (the two workers take one each)
SHARES = {
    **{p: lambda rel, p=p: rel.startswith(f"book/generated/{p}/") for p in BOOK_PROFILES},
    "the rest": lambda rel: not any(rel.startswith(f"book/generated/{p}/") for p in BOOK_PROFILES),
}


@pytest.mark.parametrize("share", list(SHARES))
def test_every_page_fits_a_phone_and_a_desktop_with_its_charts_tables_and_verdict(
    browser, site, monkeypatch, share
):
    root, base = site
    every = site_pages(root)
    pages = [rel for rel in every if SHARES[share](rel)]
    charted, boxed = set(chart_pages(root)), _verdict_pages(root)
    assert len(every) >= 10 and len(charted) >= 8 and set(boxed) <= set(every) and pages
    assert sum(len([r for r in every if keep(r)]) for keep in SHARES.values()) == len(every)
    # the chapters built once (under the reference profile's folder) are among the pages read
    once = {
        f"book/generated/{REFERENCE}/{c.name}.html" for c in chapters(root) if not per_profile(c)
    }
    assert once and once <= set(every)
    wrong: dict[str, list[str]] = {}
    tab = reader(browser)
    for rel in pages:
        page, messages, offhost = load(tab, f"{base}/{rel}", PHONE)
        assert page.locator("h1").count() >= 1, rel  # every page has its title
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
        if rel in charted:
            resize(page, DESKTOP)
            check_fit(page, rel)
            check_marks(page, rel)
        assert not messages and not offhost, (rel, messages, offhost)
    tab.close()
    assert not wrong, wrong
