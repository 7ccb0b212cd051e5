"""The CPU side KTransformers' engines share: its kernels' decode and prefill rates on a host.

Constants in catalog/engine_constants.yaml (``ktransformers``), each with its source: llamafile's
share of the memory rate and rate per core, AMX's int8 and bf16 tile rates per core (its published
35 TOPS / 21 TFLOPS over the 64 cores of bench_moe_amx.py), and what each socket after the first
adds under a NUMA layout that spreads the experts (``numa_socket_share``).
"""

from __future__ import annotations

from functools import cache

from kvoffload.inputs import catalog
from kvoffload.inputs.hardware import Host, System
from kvoffload.inputs.precision import WeightFormat
from kvoffload.model import cpu_rate

AMX_MIN_TOKENS_PER_EXPERT = 4  # doc/en/AMX.md: AMX above 4 tokens per expert, else AVX-512
HIDDEN_BYTES = 2  # the pinned bf16 host buffer of the hidden state (KExpertsCPU.input_tensor_cpu)


@cache
def constants() -> dict:
    """Return KTransformers' engine constants with their sources (catalog/engine_constants.yaml)."""
    return catalog.load("engine_constants")["ktransformers"]


def constant(name: str) -> float:
    """Return one of KTransformers' engine constants' value."""
    return float(constants()[name]["value"])


def hidden_round_trip_s(system: System, nbytes: float) -> float:
    """Return the seconds ``nbytes`` of hidden state take to the CPU's experts and their output
    back: the pinned host buffers' copies each way (KExpertsCPU's input and output tensors)."""
    return nbytes / system.copy_rate("h2d", pinned=True) + nbytes / system.copy_rate(
        "d2h", pinned=True
    )


def socket_scale(host: Host, n_threads: int, numa: str | None) -> tuple[float, float]:
    """Return what the sockets of a ``distribute`` layout add up to, in sockets (each after the
    first adds ``numa_socket_share`` of one, fitted on ``USE_NUMA``), and the share of their
    threads' full rate that is; (1, 1) on one socket or under another policy."""
    if numa != "distribute":
        return 1.0, 1.0
    used = cpu_rate.sockets_used(host, n_threads, "distribute")
    worth = 1.0 + (used - 1) * constant("numa_socket_share")
    return worth, worth / used


def stream_rate(
    host: Host, kind: str, fmt: WeightFormat, n_threads: int, numa: str | None
) -> float:
    """Return the rate (B/s) the CPU streams expert weights in ``fmt`` in decode (matvecs).

    ``kind`` ``llamafile``: llamafile's kernels reach ``llamafile_bandwidth_share`` of the memory
    the threads read (fitted); any other kernel the llama.cpp matvec rate for its format
    (assumed: AMX's AVX-512 decode kernel and kt-kernel's native ones read like it).
    """
    if kind != "llamafile":
        return cpu_rate.weight_stream_rate(host, fmt, n_threads, numa)
    one = cpu_rate.host_stream_rate(host, n_threads, "isolate" if numa == "distribute" else numa)
    worth, share = socket_scale(host, n_threads, numa)
    memory = constant("llamafile_bandwidth_share") * one * worth
    cores = cpu_rate.thread_cores(host, numa)
    n_eff = min(n_threads, cores) if cores else n_threads
    return min(memory, n_eff * cpu_rate.kernel(fmt).per_thread_bps * share)


def compute_rate(
    host: Host, kind: str, n_threads: int, numa: str | None, tokens_per_expert: float
) -> float:
    """Return the CPU's FLOP/s on experts in prefill for a kernel ``kind`` (``llamafile``,
    ``int8`` or ``bf16`` AMX tiles, ``vector``): llamafile's or AMX's rate per core (fitted; AMX's
    from its published kernel rate), and at or below 4 tokens an expert the host's vector rate
    for the cores the threads run on (``flops`` is every core's)."""
    cores = cpu_rate.thread_cores(host, numa) or n_threads
    if kind == "vector" or (kind != "llamafile" and tokens_per_expert <= AMX_MIN_TOKENS_PER_EXPERT):
        every = host.performance_cores or host.cores
        return host.flops.value * (min(n_threads, cores) / every if every else 1.0)
    name = "llamafile_gemm_per_core" if kind == "llamafile" else f"amx_{kind}_per_core"
    share = socket_scale(host, n_threads, numa)[1]
    return constant(name) * 1e9 * min(n_threads, cores) * share
