"""``kvoffload run``: execute chapters for one machine, outside the book, with offline pages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kvoffload.bookbuild import notebook_cache
from kvoffload.bookbuild.assets import VENDOR, catalog_bib, vendor_assets, vendor_current
from kvoffload.bookbuild.jupyterbook import WarmSphinx, build_and_swap
from kvoffload.bookbuild.kernels import EarlyKernel
from kvoffload.bookbuild.profiles import Profile, resolve_profile
from kvoffload.bookbuild.runner import (
    Chapter,
    Job,
    Outcome,
    cached,
    chapter_imports,
    chapters,
    chapters_folder,
    check_parameters,
    declared_parameters,
    per_profile,
    run_jobs,
    select,
)
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.text import markdown_text

# imported once the kernel has started (they take a second; the kernel's start overlaps them):
# kvoffload.bookbuild.pages and kvoffload.inputs.models

# each profile's executed chapters, kept by their inputs (code, parameters, files): a run for the
# same machine into another folder takes them instead of executing again
RUNS = Path("_build") / ".cache" / "runs"
MARKER = ".kvoffload-run"  # in each folder `kvoffload run` made, and so may overwrite
_MARKER_TEXT = "made by kvoffload run, which replaces what it wrote here on the next run\n"


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
    profile = resolve_profile(hardware)
    chosen = select(chapters(root), chapter_keys)
    out = (out or Path("kvoffload-run") / profile.id).resolve()
    # with no run kept for these chapters they will execute: their kernel starts now, and its
    # start and the chapters' imports overlap everything this process does before they run
    stored = [d / f"{c.name}.ipynb" for d in (out, root / RUNS / profile.id) for c in chosen]
    early = None if any(p.is_file() for p in stored) else EarlyKernel(chapters_folder(root))
    try:
        if early is not None:
            early.preimport(chapter_imports(chosen))
        return _run_and_build(root, profile, chosen, model, out, n_jobs, progress, early)
    finally:
        if early is not None:
            early.close()  # when not taken (an error before the jobs ran)


def _run_and_build(
    root: Path,
    profile: Profile,
    chosen: list[Chapter],
    model: str | None,
    out: Path,
    n_jobs: int | None,
    progress: bool,
    early: EarlyKernel | None,
) -> RunResult:
    """Execute the chosen chapters into ``out`` and build their pages in ``out/html``."""
    if model is not None:
        from kvoffload.inputs.models import load_model

        load_model(model)  # refuse an unknown model before running chapters
        model = str(Path(model).resolve()) if Path(model).exists() else model
    claim_folder(out)
    src, staging = out / ".site-src", out / ".site-build"
    # the last run's pages go before Sphinx starts: removed under its imports, the extension's
    # folder would be remembered as missing and the build would fail to import it
    shutil.rmtree(src, ignore_errors=True)
    jobs = _jobs(profile, chosen, model, out)
    runs = root / RUNS / profile.id
    for job in jobs:
        _take_stored(job, runs / job.out.name)
    static = root / "book" / "_static"
    vendor = _VendorAssets(static)  # made in a process of its own when missing (seconds)
    with vendor, WarmSphinx(src, staging) as warm:  # Sphinx's imports overlap the chapters' runs
        _write_book(root, profile, chosen, src, with_vendor=vendor.proc is None)
        warm.setup()  # everything but the pages is in place: Sphinx sets up while they run
        from kvoffload.bookbuild.pages import prepare_page

        outcomes = run_jobs(jobs, n_jobs=n_jobs, progress=progress, early=early)
        for job in jobs:
            _keep(job.out, runs / job.out.name)
        if vendor.proc is not None:
            vendor.wait()
            shutil.copytree(static / VENDOR, src / "book" / "_static" / VENDOR)
        for job in jobs:
            shutil.copy2(job.out, src / job.out.name)
            # the page's copy: its title names the machine, its parameters show folded
            machine = profile.system if per_profile(job.chapter) else None
            prepare_page(src / job.out.name, job.chapter, machine)
        build_and_swap(src, staging, out / "html", extra={MARKER: _MARKER_TEXT.encode()}, warm=warm)
    return RunResult([out / f"{c.name}.ipynb" for c in chosen], out / "html", outcomes)


def _jobs(profile: Profile, chosen: list[Chapter], model: str | None, out: Path) -> list[Job]:
    """Return one job per chosen chapter, its parameters checked."""
    params = {"model": model} if model is not None else {}
    jobs = []
    for chapter in chosen:
        declared = declared_parameters(chapter)
        values = {
            k: v for k, v in {"hardware": profile.hardware, **params}.items() if k in declared
        }
        check_parameters(chapter, values)
        jobs.append(Job(chapter, profile.id, values, out / f"{chapter.name}.ipynb", profile.files))
    return jobs


_MAKE_VENDOR = (
    "import sys; from pathlib import Path; from kvoffload.bookbuild.assets import vendor_assets; "
    "vendor_assets(Path(sys.argv[1]))"
)


class _VendorAssets:
    """The Vega bundle and MathJax as the book keeps them (git-ignored), made once per version,
    then copied with the rest of the static files: the Vega bundle takes seconds
    and holds the interpreter's lock meanwhile, so when missing they are made in a process of
    their own while the chapters run (a context manager: left running, it is killed)."""

    def __init__(self, static: Path) -> None:
        self.static = static
        self.proc: subprocess.Popen[bytes] | None = None
        if not vendor_current(static):
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _MAKE_VENDOR, str(static)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

    def wait(self) -> None:
        """Wait for the files; when that process failed, make them here (raising its error)."""
        if self.proc is not None and self.proc.wait() != 0:
            vendor_assets(self.static)

    def __enter__(self) -> _VendorAssets:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _write_book(
    root: Path, profile: Profile, chosen: list[Chapter], src: Path, *, with_vendor: bool
) -> None:
    """Write the pages' book in ``src``, the pages aside: static files (the vendored ones when
    ``with_vendor``), extension, bibliography, index, contents, then the configuration."""
    static = root / "book" / "_static"
    shutil.copytree(
        static,
        src / "book" / "_static",
        ignore=lambda folder, names: [] if with_vendor or Path(folder) != static else [VENDOR],
    )
    (src / "book" / "generated").mkdir(parents=True)
    shutil.copytree(root / "book" / "_ext", src / "book" / "_ext")
    bib = (root / "book" / "references.bib").read_text(encoding="utf-8")
    (src / "book" / "references.bib").write_text(bib, encoding="utf-8")
    (src / "book" / "generated" / "catalog.bib").write_text(catalog_bib(bib), encoding="utf-8")
    index = [
        f"# {markdown_text(profile.system.name)}",
        "",
        f"Chapters computed for profile `{profile.id}` by `kvoffload run`.",
        "",
    ]
    index += [f"- {{doc}}`{c.title} <{c.name}>`" for c in chosen]
    index += ["", "## References", "", "```{bibliography}", "```"]
    (src / "index.md").write_text("\n".join(index) + "\n", encoding="utf-8")
    toc = ["format: jb-book", "root: index", "chapters:", *[f"  - file: {c.name}" for c in chosen]]
    (src / "_toc.yml").write_text("\n".join(toc) + "\n", encoding="utf-8")
    # last, and whole: Sphinx's preloading reads it if it is there, and then the extension too
    tmp = src / "._config.yml.tmp"
    shutil.copy2(root / "_config.yml", tmp)
    os.replace(tmp, src / "_config.yml")


def _take_stored(job: Job, stored: Path) -> None:
    """Start ``job`` from the run kept in ``stored`` when it is sound and made from the same inputs."""
    if cached(job) or notebook_cache.load(stored, job.key()) is None:
        return
    shutil.copy2(stored, job.out)


def _keep(run: Path, stored: Path) -> None:
    """Keep a verified run in ``stored`` (atomically), for the next ``kvoffload run`` anywhere."""
    if stored.is_file() and stored.read_bytes() == run.read_bytes():
        return
    stored.parent.mkdir(parents=True, exist_ok=True)
    tmp = stored.with_name(f".{stored.name}.{os.getpid()}.tmp")
    shutil.copy2(run, tmp)
    os.replace(tmp, stored)


def _owned(folder: Path) -> bool:
    return (folder / MARKER).is_file()


def claim_folder(out: Path) -> None:
    """Make ``out`` a folder this command owns, or refuse one that holds anything of the user's.

    A new or empty folder is taken (and marked); a folder, or its ``html`` page folder, that
    holds files but no marker was not made by ``kvoffload run`` and is left untouched.
    """
    if out.exists() and not out.is_dir():
        raise InputError("is a file, not a folder", file=str(out), field="--out")
    html = out / "html"
    if out.is_dir() and not _owned(out) and any(out.iterdir()):
        raise InputError(
            f"this folder is not empty and was not made by kvoffload run (it has no {MARKER} "
            "file); nothing was written: choose a new or empty folder",
            file=str(out),
            field="--out",
        )
    if html.exists() and not (html.is_dir() and _owned(html)):
        raise InputError(
            f"this page folder was not made by kvoffload run (it has no {MARKER} file); "
            "nothing was written: move it away or choose another --out",
            file=str(html),
            field="--out",
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text(_MARKER_TEXT, encoding="utf-8")
