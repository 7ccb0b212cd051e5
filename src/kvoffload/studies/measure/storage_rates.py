"""Storage: sequential write and read, and random reads over request sizes and queue depths."""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from kvoffload.inputs.hardware import Storage
from kvoffload.inputs.units import format_bytes, format_seconds
from kvoffload.studies.measure.plan import MiB, Plan, Report, figure_key, gbps, measured_figure

SCRATCH_PREFIX = ".kvoffload-measure-"  # the storage test's scratch file, removed on every exit


@contextlib.contextmanager
def _scratch_file(directory: Path, nbytes: int) -> Iterator[Path]:
    """Yield a scratch file of ``nbytes`` random bytes; it is removed however the block ends."""
    # named before it exists, so that a signal between creating it and entering the `try`
    # cannot leave it behind
    path = directory / f"{SCRATCH_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        block = os.urandom(MiB)
        with os.fdopen(fd, "wb") as f:
            for _ in range(nbytes // MiB):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        yield path
    finally:
        path.unlink(missing_ok=True)


def _open_direct(path: Path) -> tuple[int, bool]:
    flag = getattr(os, "O_DIRECT", 0)
    if flag:
        try:
            return os.open(path, os.O_RDONLY | flag), True
        except OSError:
            pass
    return os.open(path, os.O_RDONLY), False


def _drop_cache(fd: int) -> None:
    with contextlib.suppress(AttributeError, OSError):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def _random_reads(
    fd: int, file_bytes: int, size: int, depth: int, seconds: float, direct: bool
) -> float:
    """Return bytes/s for random ``size`` reads with ``depth`` requests in flight.

    The clock starts once every reader is running (a barrier of ``depth`` + 1) and each reader
    reads at least once, so a loaded machine slows a point instead of leaving it empty; the
    rate divides the bytes read by the time from the start to the end of the last read.
    """
    blocks = file_bytes // size
    clock = {"t0": 0.0, "stop": 0.0}  # set by the barrier's action, before any reader is let go

    def begin() -> None:
        clock["t0"] = time.perf_counter()
        clock["stop"] = clock["t0"] + seconds

    start = threading.Barrier(depth + 1, action=begin)
    halt = threading.Event()  # set when the main thread leaves early (a signal): stop reading
    done = [0] * depth  # bytes read by each reader
    ended = [0.0] * depth  # when each reader's last read ended
    failed: list[BaseException] = []

    def worker(i: int) -> None:
        rng = np.random.default_rng(i)
        try:
            buf = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT needs
            try:
                start.wait()
                while True:
                    offset = int(rng.integers(blocks)) * size
                    os.preadv(fd, [buf], offset)
                    done[i] += size
                    ended[i] = time.perf_counter()
                    if halt.is_set() or ended[i] >= clock["stop"]:
                        break
            finally:
                buf.close()
        except threading.BrokenBarrierError:  # the main thread left, or another reader failed
            pass
        except BaseException as exc:
            failed.append(exc)
            start.abort()

    if not direct:
        _drop_cache(fd)
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(depth)]
    try:
        for t in threads:
            t.start()
        with contextlib.suppress(threading.BrokenBarrierError):  # a reader failed: raised below
            start.wait()
        for t in threads:
            t.join()
    finally:  # on a signal too: no reader outlives the file descriptor it reads
        halt.set()
        start.abort()
        for t in threads:
            if t.is_alive():
                t.join()
    if failed:
        raise failed[0]
    return sum(done) / (max(ended) - clock["t0"])


def storage(plan: Plan, report: Report, progress: Callable[[str], None], directory: Path) -> None:
    """Measure sequential write and read, and random reads over request sizes and queue depths."""
    progress(
        f"storage: writing a {format_bytes(plan.file_bytes, binary=True)} scratch file in {directory}"
    )
    t0 = time.perf_counter()
    with _scratch_file(directory, plan.file_bytes) as path:
        write = plan.file_bytes / (time.perf_counter() - t0)
        fd, direct = _open_direct(path)
        try:
            if not direct:
                report.notes.append(
                    "direct I/O is not supported on this filesystem: reads went through the page cache, "
                    "which was dropped before each test (posix_fadvise), so figures may still be inflated"
                )
            progress("storage: sequential read")
            _drop_cache(fd)
            buf = mmap.mmap(-1, 1 * MiB)
            t0 = time.perf_counter()
            offset = 0
            while offset < plan.file_bytes:
                got = os.preadv(fd, [buf], offset)
                if got <= 0:
                    break
                offset += got
            seq = offset / (time.perf_counter() - t0)
            buf.close()
            rows = []
            for size in plan.request_sizes:
                for depth in plan.queue_depths:
                    progress(
                        f"storage: random {format_bytes(size, binary=True)} reads, queue depth {depth}"
                    )
                    rate = _random_reads(
                        fd, plan.file_bytes, size, depth, plan.seconds_per_point, direct
                    )
                    rows.append(
                        {
                            "request_bytes": size,
                            "queue_depth": depth,
                            "gb_s": rate / 1e9,
                            "share_of_sequential": rate / seq,
                        }
                    )
        finally:
            os.close(fd)
    report.tables["storage_random_reads"] = rows
    how = "O_DIRECT" if direct else "buffered, page cache dropped"
    report.figures[figure_key(Storage, "read_bandwidth")] = measured_figure(
        gbps(seq),
        f"sequential 1 MiB preadv over {format_bytes(plan.file_bytes, binary=True)}, {how}",
    )
    report.figures[figure_key(Storage, "write_bandwidth")] = measured_figure(
        gbps(write), "sequential 1 MiB writes then fsync"
    )
    qd1 = next(
        r for r in rows if r["request_bytes"] == min(plan.request_sizes) and r["queue_depth"] == 1
    )
    small = min(plan.request_sizes)
    latency = max(small / (qd1["gb_s"] * 1e9) - small / seq, 1e-7)
    report.figures[figure_key(Storage, "read_latency")] = measured_figure(
        format_seconds(latency),
        f"{format_bytes(small, binary=True)} random reads at queue depth 1, {how}",
    )
    iops = max(r["gb_s"] * 1e9 / small for r in rows if r["request_bytes"] == small)
    report.figures[figure_key(Storage, "random_read_iops")] = measured_figure(
        f"{iops:.4g} /s",
        f"{format_bytes(small, binary=True)} random reads, best queue depth, {how}",
    )
