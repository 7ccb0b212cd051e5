"""The built pages: every per-profile page opens with one verdict box whose numbers are the
package's for that profile, every page's title names its machine, chapters 07 and 08 exist once,
and the Machines page's table is the package's."""

from __future__ import annotations

import html as htmllib
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from kvoffload.bookbuild import page_cells
from kvoffload.bookbuild.profiles import REFERENCE
from kvoffload.bookbuild.runner import chapters, declared_parameters, per_profile
from kvoffload.inputs.hardware import load_system
from kvoffload.report import verdict_box
from kvoffload.studies import verdict
from tests.support.paths import BOOK_PROFILES
from tests.support.verdicts import assert_box_shows, chapter_box, chapter_verdict, glued

pytestmark = pytest.mark.slow


def _soup(path: Path) -> BeautifulSoup:
    return BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")


def _plain(text: str) -> str:
    """Return page text with Sphinx's typographic quotes made plain again."""
    return htmllib.unescape(text).replace("\u2019", "'").replace("\u2018", "'")


def _one_box(soup: BeautifulSoup, where: str):
    boxes = soup.select(".verdict")
    assert len(boxes) == 1, f"{where}: {len(boxes)} verdict boxes"
    return boxes[0]


def test_every_per_profile_page_opens_with_the_package_s_verdict(built_book, monkeypatch):
    root, _ = built_book
    html = root / "_build" / "html" / "book" / "generated"
    every = [c for c in chapters(root) if per_profile(c)]
    assert every
    for pid in BOOK_PROFILES:
        for chapter in every:
            where = f"{pid}/{chapter.name}"
            soup = _soup(html / pid / f"{chapter.name}.html")
            box = _one_box(soup, where)
            v = chapter_verdict(chapter, pid, monkeypatch)
            assert box["data-profile"] == pid, where
            assert_box_shows(str(box), v)
            assert box.select_one(".verdict-workload").get_text() == verdict.describe(v.workload)
            # the title, then the verdict, then the machine switcher
            text = str(soup.select_one("main") or soup)
            h1, switcher = text.find("<h1"), text.find("kvoffload-switcher")
            assert 0 <= h1 < text.find('class="verdict"') < switcher, where


def test_every_per_profile_box_gives_its_chapter_s_own_glued_answer(built_book, monkeypatch):
    """The box's headline figure is the chapter's answer: the text its prose glues, and the
    figure the chapter's own verdict cell computes for that profile."""
    root, _ = built_book
    html = root / "_build" / "html" / "book" / "generated"
    for pid in BOOK_PROFILES:
        for chapter in [c for c in chapters(root) if per_profile(c)]:
            where = f"{pid}/{chapter.name}"
            box = _one_box(_soup(html / pid / f"{chapter.name}.html"), where)
            line = box.select_one(".verdict-answer")
            assert line is not None, f"{where}: the box gives no answer of the chapter's own"
            shown = line.select_one(".verdict-headline").get_text()
            answer = chapter_box(chapter, pid, monkeypatch).answer
            assert line["data-glue"] == answer.key and shown == answer.text, (where, shown)
            executed = root / "book" / "generated" / pid / f"{chapter.name}.ipynb"
            assert glued(executed, answer.key) == shown, (where, answer.key)


def test_index_pages_and_the_intro_open_with_the_machine_s_verdict(built_book):
    root, _ = built_book
    site = root / "_build" / "html"
    for pid in BOOK_PROFILES:
        page = (
            site / "book" / "intro.html"
            if pid == REFERENCE
            else site / "book" / "generated" / pid / "index.html"
        )
        soup = _soup(page)
        box = _one_box(soup, str(page))
        assert box["data-profile"] == pid
        assert_box_shows(str(box), verdict.verdict(pid))


def test_every_per_profile_page_s_title_names_its_machine(built_book):
    root, _ = built_book
    html = root / "_build" / "html" / "book" / "generated"
    titles = []
    for pid in BOOK_PROFILES:
        label = page_cells.machine_label(load_system(pid))
        files = [html / pid / f"{c.name}.html" for c in chapters(root) if per_profile(c)]
        if pid != REFERENCE:
            files.append(html / pid / "index.html")
        for page in files:
            soup = _soup(page)
            title = _plain(soup.title.get_text())
            assert label in title, (page, title)
            assert label in _plain(soup.select_one("h1").get_text()), page
            titles.append(title)
    assert len(titles) == len(set(titles))  # no two pages share a title


def test_machine_independent_chapters_exist_once(built_book):
    root, _ = built_book
    html = root / "_build" / "html" / "book" / "generated"
    for name in ("07_validation", "08_claims"):
        found = sorted(p.relative_to(html).as_posix() for p in html.rglob(f"{name}.html"))
        assert found == [f"{REFERENCE}/{name}.html"], found


def test_chapter_09_shows_a_testbed_not_the_build_machine(built_book):
    root, _ = built_book
    page = root / "_build" / "html" / "book" / "generated" / REFERENCE / "09_your_machine.html"
    text = _soup(page).get_text(" ")
    testbed = load_system(
        declared_parameters(next(c for c in chapters(root) if c.number == "09"))["hardware"]
    )
    assert testbed.name in text and "the machine that built this page" not in text
    code = " ".join(pre.get_text() for pre in _soup(page).select("pre"))
    assert "kvoffload measure --out my.yaml" in code and "kvoffload run --hardware my.yaml" in code


def test_the_machines_page_is_the_package_s_table(built_book):
    root, _ = built_book
    page = root / "_build" / "html" / "book" / "generated" / "machines.html"
    soup = _soup(page)
    rows = soup.select("table tbody tr")
    assert len(rows) == len(BOOK_PROFILES)
    for row, pid in zip(rows, BOOK_PROFILES, strict=True):
        cells = [td.get_text(" ", strip=True) for td in row.select("td")]
        href = row.select_one("a")["href"]
        assert href.startswith("../intro.html" if pid == REFERENCE else f"{pid}/index.html"), href
        want = verdict.machine_row(pid)
        assert _plain(cells[0]) == page_cells.machine_label(load_system(pid))
        assert cells[1] == f"{want.link_gbs:,.1f}"
        # each time as the package marks it: "(does not fit)" after one whose setup does not fit
        assert cells[2 : 2 + len(want.on_gpu_ms)] == verdict_box.machine_times(want)


def test_the_intro_opens_with_the_answer_and_links_the_article(built_book):
    root, _ = built_book
    soup = _soup(root / "_build" / "html" / "book" / "intro.html")
    first = soup.select_one("main p") or soup.select_one("p")
    ref = verdict.verdict(REFERENCE)
    assert verdict_box.ms(ref.offloaded_ms) in first.get_text()
    hrefs = [a["href"] for a in soup.select("a[href]")]
    assert any("references.html#id" in h or "references.html#" in h for h in hrefs), hrefs
    assert any("08_claims.html" in h for h in hrefs)
