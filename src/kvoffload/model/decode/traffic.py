"""One step's weight work per layer class: the bytes each side reads, the FLOPs, the copies."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvoffload.model import tensor_groups
from kvoffload.model.decode.layer_classes import Layers
from kvoffload.model.decode.placement import GroupPlacement, Setup, Split
from kvoffload.model.routing import touched_share


@dataclass(frozen=True)
class WeightTraffic:
    """One step's weight work per layer class: bytes each side reads, FLOPs, copies, hand-overs."""

    gpu_bytes: np.ndarray  # weight bytes the GPU reads from its memory
    cpu_bytes: np.ndarray  # weight bytes CPU-side matmuls read from host memory
    gpu_flops: np.ndarray
    cpu_flops: np.ndarray
    moved: np.ndarray  # bytes copied host -> GPU (streamed modules)
    from_disk: np.ndarray  # weight bytes read from disk
    hand_overs: np.ndarray  # activation copies each way (CPU-computed groups)


def staged_weight_bytes(setup: Setup, lay: Layers) -> np.ndarray:
    """Return the weight bytes each class copies to the GPU per step, for one request (B)."""
    p, r = setup.placement, setup.routing
    return lay.derived(
        ("staged", p.groups, p.weights, r), lambda: weight_traffic(setup, lay, np.ones(1)).moved
    )


def weight_traffic(setup: Setup, lay: Layers, b: np.ndarray) -> WeightTraffic:
    """Return each class's weight traffic for ``b`` requests (a trailing class axis).

    Routed experts are read only for the experts the batch touches; a streamed group moves
    whole, every expert included.
    """
    p = setup.placement
    k, n = lay.expert_use
    r = setup.routing
    # distinct routed experts the batch reads (a dense model has none: the share multiplies 0)
    active = touched_share(n, k, b, r.effective_experts) if (k, n) != (1, 1) else 1.0
    if not p.groups:
        w = p.weights
        # what does not depend on the batch is computed once per placement (read-only arrays)
        read_at = lambda: lay.weight_bytes - lay.expert_bytes + lay.expert_bytes * active  # noqa: E731
        read = lay.derived(("read",), read_at) if (k, n) == (1, 1) else read_at()
        zero, moved, disk = lay.derived(
            ("placed", w),
            lambda: (
                np.zeros_like(lay.weight_bytes), lay.weight_bytes * w.off, lay.weight_bytes * w.disk
            ),
        )  # fmt: skip
        if r.stream == "routed" and (k, n) != (1, 1):
            # only the routed experts the batch touches cross, less those a GPU cache holds
            hit = r.gpu_hit_rate
            moved = (
                lay.weight_bytes - lay.expert_bytes + lay.expert_bytes * active * (1 - hit)
            ) * w.off
        return WeightTraffic(read, zero, b * lay.dense_flops, zero, moved, disk, zero)
    experts = tensor_groups.GROUPS.index("experts")
    placed = {g.group: g for g in p.groups}
    gpu_b = cpu_b = gpu_f = cpu_f = moved = disk = 0.0
    crossing = np.zeros_like(lay.weight_bytes)
    for i, name in enumerate(tensor_groups.GROUPS):
        full = lay.group_bytes[..., i]
        if not np.any(full):
            continue
        # groups not placed one by one: on the GPU beside placed groups, else the whole split
        g = placed.get(name, GroupPlacement(name, Split() if p.groups else p.weights))
        read = full * active if i == experts else full
        flops = 2 * b * lay.group_params[..., i] * ((k / n) if i == experts else 1.0)
        off = g.tier.cpu + g.tier.disk
        disk = disk + full * g.tier.disk
        if g.compute == "gpu":
            # a streamed group moves whole, unless the engine fetches only the routed experts it
            # needs (and finds some in a GPU expert cache)
            copied = read * (1 - r.gpu_hit_rate) if i == experts and r.stream == "routed" else full
            gpu_b, gpu_f, moved = gpu_b + read, gpu_f + flops, moved + copied * off
        else:
            gpu_b, gpu_f = gpu_b + read * g.tier.gpu, gpu_f + flops * g.tier.gpu
            cpu_b, cpu_f = cpu_b + read * off, cpu_f + flops * off
            crossing = np.maximum(crossing, np.where(full * off > 0, 1.0, 0.0))
    shape = np.broadcast(b, lay.weight_bytes).shape
    arr = lambda x: np.broadcast_to(np.asarray(x, dtype=np.float64), shape)  # noqa: E731
    return WeightTraffic(
        arr(gpu_b), arr(cpu_b), arr(gpu_f), arr(cpu_f), arr(moved), arr(disk), arr(crossing)
    )
