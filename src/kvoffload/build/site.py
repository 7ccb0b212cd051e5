"""Build the book: run chapters per profile, write the generated pages, build offline, swap."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import nbformat

from kvoffload.build.runner import (
    Chapter,
    ChapterError,
    Job,
    Outcome,
    chapters,
    check_parameters,
    declared_parameters,
    error_outputs,
    per_profile,
    run_jobs,
)
from kvoffload.spec import catalog
from kvoffload.spec.errors import InputError
from kvoffload.spec.hardware import System, load_system, system_ids

REFERENCE = "article-reference"
SECOND = "a100-80gb-sxm-pcie4"  # the article's machine with real figures: listed first after it
SWITCHER_TAG = "kvoffload-switcher"
OFFSITE = re.compile(
    r"""<(?:script|link)\b[^>]*?(?:src|href)\s*=\s*["'](?:https?:)?//""", re.IGNORECASE
)


class BuildError(RuntimeError):
    """The Jupyter Book build failed; the previous site is left in place."""


# -- offline assets ------------------------------------------------------------------------------
def vendor_assets(static: Path) -> None:
    """Write the Vega bundle (wrapped so it cannot clash with Sphinx's globals) and MathJax."""
    import mathjax
    import vl_convert

    vendor = static / "vendor"
    (vendor / "mathjax").mkdir(parents=True, exist_ok=True)
    bundle = "(function () {\n" + vl_convert.javascript_bundle() + "\n})();\n"
    _write_if_changed(vendor / "vega-bundle.js", bundle)
    src = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5" / "tex-svg.js"
    _write_if_changed(vendor / "mathjax" / "tex-svg.js", src.read_text(encoding="utf-8"))


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def catalog_bib(existing: str) -> str:
    """Return BibTeX entries for every registered source not already in references.bib."""
    taken = set(re.findall(r"@\w+\{([^,]+),", existing))
    entries = []
    for key, src in sorted(catalog.sources().items()):
        if key in taken:
            continue
        fields = {
            "title": "{" + _bib(src.get("title", key)) + "}",
            "note": f"Catalog source ({src.get('kind', 'unspecified')})",
        }
        if src.get("url"):
            fields["url"] = src["url"]
        if src.get("author"):
            fields["author"] = "{" + _bib(str(src["author"])) + "}"
        if src.get("year"):
            fields["year"] = str(src["year"])
        body = ",\n".join(f"  {k} = {{{v}}}" for k, v in fields.items())
        entries.append(f"@misc{{{key},\n{body}\n}}\n")
    return "\n".join(entries)


def _bib(text: str) -> str:
    return (
        text.replace("{", "")
        .replace("}", "")
        .replace("%", r"\%")
        .replace("&", r"\&")
        .replace("#", r"\#")
    )


# -- chapter execution per profile ------------------------------------------------------------------
@dataclass(frozen=True)
class Profile:
    """A hardware profile to run the chapters for: its id and what the chapters are given."""

    id: str
    hardware: str  # the parameter value: a catalog id or an absolute profile path
    system: System
    files: tuple[Path, ...] = ()


def resolve_profile(ref: str) -> Profile:
    """Return the profile for a catalog id or a profile file path."""
    system = load_system(ref)
    if system.origin == "catalog":
        return Profile(system.id, ref, system)
    path = Path(ref).resolve()
    return Profile(system.id, str(path), system, (path,))


def ordered_profiles(ids: Sequence[str] | None) -> list[str]:
    """Return profile ids with the reference first and its real-figure twin second."""
    chosen = list(dict.fromkeys(ids or system_ids()))
    for ident in chosen:
        if ident not in system_ids():
            raise InputError(f"unknown system id {ident!r}", field="--profiles")
    if REFERENCE not in chosen:
        chosen.insert(0, REFERENCE)
    order = {REFERENCE: 0, SECOND: 1}
    return sorted(chosen, key=lambda i: (order.get(i, 2), system_ids().index(i)))


def plan(
    root: Path,
    profiles: Sequence[Profile],
    out_dir: Path,
    chosen: Sequence[Chapter] | None = None,
    params: dict | None = None,
) -> list[Job]:
    """Return one job per chapter and profile, refusing parameters a chapter does not declare."""
    jobs = []
    for chapter in chosen or chapters(root):
        if not per_profile(chapter):  # rendered once, on the reference machine's path
            check_parameters(chapter, params or {})
            out = out_dir / profiles[0].id / f"{chapter.name}.ipynb"
            jobs.append(Job(chapter, profiles[0].id, dict(params or {}), out))
            continue
        for p in profiles:
            values = {"hardware": p.hardware, **(params or {})}
            check_parameters(chapter, values)
            jobs.append(
                Job(chapter, p.id, values, out_dir / p.id / f"{chapter.name}.ipynb", p.files)
            )
    return jobs


# -- generated pages ------------------------------------------------------------------------------------
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
    _write_if_changed(generated / "machines.md", "\n".join(lines))
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
        _write_if_changed(generated / pid / "index.md", "\n".join(page))
    for pid in systems:
        for c in chosen:
            _add_switcher(generated / pid / f"{c.name}.ipynb", c, pid, systems)
    bib = (root / "book" / "references.bib").read_text(encoding="utf-8")
    _write_if_changed(generated / "catalog.bib", catalog_bib(bib))


def refuse_error_outputs(generated: Path) -> None:
    """Refuse to build when any executed chapter holds an error output."""
    for path in sorted(generated.rglob("*.ipynb")):
        problems = error_outputs(json.loads(path.read_text(encoding="utf-8")))
        if problems:
            raise ChapterError(f"{path}: error output in {problems[0]}; re-run the chapter")


# -- the Sphinx build --------------------------------------------------------------------------------------
def _inputs_digest(root: Path) -> str:
    """Hash everything the Sphinx build reads: config, toc, pages, executed chapters, the lock."""
    h = hashlib.sha256()
    files = [root / "_config.yml", root / "_toc.yml"]
    files += [p for p in (root / "requirements.lock",) if p.is_file()]  # theme and Sphinx versions
    files += sorted(
        p for p in (root / "book").rglob("*") if p.is_file() and ".running-" not in p.name
    )
    for p in files:
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def jupyter_book(
    src: Path, staging: Path, *, config: Path | None = None, toc: Path | None = None
) -> None:
    """Run a strict Jupyter Book build of ``src`` into ``staging``; raise BuildError with its log."""
    cmd = [
        str(Path(sys.executable).with_name("jupyter-book")),
        "build",
        str(src),
        "--path-output",
        str(staging),
        "-W",
        "-n",
        "--keep-going",
    ]
    if config:
        cmd += ["--config", str(config)]
    if toc:
        cmd += ["--toc", str(toc)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        log = (proc.stdout + proc.stderr).strip().splitlines()
        warnings = [ln for ln in log if "WARNING" in ln or "ERROR" in ln or "Error" in ln]
        detail = "\n".join((warnings or log)[-15:])
        raise BuildError(f"the Jupyter Book build failed (exit {proc.returncode}):\n{detail}")


def check_offline(html_dir: Path) -> list[str]:
    """Return pages that load a script or stylesheet from another host."""
    return [
        str(p.relative_to(html_dir))
        for p in sorted(html_dir.rglob("*.html"))
        if OFFSITE.search(p.read_text(encoding="utf-8", errors="replace"))
    ]


def swap_in(new_html: Path, target: Path) -> None:
    """Replace ``target`` with ``new_html`` so that a reader never sees a half-written site."""
    target.parent.mkdir(parents=True, exist_ok=True)
    previous = target.with_name(target.name + ".previous")
    shutil.rmtree(previous, ignore_errors=True)
    if target.exists():
        target.rename(previous)
    try:
        new_html.rename(target)
    except OSError:
        if previous.exists():
            previous.rename(target)
        raise
    shutil.rmtree(previous, ignore_errors=True)


def build_and_swap(src: Path, staging: Path, target: Path, *, stamp: str | None = None) -> None:
    """Build ``src`` in ``staging``, refuse off-site assets, then swap the result in as ``target``."""
    shutil.rmtree(staging / "_build" / "html", ignore_errors=True)
    jupyter_book(src, staging)
    new_html = staging / "_build" / "html"
    offsite = check_offline(new_html)
    if offsite:
        raise BuildError(
            f"pages load a script or stylesheet from another host: {', '.join(offsite[:5])}"
        )
    if stamp is not None:
        (new_html / ".kvoffload-inputs").write_text(stamp)
    swap_in(new_html, target)


@dataclass(frozen=True)
class BookResult:
    """What a book build did."""

    html: Path
    outcomes: list[Outcome]
    built: bool  # False when nothing changed and the site was left as it was
    seconds: float

    @property
    def executed(self) -> int:
        """Return how many chapter runs executed (not cached)."""
        return sum(o.status == "executed" for o in self.outcomes)


def build_book(
    root: Path,
    profile_ids: Sequence[str] | None = None,
    *,
    n_jobs: int | None = None,
    progress: bool = True,
) -> BookResult:
    """Execute every chapter for every profile (cached), then build _build/html strictly and swap it in."""
    started = time.perf_counter()
    ids = ordered_profiles(profile_ids)
    profiles = [resolve_profile(i) for i in ids]
    generated = root / "book" / "generated"
    chosen = chapters(root)
    jobs = plan(root, profiles, generated, chosen)
    outcomes = run_jobs(jobs, n_jobs=n_jobs, progress=progress)
    _prune(generated, ids, chosen)
    write_pages(root, generated, ids, chosen)
    refuse_error_outputs(generated)
    vendor_assets(root / "book" / "_static")
    html = root / "_build" / "html"
    stamp = html / ".kvoffload-inputs"
    digest = _inputs_digest(root)
    if stamp.is_file() and stamp.read_text() == digest:
        return BookResult(html, outcomes, False, time.perf_counter() - started)
    build_and_swap(root, root / "_build" / ".staging", html, stamp=digest)
    return BookResult(html, outcomes, True, time.perf_counter() - started)


def _prune(generated: Path, ids: Sequence[str], chosen: Sequence[Chapter]) -> None:
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


# -- one machine, outside the book -------------------------------------------------------------------------
@dataclass(frozen=True)
class RunResult:
    """What ``kvoffload run`` wrote."""

    notebooks: list[Path]
    html: Path
    outcomes: list[Outcome]


def run_for_profile(
    root: Path,
    hardware: str,
    *,
    model: str | None = None,
    chapter_keys: Sequence[str] | None = None,
    out: Path | None = None,
    n_jobs: int | None = None,
    progress: bool = True,
) -> RunResult:
    """Execute chapters for one profile into ``out`` and build offline standalone pages there."""
    from kvoffload.build.runner import select

    profile = resolve_profile(hardware)
    chosen = select(chapters(root), chapter_keys)
    if model is not None:
        from kvoffload.spec.models import load_model

        load_model(model)  # refuse an unknown model before starting kernels
        model = str(Path(model).resolve()) if Path(model).exists() else model
    out = (out or Path("kvoffload-run") / profile.id).resolve()
    params = {"model": model} if model is not None else {}
    jobs = []
    for chapter in chosen:
        declared = declared_parameters(chapter)
        values = {
            k: v for k, v in {"hardware": profile.hardware, **params}.items() if k in declared
        }
        check_parameters(chapter, values)
        jobs.append(Job(chapter, profile.id, values, out / f"{chapter.name}.ipynb", profile.files))
    outcomes = run_jobs(jobs, n_jobs=n_jobs, progress=progress)
    src = out / ".site-src"
    shutil.rmtree(src, ignore_errors=True)
    (src / "book" / "generated").mkdir(parents=True)
    for job in jobs:
        shutil.copy2(job.out, src / job.out.name)
    shutil.copytree(
        root / "book" / "_static", src / "book" / "_static", ignore=shutil.ignore_patterns("vendor")
    )
    shutil.copytree(root / "book" / "_ext", src / "book" / "_ext")
    vendor_assets(src / "book" / "_static")
    bib = (root / "book" / "references.bib").read_text(encoding="utf-8")
    (src / "book" / "references.bib").write_text(bib, encoding="utf-8")
    (src / "book" / "generated" / "catalog.bib").write_text(catalog_bib(bib), encoding="utf-8")
    shutil.copy2(root / "_config.yml", src / "_config.yml")
    index = [
        f"# {profile.system.name}",
        "",
        f"Chapters computed for profile `{profile.id}` by `kvoffload run`.",
        "",
    ]
    index += [f"- {{doc}}`{c.title} <{c.name}>`" for c in chosen]
    index += ["", "## References", "", "```{bibliography}", "```"]
    (src / "index.md").write_text("\n".join(index) + "\n", encoding="utf-8")
    toc = ["format: jb-book", "root: index", "chapters:", *[f"  - file: {c.name}" for c in chosen]]
    (src / "_toc.yml").write_text("\n".join(toc) + "\n", encoding="utf-8")
    build_and_swap(src, out / ".site-build", out / "html")
    return RunResult([j.out for j in jobs], out / "html", outcomes)
