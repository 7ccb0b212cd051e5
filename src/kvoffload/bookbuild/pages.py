"""The generated pages: the intro's answer, the machines page, one index per profile, the switchers.

Each executed chapter is prepared for its page (page_cells: its title, verdict box, switcher,
parameters and labels) and written, once its bytes change.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import nbformat

from kvoffload.bookbuild import notebook_cache
from kvoffload.bookbuild.assets import catalog_bib, write_if_changed
from kvoffload.bookbuild.errors import ChapterError
from kvoffload.bookbuild.notebook_cache import error_outputs
from kvoffload.bookbuild.page_cells import (
    _add_switcher,
    machine_label,
    namespace_labels,
    retitle,
    show_parameters,
)
from kvoffload.bookbuild.profiles import REFERENCE
from kvoffload.bookbuild.runner import Chapter, package_memo, per_profile
from kvoffload.inputs.hardware import System, load_system, system_ids
from kvoffload.inputs.models import load_model
from kvoffload.report import verdict_box
from kvoffload.studies import reuse, verdict

ANSWER = "answer.md"  # book/generated/answer.md: the intro's opening, included by book/intro.md
MEASURED_A100 = "a100-80gb-sxm-pcie4"  # the intro's headline on a measured PCIe 4.0 link


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
