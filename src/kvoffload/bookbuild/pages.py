"""The generated pages: the intro's answer, the machines page, one index per profile, the switchers.

Each executed chapter is prepared for its page here: its heading (and so the page's title) names
the machine, its verdict box (the cell tagged ``kvoffload-verdict``) stays under the heading with
the machine switcher below it, the parameters it ran with are shown in one folded cell, and the
labels of a chapter rendered once per profile are made unique to the profile.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import nbformat

from kvoffload.bookbuild import notebook_cache
from kvoffload.bookbuild.assets import catalog_bib, write_if_changed
from kvoffload.bookbuild.errors import ChapterError
from kvoffload.bookbuild.notebook_cache import error_outputs
from kvoffload.bookbuild.profiles import REFERENCE
from kvoffload.bookbuild.runner import Chapter, package_memo, per_profile
from kvoffload.inputs.hardware import System, load_system, system_ids
from kvoffload.inputs.models import load_model
from kvoffload.report import verdict_box
from kvoffload.studies import reuse, verdict

SWITCHER_TAG = "kvoffload-switcher"
VERDICT_TAG = "kvoffload-verdict"  # the chapter's verdict cell: the switcher goes under it
PARAMETERS_TAG = "kvoffload-parameters"  # the folded cell with the values the page ran with
MEASURED_A100 = "a100-80gb-sxm-pcie4"  # the intro's headline on a measured PCIe 4.0 link
REFERENCE_LABEL = "the article's A100"  # the reference machine's short name in titles
ANSWER = "answer.md"  # book/generated/answer.md: the intro's opening, included by book/intro.md

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


def prepare_page(
    path: Path,
    chapter: Chapter,
    system: System | None,
    *,
    systems: dict[str, System] | None = None,
    namespace: str | None = None,
    source: Path | None = None,
) -> bool:
    """Prepare one executed chapter for its page (see the module's docstring); idempotent.

    The executed notebook is read from ``source`` (default: ``path`` itself) and the page is
    written to ``path`` only when its bytes change, so that Sphinx re-reads only changed pages.
    Return True when the page was written.
    """
    nb = nbformat.read(str(source or path), as_version=4)
    if system is not None:
        retitle(nb, chapter, system)
    if systems is not None and system is not None:
        _add_switcher(nb, chapter, system.id, systems)
    show_parameters(nb)
    if namespace:
        namespace_labels(nb, namespace)
    for c in nb.cells:
        c.pop("id", None)  # ids are random per write; leave them out so rebuilds are byte-stable
    nb.nbformat_minor = 4
    nb.metadata.pop(notebook_cache.META, None)  # the cache's seal is not part of the page
    return notebook_cache.write_if_changed(path, nb)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _PageMemo:
    """What each page was last prepared from, so an unchanged page is not read and rewritten.

    A page depends on its executed notebook, its chapter's title, its machine and the machines
    the switcher lists, and this module's code; their hash, and the page's own, are kept in
    ``generated/.pages.json`` (written only by a successful preparation).
    """

    FILE = ".pages.json"

    def __init__(self, generated: Path, systems: dict[str, System]) -> None:
        self.path = generated / self.FILE
        try:
            self.seen: dict[str, str] = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.seen = {}
        if not isinstance(self.seen, dict):
            self.seen = {}
        self.generated = generated
        common = hashlib.sha256(Path(__file__).read_bytes())
        common.update(Path(verdict_box.__file__).read_bytes())
        common.update(
            json.dumps([[s.id, s.name, machine_label(s)] for s in systems.values()]).encode()
        )
        self.common = common.hexdigest()
        self.systems = systems

    def _key(self, source: Path, chapter: Chapter, pid: str | None) -> str:
        h = hashlib.sha256(self.common.encode())
        h.update(source.read_bytes())
        h.update(json.dumps([chapter.name, chapter.title, pid]).encode())
        return h.hexdigest()

    def fresh(self, page: Path, source: Path, chapter: Chapter, pid: str | None) -> bool:
        """True when ``page`` exists and was prepared from exactly these inputs."""
        rel = str(page.relative_to(self.generated))
        if not page.is_file() or not source.is_file():
            return False
        return self.seen.get(rel) == self._key(source, chapter, pid) + _digest(page)

    def record(self, page: Path, source: Path, chapter: Chapter, pid: str | None) -> None:
        """Remember what ``page`` was just prepared from."""
        rel = str(page.relative_to(self.generated))
        self.seen[rel] = self._key(source, chapter, pid) + _digest(page)

    def save(self) -> None:
        """Write the memo (only when it changed)."""
        write_if_changed(self.path, json.dumps(self.seen, indent=0, sort_keys=True) + "\n")


def _once(chosen: Sequence[Chapter]) -> list[Chapter]:
    return [c for c in chosen if not per_profile(c)]


def answer_markdown(systems: dict[str, System]) -> str:
    """Return the intro's opening: the book's answer (streaming, then reuse), the article it answers
    (book/intro.md includes it from book/generated/), and the reference machine's verdict box."""
    ref_system = systems.get(REFERENCE) or load_system(REFERENCE)
    ref = verdict.verdict(ref_system)
    # the other half: the same request's prefix reloaded once from host memory (chapter 11)
    hit = reuse.headline(
        reuse.cache(ref_system, load_model(ref.workload.model)), ref.workload.context
    )
    fastest = min(
        (verdict.verdict(load_system(i)) for i in system_ids() if i != REFERENCE),
        key=lambda v: v.offloaded_ms,
    )
    # the same request on a catalog A100 whose link was measured, beside the article's 32 GB/s
    measured = verdict.verdict(systems.get(MEASURED_A100) or load_system(MEASURED_A100))
    claims = f"/book/generated/{REFERENCE}/08_claims"
    source = (
        "The question comes from an article in Korean, {cite:t}`kvoffload-article`, which argues "
        f"that offloading the KV cache is rarely worth it. Chapter 08, {{doc}}`{claims}`, quotes "
        "and judges each of its claims, and the {doc}`/book/generated/machines` page gives every "
        "machine's verdict side by side."
    )
    return (
        "\n\n".join(
            [
                verdict_box.answer(ref, fastest, hit, measured=measured),
                source,
                verdict_box.verdict_html(ref),
            ]
        )
        + "\n"
    )


def machines_markdown(systems: dict[str, System]) -> str:
    """Return the Machines page: one row per profile, each linking to its pages."""

    def link(row: verdict.MachineRow) -> str:
        label = verdict_box.md_escape(machine_label(systems[row.system_id]))
        target = "../intro" if row.system_id == REFERENCE else f"{row.system_id}/index"
        return f"{{doc}}`{label} <{target}>`"

    rows = [verdict.machine_row(s) for s in systems.values()]
    head = verdict.HEADLINE
    model = load_model(head.model).name
    ks = [f"{c // 1000}K" for c in verdict.MACHINE_CONTEXTS]
    ns = [f"{c:,}" for c in verdict.MACHINE_CONTEXTS]
    kays = ", ".join(ks[:-1]) + " and " + ks[-1]
    counts = ", ".join(ns[:-1]) + " and " + ns[-1]
    lines = [
        "# Machines",
        "",
        "Every chapter, computed once for each hardware profile in the catalog. The first is the",
        "article's own machine (the reading path in the sidebar); each row links to a machine's",
        "chapters. `kvoffload hardware show ID` lists every figure with its source.",
        "",
        f"Workload: {verdict_box.md_escape(model)}, {head.weights} weights and cache, one request;",
        f"{kays} are {counts} tokens, as in the article. TPOT is one decode step at that context with",
        "every byte on the GPU, then with the whole cache in host memory (the weights on the GPU",
        "where they fit, else as much of them as fits). The longest context is the longest that",
        f"meets a {verdict.BUDGET_MS:g} ms TPOT with the cache offloaded (the weights placed as at",
        f"{head.context:,} tokens: the figure each machine's page opens with); the link is the",
        "achievable host-to-GPU copy rate.",
        "",
        verdict_box.machines_table(rows, link),
        "",
    ]
    others = [pid for pid in systems if pid != REFERENCE]
    lines += ["```{toctree}", ":hidden:", "", *[f"{pid}/index" for pid in others], "```", ""]
    return "\n".join(lines)


def index_markdown(
    system: System, chapters_here: Sequence[Chapter], once: Sequence[Chapter]
) -> str:
    """Return one profile's index page: its verdict, its description, its chapters."""
    v = verdict.verdict(system)
    page = [
        f"# {verdict_box.md_escape(machine_label(system))}",
        "",
        verdict_box.verdict_html(v),
        "",
        verdict_box.md_escape(system.description or system.name),
        "",
        f"Profile `{system.id}`: {verdict_box.md_escape(system.name)}. The chapters computed for",
        "this machine:",
        "",
    ]
    page += [f"- {{doc}}`{c.title} <{c.name}>`" for c in chapters_here]
    if once:
        page += ["", "The same on every machine:", ""]
        page += [f"- {{doc}}`{c.title} <../{REFERENCE}/{c.name}>`" for c in once]
    page += ["", "```{toctree}", ":hidden:", "", *[c.name for c in chapters_here], "```", ""]
    return "\n".join(page)


def write_pages(
    root: Path,
    generated: Path,
    profile_ids: Sequence[str],
    chosen: Sequence[Chapter],
    executed: Path | None = None,
    derived: Path | None = None,
) -> None:
    """Write the intro's answer, the machines page, one index per profile, and each chapter's page.

    A chapter's page is made from its executed notebook in ``executed``/<profile>/ (default:
    the page itself, prepared in place); every file is written only when its bytes change. With
    ``derived``, the Markdown pages (verdicts from the package alone) are kept there between
    builds until the package changes.
    """
    runs = executed or generated
    systems = {pid: load_system(pid) for pid in profile_ids}
    once = _once(chosen)
    every = [c for c in chosen if per_profile(c)]  # once-only chapters stay on the main path

    def markdown() -> dict[str, bytes]:
        files = {ANSWER: answer_markdown(systems), "machines.md": machines_markdown(systems)}
        for pid in (p for p in systems if p != REFERENCE):
            files[f"{pid}/index.md"] = index_markdown(systems[pid], every, once)
        return {rel: text.encode("utf-8") for rel, text in files.items()}

    # the verdicts these pages show come from the package alone: computed once per package
    # (and this module, which writes them: the package's digest leaves the build out)
    seen = hashlib.sha256(Path(__file__).read_bytes())
    seen.update(json.dumps([list(profile_ids), [[c.name, c.title] for c in chosen]]).encode())
    name = "pages-" + seen.hexdigest()[:16]
    if derived is not None:
        files = package_memo(derived, name, markdown)
        keep_newest(derived, "pages-*.json", derived / f"{name}.json", PAGE_MEMOS)
    else:
        files = markdown()
    for rel, body in files.items():
        write_if_changed(generated / rel, body.decode("utf-8"))
    memo = _PageMemo(generated, systems)
    for pid in systems:
        for c in every:
            name = f"{c.name}.ipynb"
            page, source = generated / pid / name, runs / pid / name
            if memo.fresh(page, source, c, pid):
                continue
            prepare_page(page, c, systems[pid], systems=systems, namespace=pid, source=source)
            memo.record(page, source, c, pid)
    for c in once:
        name = f"{c.name}.ipynb"
        page, source = generated / REFERENCE / name, runs / REFERENCE / name
        if not memo.fresh(page, source, c, None):
            prepare_page(page, c, None, source=source)
            memo.record(page, source, c, None)
    memo.save()
    bib = (root / "book" / "references.bib").read_text(encoding="utf-8")
    write_if_changed(generated / "catalog.bib", catalog_bib(bib))


PAGE_MEMOS = 8  # the page memos kept: one per set of profiles and chapters built lately


def keep_newest(folder: Path, pattern: str, used: Path, n: int) -> None:
    """Mark ``used`` as just used, then delete all but the ``n`` newest files matching ``pattern``."""
    with contextlib.suppress(OSError):
        os.utime(used)
    found = []
    for path in folder.glob(pattern):
        with contextlib.suppress(OSError):
            found.append((path.stat().st_mtime_ns, path.name, path))
    for *_, path in sorted(found, reverse=True)[n:]:
        path.unlink(missing_ok=True)


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
