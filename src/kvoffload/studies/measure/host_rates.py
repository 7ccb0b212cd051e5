"""Host memory bandwidth (one thread and all cores) and the CPU's matrix-multiply rate, with numpy."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from kvoffload.inputs.hardware import Host
from kvoffload.inputs.units import format_bytes
from kvoffload.studies.measure.plan import Plan, Report, figure_key, gbps, measured_figure


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
    report.figures[figure_key(Host, "memory")] = measured_figure(
        f"{total} B", "os.sysconf physical pages x page size"
    )
    best = max(read_n, read1)
    report.figures[figure_key(Host, "memory_bandwidth")] = measured_figure(
        gbps(best),
        f"numpy sum over {format_bytes(src.nbytes, binary=True)}, {cores} threads",
        f"single thread {gbps(read1)}",
    )
    report.figures[figure_key(Host, "flops")] = measured_figure(
        f"{flops / 1e9:.4g} GFLOP/s", "numpy float32 1024x1024 matmul", "BLAS threads as configured"
    )
    report.figures[figure_key(Host, "cores")] = {"value": cores}
