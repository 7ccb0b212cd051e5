"""Execute chapters with papermill, once per hardware profile, with a content-hash cache."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from kvoffload.build.errors import ChapterError
from kvoffload.spec.errors import InputError

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # the whole kvoffload package
CACHE_META = "kvoffload"


@dataclass(frozen=True)
class Chapter:
    """One chapter: a Jupytext MyST notebook in notebooks/ named NN_slug.md."""

    path: Path

    @property
    def name(self) -> str:
        """Return the file stem, e.g. '01_memory_tiers'."""
        return self.path.stem

    @property
    def number(self) -> str:
        """Return the chapter number, e.g. '01'."""
        return self.name.split("_", 1)[0]

    @property
    def title(self) -> str:
        """Return the chapter's first heading."""
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if line.startswith("# "):
                return line[2:].strip()
        return self.name

    def matches(self, key: str) -> bool:
        """True when ``key`` names this chapter: '01', '01_memory_tiers' or 'memory_tiers'."""
        return key in (self.number, self.name, self.name.split("_", 1)[-1])


def find_root(start: Path | None = None) -> Path:
    """Return the checkout root (the folder with _toc.yml and notebooks/), searching upwards."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "_toc.yml").is_file() and (folder / "notebooks").is_dir():
            return folder
    raise InputError(
        "not inside a kvoffload checkout (no _toc.yml and notebooks/ found); run from the project folder"
    )


def chapters(root: Path) -> list[Chapter]:
    """Return the chapters in order."""
    return [Chapter(p) for p in sorted((root / "notebooks").glob("[0-9][0-9]_*.md"))]


def select(all_chapters: Sequence[Chapter], keys: Iterable[str] | None) -> list[Chapter]:
    """Return the chapters named by ``keys`` (all when none), refusing unknown names."""
    if not keys:
        return list(all_chapters)
    chosen = []
    for key in keys:
        found = [c for c in all_chapters if c.matches(key)]
        if not found:
            names = ", ".join(c.name for c in all_chapters)
            raise InputError(f"no chapter {key!r}; chapters: {names}", field="--chapter")
        chosen.extend(c for c in found if c not in chosen)
    return chosen


def _read(path: Path) -> Any:
    return _read_version(path, path.stat().st_mtime_ns)


@cache
def _read_version(path: Path, mtime_ns: int) -> Any:
    """Parse a chapter once per version of the file (an edited chapter is read again)."""
    import jupytext

    return jupytext.read(path)


def _parameter_cells(chapter: Chapter) -> list:
    nb = _read(chapter.path)
    return [
        c for c in nb.cells if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])
    ]


def per_profile(chapter: Chapter) -> bool:
    """True when the book runs the chapter once per hardware profile.

    That is a chapter whose parameters cell declares ``hardware``, unless its front matter says
    ``kvoffload: {per_profile: false}`` (rendered once; ``kvoffload run`` can still pass a profile).
    """
    meta = _read(chapter.path).metadata.get("kvoffload", {}) or {}
    return bool(meta.get("per_profile", True)) and "hardware" in declared_parameters(chapter)


def declared_parameters(chapter: Chapter) -> dict[str, Any]:
    """Return the names and default values of the chapter's parameters cell ({} when it has none)."""
    cells = _parameter_cells(chapter)
    if len(cells) > 1:
        raise ChapterError(
            f"chapter {chapter.name}: expected one cell tagged 'parameters', found {len(cells)}"
        )
    out: dict[str, Any] = {}
    for node in ast.parse(cells[0].source).body if cells else []:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            out[node.targets[0].id] = ast.literal_eval(node.value)
    return out


def check_parameters(chapter: Chapter, params: dict[str, Any]) -> None:
    """Refuse parameters the chapter does not declare (papermill itself only warns)."""
    declared = declared_parameters(chapter)
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise InputError(
            f"chapter {chapter.name} does not declare parameter {unknown[0]!r}; it declares: {', '.join(declared)}",
            field="parameters",
        )


@cache
def _package_digest() -> str:
    """Hash the package's source and catalog: a change to either re-executes every chapter."""
    h = hashlib.sha256()
    for path in sorted(PACKAGE_DIR.rglob("*")):
        if path.suffix in {".py", ".yaml", ".json"} and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(PACKAGE_DIR)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class Job:
    """One chapter executed for one profile into one output notebook."""

    chapter: Chapter
    profile: str  # the profile id (folder name)
    params: dict[str, Any] = field(hash=False)
    out: Path
    extra_inputs: tuple[Path, ...] = ()  # files the parameters point at (a user's profile)

    def key(self) -> str:
        """Return the content hash: chapter text + parameters + package source + catalog (+ user files)."""
        h = hashlib.sha256()
        h.update(self.chapter.path.read_bytes())
        h.update(json.dumps(self.params, sort_keys=True, default=str).encode())
        h.update(_package_digest().encode())
        for p in self.extra_inputs:
            h.update(p.read_bytes())
        return h.hexdigest()


@dataclass(frozen=True)
class Outcome:
    """What happened to one job."""

    job: Job
    status: str  # 'executed' or 'cached'
    seconds: float = 0.0


def cached(job: Job) -> bool:
    """True when the job's output exists and was made from the same inputs."""
    if not job.out.is_file():
        return False
    try:
        meta = (
            json.loads(job.out.read_text(encoding="utf-8")).get("metadata", {}).get(CACHE_META, {})
        )
    except (OSError, ValueError):
        return False
    return meta.get("key") == job.key()


def error_outputs(nb: dict) -> list[str]:
    """Return a description of every error output in an executed notebook."""
    found = []
    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found.append(f"cell {i}: {out.get('ename')}: {out.get('evalue')}")
            elif out.get(
                "output_type"
            ) == "stream" and "Traceback (most recent call last)" in "".join(out.get("text", "")):
                found.append(f"cell {i}: a traceback printed to {out.get('name')}")
    return found


def _execute(job: Job) -> Outcome:
    """Execute one job (in a worker process); raise ChapterError naming chapter, profile, cell."""
    import time

    import jupytext
    import nbformat
    import papermill
    from papermill.exceptions import PapermillExecutionError

    started = time.perf_counter()
    nb = jupytext.read(job.chapter.path)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    job.out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(suffix=".ipynb", dir=job.out.parent, prefix=".running-")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        try:
            executed = papermill.execute_notebook(
                nb,
                str(tmp),
                parameters=job.params,
                kernel_name="python3",
                progress_bar=False,
                log_output=False,
                cwd=str(job.chapter.path.parent),
                start_timeout=300,  # a busy two-core machine can take over a minute to start one
            )
        except PapermillExecutionError as exc:
            source = ""
            failed = nbformat.read(str(tmp), as_version=4) if tmp.exists() else None
            if failed is not None and exc.cell_index < len(failed.cells):
                lines = [
                    ln for ln in failed.cells[exc.cell_index].source.splitlines() if ln.strip()
                ]
                source = f" ({lines[0][:80]!r})" if lines else ""
            raise ChapterError(
                f"chapter {job.chapter.name}, profile {job.profile}: cell {exc.cell_index}{source} "
                f"raised {exc.ename}: {exc.evalue}"
            ) from None
        problems = error_outputs(executed)
        if problems:
            raise ChapterError(
                f"chapter {job.chapter.name}, profile {job.profile}: error output in {problems[0]}"
            )
        executed.metadata[CACHE_META] = {
            "key": job.key(),
            "profile": job.profile,
            "chapter": job.chapter.name,
        }
        nbformat.write(executed, str(tmp))
        os.replace(tmp, job.out)
    finally:
        tmp.unlink(missing_ok=True)
    return Outcome(job, "executed", time.perf_counter() - started)


def _quiet_worker() -> None:
    """Send the worker's (and its kernels') stderr to /dev/null: failures come back as exceptions."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)


def run_jobs(
    jobs: Sequence[Job], *, n_jobs: int | None = None, progress: bool = True
) -> list[Outcome]:
    """Run every job not already cached, in parallel; raise ChapterError listing all failures."""
    from tqdm import tqdm

    outcomes = [Outcome(j, "cached") for j in jobs if cached(j)]
    todo = [j for j in jobs if not cached(j)]
    failures: list[str] = []
    if todo:
        workers = max(1, min(n_jobs or os.cpu_count() or 1, len(todo)))
        bar = tqdm(total=len(todo), desc="executing chapters", unit="chapter", disable=not progress)
        with ProcessPoolExecutor(max_workers=workers, initializer=_quiet_worker) as pool:
            futures = {pool.submit(_execute, j): j for j in todo}
            for fut in as_completed(futures):
                try:
                    outcomes.append(fut.result())
                except ChapterError as exc:
                    failures.append(str(exc))
                except Exception as exc:  # a kernel that died, a broken install: still name the job
                    j = futures[fut]
                    failures.append(
                        f"chapter {j.chapter.name}, profile {j.profile}: {type(exc).__name__}: {exc}"
                    )
                bar.update(1)
        bar.close()
    if failures:
        raise ChapterError("; ".join(sorted(failures)))
    return outcomes
