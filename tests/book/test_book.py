"""The book pipeline: every page built offline, cached re-runs, loud failures, old site kept."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvoffload.bookbuild.errors import ChapterError
from kvoffload.bookbuild.jupyterbook import OFFSITE, STAMP, slim_site
from kvoffload.bookbuild.profile_run import run_for_profile
from kvoffload.bookbuild.profiles import plan, resolve_profile
from kvoffload.bookbuild.runner import chapters, check_parameters, per_profile
from kvoffload.bookbuild.site import build_book
from kvoffload.inputs.errors import InputError
from kvoffload.report import calculator_page
from tests.support.paths import BOOK_PROFILES, REPO, copy_book_sources

pytestmark = pytest.mark.slow


def _chapter_pages(root: Path) -> list[Path]:
    html = root / "_build" / "html"
    every = [c for c in chapters(root) if per_profile(c)]
    once = [c for c in chapters(root) if not per_profile(c)]
    pages = [
        html / "book" / "generated" / p / f"{c.name}.html" for p in BOOK_PROFILES for c in every
    ]
    return pages + [html / "book" / "generated" / BOOK_PROFILES[0] / f"{c.name}.html" for c in once]


def test_every_page_exists(built_book):
    root, result = built_book
    html = root / "_build" / "html"
    every = [c for c in chapters(root) if per_profile(c)]
    once = [c for c in chapters(root) if not per_profile(c)]
    assert result.built and result.executed == len(BOOK_PROFILES) * len(every) + len(once)
    assert not (root / "_build/html/book/generated/t4-pcie3/08_claims.html").exists()
    for page in _chapter_pages(root):
        assert page.is_file(), page
    for name in (
        "index.html",
        "search.html",
        "searchindex.js",
        "book/intro.html",
        "book/references.html",
    ):
        assert (html / name).is_file(), name
    assert (html / "book/generated/machines.html").is_file()
    assert not (html / "genindex.html").exists()  # no index entries: no empty index page
    assert (html / "book/generated/t4-pcie3/index.html").is_file()
    # the calculator at the site's root, with its script, linked from the intro and the sidebar
    assert (html / "calculator.html").is_file()
    assert (html / "_static/calculator/calculator.js").is_file()
    assert 'href="../calculator.html"' in (html / "book/intro.html").read_text(encoding="utf-8")
    assert 'href="../calculator.html"' in (html / "book/calculator.html").read_text(
        encoding="utf-8"
    )


def test_no_page_has_an_error_or_an_offsite_asset(built_book):
    root, _ = built_book
    pages = sorted((root / "_build" / "html").rglob("*.html"))
    assert len(pages) >= 8
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "Traceback" not in text, page
        assert not re.search(r'class="[^"]*\boutput error\b', text), page
        assert not OFFSITE.search(text), page


def test_chapters_carry_their_profiles_figures_and_switcher(built_book):
    root, _ = built_book
    html = root / "_build" / "html" / "book" / "generated"
    ref = (html / "article-reference" / "01_memory_tiers.html").read_text(encoding="utf-8")
    t4 = (html / "t4-pcie3" / "01_memory_tiers.html").read_text(encoding="utf-8")
    assert "32 GB/s" in ref and "16.38" in ref  # 524 MB over the article's 32 GB/s
    assert "PCIe 3.0" in t4
    # one click to the same chapter on the other profile
    assert 'href="../t4-pcie3/01_memory_tiers.html"' in ref
    assert 'href="../article-reference/01_memory_tiers.html"' in t4
    assert "kvo-chart-" in ref and "vendor/vega-bundle.js" in ref
    kv = (html / "article-reference" / "02_kv_sizing.html").read_text(encoding="utf-8")
    assert "vendor/mathjax/tex-svg.js" in kv


def _files(html: Path) -> dict[str, bytes]:
    return {str(p.relative_to(html)): p.read_bytes() for p in html.rglob("*") if p.is_file()}


def test_chart_ids_and_pages_are_byte_stable_and_jupyter_books_own_build_agrees(
    built_book, tmp_path
):
    """``jupyter-book build`` itself, run again from nothing on the same sources, writes the
    session's site file for file and byte for byte, less what kvoffload adds beside Sphinx's
    output (the calculator's files and the build's stamp): chart ids and pages are stable
    across builds, and kvoffload.bookbuild.sphinx_run configures Sphinx as the command does."""
    root, _ = built_book
    cli = [
        str(Path(sys.executable).with_name("jupyter-book")),
        *("build", str(root), "--path-output", str(tmp_path / "cli"), "-W", "-n", "--keep-going"),
    ]
    subprocess.run(cli, check=True, capture_output=True)
    slim_site(tmp_path / "cli" / "_build" / "html")
    ours = _files(root / "_build" / "html")
    theirs = _files(tmp_path / "cli" / "_build" / "html")
    added = {calculator_page.PAGE, calculator_page.SCRIPT, calculator_page.STYLE, STAMP}
    assert sorted(ours) == sorted({*theirs, *added})
    assert all(page.relative_to(root / "_build" / "html").as_posix() in theirs
               for page in _chapter_pages(root))  # fmt: skip
    assert [name for name in theirs if ours[name] != theirs[name]] == []


def test_second_build_executes_nothing_and_keeps_the_site(built_book):
    root, _ = built_book
    index = root / "_build" / "html" / "index.html"
    before = index.stat().st_mtime_ns
    again = build_book(root, BOOK_PROFILES, n_jobs=2, progress=False)
    assert again.executed == 0 and not again.built
    assert index.stat().st_mtime_ns == before


def test_a_broken_chapter_fails_loudly_and_keeps_the_old_site(built_book, tmp_path):
    root = tmp_path / "book"  # a copy: the shared build stays as it is for the other tests
    shutil.copytree(built_book[0], root, symlinks=True)
    html = root / "_build" / "html"
    snapshot = {p: p.read_bytes() for p in html.rglob("*.html")}
    broken = root / "notebooks" / "09_broken.md"
    broken.write_text(
        (root / "notebooks" / "01_memory_tiers.md")
        .read_text(encoding="utf-8")
        .replace(
            "system = load_system(hardware)",
            "system = load_system(hardware)\nraise RuntimeError('deliberately broken')",
        ),
        encoding="utf-8",
    )
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "kvoffload",
                "book",
                "--profiles",
                "article-reference",
                "--quiet",
                "--jobs",
                "1",
            ],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "chapter 09_broken" in proc.stderr and "cell" in proc.stderr
        assert "deliberately broken" in proc.stderr and "Traceback" not in proc.stderr
        with pytest.raises(ChapterError, match=r"09_broken, profile t4-pcie3: cell \d+"):
            build_book(root, BOOK_PROFILES, n_jobs=2, progress=False)
    finally:
        broken.unlink()
    assert {p: p.read_bytes() for p in html.rglob("*.html")} == snapshot
    assert not list((root / "book" / "generated").rglob("09_broken*"))


def _site(root: Path) -> dict[str, bytes]:
    html = root / "_build" / "html"
    return {
        str(p.relative_to(html)): p.read_bytes() for p in sorted(html.rglob("*")) if p.is_file()
    }


def test_a_prose_edit_executes_nothing_and_gives_the_site_a_clean_build_gives(built_book, tmp_path):
    """A prose-only edit re-renders from the stored runs (nothing executes) and Sphinx re-reads
    only what changed; undone, the site is byte for byte the session's cold build (every chapter
    executed in fresh kernels, Sphinx from nothing): no stale page, search entry or link."""
    root, _ = built_book
    warm = tmp_path / "warm"
    shutil.copytree(root, warm, symlinks=True)
    chapter = warm / "notebooks" / "01_memory_tiers.md"
    text = chapter.read_text(encoding="utf-8")
    assert text.count("## Overview\n") == 1
    chapter.write_text(text.replace("## Overview\n", "## Overview\n\nAn edited quokka sentence.\n"))
    edited = build_book(warm, BOOK_PROFILES, n_jobs=2, progress=False)
    assert edited.executed == 0 and edited.rendered == len(BOOK_PROFILES) and edited.built
    cold_site, edited_site = _site(root), _site(warm)
    page = "book/generated/t4-pcie3/01_memory_tiers.html"
    assert "An edited quokka sentence." in edited_site[page].decode()
    assert (
        b"quokka" in edited_site["searchindex.js"] and b"quokka" not in cold_site["searchindex.js"]
    )
    chapter.write_text(text, encoding="utf-8")
    undone = build_book(warm, BOOK_PROFILES, n_jobs=2, progress=False)
    assert undone.executed == 0 and undone.built
    warm_site = _site(warm)
    assert sorted(warm_site) == sorted(cold_site)
    assert [p for p in warm_site if warm_site[p] != cold_site[p]] == []


def test_an_undeclared_parameter_is_refused(tmp_path):
    root = copy_book_sources(tmp_path)
    chapter = chapters(root)[0]
    with pytest.raises(InputError, match="does not declare parameter 'bandwidth'"):
        check_parameters(chapter, {"hardware": "t4-pcie3", "bandwidth": 9})
    with pytest.raises(InputError, match="does not declare parameter 'nonsense'"):
        plan(root, [resolve_profile("t4-pcie3")], tmp_path / "out", params={"nonsense": 1})


def test_run_for_a_profile_that_is_not_in_the_catalog(tmp_path):
    root = copy_book_sources(tmp_path / "src")
    mine = tmp_path / "my.yaml"
    mine.write_text(
        "id: my-slow-box\nname: My slow box\ngpu: {base: rtx-4090}\n"
        "link: {base: pcie4-x16, h2d_bandwidth: 12.5 GB/s, d2h_bandwidth: 11 GB/s}\n"
        "host: {base: desktop-ddr5-2ch}\nstorage: {base: nvme-gen4}\n"
    )
    result = run_for_profile(
        root, str(mine), chapter_keys=["01"], out=tmp_path / "out", progress=False
    )
    page = (result.html / "01_memory_tiers.html").read_text(encoding="utf-8")
    assert "My slow box" in page and "12.5 GB/s" in page
    assert not OFFSITE.search(page)
    assert result.notebooks[0].is_file()
    shutil.rmtree(tmp_path / "out")


def test_markdown_beside_the_book_is_kept_out_of_it():
    """A Markdown file at the repository root (README, CONTRIBUTING) is not a page: the strict
    build (-W) fails on a document that no toctree includes, so each must be excluded."""
    import fnmatch

    import yaml

    config = yaml.safe_load((REPO / "_config.yml").read_text())
    excluded = config["exclude_patterns"]
    for path in REPO.glob("*.md"):
        assert any(fnmatch.fnmatch(path.name, p) for p in excluded), path.name
