"""Shared fixtures: run the CLI in-process or as a real subprocess."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvoffload.cli import main
from tests.support.cli_process import run_cli
from tests.support.shared import (
    BOOK,
    CALCULATOR,
    shared_dir,
    start_book_build,
    stop_book_build,
    wait_for,
)


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
    """Run ``kvoffload ARGS`` as a separate process (what a user's shell sees: its status, its
    stdout and stderr), forked from a server that imported the package once
    (tests/support/cli_process.py)."""

    def run(*args: str, timeout: float = 30) -> Run:
        return Run(*run_cli([str(a) for a in args], timeout, dict(os.environ)))

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


# the modules whose tests read the book and take longest (tens of seconds each), longest first
LONGEST_FIRST = ("test_browser_pages.py", "test_browser_calculator.py", "test_book.py",
                 "test_browser_mobile_nav.py")  # fmt: skip


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what they deselect
def pytest_collection_modifyitems(config, items):
    """Start the session's book build in the background as soon as a test needs it, and run the
    tests that need it (or the calculator's data it computes first) after all the others."""
    reads = [bool({"built_book", "calculator_data"} & set(i.fixturenames)) for i in items]
    needs = [i for i, r in zip(items, reads, strict=True) if r]
    if needs:
        start_book_build(shared_dir(config._tmp_path_factory))
        others = [i for i, r in zip(items, reads, strict=True) if not r]
        # the longest of them first, so that the run does not end on one worker alone
        first = {m: n for n, m in enumerate(LONGEST_FIRST)}
        needs.sort(key=lambda i: first.get(i.path.name, len(first)))
        items[:] = others + needs


def pytest_sessionfinish(session):
    """Stop the background book build if no test waited for it (an early stop, say)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # the run itself, after every worker
        stop_book_build(shared_dir(session.config._tmp_path_factory))


@pytest.fixture(scope="session")
def calculator_data(tmp_path_factory) -> dict:
    """The calculator page's data (studies/calculator_data), computed once per run by the
    background book build: its advise table is the costliest thing the book derives."""
    return wait_for(shared_dir(tmp_path_factory), CALCULATOR)


@pytest.fixture(scope="session")
def built_book(tmp_path_factory):
    """The book built for two profiles in a copy of the sources, once per run and in the
    background from the run's start (tests/support/book_build.py); return (root, result).

    Tests use it read-only (a no-op rebuild included); one that edits the book works on a copy.
    """
    return wait_for(shared_dir(tmp_path_factory), BOOK)
