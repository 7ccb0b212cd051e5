"""How fast CPU-side matmuls stream their weights: a llama.cpp matvec rate per format and threads.

A decode matvec on the CPU dequantises and dots every weight once, so its time is the weight bytes
over a rate that is the lower of what the memory delivers to these kernels and what the threads can
dequantise: ``min(bandwidth_share x host memory bandwidth, n_eff x per_thread)``, with
``n_eff = min(threads, performance cores)``. The constants are fitted per kernel to published
CPU-only llama.cpp runs on named CPUs (catalog/cpu_matvec.yaml, with each row's source).

On a host of several sockets the memory the threads reach depends on where the pages lie
(``host_stream_rate``). With no NUMA policy the pages are first-touched by the thread that loads
them, so they sit on one node: every socket's threads draw on that node's DRAM, the far ones over
the socket link, and two sockets deliver one socket's rate (llama.cpp issue #11744: a dual EPYC
9175F ran Llama 3.1 70B f16 at 2.4 tokens/s, and at 4.31 with ``--numa distribute`` and the
model paged in by the generating threads, 0.56 of it). ``distribute`` spreads the threads over
the nodes and each reads what it first touched: every socket at its own rate. ``isolate`` keeps
the threads, and their pages, on one node. ``numactl`` runs on the CPUs and memory policy
numactl gives; modelled as ``numactl --interleave=all`` over every node, where each socket reads
all but 1/sockets of its bytes from the others, across the socket link.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from kvoffload.inputs import catalog
from kvoffload.inputs.hardware import Host
from kvoffload.inputs.precision import WeightFormat
from kvoffload.inputs.units import Dim, parse_quantity


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


NUMA_POLICIES = ("distribute", "isolate", "numactl")  # llama.cpp's --numa; None: no policy


def sockets_used(host: Host, threads: int | None = None, numa: str | None = None) -> int:
    """Return the sockets whose cores run the threads: one under ``isolate``, else all they fill."""
    if numa is not None and numa not in NUMA_POLICIES:
        raise ValueError(f"numa must be one of {', '.join(NUMA_POLICIES)} or None, got {numa!r}")
    if numa == "isolate":
        return 1
    return min(host.sockets, threads) if threads else host.sockets


def host_stream_rate(host: Host, threads: int | None = None, numa: str | None = None) -> float:
    """Return the rate (B/s) at which CPU threads stream host memory under a NUMA policy.

    One socket: the host's ``memory_bandwidth``. Several (``s`` sockets used, the threads split
    evenly, each socket reading its own DRAM at ``b``, each pair of sockets linked at ``x`` per
    direction; no ``cross_socket_bandwidth``: unbounded): ``distribute`` s x b; ``isolate`` b; no
    policy, every page on one node, min(b, s x x) (its DRAM serves all, each far socket's R/s
    crosses its link); ``numactl`` (interleaved) min(s x b, s^2 x x) (each link carries R/s^2).
    """
    s = sockets_used(host, threads, numa)
    b = host.socket_bandwidth
    if s == 1:
        return b
    x = host.cross_socket_bandwidth.value if host.cross_socket_bandwidth else float("inf")
    if numa == "distribute":
        return s * b
    if numa == "numactl":
        return min(s * b, s * s * x)
    return min(b, s * x)


def thread_cores(host: Host, numa: str | None = None) -> int | None:
    """Return the cores matvec threads run on at full speed: one socket's under ``isolate``."""
    cores = host.performance_cores or host.cores
    if cores is None or numa != "isolate":
        return cores
    return max(cores // host.sockets, 1)


def weight_stream_rate(
    host: Host, fmt: WeightFormat, threads: int | None = None, numa: str | None = None
) -> float:
    """Return the rate (B/s) at which CPU matvecs stream weights in ``fmt`` with ``threads``."""
    k = kernel(fmt)
    n = threads or host.matmul_threads
    bandwidth = k.bandwidth_share * host_stream_rate(host, n, numa)
    if n is None:
        return bandwidth
    cores = thread_cores(host, numa)
    n_eff = min(n, cores) if cores else n
    return min(bandwidth, n_eff * k.per_thread_bps)
