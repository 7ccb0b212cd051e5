"""Shared fixtures: run the CLI in-process or as a real subprocess."""

from __future__ import annotations

import fcntl
import json
import os
import pickle
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvoffload.cli import main
from tests.support.paths import BOOK_PROFILES, copy_book_sources


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> dict:
        return json.loads(self.out)


@pytest.fixture
def cli(capsys):
    """Run ``kvoffload ARGS`` in-process and capture its exit code and output."""

    def run(*args: str) -> Run:
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse exits
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


@pytest.fixture
def cli_process():
    """Run ``kvoffload ARGS`` as a separate process (what a user's shell sees)."""

    def run(*args: str, timeout: float = 30) -> Run:
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        proc = subprocess.run(
            [sys.executable, "-m", "kvoffload", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
        return Run(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def write(tmp_path: Path):
    """Write a file under tmp_path and return its path."""

    def put(name: str, content: str | bytes) -> Path:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    return put


def _once(tmp_path_factory, name: str, make):
    """Return ``make()``, made once per run: under pytest-xdist the first worker to ask makes it
    in the run's shared temporary folder, under a lock, and the others wait and read it."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    stored = shared / f"{name}.pickle"
    with (shared / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not stored.exists():
            stored.write_bytes(pickle.dumps(make(shared)))
    return pickle.loads(stored.read_bytes())


@pytest.fixture(scope="session")
def calculator_data(tmp_path_factory) -> dict:
    """The calculator page's data (studies/calculator_data), computed once per run: its advise
    table is the costliest thing the book derives from the package alone."""
    from kvoffload.studies.calculator_data import calculator_data as compute

    return _once(tmp_path_factory, "calculator-data", lambda _shared: compute())


@pytest.fixture(scope="session")
def built_book(tmp_path_factory, calculator_data):
    """Build the book for two profiles in a copy of the sources; return (root, result).

    Built once per run (see _once). Tests use it read-only (a no-op rebuild included); one that
    edits the book works on a copy. The calculator's files are the run's ``calculator_data``'s,
    stored where the build keeps what it derives from the package alone, so it does not compute
    them a second time.
    """
    from kvoffload.bookbuild.runner import package_memo
    from kvoffload.bookbuild.site import DERIVED, build_book
    from kvoffload.report import calculator_page

    def build(shared):
        root = shared / "built-book"
        copy_book_sources(root)
        package_memo(
            root / DERIVED, "calculator", lambda: calculator_page.site_files(calculator_data)
        )
        return root, build_book(root, BOOK_PROFILES, n_jobs=2, progress=False)

    return _once(tmp_path_factory, "built-book", build)
