"""What a test run makes once for all its workers: in the run's shared folder, under a lock."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BOOK = "built-book"  # the session's book, built in the background (tests.support.book_build)
CALCULATOR = "calculator-data"  # the calculator page's data, which that build computes first


def shared_dir(tmp_path_factory) -> Path:
    """Return the folder every worker of this run shares (pytest-xdist's, or the run's own)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once(tmp_path_factory, name: str, make: Callable[[Path], Any]) -> Any:
    """Return ``make(shared folder)``, made once per run: the first worker to ask makes it under a
    lock, the others wait and read it back."""
    shared = shared_dir(tmp_path_factory)
    stored = shared / f"{name}.pickle"
    with (shared / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not stored.exists():
            stored.write_bytes(pickle.dumps(make(shared)))
    return pickle.loads(stored.read_bytes())


def start_book_build(shared: Path) -> None:
    """Start the session's book build in the background, once per run (the first caller's)."""
    with (shared / f"{BOOK}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (shared / f"{BOOK}.started").exists():
            return
        log = (shared / f"{BOOK}.log").open("w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.book_build", str(shared)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=Path(__file__).resolve().parents[2],
        )
        (shared / f"{BOOK}.started").write_text(str(proc.pid))


def stop_book_build(shared: Path) -> None:
    """End the background book build if it is still running (it stops its kernels itself)."""
    started = shared / f"{BOOK}.started"
    if not started.exists() or (shared / f"{BOOK}.pickle").exists():
        return
    with contextlib.suppress(ProcessLookupError, ValueError):
        os.kill(int(started.read_text()), signal.SIGTERM)


def wait_for(shared: Path, name: str, timeout_s: float = 1200) -> Any:
    """Return what the background build stored under ``name``; fail with its log if it failed."""
    stored, failed = shared / f"{name}.pickle", shared / f"{BOOK}.failed"
    deadline = time.monotonic() + timeout_s
    while not stored.exists():
        if failed.exists() or time.monotonic() > deadline:
            log = (shared / f"{BOOK}.log").read_text(encoding="utf-8", errors="replace")
            raise RuntimeError(f"the session's book build failed or timed out:\n{log[-4000:]}")
        time.sleep(0.2)
    return pickle.loads(stored.read_bytes())
