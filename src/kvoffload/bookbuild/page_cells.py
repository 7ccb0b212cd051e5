"""A chapter's notebook made into its page: the title names the machine, the verdict box and the
machine switcher under it, the parameters shown in one folded cell, labels unique per profile."""

from __future__ import annotations

import ast
import re

import nbformat

from kvoffload.bookbuild import notebook_cache
from kvoffload.bookbuild.profiles import REFERENCE
from kvoffload.bookbuild.runner import Chapter
from kvoffload.inputs.hardware import System
from kvoffload.report import verdict_box

SWITCHER_TAG = "kvoffload-switcher"
VERDICT_TAG = "kvoffload-verdict"  # the chapter's verdict cell: the switcher goes under it
PARAMETERS_TAG = "kvoffload-parameters"  # the folded cell with the values the page ran with
REFERENCE_LABEL = "the article's A100"  # the reference machine's short name in titles

# where a label is defined in a chapter, and where it is referred to (MyST)
_LABEL_DEFS = (
    re.compile(r"^(?P<pre>\()(?P<label>[A-Za-z][\w.:-]*)(?P<post>\)=)\s*$", re.M),
    re.compile(r"^(?P<pre>:(?:label|name):\s*)(?P<label>[A-Za-z][\w.:-]*)(?P<post>)\s*$", re.M),
    re.compile(r"^(?P<pre>\$\$.*\$\$\s*\()(?P<label>[A-Za-z][\w.:-]*)(?P<post>\))\s*$", re.M),
    re.compile(r"^(?P<pre>\$\$\s*\()(?P<label>[A-Za-z][\w.:-]*)(?P<post>\))\s*$", re.M),
)
_LABEL_REFS = re.compile(r"\{(?P<role>numref|eq|ref)\}`(?P<body>[^`]*)`")


def machine_label(system: System) -> str:
    """Return the short machine name a title carries ("T4 16GB, PCIe 3.0 x16")."""
    if system.id == REFERENCE:
        return REFERENCE_LABEL
    return verdict_box.machine_label(system.name)


def _tags(cell) -> list[str]:
    return list(cell.metadata.get("tags", []))


def _title_index(nb) -> int | None:
    return next(
        (
            i
            for i, c in enumerate(nb.cells)
            if c.cell_type == "markdown" and c.source.lstrip().startswith("# ")
        ),
        None,
    )


def retitle(nb, chapter: Chapter, system: System) -> None:
    """Make the chapter's heading, and so the page's <title>, name the machine."""
    index = _title_index(nb)
    if index is None:
        return
    cell = nb.cells[index]
    _, sep, rest = cell.source.lstrip().partition("\n")
    heading = f"# {chapter.title} on {verdict_box.md_escape(machine_label(system))}"
    cell.source = heading + sep + rest


def _add_switcher(nb, chapter: Chapter, profile: str, systems: dict[str, System]) -> None:
    nb.cells = [c for c in nb.cells if SWITCHER_TAG not in _tags(c)]
    links = " · ".join(
        f"**{pid}**" if pid == profile else f"{{doc}}`{pid} <../{pid}/{chapter.name}>`"
        for pid in systems
    )
    text = (
        f"```{{admonition}} Machine: {verdict_box.md_escape(systems[profile].name)}\n"
        ":class: kvoffload-switcher\n"
        f"This chapter computed for another machine: {links}. "
        f"All machines: {{doc}}`../machines`.\n```"
    )
    cell = nbformat.v4.new_markdown_cell(text)
    cell.metadata["tags"] = [SWITCHER_TAG]
    cell.pop("id", None)
    index = _title_index(nb)
    box = next((i for i, c in enumerate(nb.cells) if VERDICT_TAG in _tags(c)), None)
    if box is not None and (index is None or box > index):
        nb.cells.insert(box + 1, cell)  # under the verdict box, which is under the title
    elif index is None:
        nb.cells.insert(0, cell)
    else:
        # the switcher goes under the title and opening paragraph, before the first section
        title_cell = nb.cells[index]
        head, sep, rest = title_cell.source.partition("\n## ")
        title_cell.source = head.rstrip()
        nb.cells.insert(index + 1, cell)
        if sep:
            nb.cells.insert(index + 2, nbformat.v4.new_markdown_cell("## " + rest))


def parameters_source(defaults: str, injected: str) -> str:
    """Return the parameters cell with the injected values in place of the defaults.

    Comments and order are kept; a value injected for a name the cell does not assign is
    added at the end.
    """
    given: dict[str, str] = {}
    for node in ast.parse(injected).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            given[node.targets[0].id] = ast.get_source_segment(injected, node.value) or "None"
    lines = defaults.splitlines()
    done: set[str] = set()
    for node in reversed(ast.parse(defaults).body):
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in given
        ):
            continue
        name, v = node.targets[0].id, node.value
        assert v.end_lineno is not None and v.end_col_offset is not None
        if v.lineno != v.end_lineno:  # a value over several lines: replace those lines whole
            lines[node.lineno - 1 : v.end_lineno] = [f"{name} = {given[name]}"]
        else:
            line = lines[v.lineno - 1]
            lines[v.lineno - 1] = line[: v.col_offset] + given[name] + line[v.end_col_offset :]
        done.add(name)
    lines += [f"{k} = {v}" for k, v in given.items() if k not in done]
    return "\n".join(lines)


def show_parameters(nb) -> None:
    """Replace the removed parameters cell and papermill's injected one by one folded cell.

    The cell shows every parameter with the value the page ran with, so that the visible code
    runs as shown. It goes where the visible code starts: before the first code cell shown
    after the parameters and the verdict, else where the parameters were.
    """
    cells = nb.cells
    if any(PARAMETERS_TAG in _tags(c) for c in cells):
        return
    where = next((i for i, c in enumerate(cells) if "parameters" in _tags(c)), None)
    if where is None:
        return
    tag = notebook_cache.INJECTED_TAG
    injected_at = next((i for i, c in enumerate(cells) if tag in _tags(c)), None)
    injected = cells[injected_at].source if injected_at is not None else ""
    cell = nbformat.v4.new_code_cell(parameters_source(cells[where].source, injected))
    cell.metadata["tags"] = [PARAMETERS_TAG, "hide-input"]
    cell.pop("id", None)
    drop = {where} | ({injected_at} if injected_at is not None else set())
    hidden = {"remove-cell", "remove-input", VERDICT_TAG}
    shown = next(
        (
            i
            for i in range(max(drop) + 1, len(cells))
            if cells[i].cell_type == "code" and not hidden & set(_tags(cells[i]))
        ),
        where,
    )
    out = []
    for i, c in enumerate(cells):
        if i == shown:
            out.append(cell)
        if i not in drop:
            out.append(c)
    nb.cells = out


def namespace_labels(nb, prefix: str) -> None:
    """Prefix every label the chapter defines, and its references, with ``prefix`` + '-'.

    A chapter rendered once per profile would otherwise define each label once per profile,
    which a strict build refuses. Labels already prefixed are left as they are.
    """
    defined: set[str] = set()
    for c in nb.cells:
        name = c.metadata.get("mystnb", {}).get("figure", {}).get("name")
        if name:
            defined.add(str(name))
        if c.cell_type == "markdown":
            for pattern in _LABEL_DEFS:
                defined |= {m["label"] for m in pattern.finditer(c.source)}
    fresh = {x for x in defined if not x.startswith(prefix + "-")}
    if not fresh:
        return

    def define(m: re.Match) -> str:
        label = m["label"]
        return f"{m['pre']}{prefix}-{label}{m['post']}" if label in fresh else m.group(0)

    def refer(m: re.Match) -> str:
        body = m["body"]
        target = re.search(r"<([^>]+)>\s*$", body)
        label = target.group(1) if target else body.strip()
        if label not in fresh:
            return m.group(0)
        new = body.replace(f"<{label}>", f"<{prefix}-{label}>") if target else f"{prefix}-{label}"
        return f"{{{m['role']}}}`{new}`"

    for c in nb.cells:
        if c.cell_type == "markdown":
            text = c.source
            for pattern in _LABEL_DEFS:
                text = pattern.sub(define, text)
            c.source = _LABEL_REFS.sub(refer, text)
        figure = c.metadata.get("mystnb", {}).get("figure", {})
        if figure.get("name") in fresh:  # a code cell's output as a named figure
            figure["name"] = f"{prefix}-{figure['name']}"
