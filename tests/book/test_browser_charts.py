"""Every chart on every built page, in headless Chromium: it draws marks (not just axes), with no
console warning or error, inside a numbered caption, within its container from 360 px up; no
page scrolls sideways on a 390 px phone; in dark mode a chart sits on the page's own background."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvoffload.bookbuild.runner import chapters, per_profile
from tests.support.browser import block_offhost
from tests.support.paths import BOOK_PROFILES

pytestmark = pytest.mark.slow

PHONE = {"width": 390, "height": 844}
NARROWEST = {"width": 360, "height": 740}
DESKTOP = {"width": 1440, "height": 900}
SKIP = {"genindex.html", "search.html", "py-modindex.html"}
CAPTION = re.compile(r"^Figure (\d+)\.(\d+): \S")

# the number of drawn marks in a chart's SVG: a path inside a group of data marks (symbols,
# rects, lines, areas) that covers an area, or a line that has a length; axes, legends, rules and
# text do not count, nor does a bar of zero width (what a log axis from zero leaves)
MARKS_JS = """el => {
  const svg = el.querySelector('svg');
  if (!svg) return -1;
  let n = 0;
  for (const g of svg.querySelectorAll('g.role-mark')) {
    const line = g.classList.contains('mark-line');
    for (const p of g.querySelectorAll('path')) {
      const d = p.getAttribute('d') || '';
      if (d.includes('NaN')) continue;
      const b = p.getBBox();
      if ((b.width > 0.5 && b.height > 0.5) || (line && (b.width > 0.5 || b.height > 0.5))) n++;
    }
  }
  return n;
}"""
# how far (px) the chart's SVG, or the chart itself, reaches past its container or the viewport
OVERFLOW_JS = """el => {
  const svg = el.querySelector('svg');
  const box = el.getBoundingClientRect(), s = svg.getBoundingClientRect();
  const parent = el.parentElement.getBoundingClientRect();
  return Math.max(s.right - box.right, box.right - parent.right, s.right - window.innerWidth,
                  -s.left, 0);
}"""
SCROLL_JS = """() => Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)
                    - window.innerWidth"""


REFRESH = re.compile(r'<meta http-equiv="refresh"', re.IGNORECASE)


def _built_pages(root: Path) -> list[str]:
    """Return every page of the built site, relative to its root (search and index pages, and
    the root's redirect to the intro, aside)."""
    html = root / "_build" / "html"
    return sorted(
        p.relative_to(html).as_posix()
        for p in html.rglob("*.html")
        if not {"_static", "_sources", "_images"} & set(p.relative_to(html).parts)
        and p.name not in SKIP
        and not REFRESH.match(p.read_text(encoding="utf-8", errors="replace").lstrip())
    )


def _chart_pages(root: Path) -> list[str]:
    html = root / "_build" / "html"
    return [rel for rel in _built_pages(root) if "kvoffload-chart" in (html / rel).read_text()]


@pytest.fixture(scope="module")
def warm(browser):
    """Let the browser make its one favicon request (the site has none) before the checks."""
    page = browser.new_page()
    page.goto("about:blank")
    page.close()
    return browser


def _load(browser, url, viewport, dark=False):
    """Open ``url`` at ``viewport``; return the page, its errors and warnings, off-host requests."""
    context = browser.new_context(viewport=viewport)
    if dark:
        context.add_init_script(
            "localStorage.setItem('theme', 'dark'); localStorage.setItem('mode', 'dark');"
        )
    page = context.new_page()
    messages: list[str] = []
    page.on(
        "console",
        lambda m: (
            messages.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None
        ),
    )
    page.on("pageerror", lambda e: messages.append(f"pageerror: {e}"))
    offhost = block_offhost(page)
    page.goto(url, wait_until="load")
    n = page.locator(".kvoffload-chart").count()
    if n:
        page.wait_for_function(
            "n => document.querySelectorAll('.kvoffload-chart svg').length >= n",
            arg=n,
            timeout=20000,
        )
        page.wait_for_timeout(150)  # a container-sized chart re-renders once it knows its width
    return page, messages, offhost


def test_the_site_has_charts_on_the_chapters_that_promise_them(site):
    root, _ = site
    pages = _chart_pages(root)
    assert len(pages) >= 8, pages


def _check_charts(page, rel: str, messages: list[str], offhost: list[str]) -> None:
    """Assert every chart on the page draws marks inside one numbered caption, cleanly."""
    charts = page.locator(".kvoffload-chart")
    numbers = []
    for i in range(charts.count()):
        chart = charts.nth(i)
        assert chart.evaluate(MARKS_JS) >= 1, f"{rel}: chart {i} draws no mark"
        caption = chart.locator("xpath=ancestor::figure[1]/figcaption")
        assert caption.count() == 1, f"{rel}: chart {i} has no caption"
        match = CAPTION.match(caption.inner_text().strip())
        assert match, f"{rel}: chart {i} caption {caption.inner_text()!r}"
        numbers.append((int(match[1]), int(match[2])))
    assert [n for _, n in numbers] == list(range(1, len(numbers) + 1)), (rel, numbers)
    assert len({c for c, _ in numbers}) == 1, (rel, numbers)
    assert not messages, f"{rel}: {messages}"
    assert not offhost, f"{rel}: requested {offhost}"


def _check_fit(page, rel: str) -> None:
    """Assert no chart reaches past its container or the viewport."""
    charts = page.locator(".kvoffload-chart")
    for i in range(charts.count()):
        over = charts.nth(i).evaluate(OVERFLOW_JS)
        assert over <= 1, f"{rel}: chart {i} reaches {over:.0f} px past its container"


# One pass over the site per width (a page load is the expensive part): at 1440 and 390 px every
# chart draws marks with a numbered caption and a clean console; at every width each chart fits
# its container; at 390 px no page (with or without a chart) scrolls sideways.
WIDTHS = {
    "1440px": (DESKTOP, True, False),
    "390px": (PHONE, True, True),
    "360px": (NARROWEST, False, False),
}


@pytest.mark.parametrize("width", list(WIDTHS))
def test_every_chart_draws_fits_and_no_page_scrolls_sideways(warm, site, width):
    root, base = site
    viewport, check_marks, check_scroll = WIDTHS[width]
    charted = set(_chart_pages(root))
    wide = {}
    for rel in _built_pages(root) if check_scroll else sorted(charted):
        page, messages, offhost = _load(warm, f"{base}/{rel}", viewport)
        if rel in charted:
            if check_marks:
                _check_charts(page, rel, messages, offhost)
            _check_fit(page, rel)
        if check_scroll and (over := page.evaluate(SCROLL_JS)) > 0:
            wide[rel] = over
        page.context.close()
    assert not wide, f"pages wider than a {viewport['width']} px screen (px too wide): {wide}"


def test_every_per_profile_chapter_has_a_chart(site):
    root, _ = site
    html = root / "_build" / "html"
    every = [c for c in chapters(root) if per_profile(c)]
    pages = [f"book/generated/{p}/{c.name}.html" for p in BOOK_PROFILES for c in every]
    bare = [rel for rel in pages if "kvoffload-chart" not in (html / rel).read_text()]
    assert not bare, f"per-profile chapters without a chart: {bare}"


def test_dark_mode_draws_charts_on_the_page_background(warm, site):
    _, base = site
    page, messages, _ = _load(
        warm, f"{base}/book/generated/article-reference/03_decode_timing.html", DESKTOP, dark=True
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
    page.context.close()
