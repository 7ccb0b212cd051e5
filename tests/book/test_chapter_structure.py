"""Every chapter opens with its verdict, workload, overview and prerequisites, ends with what's
next, hides its bookkeeping and shows code that runs as shown."""

from __future__ import annotations

import ast
import builtins
import re

import jupytext
import pytest

from kvoffload.bookbuild.runner import Chapter, chapters, per_profile
from tests.support.paths import REPO

CHAPTERS = chapters(REPO)
HIDDEN = {"remove-cell", "remove-input"}


def _tags(cell) -> set[str]:
    return set(cell.metadata.get("tags", []))


def _cells(chapter: Chapter):
    return jupytext.read(chapter.path).cells


def _shown(cell) -> bool:
    """A code cell whose code the page shows (the parameters are shown folded by the build)."""
    return cell.cell_type == "code" and ("parameters" in _tags(cell) or not _tags(cell) & HIDDEN)


def _defined(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del):
            out.add(n.id)
        elif isinstance(n, ast.Import | ast.ImportFrom):
            out |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.FunctionDef | ast.ClassDef):
            out.add(n.name)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
    return out


def _used(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _glues(tree: ast.AST) -> int:
    return sum(
        isinstance(n, ast.Call) and getattr(n.func, "id", None) == "glue" for n in ast.walk(tree)
    )


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.number)
def test_the_shown_code_runs_as_shown_and_holds_no_bookkeeping(chapter):
    """Every name the shown code uses is defined by shown code above it; glue stays hidden."""
    known = set(dir(builtins))
    for i, cell in enumerate(_cells(chapter)):
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source)
        if not _shown(cell):
            continue
        missing = _used(tree) - known - _defined(tree)
        assert not missing, (
            f"{chapter.name} cell {i} uses {sorted(missing)}, defined only in hidden cells"
        )
        assert _glues(tree) == 0, f"{chapter.name} cell {i} shows glue(...) calls"
        known |= _defined(tree)


def _headings(text: str) -> list[str]:
    return re.findall(r"^## (.+)$", text, re.M)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.number)
def test_a_chapter_opens_with_overview_and_prerequisites_and_ends_with_what_s_next(chapter):
    text = "\n\n".join(c.source for c in _cells(chapter) if c.cell_type == "markdown")
    heads = _headings(text)
    assert heads[:2] == ["Overview", "Prerequisites"], heads
    assert heads[-1] == "What's next", heads
    # the workload, in one line at the top: before any section, after the title (and verdict)
    at = text.find("\n**Workload:**")
    assert at > 0 and "\n## " not in text[:at], f"{chapter.name}: no workload line at the top"
    assert text.index("## Overview") > at


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if per_profile(c)], ids=lambda c: c.number)
def test_a_per_profile_chapter_opens_with_its_verdict(chapter):
    cells = _cells(chapter)
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# ")
    assert "parameters" in _tags(cells[1])
    verdicts = [c for c in cells if "kvoffload-verdict" in _tags(c)]
    assert len(verdicts) == 1 and verdicts[0] is cells[2]
    assert "remove-input" in _tags(cells[2]) and "verdict_box.box(" in cells[2].source
    assert "{glue:text}`workload`" in cells[3].source  # the line says which workload it is for


def test_chapters_07_and_08_are_rendered_once():
    once = {c.number for c in CHAPTERS if not per_profile(c)}
    assert {"07", "08", "09"} <= once


def test_chapter_09_shows_a_published_testbed_and_says_how_to_run_it_on_yours():
    chapter = next(c for c in CHAPTERS if c.number == "09")
    from kvoffload.bookbuild.runner import declared_parameters
    from kvoffload.inputs.hardware import load_system, system_ids

    hardware = declared_parameters(chapter)["hardware"]
    assert hardware in system_ids() and hardware != "article-reference"
    assert any(f.kind.value == "measured" for f in load_system(hardware).figures().values())
    text = chapter.path.read_text(encoding="utf-8")
    assert "kvoffload measure --out my.yaml" in text and "kvoffload run --hardware my.yaml" in text


def test_equations_carry_labels_and_are_referred_to():
    for chapter in CHAPTERS:
        text = chapter.path.read_text(encoding="utf-8")
        labels = re.findall(r"^\$\$ \(([\w-]+)\)$", text, re.M)
        opened = re.findall(r"^\$\$$", text, re.M)
        assert len(opened) == len(labels), chapter.name  # every display equation is labelled
        for label in labels:
            assert f"{{eq}}`{label}`" in text, (chapter.name, label)
