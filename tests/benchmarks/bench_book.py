"""Benchmark the book pipeline, in one run: cold build, warm no-op, a prose edit and a code edit of
one chapter, one chapter for a new profile, `kvoffload run` of one chapter for a user's machine (never run
before, then again) beside the same chapter inside the book, and jupyter-cache's rebuild of the
same prose edit.

Run with `make bench`. Works on copies of the sources in a temporary folder, so the working
tree's book is untouched. Prints `name: value` lines (a script can read them); asserts nothing.
``--profiles A,B`` limits the book to those profiles (default: every catalog profile).

The peer: Jupyter Book's own execution cache (jupyter-cache, installed with jupyter-book) builds
the same chapters once each with their default parameters (it has no per-profile runs), caches
them, then rebuilds after the same prose edits. Ours is timed on the same one-profile book. A
prose-edit figure is the median of three successive edits (each run's time is printed too).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from kvoffload.bookbuild.profile_run import RUNS, run_for_profile
from kvoffload.bookbuild.site import build_book
from tests.support.paths import copy_book_sources
from tests.support.samples import GOOD_PROFILE

PROFILE = """id: bench-box
name: "Benchmark box: RTX 4090 on a 12 GB/s link"
gpu: {base: rtx-4090}
link: {base: pcie4-x16, h2d_bandwidth: 12 GB/s, d2h_bandwidth: 11 GB/s}
host: {base: desktop-ddr5-2ch}
storage: {base: nvme-gen4}
"""
EDITED = "01_memory_tiers.md"
PROSE_MARK = "## Overview\n"
CODE_MARK = "from myst_nb import glue\n"
PROSE_EDITS = 3  # each prose-edit figure is the median of this many successive edits
CHAPTER = "03"  # the chapter a reader re-runs for a machine of their own (`kvoffload run`)


def _prose_edit(root: Path, n: int) -> None:
    """Add a sentence under the Overview heading of one chapter (no code cell changes)."""
    path = root / "notebooks" / EDITED
    text = path.read_text(encoding="utf-8")
    path.write_text(
        text.replace(PROSE_MARK, f"{PROSE_MARK}\nA sentence added by the benchmark ({n}).\n", 1)
    )


def _code_edit(root: Path) -> None:
    """Change one code cell of one chapter (a comment: the code key changes, the outputs do not)."""
    path = root / "notebooks" / EDITED
    text = path.read_text(encoding="utf-8")
    assert CODE_MARK in text, f"{EDITED} has no line {CODE_MARK!r} to edit"
    path.write_text(text.replace(CODE_MARK, CODE_MARK + "# edited by the benchmark\n", 1))


class _Printed(dict):
    """A dict of figures that prints each `name: value` line as it is set (a long run shows
    its progress, and a failure keeps what was measured)."""

    def __init__(self, suffix: str = "") -> None:
        super().__init__()
        self.suffix = suffix

    def __setitem__(self, key: str, value: str) -> None:
        key += self.suffix
        print(f"{key}: {value}", flush=True)
        super().__setitem__(key, value)


def _timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def _ours(tmp: Path, profiles: list[str] | None, tag: str) -> dict[str, str]:
    root = copy_book_sources(tmp / f"book-{tag}")
    figures: dict[str, str] = _Printed("" if tag == "book" else "_" + tag)
    cold, t = _timed(build_book, root, profiles, progress=False)
    figures["cold_build_s"] = f"{t:.1f}"
    figures["cold_build_executed"] = str(cold.executed)
    # one run of the chapter inside the book: its jobs' median time in the cold build
    inside = [o.seconds for o in cold.outcomes if o.job.chapter.number == CHAPTER]
    figures["book_chapter_s"] = f"{statistics.median(inside):.2f}" if inside else "none"
    warm, t = _timed(build_book, root, profiles, progress=False)
    figures["warm_noop_s"] = f"{t:.2f}"
    figures["warm_noop_executed"] = str(warm.executed)
    times, executed = [], []
    for n in range(1, PROSE_EDITS + 1):
        _prose_edit(root, n)
        prose, t = _timed(build_book, root, profiles, progress=False)
        times.append(t)
        executed.append(prose.executed)
    figures["prose_edit_s"] = f"{statistics.median(times):.2f}"
    figures["prose_edit_runs_s"] = " ".join(f"{t:.2f}" for t in times)
    figures["prose_edit_executed"] = str(max(executed))
    _code_edit(root)
    code, t = _timed(build_book, root, profiles, progress=False)
    figures["code_edit_s"] = f"{t:.2f}"
    figures["code_edit_executed"] = str(code.executed)
    return dict(figures)


def _jupyter_cache_prose_edit(tmp: Path) -> tuple[float, list[float]] | None:
    """Return the first build's time and each prose-edit rebuild's (s) under jupyter-cache."""
    try:
        import jupyter_cache  # noqa: F401
    except ImportError:
        return None
    root = copy_book_sources(tmp / "peer")
    nb = root / "notebooks"
    chapters = sorted(p.stem for p in nb.glob("[0-9][0-9]_*.md"))
    (nb / "_toc.yml").write_text(
        "format: jb-book\nroot: index\nchapters:\n" + "".join(f"  - file: {c}\n" for c in chapters)
    )
    (nb / "index.md").write_text("# Peer\n")
    (nb / "references.bib").write_text((root / "book" / "references.bib").read_text())
    (nb / "_config.yml").write_text(
        "title: peer\nexecute:\n  execute_notebooks: cache\n  timeout: -1\n"
        "sphinx:\n  config:\n    suppress_warnings: ['*']\n"
        "bibtex_bibfiles: [references.bib]\n"
    )
    jb = [str(Path(sys.executable).with_name("jupyter-book")), "build", str(nb)]

    def build() -> float:
        t0 = time.perf_counter()
        subprocess.run(jb, cwd=nb, capture_output=True, check=False)
        return time.perf_counter() - t0

    first = build()
    times = []
    for n in range(1, PROSE_EDITS + 1):
        _prose_edit(root, n)
        times.append(build())
    return first, times


STANDALONE_RUNS = 3  # each standalone figure is the median of this many runs


def _standalone_chapter(tmp: Path, root: Path) -> tuple[list[float], list[float]]:
    """Return the times (s) of `kvoffload run --hardware mine.yaml --chapter 03`, a new process
    and a new folder each: for a machine never run before (its kept runs deleted first, so the
    chapter executes), then for the same machine again (its kept run reused).
    """
    mine = tmp / "mine.yaml"
    mine.write_text(GOOD_PROFILE)
    profile_id = yaml.safe_load(GOOD_PROFILE)["id"]

    def run(out: str) -> float:
        command = [sys.executable, "-m", "kvoffload", "run", "--hardware", str(mine)]
        command += ["--chapter", CHAPTER, "--out", str(tmp / out), "--quiet"]
        t0 = time.perf_counter()
        subprocess.run(command, cwd=root, capture_output=True, check=True)
        return time.perf_counter() - t0

    never = []
    for n in range(STANDALONE_RUNS):
        shutil.rmtree(root / RUNS / profile_id, ignore_errors=True)
        never.append(run(f"standalone-never-{n}"))
    reuse = [run(f"standalone-reuse-{n}") for n in range(STANDALONE_RUNS)]
    return never, reuse


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profiles", default=None)
    args = parser.parse_args()
    profiles = args.profiles.split(",") if args.profiles else None
    figures: dict[str, str] = _Printed()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        ours = _ours(tmp, profiles, "book")
        # the peer's comparison: the same chapters, one profile (their default parameters)
        one = _ours(tmp, ["article-reference"], "one_profile")
        peer = _jupyter_cache_prose_edit(tmp)
        if peer is not None:
            figures["jupyter_cache_first_build_s"] = f"{peer[0]:.1f}"
            theirs = statistics.median(peer[1])
            figures["jupyter_cache_prose_edit_s"] = f"{theirs:.2f}"
            figures["jupyter_cache_prose_edit_runs_s"] = " ".join(f"{t:.2f}" for t in peer[1])
            ours = float(one["prose_edit_s_one_profile"])
            figures["prose_edit_over_jupyter_cache"] = f"{ours / theirs:.3f}"
        root = copy_book_sources(tmp / "run")
        profile = tmp / "bench.yaml"
        profile.write_text(PROFILE)
        _, t = _timed(
            run_for_profile,
            root,
            str(profile),
            chapter_keys=["01"],
            out=tmp / "out",
            progress=False,
        )
        figures["one_chapter_new_profile_s"] = f"{t:.1f}"
        shutil.rmtree(tmp / "out", ignore_errors=True)
        never, reuse = _standalone_chapter(tmp, root)
        figures["standalone_chapter_never_run_s"] = f"{statistics.median(never):.2f}"
        figures["standalone_chapter_never_run_runs_s"] = " ".join(f"{t:.2f}" for t in never)
        figures["standalone_chapter_s"] = f"{statistics.median(reuse):.2f}"
        figures["standalone_chapter_runs_s"] = " ".join(f"{t:.2f}" for t in reuse)
        figures["book_chapter_s"] = ours["book_chapter_s"]


if __name__ == "__main__":
    main()
