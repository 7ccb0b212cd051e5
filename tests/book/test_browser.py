"""The built pages in a real browser (Debian's headless Chromium): charts draw, math renders,
search answers, the console stays clean, and nothing is fetched from another host."""

from __future__ import annotations

import pytest

from kvoffload.build.runner import chapters, per_profile
from tests.support.browser import open_page
from tests.support.paths import BOOK_PROFILES

pytestmark = pytest.mark.slow


def _pages(root):
    every = [c for c in chapters(root) if per_profile(c)]
    return [f"book/generated/{p}/{c.name}.html" for p in BOOK_PROFILES for c in every]


def test_once_only_chapters_load_cleanly(browser, site):
    root, base = site
    for c in (c for c in chapters(root) if not per_profile(c)):
        page, errors, offhost = open_page(
            browser, f"{base}/book/generated/article-reference/{c.name}.html"
        )
        assert page.locator("h1").count() >= 1
        assert not errors and not offhost, (c.name, errors, offhost)
        page.close()


def test_every_chart_draws_without_console_errors(browser, site):
    root, base = site
    for rel in _pages(root):
        page, errors, offhost = open_page(browser, f"{base}/{rel}")
        charts = page.locator(".kvoffload-chart")
        n = charts.count()
        assert n >= 1, rel
        page.wait_for_function(
            "n => document.querySelectorAll('.kvoffload-chart svg').length >= n",
            arg=n,
            timeout=20000,
        )
        for i in range(n):
            assert charts.nth(i).locator("svg").count() >= 1, f"{rel}: chart {i} did not draw"
        assert not errors, f"{rel}: console errors {errors}"
        assert not offhost, f"{rel}: requested {offhost}"
        page.close()


def test_math_renders_offline(browser, site):
    _, base = site
    page, errors, offhost = open_page(
        browser, f"{base}/book/generated/article-reference/02_kv_sizing.html"
    )
    page.wait_for_selector("mjx-container svg", timeout=20000)
    assert not errors and not offhost
    page.close()


def test_search_finds_a_chapter(browser, site):
    _, base = site
    page, errors, offhost = open_page(browser, f"{base}/search.html?q=bandwidth")
    page.wait_for_selector("#search-results li", timeout=20000)
    assert page.locator("#search-results li").count() >= 1
    assert not errors and not offhost
    page.close()


def test_sliders_change_the_interactive_chart_without_a_kernel(browser, site):
    _, base = site
    page, errors, offhost = open_page(
        browser, f"{base}/book/generated/article-reference/03_decode_timing.html"
    )
    page.wait_for_function(
        "document.querySelectorAll('.kvoffload-chart svg').length >= 5", timeout=20000
    )
    slider = page.locator(".vega-bind input[type=range]").first
    assert slider.count() == 1
    chart = slider.locator("xpath=ancestor::div[contains(@class,'kvoffload-chart')]")
    paths = chart.locator("svg path")

    def shapes():
        return [paths.nth(i).get_attribute("d") for i in range(paths.count())]

    before = shapes()
    slider.evaluate(
        "(el) => { el.value = 400; el.dispatchEvent(new Event('input', {bubbles: true})); }"
    )
    page.wait_for_timeout(500)
    after = shapes()
    assert before != after, "moving the link-bandwidth slider did not redraw the chart"
    assert not errors and not offhost
    page.close()
