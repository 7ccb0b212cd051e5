"""Whether bytes fit a machine: GPU memory, host memory and, where the profile bounds it, disk.

The one comparison of memory with capacity; the step model's batch search, the alternatives'
fit, FlexGen's policy search and the scenario check all use it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from kvoffload.spec.hardware import System


def tiers(
    system: System, gpu_bytes: ArrayLike, cpu_bytes: ArrayLike, disk_bytes: ArrayLike = 0.0
) -> list[tuple[str, ArrayLike, float]]:
    """Return (tier, bytes needed, bytes there) for every tier the system bounds."""
    out = [
        ("GPU memory", gpu_bytes, system.gpu_memory),
        ("host memory", cpu_bytes, system.host_memory),
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
