"""How fast CPU-side matmuls stream their weights: a llama.cpp matvec rate per format and threads.

A decode matvec on the CPU dequantises and dots every weight once, so its time is the weight bytes
over a rate that is the lower of what the memory delivers to these kernels and what the threads can
dequantise: ``min(bandwidth_share x host memory bandwidth, n_eff x per_thread)``, with
``n_eff = min(threads, performance cores)``. The constants are fitted per kernel to published
CPU-only llama.cpp runs on named CPUs (catalog/cpu_matvec.yaml, with each row's source).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from kvoffload.spec import catalog
from kvoffload.spec.hardware import Host
from kvoffload.spec.precision import WeightFormat
from kvoffload.spec.units import Dim, parse_quantity


@dataclass(frozen=True)
class Kernel:
    """One matvec kernel's constants: the share of host bandwidth it reaches, B/s per thread."""

    name: str
    bandwidth_share: float
    per_thread_bps: float
    kind: str


@cache
def kernel(fmt: WeightFormat) -> Kernel:
    """Return the matvec kernel (and its constants) llama.cpp runs for weights in ``fmt``."""
    data = catalog.load("cpu_matvec")
    name = data["format_kernels"][fmt.value]["kernel"]
    c = data["constants"][name]
    return Kernel(
        name, float(c["bandwidth_share"]), parse_quantity(c["per_thread"], Dim.BANDWIDTH), c["kind"]
    )


def weight_stream_rate(host: Host, fmt: WeightFormat, threads: int | None = None) -> float:
    """Return the rate (B/s) at which CPU matvecs stream weights in ``fmt`` with ``threads``."""
    k = kernel(fmt)
    bandwidth = k.bandwidth_share * host.memory_bandwidth.value
    n = threads or host.matmul_threads
    if n is None:
        return bandwidth
    cores = host.performance_cores or host.cores
    n_eff = min(n, cores) if cores else n
    return min(bandwidth, n_eff * k.per_thread_bps)
