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


@pytest.fixture(scope="session")
def built_book(tmp_path_factory):
    """Build the book for two profiles in a copy of the sources; return (root, result).

    Built once per run: under pytest-xdist the first worker to ask builds it in the run's shared
    temporary folder, under a lock, and the others wait and read the same site. Tests use it
    read-only (a no-op rebuild included); one that edits the book works on a copy.
    """
    from kvoffload.bookbuild.site import build_book

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root = shared / "built-book"
    stored = shared / "built-book.pickle"
    with (shared / "built-book.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not stored.exists():
            copy_book_sources(root)
            result = build_book(root, BOOK_PROFILES, n_jobs=2, progress=False)
            stored.write_bytes(pickle.dumps(result))
    return root, pickle.loads(stored.read_bytes())
