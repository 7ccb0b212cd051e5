"""Whether bytes fit a machine: GPU memory, host memory and, where the profile bounds it, disk.

Host memory counts what a process can hold: the profile's memory less ``Host.reserved_memory``
(the OS, its page descriptors and the page cache's floor).

The one comparison of memory with capacity; the step model's batch search, the alternatives'
fit, FlexGen's policy search and the scenario check all use it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from kvoffload.inputs.hardware import System


def host_capacity(system: System) -> float:
    """Return the host memory a process can hold (bytes): the memory less what the OS keeps."""
    return max(system.host_memory - system.host.reserved_memory, 0.0)


def tiers(
    system: System, gpu_bytes: ArrayLike, cpu_bytes: ArrayLike, disk_bytes: ArrayLike = 0.0
) -> list[tuple[str, ArrayLike, float]]:
    """Return (tier, bytes needed, bytes there) for every tier the system bounds."""
    out = [
        ("GPU memory", gpu_bytes, system.gpu_memory),
        ("host memory", cpu_bytes, host_capacity(system)),
    ]
    if system.disk_capacity is not None:
        out.append(("disk", disk_bytes, system.disk_capacity))
    return out


def within(need_bytes: ArrayLike, have_bytes: float) -> np.ndarray:
    """Return whether a tier holding ``have_bytes`` holds ``need_bytes`` (elementwise)."""
    return np.asarray(need_bytes, dtype=np.float64) <= have_bytes


def fits(
    system: System, gpu_bytes: ArrayLike, cpu_bytes: ArrayLike, disk_bytes: ArrayLike = 0.0
) -> np.ndarray:
    """Return whether every tier holds what it must (bytes, broadcast elementwise)."""
    ok = np.asarray(True)
    for _, need, have in tiers(system, gpu_bytes, cpu_bytes, disk_bytes):
        ok = ok & within(need, have)
    return ok
