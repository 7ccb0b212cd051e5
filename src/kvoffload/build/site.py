"""Build the book: run chapters per profile, write the generated pages, build offline, swap."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvoffload.build.assets import vendor_assets
from kvoffload.build.jupyterbook import build_and_swap
from kvoffload.build.pages import prune, refuse_error_outputs, write_pages
from kvoffload.build.profiles import ordered_profiles, plan, resolve_profile
from kvoffload.build.runner import Outcome, chapters, run_jobs
from kvoffload.report import calculator_page


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
    prune(generated, ids, chosen)
    write_pages(root, generated, ids, chosen)
    refuse_error_outputs(generated)
    vendor_assets(root / "book" / "_static")
    html = root / "_build" / "html"
    stamp = html / ".kvoffload-inputs"
    calculator = calculator_page.site_files()  # calculator.html at the site's root
    digest = _inputs_digest(root, calculator)
    if stamp.is_file() and stamp.read_text() == digest:
        return BookResult(html, outcomes, False, time.perf_counter() - started)
    build_and_swap(root, root / "_build" / ".staging", html, stamp=digest, extra=calculator)
    return BookResult(html, outcomes, True, time.perf_counter() - started)
