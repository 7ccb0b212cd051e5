"""Execute chapters once per hardware profile in warm kernels, skipping what the cache holds."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from kvoffload.bookbuild import notebook_cache
from kvoffload.bookbuild.errors import ChapterError
from kvoffload.bookbuild.kernels import KERNEL_NAME, CellFailure, EarlyKernel, Kernel, KernelBroken
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.signals import stop_on_signals

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # the whole kvoffload package
LOCK_FILE = "requirements.lock"  # the pinned versions: a change re-executes every chapter


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


def chapters_folder(root: Path) -> Path:
    """Return the folder of the chapters (their kernels' working folder)."""
    return root / "notebooks"


def chapters(root: Path) -> list[Chapter]:
    """Return the chapters in order."""
    return [Chapter(p) for p in sorted(chapters_folder(root).glob("[0-9][0-9]_*.md"))]


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


def chapter_imports(chosen: Iterable[Chapter]) -> list[str]:
    """Return the modules the chapters' code cells import (and the names imported from them
    that may be modules), in order, each once: what a kernel can load before they run."""
    names: list[str] = []
    for chapter in chosen:
        for cell in _read(chapter.path).cells:
            if cell.cell_type != "code":
                continue
            try:
                tree = ast.parse(cell.source)
            except SyntaxError:  # a cell with IPython magics
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names += [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.append(node.module)
                    names += [f"{node.module}.{alias.name}" for alias in node.names]
    return list(dict.fromkeys(names))


def check_parameters(chapter: Chapter, params: dict[str, Any]) -> None:
    """Refuse parameters the chapter does not declare (papermill itself only warns)."""
    declared = declared_parameters(chapter)
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise InputError(
            f"chapter {chapter.name} does not declare parameter {unknown[0]!r}; it declares: {', '.join(declared)}",
            field="parameters",
        )


# what a chapter imports: every layer under the build (the build and the command line run the
# chapters but are not run by them; RUN_FORMAT stands for how this module runs them)
RUN_FORMAT = "warm-kernel-1"
_NOT_IMPORTED_BY_CHAPTERS = ("build", "cli.py", "__main__.py")


@cache
def _package_digest() -> str:
    """Hash the package's source and catalog that chapters import: a change re-executes them all."""
    h = hashlib.sha256(RUN_FORMAT.encode())
    for path in sorted(PACKAGE_DIR.rglob("*")):
        if path.relative_to(PACKAGE_DIR).parts[0] in _NOT_IMPORTED_BY_CHAPTERS:
            continue
        if (
            path.suffix in {".py", ".yaml", ".json", ".js", ".css"}
            and "__pycache__" not in path.parts
        ):
            h.update(str(path.relative_to(PACKAGE_DIR)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def package_memo(
    cache_dir: Path, name: str, compute: Callable[[], dict[str, bytes]]
) -> dict[str, bytes]:
    """Return ``compute()``, kept on disk in ``cache_dir`` until the package (code or catalog)
    changes: for what the build derives from the package alone (the calculator's files)."""
    import base64

    path = cache_dir / f"{name}.json"
    key = _package_digest()
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        if stored.get("key") == key:
            return {k: base64.b64decode(v) for k, v in stored["files"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    files = compute()
    body = {"key": key, "files": {k: base64.b64encode(v).decode() for k, v in files.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(body), encoding="utf-8")
    os.replace(tmp, path)
    return files


def _lock_bytes(chapter: Chapter) -> bytes:
    """Return the pinned lock beside the chapters' checkout (the versions a chapter ran with)."""
    lock = chapter.path.parent.parent / LOCK_FILE
    return lock.read_bytes() if lock.is_file() else b""


@dataclass(frozen=True)
class Job:
    """One chapter executed for one profile into one output notebook."""

    chapter: Chapter
    profile: str  # the profile id (folder name)
    params: dict[str, Any] = field(hash=False)
    out: Path  # the executed notebook, kept as the cache entry of this job
    extra_inputs: tuple[Path, ...] = ()  # files the parameters point at (a user's profile)

    def key(self) -> str:
        """Return the cache key: code cells + parameters + package and catalog + lock + user files."""
        inputs = [_package_digest().encode(), _lock_bytes(self.chapter)]
        inputs += [p.read_bytes() for p in self.extra_inputs]
        return notebook_cache.key(_read(self.chapter.path), self.params, inputs)


@dataclass(frozen=True)
class Outcome:
    """What happened to one job."""

    job: Job
    status: str  # 'executed', 'cached' (unchanged) or 'rendered' (prose re-rendered, not run)
    seconds: float = 0.0


def _text_hash(chapter: Chapter) -> str:
    return hashlib.sha256(chapter.path.read_bytes()).hexdigest()


def _render_cached(job: Job, cache_key: str) -> Outcome | None:
    """Bring a sound stored run up to the chapter's current prose; None when it must execute."""
    text = _text_hash(job.chapter)
    if notebook_cache.unchanged(job.out, cache_key, text):
        return Outcome(job, "cached")
    stored = notebook_cache.load(job.out, cache_key)
    if stored is None:
        return None
    merged = notebook_cache.merge(_read(job.chapter.path), stored)
    if merged is None:
        return None
    about = {"profile": job.profile, "chapter": job.chapter.name}
    written = notebook_cache.write_if_changed(
        job.out, notebook_cache.seal(merged, cache_key, **about)
    )
    notebook_cache.note(job.out, cache_key, text)
    return Outcome(job, "rendered" if written else "cached")


def cached(job: Job) -> bool:
    """True when the job's stored run is sound and was made from the same code and inputs."""
    return notebook_cache.load(job.out, job.key()) is not None


def _prepared(job: Job):
    """Return the chapter as a notebook ready to run: kernel set, parameters injected after its
    parameters cell (as papermill writes them)."""
    import copy

    from nbformat.v4 import new_code_cell
    from papermill.translators import translate_parameters

    nb = copy.deepcopy(_read(job.chapter.path))
    nb.metadata["kernelspec"] = {
        "name": KERNEL_NAME,
        "display_name": "Python 3",
        "language": "python",
    }
    if job.params:
        source = translate_parameters(KERNEL_NAME, "python", job.params, "Parameters")
        injected = new_code_cell(source.rstrip("\n") + "\n")
        injected.metadata["tags"] = [notebook_cache.INJECTED_TAG]
        at = next(
            (i + 1 for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])),
            0,
        )
        nb.cells.insert(at, injected)
    return nb


def _failure(job: Job, nb, failure: CellFailure) -> ChapterError:
    """Return the error naming chapter, profile and the failing cell as the chapter numbers it."""
    index = failure.index
    cells = nb.cells
    source = ""
    if 0 <= index < len(cells):
        lines = [ln for ln in cells[index].source.splitlines() if ln.strip()]
        source = f" ({lines[0][:80]!r})" if lines else ""
        # the chapter's own numbering: the injected parameters cell is not one of its cells
        index -= sum(
            notebook_cache.INJECTED_TAG in c.metadata.get("tags", []) for c in cells[:index]
        )
    evalue = " ".join(str(failure.evalue).split())[:300]
    return ChapterError(
        f"chapter {job.chapter.name}, profile {job.profile}: cell {index}{source} "
        f"raised {failure.ename}: {evalue}"
    )


def _execute(job: Job, kernel: Kernel) -> Outcome:
    """Execute one job in a warm kernel; store the sealed run; raise ChapterError naming the cell."""
    started = time.perf_counter()
    text = _text_hash(job.chapter)  # the text it runs from, taken before the run
    cache_key = job.key()
    nb = _prepared(job)
    failure = kernel.run(nb)
    if failure is not None:
        raise _failure(job, nb, failure)
    problems = notebook_cache.error_outputs(nb)
    if problems:
        raise ChapterError(
            f"chapter {job.chapter.name}, profile {job.profile}: error output in {problems[0]}"
        )
    notebook_cache.seal(nb, cache_key, profile=job.profile, chapter=job.chapter.name)
    notebook_cache.write_if_changed(job.out, nb)
    notebook_cache.note(job.out, cache_key, text)
    return Outcome(job, "executed", time.perf_counter() - started)


HALT_WAIT_S = 2.0  # how long an interrupt waits for the workers, all of them together


class _Pool:
    """Worker threads, each driving one warm kernel through jobs taken from a shared queue."""

    def __init__(
        self, todo: Sequence[Job], workers: int, cwd: Path, early: EarlyKernel | None = None
    ) -> None:
        self.pending: queue.SimpleQueue[Job] = queue.SimpleQueue()
        for job in todo:
            self.pending.put(job)
        self.results: queue.SimpleQueue[tuple[Job, Outcome | BaseException]] = queue.SimpleQueue()
        self.cwd = cwd
        self.early = early  # a kernel started ahead: the first worker's
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.kernels: list[Kernel] = []
        self.threads = [
            threading.Thread(target=self._work, name=f"kvoffload-kernel-{i}", daemon=True)
            for i in range(workers)
        ]
        for t in self.threads:
            t.start()

    def _kernel(self) -> Kernel | None:
        early, self.early = self.early, None  # taken by one worker only (under the GIL)
        kernel = early.take() if early is not None else Kernel(self.cwd)
        with self.lock:
            if self.stop.is_set():  # stopped while it started: end it here
                kernel.kill()
                return None
            self.kernels.append(kernel)
        return kernel

    def _work(self) -> None:
        kernel: Kernel | None = None
        try:
            while not self.stop.is_set():
                try:
                    job = self.pending.get_nowait()
                except queue.Empty:
                    return
                try:
                    for attempt in (1, 2):  # a kernel the last job broke is replaced once
                        if kernel is None or not kernel.alive():
                            if kernel is not None:
                                kernel.close()
                            kernel = self._kernel()
                            if kernel is None:
                                return
                        try:
                            self.results.put((job, _execute(job, kernel)))
                            break
                        except KernelBroken:
                            kernel.close()
                            kernel = None
                            if attempt == 2:
                                raise
                except BaseException as exc:  # reported by the main thread, naming the job
                    self.results.put((job, exc))
        finally:
            if kernel is not None:
                kernel.close()

    def halt(self) -> None:
        """Stop taking jobs and kill every kernel now (on Ctrl-C, SIGTERM or SIGHUP)."""
        with self.lock:
            self.stop.set()
            kernels = list(self.kernels)
        if self.early is not None:
            self.early.kill()
        for kernel in kernels:
            kernel.kill()
        # the workers notice their dead kernels and end; wait for them two seconds in all, not
        # two each (a loaded machine would otherwise hold the interrupt for seconds per worker)
        deadline = time.monotonic() + HALT_WAIT_S
        for t in self.threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))


def run_jobs(
    jobs: Sequence[Job],
    *,
    n_jobs: int | None = None,
    progress: bool = True,
    early: EarlyKernel | None = None,
) -> list[Outcome]:
    """Run every job whose code or inputs changed, in warm kernels; raise ChapterError listing all
    failures. A job whose prose alone changed is re-rendered from its stored run, not executed.

    ``early``: a kernel started ahead in the chapters' folder, used by the first worker (and
    closed here when no job needs it)."""
    outcomes: list[Outcome] = []
    todo: list[Job] = []
    for job in jobs:
        found = _render_cached(job, job.key())
        if found is None:
            todo.append(job)
        else:
            outcomes.append(found)
    failures: list[str] = []
    if todo:
        from tqdm import tqdm

        workers = max(1, min(n_jobs or os.cpu_count() or 1, len(todo)))
        bar = tqdm(total=len(todo), desc="executing chapters", unit="chapter", disable=not progress)
        with stop_on_signals():
            pool = _Pool(todo, workers, todo[0].chapter.path.parent, early)
            try:
                for _ in todo:
                    job, result = pool.results.get()
                    if isinstance(result, Outcome):
                        outcomes.append(result)
                    elif isinstance(result, ChapterError):
                        failures.append(str(result))
                    else:  # a kernel that died, a broken install: still name the job
                        failures.append(
                            f"chapter {job.chapter.name}, profile {job.profile}: "
                            f"{type(result).__name__}: {' '.join(str(result).split())[:300]}"
                        )
                    bar.update(1)
            except BaseException:
                pool.halt()
                raise
            finally:
                bar.close()
    if early is not None:
        early.close()  # not taken: every job was cached, or the pool stopped first
    if failures:
        raise ChapterError("; ".join(sorted(failures)))
    return outcomes
