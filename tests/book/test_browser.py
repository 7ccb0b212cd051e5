"""The built pages in a real browser (Debian's headless Chromium): charts draw, math renders,
search answers, the console stays clean, and nothing is fetched from another host."""

from __future__ import annotations

import pytest

from tests.support.browser import open_page

pytestmark = pytest.mark.slow


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


def test_the_try_it_widget_recomputes_tpot_without_a_kernel(browser, site):
    _, base = site
    page, errors, offhost = open_page(
        browser, f"{base}/book/generated/article-reference/03_decode_timing.html"
    )
    widget = page.locator(".kvo-tpot")
    assert widget.count() == 1
    shown = widget.locator('[data-kvo="tpot_none_ms"]')
    page.wait_for_function("el => el.textContent.trim() !== ''", arg=shown.element_handle())
    before = shown.inner_text()
    slider = widget.locator('input[data-kvo="link_slider"]')
    slider.evaluate(
        "(el) => { el.value = el.max; el.dispatchEvent(new Event('input', {bubbles: true})); }"
    )
    page.wait_for_function(
        "([el, old]) => el.textContent !== old", arg=[shown.element_handle(), before]
    )
    assert float(shown.inner_text().replace(",", "").split()[0]) < float(
        before.replace(",", "").split()[0]
    ), "a faster link must shorten the offloaded step"
    assert not errors and not offhost
    page.close()
