"""The sidebars on a phone (390 px, touch): ☰ opens the navigation drawer on every page type and
its links go to other pages; the contents button opens a chapter's "On this page" drawer. Served
and from file://, offline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.browser import Tab

pytestmark = pytest.mark.slow

PHONE = {"viewport": {"width": 390, "height": 844}, "has_touch": True, "is_mobile": True}
CHAPTER = "book/generated/article-reference/03_decode_timing.html"
# the index of the first link to another page (the page's own link may read "#")
_OTHER_PAGE = "as => as.findIndex(a => a.href.split('#')[0] !== location.href.split('#')[0])"
PAGES = ["book/intro.html", CHAPTER, "book/generated/machines.html", "book/calculator.html"]


def _calculator_links(html: Path) -> list[str]:
    """Return the pages the standalone calculator links back to, a redirect followed."""
    text = (html / "calculator.html").read_text(encoding="utf-8")
    pages = []
    for href in re.findall(r'<a [^>]*href="([^"#?]+\.html)"', text):
        redirect = re.search(
            r'http-equiv="Refresh" content="0; url=([^"]+)"', (html / href).read_text()
        )
        pages.append(redirect.group(1) if redirect else href)
    return pages


def _base(site, where: str) -> str:
    """Return the site's base URL: the local server's, or the built folder's file:// URL."""
    root, served = site
    return served if where == "served" else (root / "_build" / "html").as_uri()


def _tap_open(page, toggle: str, dialog: str):
    """Tap the one visible ``toggle``; return the drawer ``dialog``, checked open and on screen."""
    button = page.locator(f"{toggle}:visible")
    assert button.count() == 1, f"one visible {toggle}"
    button.tap()
    drawer = page.locator(dialog)
    drawer.wait_for(state="visible", timeout=5000)
    assert drawer.evaluate("d => d.open"), f"{dialog} did not open"
    # the drawer slides in: wait until it lies inside the viewport, then measure it
    page.wait_for_function(
        "d => { const r = d.getBoundingClientRect(); return r.left >= -1 && r.right <= innerWidth + 1; }",
        arg=drawer.element_handle(),
        timeout=5000,
    )
    box = drawer.bounding_box()
    assert box and box["width"] > 100 and box["height"] > 100, box
    assert box["x"] >= -1 and box["x"] + box["width"] <= 391 and box["y"] >= -1, box
    return drawer


@pytest.mark.parametrize("where", ["served", "file"])
def test_the_menu_opens_the_navigation_drawer_on_every_page_type(browser, site, where):
    base = _base(site, where)
    pages = [*PAGES, *_calculator_links(site[0] / "_build" / "html")]
    assert "book/intro.html" in pages[len(PAGES) :], "the calculator links back to the intro"
    with Tab(browser, **PHONE) as tab:  # one tab taps through every page, as a reader's would
        for name in dict.fromkeys(pages):
            page, errors, offhost = tab.open(f"{base}/{name}")
            drawer = _tap_open(page, ".primary-toggle", "#pst-primary-sidebar-modal")
            links = drawer.locator("nav.bd-links a.reference.internal")
            elsewhere = links.evaluate_all(_OTHER_PAGE)
            assert elsewhere >= 0, f"{name}: no link to another page in the drawer"
            link = links.nth(elsewhere)
            assert link.is_visible(), name
            target = link.evaluate("a => a.href")
            link.tap()
            page.wait_for_url(target, timeout=10000)
            assert page.locator("h1").count() >= 1, (name, target)
            assert not errors and not offhost, (name, errors, offhost)


@pytest.mark.parametrize("where", ["served", "file"])
def test_the_contents_button_opens_a_chapters_on_this_page_drawer(browser, site, where):
    with Tab(browser, **PHONE) as tab:
        page, errors, offhost = tab.open(f"{_base(site, where)}/{CHAPTER}")
        drawer = _tap_open(page, ".secondary-toggle", "#pst-secondary-sidebar-modal")
        assert drawer.locator("a.nav-link:visible").count() >= 3, (
            "the chapter's sections are listed"
        )
        assert not errors and not offhost, (errors, offhost)
