"""Measure this machine (host memory, storage, and the GPU when PyTorch with CUDA is present)
and write a hardware profile whose measured figures say how and when they were taken."""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import mmap
import os
import platform
import secrets
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import yaml

from kvoffload import __version__
from kvoffload.spec import catalog
from kvoffload.spec.errors import InputError, one_line
from kvoffload.spec.hardware import (
    PART_MODELS,
    Gpu,
    Host,
    Link,
    Part,
    Storage,
    build_system,
    load_system,
)
from kvoffload.spec.inputs import check_writable
from kvoffload.spec.limits import MAX_NAME_BYTES
from kvoffload.spec.text import NAME_CHARS, NOTE_CHARS
from kvoffload.spec.units import format_bandwidth, format_bytes

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SCRATCH_PREFIX = ".kvoffload-measure-"  # the storage test's scratch file, removed on every exit
PROFILE_MODE = 0o644  # a profile is shared like any config file (less where the umask says so)


@dataclass(frozen=True)
class Plan:
    """How much to measure: the quick plan fits in about 30 s, the full one in about 5 minutes."""

    host_bytes: int
    file_bytes: int
    seconds_per_point: float
    request_sizes: tuple[int, ...]
    queue_depths: tuple[int, ...]
    gpu_sizes: tuple[int, ...]

    @staticmethod
    def quick() -> Plan:
        """Return the quick plan."""
        return Plan(
            256 * MiB,
            512 * MiB,
            0.25,
            (4 * KiB, 64 * KiB, 1 * MiB),
            (1, 8, 32),
            (64 * KiB, 4 * MiB, 256 * MiB),
        )

    @staticmethod
    def full() -> Plan:
        """Return the full plan."""
        return Plan(
            1 * GiB,
            4 * GiB,
            1.0,
            (4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, 1 * MiB),
            (1, 2, 4, 8, 16, 32),
            (4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB, 1 * GiB),
        )


@dataclass
class Report:
    """What was measured, what was skipped and why."""

    figures: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # 'part.field' -> figure mapping
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _key(part: type[Part], name: str) -> str:
    """Return 'part.field' for a field of a hardware part's schema; refuse a field it lacks."""
    kind = next(k for k, model in PART_MODELS.items() if model is part)
    if name not in part.__struct_fields__:
        raise ValueError(f"the {kind} schema has no field {name!r}")
    return f"{kind}.{name}"


def plain_note(text: object, limit: int = NOTE_CHARS) -> str:
    """Return ``text`` (an error's message, a path) as one line of plain text of ``limit`` chars.

    A skip reason or note built from an exception may span lines or hold control characters,
    which the profile's own schema (spec/text.py) refuses: whitespace is collapsed, anything
    unprintable escaped, and the text shortened.
    """
    line = one_line(" ".join(str(text).split())) or ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _provenance(what: str) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"kvoffload {__version__} measure ({what}) on {socket.gethostname()}, {platform.platform()}, {stamp}"


def _figure(value: str, what: str, note: str = "") -> dict[str, Any]:
    out = {"value": value, "kind": "measured", "source": _provenance(what)}
    if note:
        out["note"] = note
    return out


def _gbps(x: float) -> str:
    return f"{x / 1e9:.4g} GB/s"


def _best_rate(nbytes: int, run: Callable[[], None], seconds: float) -> float:
    """Return the best bytes/s over repeated runs within ``seconds`` (at least three runs)."""
    rates = []
    deadline = time.perf_counter() + seconds
    while len(rates) < 3 or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        run()
        rates.append(nbytes / (time.perf_counter() - t0))
        if len(rates) >= 50:
            break
    return max(rates)


# -- host memory ----------------------------------------------------------------------------------
def host_memory(plan: Plan, report: Report, progress: Callable[[str], None]) -> None:
    """Measure read and copy bandwidth with numpy, one thread and all cores, and the CPU's FLOP rate."""
    n = plan.host_bytes // 8
    src = np.ones(n, dtype=np.float64)
    dst = np.empty_like(src)
    cores = os.cpu_count() or 1
    progress("host memory: single-thread read")
    read1 = _best_rate(src.nbytes, lambda: src.sum(), plan.seconds_per_point)
    progress("host memory: single-thread copy")
    copy1 = _best_rate(2 * src.nbytes, lambda: np.copyto(dst, src), plan.seconds_per_point)
    chunks = np.array_split(np.arange(n), cores)
    bounds = [(c[0], c[-1] + 1) for c in chunks if len(c)]

    def parallel(fn: Callable[[int, int], Any]) -> Callable[[], None]:
        def run() -> None:
            with ThreadPoolExecutor(max_workers=len(bounds)) as pool:
                list(pool.map(lambda b: fn(*b), bounds))

        return run

    progress(f"host memory: {cores}-thread read")
    read_n = _best_rate(src.nbytes, parallel(lambda a, b: src[a:b].sum()), plan.seconds_per_point)
    progress(f"host memory: {cores}-thread copy")
    copy_n = _best_rate(
        2 * src.nbytes, parallel(lambda a, b: np.copyto(dst[a:b], src[a:b])), plan.seconds_per_point
    )
    progress("CPU: float32 matrix multiply")
    a = np.ones((1024, 1024), dtype=np.float32)
    flops = _best_rate(2 * 1024**3, lambda: a @ a, plan.seconds_per_point)
    report.tables["host_memory"] = [
        {"test": "read (numpy sum)", "threads": 1, "gb_s": read1 / 1e9},
        {"test": "copy (numpy copyto, read + write counted)", "threads": 1, "gb_s": copy1 / 1e9},
        {"test": "read (numpy sum)", "threads": cores, "gb_s": read_n / 1e9},
        {
            "test": "copy (numpy copyto, read + write counted)",
            "threads": cores,
            "gb_s": copy_n / 1e9,
        },
    ]
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    report.figures[_key(Host, "memory")] = _figure(
        f"{total} B", "os.sysconf physical pages x page size"
    )
    best = max(read_n, read1)
    report.figures[_key(Host, "memory_bandwidth")] = _figure(
        _gbps(best),
        f"numpy sum over {format_bytes(src.nbytes, binary=True)}, {cores} threads",
        f"single thread {_gbps(read1)}",
    )
    report.figures[_key(Host, "flops")] = _figure(
        f"{flops / 1e9:.4g} GFLOP/s", "numpy float32 1024x1024 matmul", "BLAS threads as configured"
    )
    report.figures[_key(Host, "cores")] = {"value": cores}


# -- storage ----------------------------------------------------------------------------------------
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
    report.figures[_key(Storage, "read_bandwidth")] = _figure(
        _gbps(seq),
        f"sequential 1 MiB preadv over {format_bytes(plan.file_bytes, binary=True)}, {how}",
    )
    report.figures[_key(Storage, "write_bandwidth")] = _figure(
        _gbps(write), "sequential 1 MiB writes then fsync"
    )
    qd1 = next(
        r for r in rows if r["request_bytes"] == min(plan.request_sizes) and r["queue_depth"] == 1
    )
    small = min(plan.request_sizes)
    latency = max(small / (qd1["gb_s"] * 1e9) - small / seq, 1e-7)
    report.figures[_key(Storage, "read_latency")] = _figure(
        f"{latency * 1e6:.4g} us",
        f"{format_bytes(small, binary=True)} random reads at queue depth 1, {how}",
    )
    iops = max(r["gb_s"] * 1e9 / small for r in rows if r["request_bytes"] == small)
    report.figures[_key(Storage, "random_read_iops")] = _figure(
        f"{iops:.4g} /s",
        f"{format_bytes(small, binary=True)} random reads, best queue depth, {how}",
    )


# -- GPU ------------------------------------------------------------------------------------------------
def gpu(plan: Plan, report: Report, progress: Callable[[str], None]) -> None:
    """Measure host↔device copies, device memory bandwidth and one attention step, with PyTorch."""
    try:
        import torch
    except ImportError:
        report.skipped.append("GPU: PyTorch is not installed, so no GPU figure was measured")
        return
    if not torch.cuda.is_available():
        report.skipped.append("GPU: PyTorch has no CUDA device here, so no GPU figure was measured")
        return
    dev = torch.device("cuda")

    def timed(fn: Callable[[], Any], repeat: int = 5) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(repeat):
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            best = min(best, start.elapsed_time(end) / 1e3)
        return best

    rows = []
    for size in plan.gpu_sizes:
        progress(f"GPU: copies of {format_bytes(size, binary=True)}")
        d = torch.empty(size, dtype=torch.uint8, device=dev)
        for pinned in (True, False):
            h = torch.empty(size, dtype=torch.uint8, pin_memory=pinned)
            h2d = size / timed(lambda h=h, d=d, nb=pinned: d.copy_(h, non_blocking=nb))
            d2h = size / timed(lambda h=h, d=d, nb=pinned: h.copy_(d, non_blocking=nb))
            rows.append(
                {"bytes": size, "pinned": pinned, "h2d_gb_s": h2d / 1e9, "d2h_gb_s": d2h / 1e9}
            )
    report.tables["gpu_copies"] = rows
    big = max(plan.gpu_sizes)
    pinned_big = next(r for r in rows if r["bytes"] == big and r["pinned"])
    pageable_big = next(r for r in rows if r["bytes"] == big and not r["pinned"])
    smallest = next(r for r in rows if r["bytes"] == min(plan.gpu_sizes) and r["pinned"])
    latency = max(
        min(plan.gpu_sizes) / (smallest["h2d_gb_s"] * 1e9)
        - min(plan.gpu_sizes) / (pinned_big["h2d_gb_s"] * 1e9),
        1e-7,
    )
    report.figures[_key(Link, "h2d_bandwidth")] = _figure(
        _gbps(pinned_big["h2d_gb_s"] * 1e9),
        f"torch pinned copy_ of {format_bytes(big, binary=True)}",
    )
    report.figures[_key(Link, "d2h_bandwidth")] = _figure(
        _gbps(pinned_big["d2h_gb_s"] * 1e9),
        f"torch pinned copy_ of {format_bytes(big, binary=True)}",
    )
    report.figures[_key(Link, "pageable_bandwidth")] = _figure(
        _gbps(pageable_big["h2d_gb_s"] * 1e9),
        f"torch pageable copy_ of {format_bytes(big, binary=True)}",
    )
    report.figures[_key(Link, "latency")] = _figure(
        f"{latency * 1e6:.4g} us", "smallest pinned copy minus its share of the large-copy rate"
    )
    progress("GPU: device memory bandwidth")
    x = torch.empty(big // 2, dtype=torch.uint8, device=dev)
    y = torch.empty_like(x)
    hbm = 2 * x.numel() / timed(lambda: y.copy_(x))
    report.figures[_key(Gpu, "memory_bandwidth_achievable")] = _figure(
        _gbps(hbm), "torch device copy_, read + write counted"
    )
    progress("GPU: one attention step over a cache on the GPU and streamed from pinned host memory")
    heads, dim, tokens, layers = 8, 128, 32768, 8
    q = torch.randn(1, 32, 1, dim, device=dev, dtype=torch.float16)
    kv_host = [
        torch.randn(2, 1, heads, tokens, dim, dtype=torch.float16).pin_memory()
        for _ in range(layers)
    ]
    kv_dev = [t.to(dev) for t in kv_host]
    buf = [torch.empty_like(kv_dev[0]) for _ in range(2)]
    stream = torch.cuda.Stream()

    def attend(kv: Any) -> Any:
        k = kv[0].repeat_interleave(4, dim=1)
        v = kv[1].repeat_interleave(4, dim=1)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    on_gpu = timed(lambda: [attend(kv) for kv in kv_dev], 3)

    def streamed() -> None:
        for kv in kv_host:
            buf[0].copy_(kv, non_blocking=True)
            attend(buf[0])

    def prefetched() -> None:
        with torch.cuda.stream(stream):
            buf[0].copy_(kv_host[0], non_blocking=True)
        for i in range(layers):
            torch.cuda.current_stream().wait_stream(stream)
            if i + 1 < layers:
                with torch.cuda.stream(stream):
                    buf[(i + 1) % 2].copy_(kv_host[i + 1], non_blocking=True)
            attend(buf[i % 2])

    report.tables["gpu_attention_step"] = [
        {"placement": "KV on the GPU", "ms": on_gpu * 1e3, "layers": layers, "tokens": tokens},
        {
            "placement": "KV streamed from pinned host memory",
            "ms": timed(streamed, 3) * 1e3,
            "layers": layers,
            "tokens": tokens,
        },
        {
            "placement": "streamed, next layer prefetched on a second stream",
            "ms": timed(prefetched, 3) * 1e3,
            "layers": layers,
            "tokens": tokens,
        },
    ]
    report.notes.append(
        plain_note(f"GPU: {torch.cuda.get_device_name(0)}, PyTorch {torch.__version__}")
    )


# -- the profile ------------------------------------------------------------------------------------------
def run(*, quick: bool, directory: Path, progress: Callable[[str], None] | None = None) -> Report:
    """Measure everything this machine allows; a part that cannot be measured is skipped with its reason."""
    return run_plan(Plan.quick() if quick else Plan.full(), directory=directory, progress=progress)


def run_plan(
    plan: Plan, *, directory: Path, progress: Callable[[str], None] | None = None
) -> Report:
    """Measure with an explicit plan (what ``run`` does with the quick or full plan)."""
    report = Report()
    say = progress or (lambda _: None)
    host_memory(plan, report, say)
    try:
        storage(plan, report, say, directory)
    except OSError as exc:
        report.skipped.append(
            plain_note(f"storage: could not measure in {directory}: {exc.strerror or exc}")
        )
    try:
        gpu(plan, report, say)
    except Exception as exc:  # a broken driver must not lose the host and storage figures
        report.skipped.append(plain_note(f"GPU: measurement failed: {type(exc).__name__}: {exc}"))
    return report


def profile(report: Report, *, base: str, ident: str, name: str) -> dict[str, Any]:
    """Return the profile mapping to write, checked against the hardware schema before it is.

    Measured figures go over the ``base`` catalog system's parts; a part measured whole (every
    required field of its schema) replaces the base's. InputError when it would not load.
    """
    base_raw = catalog.systems()[base]
    measured: dict[str, dict[str, Any]] = {}
    for key, fig in report.figures.items():
        kind, fld = key.split(".")
        measured.setdefault(kind, {})[fld] = fig if "kind" in fig else fig["value"]
    names = {
        "host": plain_note(
            f"this machine's host ({platform.processor() or platform.machine()})", NAME_CHARS
        ),
        "storage": "the measured filesystem's device",
    }
    out: dict[str, Any] = {
        "id": ident,
        "name": name,
        "description": f"Measured by kvoffload measure; parts it could not measure come from {base}.",
    }
    for kind, model in PART_MODELS.items():
        ref, fields = base_raw[kind], measured.get(kind)
        if not fields:
            out[kind] = ref
            continue
        if kind in names:
            fields = {"name": names[kind], **fields}
        required = {f.encode_name for f in msgspec.structs.fields(model) if f.required}
        if required <= fields.keys():  # measured whole: the base part's peaks need not bound it
            out[kind] = fields
        else:  # measured figures over the base part
            out[kind] = {"base": ref, **fields} if isinstance(ref, str) else {**ref, **fields}
    out["measurements"] = {
        "tables": report.tables,
        "skipped": [plain_note(s) for s in report.skipped],
        "notes": [plain_note(n) for n in report.notes],
    }
    out = yaml.safe_load(yaml.safe_dump(out, sort_keys=False))  # plain values, as the file holds
    try:
        build_system(out, ident=ident, origin="kvoffload measure")
    except InputError as exc:  # a schema change the measurement did not follow: say so
        raise exc.within(file=f"measured profile {ident!r}") from None
    return out


def check_out(out: Path) -> Path:
    """Return the file a profile for ``out`` goes to; InputError when it could not be written.

    Called before measuring: a folder that is missing, not a folder or not writable, or an
    ``out`` that is a directory or another non-file, is refused in one line.
    """
    where = {"file": str(out), "field": "--out"}
    target = Path(os.path.realpath(out))  # through a symbolic link to the file it names
    if len(target.name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        raise InputError(f"the file name is longer than {MAX_NAME_BYTES} bytes", **where)
    if target.is_dir():
        raise InputError("is a directory; give a file name for the profile", **where)
    if target.exists() and not stat.S_ISREG(target.stat().st_mode):
        raise InputError("exists and is not a regular file; give a file name", **where)
    folder = target.parent
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is not a directory"
        raise InputError(f"its folder {folder} {what}", **where)
    check_writable(folder, **where)
    return target


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_profile(raw: dict[str, Any], out: Path) -> None:
    """Write a profile to ``out`` whole or not at all, mode 0644 (less where the umask says so).

    A temporary file in the same folder is written, synced and renamed over ``out``. On any failure (a full disk, a signal) the temporary file is removed and ``out`` is left
    as it was; an OSError becomes an InputError naming the file.
    """
    target = check_out(out)
    text = (
        "# Written by `kvoffload measure`: measured figures say how and when they were taken.\n"
        + yaml.safe_dump(raw, sort_keys=False, allow_unicode=True)
    )
    umask = os.umask(0)
    os.umask(umask)
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".kvoffload-profile-", suffix=".tmp", dir=target.parent)
        try:
            os.fchmod(fd, PROFILE_MODE & ~umask)
            _write_all(fd, text.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        problem = exc.strerror or str(exc)
        if exc.errno == errno.ENOSPC:
            problem += "; nothing was written"
        raise InputError(f"could not write the profile: {problem}", file=str(out)) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def summarise(report: Report) -> list[str]:
    """Return one line per measured figure and per skip, for the terminal."""
    lines = []
    for key, fig in report.figures.items():
        if isinstance(fig, dict) and "kind" in fig:
            lines.append(f"  {key:<32} {fig['value']}")
    lines += [f"  skipped: {s}" for s in report.skipped]
    lines += [f"  note: {n}" for n in report.notes]
    best = max(
        (r for r in report.tables.get("storage_random_reads", [])),
        key=lambda r: r["gb_s"],
        default=None,
    )
    if best:
        lines.append(
            f"  best random read: {format_bandwidth(best['gb_s'] * 1e9)} at {format_bytes(best['request_bytes'], binary=True)} x QD {best['queue_depth']}"
        )
    return lines


def nearest_system(system: Any) -> tuple[str, list[dict[str, Any]]]:
    """Return the catalog system closest to ``system`` (log distance over the tiers' rates)."""

    def rates(s: Any) -> dict[str, float]:
        return {
            "GPU memory": s.gpu.streaming_bandwidth,
            "host→GPU link": s.link.h2d_bandwidth.value,
            "host DRAM": s.host.memory_bandwidth.value,
            "storage read": s.storage.read_bandwidth.value,
        }

    mine = rates(system)
    best, best_d = "", float("inf")
    for ident in catalog.systems():
        if ident == "article-reference":  # the article's assumptions, not a machine
            continue
        other = rates(load_system(ident))
        d = sum(np.log(mine[k] / other[k]) ** 2 for k in mine)
        if d < best_d:
            best, best_d = ident, d
    other = rates(load_system(best))
    rows = [
        {
            "tier": k,
            "this machine": format_bandwidth(mine[k]),
            best: format_bandwidth(other[k]),
            "ratio": mine[k] / other[k],
        }
        for k in mine
    ]
    return best, rows


def random_read_rows(system: Any) -> list[dict[str, Any]]:
    """Return the random-read table a measured profile keeps (empty for a catalog profile)."""
    return list(system.measurements.get("tables", {}).get("storage_random_reads", []))
