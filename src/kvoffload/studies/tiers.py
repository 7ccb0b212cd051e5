"""Memory tiers: each tier's rated and achievable rate, and the time to move a payload over it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from kvoffload.inputs import catalog
from kvoffload.inputs.figures import Figure
from kvoffload.inputs.hardware import System
from kvoffload.inputs.models import Model
from kvoffload.inputs.units import format_bytes
from kvoffload.model import kv, transfer


def tier_rates(system: System) -> pd.DataFrame:
    """Return each tier's rated and achievable rate (B/s), with kinds, latency (s) and source."""
    rows = [
        {
            "tier": tier.name,
            "rated_bps": tier.raw.value,
            "rated_kind": tier.raw.kind.value,
            "achievable_bps": tier.achievable.value,
            "achievable_kind": tier.achievable.kind.value,
            "latency_s": tier.latency.value if tier.latency else None,
            "achievable_source": catalog.source_title(tier.achievable.source),
        }
        for tier in transfer.tiers(system)
    ]
    return pd.DataFrame(rows)


def transfer_curves(system: System, sizes_bytes: np.ndarray | None = None) -> pd.DataFrame:
    """Return time (ms) and effective rate (GB/s) to move each payload size over each tier."""
    sizes = np.logspace(3, 10, 57) if sizes_bytes is None else np.asarray(sizes_bytes, float)
    rows = []
    for tier in transfer.tiers(system):
        t = tier.time(sizes)
        for size, seconds in zip(sizes, t, strict=True):
            rows.append(
                {
                    "tier": tier.name,
                    "payload_bytes": float(size),
                    "time_ms": float(seconds) * 1e3,
                    "effective_gb_s": float(size / seconds) / 1e9,
                }
            )
    return pd.DataFrame(rows)


def layer_moves(system: System, model: Model, tokens: int) -> pd.DataFrame:
    """Return the time (ms) to move one layer's K+V over each tier, and its ratio to GPU memory."""
    nbytes = kv.full_layer_bytes(model, tokens)
    tiers = transfer.tiers(system)
    base_rated = float(tiers[0].time(nbytes, achievable=False))
    base_real = float(tiers[0].time(nbytes, achievable=True))
    rows = []
    for tier in tiers:
        rated = float(tier.time(nbytes, achievable=False))
        real = float(tier.time(nbytes, achievable=True))
        rows.append(
            {
                "tier": tier.name,
                "time at rated bandwidth (ms)": rated * 1e3,
                "× GPU memory (rated)": rated / base_rated,
                "time at achievable rate (ms)": real * 1e3,
                "× GPU memory (achievable)": real / base_real,
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class LinkAgainstGpu:
    """The link's achievable rate against its rating and against the GPU's own memory."""

    gpu_rate: Figure  # GPU memory, achievable
    link_rate: Figure  # host→GPU copies, achievable
    link_raw: Figure  # host→GPU link, rated

    @property
    def link_share_pct(self) -> float:
        """Return the link's achievable rate as a share (%) of its rating."""
        return 100 * self.link_rate.value / self.link_raw.value

    @property
    def gpu_over_link(self) -> float:
        """Return how many times faster the GPU reads its own memory than the link copies."""
        return self.gpu_rate.value / self.link_rate.value


def link_against_gpu(system: System) -> LinkAgainstGpu:
    """Return the GPU's and the link's achievable rates and the link's rating."""
    gpu, link = transfer.tiers(system)[:2]
    return LinkAgainstGpu(gpu.achievable, link.achievable, link.raw)


@dataclass(frozen=True)
class LayerTimes:
    """The time (ms) to move one layer's K+V once over three tiers, at achievable rates."""

    gpu_ms: float
    link_ms: float
    disk_ms: float
    n_layers: int

    @property
    def link_ratio(self) -> float:
        """Return the link's time over the GPU memory's."""
        return self.link_ms / self.gpu_ms

    @property
    def disk_ratio(self) -> float:
        """Return the storage's time over the GPU memory's."""
        return self.disk_ms / self.gpu_ms

    @property
    def step_link_ms(self) -> float:
        """Return the link time (ms) of a step whose every layer's cache crosses the link."""
        return self.link_ms * self.n_layers


def layer_times(system: System, model: Model, tokens: int) -> LayerTimes:
    """Return the time to move one layer's K+V at ``tokens`` from GPU memory, the link, storage."""
    gpu, link, _, storage = transfer.tiers(system)
    nbytes = kv.full_layer_bytes(model, tokens)
    return LayerTimes(
        gpu_ms=float(gpu.time(nbytes)) * 1e3,
        link_ms=float(link.time(nbytes)) * 1e3,
        disk_ms=float(storage.time(nbytes)) * 1e3,
        n_layers=model.n_layers,
    )


def half_rate_bytes(system: System) -> float:
    """Return the payload (B) at which a copy reaches half the link's achievable rate (0: no latency).

    That is where the per-copy latency and the streaming time are equal: latency × rate.
    """
    link = transfer.tiers(system)[1]
    return link.latency.value * link.achievable.value if link.latency else 0.0


def half_rate_sentence(system: System) -> str:
    """Return where a copy reaches half the link's rate, or that without latency every copy is fast."""
    half = half_rate_bytes(system)
    if not half:
        return (
            "This profile gives the link no per-copy latency, so every copy, however small, "
            "runs at the link's full achievable rate."
        )
    return (
        f"A copy reaches half the link's achievable rate once its payload is {format_bytes(half)}, "
        "where the latency and the streaming time are equal."
    )
