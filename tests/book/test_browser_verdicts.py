"""In headless Chromium: each per-profile page shows one verdict box, under its title, whose
numbers are the package's for that profile, and the box fits a 390 px screen."""

from __future__ import annotations

import pytest

from kvoffload.bookbuild.profiles import REFERENCE
from kvoffload.bookbuild.runner import chapters, per_profile
from kvoffload.studies import verdict
from tests.support.browser import open_page
from tests.support.paths import BOOK_PROFILES
from tests.support.verdicts import assert_box_shows, chapter_verdict

pytestmark = pytest.mark.slow


def _pages(root):
    every = [c for c in chapters(root) if per_profile(c)]
    out = [(f"book/generated/{p}/{c.name}.html", p, c) for p in BOOK_PROFILES for c in every]
    out += [
        ("book/intro.html" if p == REFERENCE else f"book/generated/{p}/index.html", p, None)
        for p in BOOK_PROFILES
    ]
    return out


def test_each_page_shows_the_package_s_verdict_in_the_browser(browser, site, monkeypatch):
    root, base = site
    for rel, pid, chapter in _pages(root):
        page, errors, offhost = open_page(browser, f"{base}/{rel}")
        page.set_viewport_size({"width": 390, "height": 844})
        boxes = page.locator(".verdict")
        assert boxes.count() == 1, rel
        box = boxes.first
        assert box.is_visible(), rel
        want = (
            verdict.verdict(pid) if chapter is None else chapter_verdict(chapter, pid, monkeypatch)
        )
        assert_box_shows(box.evaluate("el => el.outerHTML"), want)
        # the box comes right after the page's heading and fits a phone's width
        order = page.evaluate(
            "() => { const h = document.querySelector('main h1'), v = document.querySelector('.verdict');"
            " return h && (h.compareDocumentPosition(v) & Node.DOCUMENT_POSITION_FOLLOWING) > 0; }"
        )
        assert order, rel
        assert box.evaluate("el => el.scrollWidth <= el.clientWidth + 1"), rel
        assert not errors and not offhost, (rel, errors, offhost)
        page.close()
