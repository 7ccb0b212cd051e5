"""Preparing an executed chapter for its page: title, verdict, switcher, parameters, labels."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from kvoffload.bookbuild import page_cells, pages
from kvoffload.bookbuild.runner import Chapter
from kvoffload.inputs.hardware import load_system


def _code(src: str, *tags: str):
    c = nbformat.v4.new_code_cell(src)
    c.metadata["tags"] = list(tags)
    return c


def _executed(tmp_path: Path) -> tuple[Path, Chapter]:
    """Write a chapter source and an 'executed' notebook as papermill leaves it."""
    source = tmp_path / "03_demo.md"
    source.write_text("# Demo Chapter\n\ntext\n", encoding="utf-8")
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Demo Chapter"),
        _code(
            'hardware = "article-reference"  # system profile\ncontext = 32_000  # tokens\n'
            "sizes = [\n    1,\n    2,\n]  # a list over lines",
            "parameters",
            "remove-cell",
        ),
        _code('# Parameters\nhardware = "t4-pcie3"\nsizes = [4]\n', "injected-parameters"),
        _code("box(hardware)", page_cells.VERDICT_TAG, "remove-input"),
        nbformat.v4.new_markdown_cell(
            "**Workload:** x.\n\n## Setup\n\n$$\na = b\n$$ (eq-a)\n\nBy {eq}`eq-a` and {numref}`Fig <fig-b>`.\n\n(fig-b)=\n"
        ),
        _code("import math\nx = math.pi", "remove-cell"),
        _code("print(hardware, context)"),
    ]
    out = tmp_path / "03_demo.ipynb"
    nbformat.write(nb, str(out))
    return out, Chapter(source)


def test_the_parameters_show_the_values_the_page_ran_with():
    shown = page_cells.parameters_source(
        'hardware = "x"  # profile\nbatch = 1  # requests\nsizes = [\n  1,\n]  # list',
        '# Parameters\nhardware = "t4-pcie3"\nsizes = [4]\nextra = 2\n',
    )
    assert shown.splitlines() == [
        'hardware = "t4-pcie3"  # profile',
        "batch = 1  # requests",
        "sizes = [4]",
        "extra = 2",
    ]
    assert page_cells.parameters_source("a = 1  # one", "") == "a = 1  # one"


def test_a_page_names_its_machine_and_keeps_the_verdict_under_the_title(tmp_path):
    path, chapter = _executed(tmp_path)
    systems = {i: load_system(i) for i in ("article-reference", "t4-pcie3")}
    pages.prepare_page(path, chapter, systems["t4-pcie3"], systems=systems, namespace="t4-pcie3")
    nb = nbformat.read(str(path), as_version=4)
    kinds = [
        (
            c.cell_type,
            tuple(c.metadata.get("tags", [])),
            c.source.splitlines()[0] if c.source else "",
        )
        for c in nb.cells
    ]
    assert kinds[0][2] == "# Demo Chapter on T4 16GB, PCIe 3.0 x16"
    assert page_cells.VERDICT_TAG in kinds[1][1]  # the verdict right under the title
    assert page_cells.SWITCHER_TAG in kinds[2][1]  # then the switcher
    # the parameters and papermill's cell become one folded cell before the first shown code
    params = [c for c in nb.cells if page_cells.PARAMETERS_TAG in c.metadata.get("tags", [])]
    assert len(params) == 1 and "hide-input" in params[0].metadata["tags"]
    assert params[0].source.splitlines() == [
        'hardware = "t4-pcie3"  # system profile',
        "context = 32_000  # tokens",
        "sizes = [4]",
    ]
    order = [c.source for c in nb.cells if c.cell_type == "code"]
    assert order.index(params[0].source) == order.index("print(hardware, context)") - 1
    assert not any("parameters" in c.metadata.get("tags", []) for c in nb.cells)
    # labels made unique to the profile, references with them
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "$$ (t4-pcie3-eq-a)" in text and "{eq}`t4-pcie3-eq-a`" in text
    assert "(t4-pcie3-fig-b)=" in text and "{numref}`Fig <t4-pcie3-fig-b>`" in text


def test_preparing_a_page_twice_changes_nothing(tmp_path):
    path, chapter = _executed(tmp_path)
    systems = {i: load_system(i) for i in ("article-reference", "t4-pcie3")}
    pages.prepare_page(path, chapter, systems["t4-pcie3"], systems=systems, namespace="t4-pcie3")
    once = path.read_bytes()
    pages.prepare_page(path, chapter, systems["t4-pcie3"], systems=systems, namespace="t4-pcie3")
    assert path.read_bytes() == once


def test_a_chapter_without_a_verdict_gets_the_switcher_under_its_opening(tmp_path):
    source = tmp_path / "01_x.md"
    source.write_text("# X\n", encoding="utf-8")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# X\n\nOpening.\n\n## First\n\nBody.")]
    path = tmp_path / "01_x.ipynb"
    nbformat.write(nb, str(path))
    systems = {"article-reference": load_system("article-reference")}
    pages.prepare_page(path, Chapter(source), systems["article-reference"], systems=systems)
    cells = nbformat.read(str(path), as_version=4).cells
    assert cells[0].source == "# X on the article's A100\n\nOpening."
    assert page_cells.SWITCHER_TAG in cells[1].metadata["tags"]
    assert cells[2].source.startswith("## First")


@pytest.mark.parametrize("ident", ["article-reference", "t4-pcie3"])
def test_index_pages_open_with_their_machine_and_verdict(ident):
    from kvoffload.bookbuild.runner import chapters
    from tests.support.paths import REPO

    every = chapters(REPO)
    text = pages.index_markdown(load_system(ident), every[:2], every[6:8])
    first, _, rest = text.partition("\n\n")
    assert first == f"# {pages.verdict_box.md_escape(page_cells.machine_label(load_system(ident)))}"
    assert rest.startswith('<div class="verdict"') and text.count('class="verdict"') == 1
    assert "../article-reference/07_validation" in text
