"""Where a setup puts weights and KV, and how its streams overlap: the inputs of every step."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from kvoffload.inputs.hardware import System
from kvoffload.inputs.models import Model
from kvoffload.inputs.precision import KvFormat, WeightFormat
from kvoffload.model import tensor_groups
from kvoffload.model.routing import Routing

OVERLAP_MODES = ("none", "perfect", "pipeline", "flexgen")


@dataclass(frozen=True)
class Split:
    """Shares of something (weights or KV cache) on the GPU, in host memory and on disk."""

    gpu: float = 1.0
    cpu: float = 0.0
    disk: float = 0.0

    @property
    def off(self) -> float:
        """Return the share that is not on the GPU."""
        return self.cpu + self.disk


@dataclass(frozen=True)
class GroupPlacement:
    """Where one tensor group lives and where it is computed.

    ``compute`` 'gpu': the off-GPU share is copied to the GPU each step (whole modules) and run
    there; 'cpu': the off-GPU share is computed where it lies (host memory, or read from disk into
    it), the activations crossing the link to the CPU and back.
    """

    group: str
    tier: Split
    compute: str = "gpu"

    def __post_init__(self) -> None:
        if self.group not in tensor_groups.GROUPS:
            raise ValueError(f"group must be one of {tensor_groups.GROUPS}, got {self.group!r}")
        if self.compute not in ("gpu", "cpu"):
            raise ValueError(f"compute must be 'gpu' or 'cpu', got {self.compute!r}")


@dataclass(frozen=True)
class Placement:
    """Where weights and KV live, where attention over offloaded KV runs, how streams overlap.

    ``groups`` places tensor groups one by one (the rest stay on the GPU); ``weights`` is then
    the byte-weighted whole, which the memory and the prefill use.
    """

    weights: Split = field(default_factory=Split)
    kv: Split = field(default_factory=Split)
    attention: str = "gpu"  # 'gpu': stream offloaded KV over the link; 'cpu': attend where it lies
    overlap: str = "none"
    pinned: bool = True
    groups: tuple[GroupPlacement, ...] = ()
    # False: kernels read the offloaded weights in place over the link (zero-copy, vLLM's UVA),
    # so no GPU buffer holds them on their way
    staged_weights: bool = True

    def __post_init__(self) -> None:
        if self.attention not in ("gpu", "cpu"):
            raise ValueError(f"attention must be 'gpu' or 'cpu', got {self.attention!r}")
        if self.overlap not in OVERLAP_MODES:
            raise ValueError(f"overlap must be one of {OVERLAP_MODES}, got {self.overlap!r}")


def by_groups(
    model: Model, fmt: WeightFormat, groups: tuple[GroupPlacement, ...], **rest: object
) -> Placement:
    """Return a placement of tensor groups, its whole-model weight shares weighted by bytes."""
    table = tensor_groups.tensor_table(model, fmt)
    per_group = table.by_group(table.nbytes)
    share = {g.group: g.tier for g in groups}
    total = float(per_group.sum())
    tiers = np.zeros(3)
    for i, name in enumerate(tensor_groups.GROUPS):
        s = share.get(name, Split())
        tiers += per_group[i] * np.array([s.gpu, s.cpu, s.disk])
    gpu, cpu, disk = (tiers / total) if total else (1.0, 0.0, 0.0)
    return Placement(weights=Split(float(gpu), float(cpu), float(disk)), groups=groups, **rest)


@dataclass(frozen=True)
class AttentionWalk:
    """A split-KV decode kernel whose programs walk their share of a layer's cache in tiles, one
    tile after another: ``splits`` shares a sequence, ``tile_tokens`` a tile, ``tile_s`` a tile."""

    splits: int
    tile_tokens: int
    tile_s: float

    def seconds(self, held_tokens: np.ndarray) -> np.ndarray:
        """Return a layer's walk (s) over ``held_tokens`` cached tokens: cdiv(cdiv(L, splits),
        tile_tokens) tiles at ``tile_s`` each; 0 where nothing is cached (arrays in and out)."""
        held = np.asarray(held_tokens, dtype=np.float64)
        return np.ceil(np.ceil(held / self.splits) / self.tile_tokens) * self.tile_s


@dataclass(frozen=True)
class Setup:
    """Everything a step depends on except the context and the batch."""

    system: System
    model: Model
    weights: WeightFormat = WeightFormat.BF16
    kv: KvFormat = KvFormat.BF16
    placement: Placement = field(default_factory=Placement)
    # KV heads the engine stores per layer, where it expands grouped heads (None: the model's own)
    kv_heads_stored: int | None = None
    # how many times the engine's CPU attention touches each stored cached value in a step, a
    # plain attention's read being 1 (ZeRO-Inference's fork expands grouped heads by a copy first)
    cpu_kv_passes: float = 1.0
    routing: Routing = field(default_factory=Routing)  # MoE routing skew and expert streaming
    # a decode-attention kernel slower than the cache's bytes at small batches (None: the bytes)
    attention_walk: AttentionWalk | None = None

    @property
    def cache_model(self) -> Model:
        """Return the model as its cache is stored (with expanded KV heads, if the engine does)."""
        if self.kv_heads_stored is None or self.kv_heads_stored == self.model.n_kv_heads:
            return self.model
        return replace(self.model, n_kv_heads=self.kv_heads_stored)

    def with_overlap(self, overlap: str) -> Setup:
        """Return the same setup with another overlap mode (every other placement field kept)."""
        return replace(self, placement=replace(self.placement, overlap=overlap))


def offloaded(system: System, model: Model, overlap: str = "none") -> Setup:
    """Return the setup with every KV byte in host memory and attention on the GPU (the article's case)."""
    return Setup(system, model, placement=Placement(kv=Split(0, 1, 0), overlap=overlap))
