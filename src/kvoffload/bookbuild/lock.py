"""Hold one build per folder at a time: an exclusive lock that ends with its holder."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from kvoffload.inputs.errors import InputError


@contextlib.contextmanager
def exclusive(lock_file: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_file`` while the block runs; refuse when another holds it.

    The lock is the kernel's (``flock``): it ends with the process that holds it, however that
    process ends, so a killed build never leaves a stale lock behind.
    """
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "another process"
            raise InputError(
                f"{what} is already running here (pid {holder}); wait for it to finish or stop it",
                file=str(lock_file),
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
