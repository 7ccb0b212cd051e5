"""The generated pages: machines page, one index per profile, the switchers, the bibliography."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import nbformat

from kvoffload.build.assets import catalog_bib, write_if_changed
from kvoffload.build.errors import ChapterError
from kvoffload.build.profiles import REFERENCE
from kvoffload.build.runner import Chapter, error_outputs, per_profile
from kvoffload.spec.hardware import System, load_system

SWITCHER_TAG = "kvoffload-switcher"


def _add_switcher(path: Path, chapter: Chapter, profile: str, systems: dict[str, System]) -> None:
    nb = nbformat.read(str(path), as_version=4)
    nb.cells = [c for c in nb.cells if SWITCHER_TAG not in c.metadata.get("tags", [])]
    links = " · ".join(
        f"**{pid}**" if pid == profile else f"{{doc}}`{pid} <../{pid}/{chapter.name}>`"
        for pid in systems
    )
    text = (
        f"```{{admonition}} Machine: {systems[profile].name}\n:class: kvoffload-switcher\n"
        f"This chapter computed for another machine: {links}. "
        f"All machines: {{doc}}`../machines`.\n```"
    )
    cell = nbformat.v4.new_markdown_cell(text)
    cell.metadata["tags"] = [SWITCHER_TAG]
    cell.pop("id", None)
    index = next(
        (
            i
            for i, c in enumerate(nb.cells)
            if c.cell_type == "markdown" and c.source.lstrip().startswith("# ")
        ),
        None,
    )
    if index is None:
        nb.cells.insert(0, cell)
    else:
        # the switcher goes under the title and opening paragraph, before the first section
        title_cell = nb.cells[index]
        head, sep, rest = title_cell.source.partition("\n## ")
        title_cell.source = head.rstrip()
        nb.cells.insert(index + 1, cell)
        if sep:
            nb.cells.insert(index + 2, nbformat.v4.new_markdown_cell("## " + rest))
    for c in nb.cells:
        c.pop("id", None)  # ids are random per write; leave them out so rebuilds are byte-stable
    nb.nbformat_minor = 4
    nbformat.write(nb, str(path))


def write_pages(
    root: Path, generated: Path, profile_ids: Sequence[str], chosen: Sequence[Chapter]
) -> None:
    """Write the machines page, one index per profile, the switchers and the catalog bibliography."""
    systems = {pid: load_system(pid) for pid in profile_ids}
    chosen = [c for c in chosen if per_profile(c)]  # once-only chapters stay on the main path
    lines = [
        "# Machines",
        "",
        "Every chapter, computed once for each hardware profile in the catalog. The first is the",
        "article's own machine (the reading path in the sidebar); the second is the same machine",
        "with measured figures. `kvoffload hardware show ID` lists every figure with its source.",
        "",
        "| profile | machine | chapters |",
        "|---|---|---|",
    ]
    for pid, system in systems.items():
        chapter_links = ", ".join(f"{{doc}}`{c.number} <{pid}/{c.name}>`" for c in chosen)
        lines.append(f"| `{pid}` | {system.name} | {chapter_links} |")
    others = [pid for pid in systems if pid != REFERENCE]
    lines += ["", "```{toctree}", ":hidden:", "", *[f"{pid}/index" for pid in others], "```", ""]
    write_if_changed(generated / "machines.md", "\n".join(lines))
    for pid in others:
        system = systems[pid]
        page = [
            f"# {system.name}",
            "",
            system.description,
            "",
            f"Profile `{pid}`. The chapters for this machine:",
            "",
        ]
        page += [f"- {{doc}}`{c.title} <{c.name}>`" for c in chosen]
        page += ["", "```{toctree}", ":hidden:", "", *[c.name for c in chosen], "```", ""]
        write_if_changed(generated / pid / "index.md", "\n".join(page))
    for pid in systems:
        for c in chosen:
            _add_switcher(generated / pid / f"{c.name}.ipynb", c, pid, systems)
    bib = (root / "book" / "references.bib").read_text(encoding="utf-8")
    write_if_changed(generated / "catalog.bib", catalog_bib(bib))


def refuse_error_outputs(generated: Path) -> None:
    """Refuse to build when any executed chapter holds an error output."""
    for path in sorted(generated.rglob("*.ipynb")):
        problems = error_outputs(json.loads(path.read_text(encoding="utf-8")))
        if problems:
            raise ChapterError(f"{path}: error output in {problems[0]}; re-run the chapter")


def prune(generated: Path, ids: Sequence[str], chosen: Sequence[Chapter]) -> None:
    """Remove generated chapters of profiles or chapters that are no longer built."""
    keep = {(pid, f"{c.name}.ipynb") for pid in ids for c in chosen if per_profile(c)}
    keep |= {(REFERENCE, f"{c.name}.ipynb") for c in chosen if not per_profile(c)}
    if not generated.exists():
        return
    for folder in generated.iterdir():
        if folder.is_dir():
            if folder.name not in ids:
                shutil.rmtree(folder)
                continue
            for nb in folder.glob("*.ipynb"):
                if (folder.name, nb.name) not in keep:
                    nb.unlink()
