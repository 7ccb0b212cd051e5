"""Build the book: run chapters per profile, write the generated pages, build offline, swap."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvoffload.bookbuild.assets import vendor_assets
from kvoffload.bookbuild.jupyterbook import STAMP, WarmSphinx, build_and_swap
from kvoffload.bookbuild.lock import exclusive
from kvoffload.bookbuild.pages import prune, refuse_error_outputs, write_pages
from kvoffload.bookbuild.profiles import ordered_profiles, plan, resolve_profile
from kvoffload.bookbuild.runner import Outcome, chapters, package_memo, run_jobs
from kvoffload.inputs.signals import stop_on_signals
from kvoffload.report import calculator_page

EXECUTED = Path("_build") / ".cache" / "executed"  # each chapter's last run, per profile
DERIVED = Path("_build") / ".cache" / "derived"  # what the build computes from the package alone
STAGING = Path("_build") / ".staging"  # Sphinx's working tree, kept for incremental builds
LOCK = Path("_build") / ".kvoffload-book.lock"


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

    @property
    def rendered(self) -> int:
        """Return how many chapters were re-rendered from their stored run (prose edits)."""
        return sum(o.status == "rendered" for o in self.outcomes)


def _inputs_digest(root: Path, extra: Mapping[str, bytes] | None = None) -> str:
    """Hash everything the build reads: config, toc, pages, executed chapters, the lock, ``extra``."""
    h = hashlib.sha256()
    for rel, body in sorted((extra or {}).items()):
        h.update(rel.encode())
        h.update(body)
    files = [root / "_config.yml", root / "_toc.yml"]
    files += [p for p in (root / "requirements.lock",) if p.is_file()]  # theme and Sphinx versions
    files += sorted(
        p for p in (root / "book").rglob("*") if p.is_file() and ".running-" not in p.name
    )
    for p in files:
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _structure(root: Path) -> str:
    """Hash what every page shows around its own text: the config, the toc, the extension and
    static files, the lock, and each page with its title.

    When it changes, Sphinx starts from a clean staging tree (an incremental build would leave
    other pages' sidebars naming old titles); otherwise it re-reads only changed pages.
    """
    h = hashlib.sha256()
    for p in (root / "_config.yml", root / "_toc.yml", root / "requirements.lock"):
        h.update(p.read_bytes() if p.is_file() else b"")
    # the extension, templates, styles and scripts shape every page: Sphinx does not see them change
    for folder in (root / "book" / "_ext", root / "book" / "_static"):
        for p in sorted(folder.rglob("*")) if folder.is_dir() else []:
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(root)).encode())
                h.update(p.read_bytes())
    for p in sorted((root / "book").rglob("*")):
        if p.suffix in {".md", ".ipynb"} and ".writing-" not in p.name:
            h.update(str(p.relative_to(root)).encode())
            h.update(_title(p).encode())
    return h.hexdigest()


def _title(page: Path) -> str:
    """Return a page's first heading (Markdown or notebook), or ''."""
    if page.suffix == ".md":
        lines = page.read_text(encoding="utf-8").splitlines()
    else:
        import json

        cells = json.loads(page.read_text(encoding="utf-8")).get("cells", [])
        lines = [
            ln
            for c in cells
            if c.get("cell_type") == "markdown"
            for ln in "".join(c["source"]).splitlines()
        ]
    return next((ln for ln in lines if ln.startswith("# ")), "")


def build_book(
    root: Path,
    profile_ids: Sequence[str] | None = None,
    *,
    n_jobs: int | None = None,
    progress: bool = True,
) -> BookResult:
    """Execute every chapter for every profile (cached), then build _build/html strictly and swap it in.

    One build per checkout at a time (a second one is refused); Ctrl-C, SIGTERM or SIGHUP stop
    it at once, kill its kernels and leave the last site and every finished run in place.
    """
    # Sphinx's start (imports, over a second) overlaps the chapters and pages: unused on a
    # build that changes nothing, it is killed
    with (
        exclusive(root / LOCK, "kvoffload book"),
        stop_on_signals(),
        WarmSphinx(root, root / STAGING) as warm,
    ):
        return _build(root, profile_ids, n_jobs=n_jobs, progress=progress, warm=warm)


def _build(
    root: Path,
    profile_ids: Sequence[str] | None,
    *,
    n_jobs: int | None,
    progress: bool,
    warm: WarmSphinx,
) -> BookResult:
    started = time.perf_counter()
    ids = ordered_profiles(profile_ids)
    profiles = [resolve_profile(i) for i in ids]
    generated = root / "book" / "generated"
    chosen = chapters(root)
    jobs = plan(root, profiles, root / EXECUTED, chosen)
    outcomes = run_jobs(jobs, n_jobs=n_jobs, progress=progress)
    prune(generated, ids, chosen)
    write_pages(root, generated, ids, chosen, executed=root / EXECUTED, derived=root / DERIVED)
    refuse_error_outputs(generated)
    vendor_assets(root / "book" / "_static")
    html = root / "_build" / "html"
    stamp = html / STAMP
    # calculator.html at the site's root: derived from the package alone, kept until it changes
    calculator = package_memo(root / DERIVED, "calculator", calculator_page.site_files)
    digest = _inputs_digest(root, calculator)
    if stamp.is_file() and stamp.read_text() == digest:
        return BookResult(html, outcomes, False, time.perf_counter() - started)
    build_and_swap(
        root,
        root / STAGING,
        html,
        stamp=digest,
        extra=calculator,
        structure=_structure(root),
        warm=warm,
    )
    return BookResult(html, outcomes, True, time.perf_counter() - started)
