"""The site's charts: the chapters that promise one have one, and in dark mode, in headless
Chromium, a chart sits on the page's own background. (Every chart drawn at a phone's and a
desktop's width: test_browser_phone.py.)"""

from __future__ import annotations

import re

import pytest

from kvoffload.bookbuild.runner import chapters, per_profile
from tests.support.pages import DESKTOP, chart_pages, load, reader
from tests.support.paths import BOOK_PROFILES

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def warm(browser):
    """Let the browser make its one favicon request (the site has none) before the checks."""
    page = browser.new_page()
    page.goto("about:blank")
    page.close()
    return browser


def test_the_site_has_charts_on_the_chapters_that_promise_them(site):
    root, _ = site
    pages = chart_pages(root)
    assert len(pages) >= 8, pages


def test_every_per_profile_chapter_has_a_chart(site):
    root, _ = site
    html = root / "_build" / "html"
    every = [c for c in chapters(root) if per_profile(c)]
    pages = [f"book/generated/{p}/{c.name}.html" for p in BOOK_PROFILES for c in every]
    bare = [rel for rel in pages if "kvoffload-chart" not in (html / rel).read_text()]
    assert not bare, f"per-profile chapters without a chart: {bare}"


def test_dark_mode_draws_charts_on_the_page_background(warm, site):
    _, base = site
    tab = reader(warm, dark=True)
    page, messages, _ = load(
        tab, f"{base}/book/generated/article-reference/03_decode_timing.html", DESKTOP
    )
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    result = page.evaluate(
        """() => {
      const clear = c => c === 'transparent' || c === 'rgba(0, 0, 0, 0)';
      const body = getComputedStyle(document.body).backgroundColor;
      const text = getComputedStyle(document.documentElement)
        .getPropertyValue('--pst-color-text-base').trim();
      return [...document.querySelectorAll('.kvoffload-chart')].map(el => {
        let node = el, behind = null;
        while (node && node !== document.documentElement) {
          const bg = getComputedStyle(node).backgroundColor;
          if (!clear(bg)) { behind = bg; break; }
          node = node.parentElement;
        }
        const label = el.querySelector('svg .role-axis-label text');
        const back = el.querySelector('svg .background');
        return {behind: behind || body, body,
                label: label && getComputedStyle(label).fill,
                back: back ? getComputedStyle(back).fill : 'none', text};
      });
    }"""
    )
    assert result, "no chart on the page"
    for i, r in enumerate(result):
        assert r["behind"] == r["body"], f"chart {i} sits on {r['behind']}, the page on {r['body']}"
        assert r["back"] in ("none", "transparent", "rgba(0, 0, 0, 0)"), (i, r)
        # the axis labels take the theme's (light) text colour, not Vega's black
        assert r["label"] not in ("rgb(0, 0, 0)", None), (i, r)
        channels = [int(v) for v in re.findall(r"\d+", r["label"])[:3]]
        assert sum(channels) / 3 > 150, f"chart {i}: axis labels {r['label']} on a dark page"
    assert not messages, messages
    tab.close()
