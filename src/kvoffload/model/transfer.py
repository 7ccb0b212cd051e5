"""Time to move bytes between memory tiers: bandwidth, per-transfer latency, NVMe queueing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from kvoffload.inputs.figures import Figure
from kvoffload.inputs.hardware import Storage, System


def transfer_time(
    nbytes: ArrayLike, bandwidth: ArrayLike, latency: ArrayLike = 0.0, transfers: ArrayLike = 1
) -> np.ndarray:
    """Return seconds to move ``nbytes`` (B) at ``bandwidth`` (B/s) in ``transfers`` copies."""
    b = np.asarray(nbytes, dtype=np.float64)
    return _f64(latency) * np.asarray(transfers) + b / _f64(bandwidth)


def _f64(x: ArrayLike) -> float | np.ndarray:
    """Return ``x`` as float64: a Python float as it is (the same value), else as an array."""
    return x if isinstance(x, float) else np.asarray(x, dtype=np.float64)


def link_time(
    system: System,
    nbytes: ArrayLike,
    direction: str = "h2d",
    *,
    transfers: ArrayLike = 1,
    pinned: bool = True,
) -> np.ndarray:
    """Return seconds to copy over the link ('h2d' or 'd2h'), at the slower of link and host DRAM."""
    rate = system.copy_rate(direction, pinned=pinned)
    return transfer_time(nbytes, rate, system.link.latency.value, transfers)


def peer_time(system: System, nbytes: ArrayLike, *, share: ArrayLike = 1.0) -> np.ndarray:
    """Return seconds to pass ``share`` x ``nbytes`` from one GPU to another (0 bytes: no time).

    Where the profile's link gives a GPU-to-GPU rate (``peer_bandwidth``: P2P, NVLink), the copy
    runs at it, with ``peer_latency`` (else the link's latency); without one it is staged through
    host memory: the link's latency plus the bytes at the slower pinned direction. ``share``
    scales the bytes of one such copy (a collective's steps: ``all_reduce_time``, ``gather_time``).
    """
    moved = np.asarray(nbytes, dtype=np.float64) * np.asarray(share, dtype=np.float64)
    rate, latency = _peer_path(system)
    return np.where(moved > 0, latency + moved / rate, 0.0)


def _peer_path(system: System) -> tuple[float, float]:
    """Return the GPU-to-GPU rate (B/s) and latency (s): the peer figures, else through host."""
    link = system.link
    if link.peer_bandwidth is not None:
        return link.peer_bandwidth.value, (link.peer_latency or link.latency).value
    return min(system.link_rate("h2d"), system.link_rate("d2h")), link.latency.value


def _ring_s(system: System, nbytes: float, gpus: int, steps: int) -> float:
    """Return ``steps`` ring steps in which every GPU passes ``nbytes / gpus`` to the next."""
    if nbytes <= 0 or gpus < 2:
        return 0.0
    rate, latency = _peer_path(system)
    return steps * (latency + nbytes / gpus / rate)


def all_reduce_time(system: System, nbytes: float, gpus: int) -> float:
    """Return seconds for one ring all-reduce of ``nbytes`` over ``gpus`` GPUs on the link.

    The ring algorithm NCCL runs: a reduce-scatter and an all-gather of N - 1 steps each, every
    GPU sending a 1/N chunk to its neighbour per step, all at once (Patarasuk and Yuan,
    "Bandwidth optimal all-reduce algorithms for clusters of workstations", JPDC 2009): each GPU
    moves 2(N-1)/N of the bytes and pays the link's latency 2(N-1) times.
    """
    return _ring_s(system, nbytes, gpus, 2 * (gpus - 1))


def gather_time(system: System, nbytes: float, gpus: int) -> float:
    """Return seconds to gather ``nbytes`` split over ``gpus`` GPUs onto every one: the ring's
    all-gather, N - 1 steps of a 1/N chunk each."""
    return _ring_s(system, nbytes, gpus, gpus - 1)


def nvme_bandwidth(
    storage: Storage, request_bytes: ArrayLike, queue_depth: ArrayLike = 1
) -> np.ndarray:
    """Return effective read B/s for requests of ``request_bytes`` at ``queue_depth`` outstanding.

    Each request costs the drive's small-read latency plus its size over the sequential rate;
    ``queue_depth`` requests are in flight at once; the result is capped by the sequential rate
    and, where the profile gives it, by the drive's peak random-read IOPS.
    """
    size = np.asarray(request_bytes, dtype=np.float64)
    qd = np.asarray(queue_depth, dtype=np.float64)
    seq = storage.read_bandwidth.value
    per_request = storage.read_latency.value + size / seq
    rate = np.minimum(qd * size / per_request, seq)
    if storage.random_read_iops is not None:
        rate = np.minimum(rate, storage.random_read_iops.value * size)
    return rate


@dataclass(frozen=True)
class Tier:
    """One memory tier as the article tabulates it: a raw rating and an achievable rate."""

    key: str
    name: str
    raw: Figure
    achievable: Figure
    latency: Figure | None

    def time(self, nbytes: ArrayLike, *, achievable: bool = True) -> np.ndarray:
        """Return seconds to move ``nbytes`` over this tier (one transfer)."""
        rate = (self.achievable if achievable else self.raw).value
        lat = self.latency.value if self.latency is not None else 0.0
        return transfer_time(nbytes, rate, lat)


def tiers(system: System) -> tuple[Tier, ...]:
    """Return the system's tiers, fastest first: GPU memory, the link, host DRAM, NVMe."""
    g, li, h, s = system.gpu, system.link, system.host, system.storage
    return (
        Tier(
            "gpu",
            f"GPU memory ({g.name})",
            g.memory_bandwidth,
            g.memory_bandwidth_achievable or g.memory_bandwidth,
            None,
        ),
        Tier("link", f"host→GPU link ({li.name})", li.raw_bandwidth, li.h2d_bandwidth, li.latency),
        Tier(
            "host",
            f"host DRAM ({h.name})",
            h.memory_bandwidth_peak or h.memory_bandwidth,
            h.memory_bandwidth,
            None,
        ),
        Tier("storage", f"storage ({s.name})", s.read_bandwidth, s.read_bandwidth, s.read_latency),
    )
