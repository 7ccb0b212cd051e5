"""What the browser tests of the built pages share: the pages, one load, the chart checks."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.browser import Tab

PHONE = {"width": 390, "height": 844}
NARROWEST = {"width": 360, "height": 740}
DESKTOP = {"width": 1440, "height": 900}
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
# at this width, what is wrong with the page: wider than the screen, a table that spills out with
# no scrolling box to hold it, a kvoffload table whose key (first) column is out of view
LAYOUT_JS = """() => {
  const w = window.innerWidth, out = [];
  const wide = Math.max(document.documentElement.scrollWidth, document.body.scrollWidth);
  if (wide > w) out.push('page is ' + wide + ' px wide');
  for (const t of document.querySelectorAll('table')) {
    let box = t.parentElement;
    while (box && !['auto', 'scroll', 'hidden'].includes(getComputedStyle(box).overflowX))
      box = box.parentElement;
    const label = t.id || t.className || 'table';
    if (t.getBoundingClientRect().right > w + 1 &&
        (!box || box.getBoundingClientRect().right > w + 1))
      out.push(label + ' spills out of the page: no scrolling box holds it');
    const first = t.querySelector('tbody tr > :first-child');
    if (t.classList.contains('kvoffload-table') && first &&
        first.getBoundingClientRect().right > w + 1)
      out.push(label + ': its key column is out of view');
  }
  return out;
}"""
REFRESH = re.compile(r'<meta http-equiv="refresh"', re.IGNORECASE)


def site_pages(root: Path) -> list[str]:
    """Return every page of the built site relative to its root, the redirects aside."""
    html = root / "_build" / "html"
    return sorted(
        p.relative_to(html).as_posix()
        for p in html.rglob("*.html")
        if not {"_static", "_sources", "_images"} & set(p.relative_to(html).parts)
        and not REFRESH.match(p.read_text(encoding="utf-8", errors="replace").lstrip())
    )


def chart_pages(root: Path) -> list[str]:
    """Return the site's pages that hold a chart."""
    html = root / "_build" / "html"
    return [rel for rel in site_pages(root) if "kvoffload-chart" in (html / rel).read_text()]


DARK = "localStorage.setItem('theme', 'dark'); localStorage.setItem('mode', 'dark');"


def reader(browser, dark: bool = False) -> Tab:
    """Return a tab for reading the site's pages, warnings counted (in dark mode, if asked)."""
    return Tab(browser, warnings=True, init_script=DARK if dark else "", viewport=PHONE)


def load(tab: Tab, url: str, viewport: dict):
    """Open ``url`` in ``tab`` at ``viewport`` and wait until its charts have drawn and settled;
    return the page, its errors and warnings, off-host requests."""
    page, messages, offhost = tab.open(url, viewport)
    n = page.locator(".kvoffload-chart").count()
    if n:
        page.wait_for_function(
            "n => document.querySelectorAll('.kvoffload-chart svg').length >= n",
            arg=n,
            timeout=20000,
        )
        settle(page)  # a container-sized chart re-renders once it knows its width
    return page, messages, offhost


# a container-sized chart fills its container (its SVG as wide as the chart's box)
FULL_JS = "el => Math.abs(el.querySelector('svg').getBoundingClientRect().width - el.getBoundingClientRect().width) <= 2"


# resolves once every chart has settled: each fits its container, each that filled its container
# (data-kvo-full) fills it again, and no chart's box has changed width for 200 ms (a column still
# sliding into place re-renders its charts); false after ``limit`` ms
SETTLE_JS = f"""limit => new Promise(done => {{
  const charts = [...document.querySelectorAll('.kvoffload-chart')];
  const over = {OVERFLOW_JS}, full = {FULL_JS};
  const start = performance.now();
  let widths = '', since = start;
  const look = () => {{
    const now = performance.now();
    const w = charts.map(el => Math.round(el.getBoundingClientRect().width) + ':' +
      Math.round((el.querySelector('svg') || el).getBoundingClientRect().width)).join(',');
    if (w !== widths) {{ widths = w; since = now; }}
    const ok = charts.every(el => el.querySelector('svg') && over(el) <= 1 &&
                                  (!el.dataset.kvoFull || full(el)));
    if (ok && now - since >= 200) return done(true);
    if (now - start > limit) return done(false);
    requestAnimationFrame(look);
  }};
  requestAnimationFrame(look);
}})"""


def settle(page, limit_ms: int = 10_000) -> bool:
    """Wait until every chart on the page has settled (SETTLE_JS); False if it never did, and
    check_fit then names the chart that does not fit."""
    return page.evaluate(SETTLE_JS, limit_ms)


def resize(page, viewport: dict) -> None:
    """Set the page's viewport and wait until every chart has re-rendered to its new width."""
    page.evaluate(
        f"() => document.querySelectorAll('.kvoffload-chart').forEach(el => "
        f"el.dataset.kvoFull = ({FULL_JS})(el) ? '1' : '')"
    )
    page.set_viewport_size(viewport)
    settle(page)


def check_marks(page, rel: str) -> None:
    """Assert every chart on the page draws at least one mark (not just axes)."""
    charts = page.locator(".kvoffload-chart")
    for i in range(charts.count()):
        assert charts.nth(i).evaluate(MARKS_JS) >= 1, f"{rel}: chart {i} draws no mark"


def check_charts(page, rel: str, messages: list[str], offhost: list[str]) -> None:
    """Assert every chart on the page draws marks inside one numbered caption, cleanly."""
    check_marks(page, rel)
    charts = page.locator(".kvoffload-chart")
    numbers = []
    for i in range(charts.count()):
        chart = charts.nth(i)
        caption = chart.locator("xpath=ancestor::figure[1]/figcaption")
        assert caption.count() == 1, f"{rel}: chart {i} has no caption"
        match = CAPTION.match(caption.inner_text().strip())
        assert match, f"{rel}: chart {i} caption {caption.inner_text()!r}"
        numbers.append((int(match[1]), int(match[2])))
    assert [n for _, n in numbers] == list(range(1, len(numbers) + 1)), (rel, numbers)
    assert len({c for c, _ in numbers}) == 1, (rel, numbers)
    assert not messages, f"{rel}: {messages}"
    assert not offhost, f"{rel}: requested {offhost}"


def check_fit(page, rel: str, tries: int = 5) -> None:
    """Assert no chart reaches past its container or the viewport, once the page has settled.

    On a loaded machine a chart may still be catching up with its column when it is read: a
    chart past its container is read again after the page settles once more, up to ``tries``
    times (a chart that does not fit never does)."""
    charts = page.locator(".kvoffload-chart")
    for _ in range(tries - 1):
        if all(charts.nth(i).evaluate(OVERFLOW_JS) <= 1 for i in range(charts.count())):
            return
        settle(page, 2000)
    for i in range(charts.count()):
        over = charts.nth(i).evaluate(OVERFLOW_JS)
        assert over <= 1, f"{rel}: chart {i} reaches {over:.0f} px past its container"
