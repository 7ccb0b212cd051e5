"""One scenario's prediction: the validated scenario, what it costs, and where things were put.

Every engine returns a ``Prediction`` of this one shape, so ``predict --json`` has the same keys
whatever the engine; what only one engine has goes under ``engine_settings``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvoffload.inputs.errors import InputError
from kvoffload.inputs.hardware import System
from kvoffload.inputs.models import Model
from kvoffload.inputs.precision import KvFormat, WeightFormat
from kvoffload.inputs.units import format_bytes
from kvoffload.model import capacity, decode


@dataclass(frozen=True)
class PrefixRequest:
    """The scenario's ``reuse:``: how many prompt tokens are cached, and in which tier."""

    cached_tokens: int
    tier: str  # 'gpu', 'cpu' or 'disk'


@dataclass(frozen=True)
class SessionTraffic:
    """The scenario's ``traffic:``: sessions whose turns share an LRU prefix cache."""

    sessions: int
    prefix_tokens: int  # context a turn starts with (cached from the session's last turn)
    new_tokens: int  # tokens a turn adds to its prompt
    generate: int  # tokens a turn generates
    turn_gap_s: float  # the shortest gap between two turns of one session
    arrival_rate: float  # requests per second over all sessions


@dataclass(frozen=True)
class Scenario:
    """A validated scenario: the specs and the workload."""

    system: System
    model: Model
    engine: str
    setup: decode.Setup
    batch: int
    prompt: int
    generate: int
    options: Any = None  # the engine's validated options (None for generic)
    pinned: bool | None = None  # the scenario's `pinned:` where it says; None: the engine's default
    reuse: PrefixRequest | None = None  # the scenario's `reuse:`, where given
    traffic: SessionTraffic | None = None  # the scenario's `traffic:`, where given

    def pinned_or(self, engine_default: bool) -> bool:
        """Return whether host buffers are page-locked: the scenario's word, else the engine's."""
        return engine_default if self.pinned is None else self.pinned


@dataclass(frozen=True)
class Resolved:
    """Where an engine put things: shares per tier, attention side, overlap, pinning, formats."""

    weights: decode.Split
    kv: decode.Split
    attention: str
    overlap: str
    pinned: bool
    weights_format: WeightFormat
    kv_format: KvFormat

    @classmethod
    def of(cls, setup: decode.Setup) -> Resolved:
        """Return the placement a step-model setup runs with."""
        p = setup.placement
        return cls(p.weights, p.kv, p.attention, p.overlap, p.pinned, setup.weights, setup.kv)

    def to_json(self) -> dict[str, Any]:
        """Return the placement as the JSON object documented in the README (same keys always)."""
        share = lambda s: {k: float(np.mean(getattr(s, k))) for k in ("gpu", "cpu", "disk")}  # noqa: E731
        return {
            "weights": share(self.weights),
            "kv": share(self.kv),
            "attention": self.attention,
            "overlap": self.overlap,
            "pinned": self.pinned,
            "weights_precision": self.weights_format.value,
            "kv_precision": self.kv_format.value,
        }


_TIERS = ("gpu", "cpu", "disk")


@dataclass(frozen=True)
class PrefixReuse:
    """A prefix-cache hit (s, B, tokens) and, with traffic, the mix of hits per tier."""

    hit_tokens: int
    load_s: float
    load_bytes: float
    prefill_new_s: float
    store_bytes: float
    tier: str | None  # None: traffic only, no single request given
    hit_rate_by_tier: Mapping[str, float] | None = None
    ttft_mean_s: float | None = None
    ttft_p90_s: float | None = None
    prefill_tokens_per_s: float | None = None
    survival_s_by_tier: Mapping[str, float | None] | None = None
    host_bytes_for_90pct: float | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the reuse block documented in the README (every key, null where not given)."""
        ms = lambda s: None if s is None else s * 1e3  # noqa: E731
        return {
            "hit_tokens": self.hit_tokens,
            "load_ms": self.load_s * 1e3,
            "load_bytes": int(self.load_bytes),
            "load_bandwidth": self.load_bytes / self.load_s if self.load_s > 0 else 0.0,
            "prefill_new_ms": self.prefill_new_s * 1e3,
            "store_bytes": int(self.store_bytes),
            "tier": self.tier,
            "hit_rate_by_tier": None
            if self.hit_rate_by_tier is None
            else {t: float(self.hit_rate_by_tier.get(t, 0.0)) for t in _TIERS},
            "ttft_mean_ms": ms(self.ttft_mean_s),
            "ttft_p90_ms": ms(self.ttft_p90_s),
            "prefill_tokens_per_s": self.prefill_tokens_per_s,
            # the engine's tiers only; null: nothing is ever evicted (every session fits)
            "survival_s_by_tier": None
            if self.survival_s_by_tier is None
            else dict(self.survival_s_by_tier),
            "host_bytes_for_90pct": None
            if self.host_bytes_for_90pct is None
            else float(self.host_bytes_for_90pct),
        }


@dataclass(frozen=True)
class Prediction:
    """What one scenario costs."""

    scenario: Scenario
    tpot_s: float
    ttft_s: float
    streams_s: Mapping[str, float]
    memory: decode.Memory
    by_overlap_s: Mapping[str, float]
    resolved: Resolved
    settings: dict[str, Any] = field(default_factory=dict)  # the engine's own resolved settings
    policy: str = ""  # one line saying what the engine chose, for people
    reuse: PrefixReuse | None = None  # the prefix-cache hit, where the scenario gives one
    ttft_recompute_s: float | None = None  # TTFT with nothing cached (None: ttft_s)
    # what the 'cpu' stream holds: (attention over host-resident KV, matmuls on host weights);
    # None: unknown, named as either
    cpu_work: tuple[bool, bool] | None = None

    @property
    def bottleneck(self) -> str:
        """Return the stream with the most work per step, the CPU's named by what it holds."""
        key = max(self.streams_s, key=self.streams_s.get)
        if key == "cpu" and self.cpu_work is not None:
            return decode.cpu_stream_name(*self.cpu_work)
        return decode.STREAM_NAMES[key]

    def to_json(self) -> dict[str, Any]:
        """Return the prediction as the JSON object documented in the README."""
        sc = self.scenario
        decode_rate = sc.batch / self.tpot_s
        total_time = self.ttft_s + sc.generate * self.tpot_s
        st = self.streams_s
        return {
            "hardware": sc.system.id,
            "model": sc.model.id,
            "engine": sc.engine,
            "workload": {"batch": sc.batch, "prompt": sc.prompt, "generate": sc.generate},
            "overlap": self.resolved.overlap,
            "tpot_ms": self.tpot_s * 1e3,
            "ttft_ms": self.ttft_s * 1e3,
            "ttft_recompute_ms": (
                self.ttft_s if self.ttft_recompute_s is None else self.ttft_recompute_s
            )
            * 1e3,
            "decode_tokens_per_s": decode_rate,
            "prefill_tokens_per_s": sc.batch * sc.prompt / self.ttft_s,
            "throughput_tokens_per_s": sc.batch * sc.generate / total_time,
            "bottleneck": self.bottleneck,
            "step": {
                "compute_ms": st["gpu"] * 1e3,
                "transfer_ms": (st["h2d"] + st["d2h"]) * 1e3,
                "h2d_ms": st["h2d"] * 1e3,
                "d2h_ms": st["d2h"] * 1e3,
                "cpu_ms": st["cpu"] * 1e3,
                "disk_ms": (st["disk_read"] + st["disk_write"]) * 1e3,
            },
            # every mode, null where the engine fixes its own overlap and the step model's
            # alternatives do not apply to it
            "tpot_ms_by_overlap": {
                m: (self.by_overlap_s[m] * 1e3 if m in self.by_overlap_s else None)
                for m in decode.OVERLAP_MODES
            },
            "memory": {
                "gpu_bytes": int(self.memory.gpu),
                "cpu_bytes": int(self.memory.cpu),
                "disk_bytes": int(self.memory.disk),
                "staging_bytes": int(self.memory.staging),
                "gpu_capacity_bytes": int(sc.system.gpu_memory),
                "cpu_capacity_bytes": int(sc.system.host_memory),
            },
            "policy": self.policy or None,
            "placement": self.resolved.to_json(),
            "engine_settings": self.settings,
            "reuse": None if self.reuse is None else self.reuse.to_json(),
        }


def shortfalls(system: System, mem: decode.Memory) -> list[tuple[str, float, float]]:
    """Return (tier, bytes needed, bytes there) for every tier the memory overflows."""
    tiers = capacity.tiers(system, mem.gpu, mem.cpu, mem.disk)
    # GPU by GPU where the engine places so: one GPU may overflow while the sum fits
    devices = system.devices if mem.gpu_each else ()
    tiers += [
        (f"GPU memory (GPU {i})", b, gpu.memory.value)
        for i, (b, gpu) in enumerate(zip(mem.gpu_each, devices, strict=True))
    ]
    return [(t, float(need), have) for t, need, have in tiers if not capacity.within(need, have)]


def check_fits(sc: Scenario, mem: decode.Memory, name: str = "scenario") -> None:
    """Refuse a scenario whose GPU or host memory (or disk) would overflow, saying by how much."""
    for tier, need, have in shortfalls(sc.system, mem):
        raise InputError(
            f"does not fit: {tier} needs {format_bytes(need)} but has {format_bytes(have)} "
            f"(over by {format_bytes(need - have)})",
            file=name,
            field="placement",
        )


class _MeanSteps:
    """A scenario's mean step over its generated tokens, each part computed when first read.

    Token by token (at most ``decode.exact_mean.BRUTE_STEPS`` steps) a quantity's mean is the
    same bits whichever quantities are computed beside it, so TPOT, the streams and the other
    overlap modes are computed apart, each when asked for. Past that the interval splitting looks
    at every quantity at once, so all are computed together, in one call, as the step model does.
    """

    def __init__(self, setup: decode.Setup, prompt: int, generate: int, batch: int) -> None:
        self._args = (setup, prompt, generate, batch)
        self._apart = generate <= decode.exact_mean.BRUTE_STEPS
        self._parts: dict[str, dict[str, float]] = {}

    def part(self, name: str) -> dict[str, float]:
        """Return 'tpot' (the placement's mode), 'streams' or 'by_overlap' (every mode), in s."""
        if name not in self._parts:
            mode = self._args[0].placement.overlap
            overlaps, streams = decode.OVERLAP_MODES, True
            if self._apart and name == "tpot":
                overlaps, streams = (mode,), False
            elif self._apart and name == "streams":
                overlaps = ()
            mean = decode.mean_step(*self._args, overlaps, streams=streams)
            by_overlap = {m: float(v) for m, v in mean.by_overlap.items()}
            if len(by_overlap) == len(decode.OVERLAP_MODES):
                self._parts["by_overlap"] = by_overlap
            if mode in by_overlap:
                self._parts.setdefault("tpot", {mode: by_overlap[mode]})
            if streams:
                self._parts.setdefault("streams", {k: float(v) for k, v in mean.streams.items()})
        return self._parts[name]


class _Later(Mapping[str, float]):
    """A mapping of one part of a ``_MeanSteps``, read (and so computed) only when used."""

    __slots__ = ("_means", "_name")

    def __init__(self, means: _MeanSteps, name: str) -> None:
        self._means, self._name = means, name

    def __getitem__(self, key: str) -> float:
        return self._means.part(self._name)[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._means.part(self._name))

    def __len__(self) -> int:
        return len(self._means.part(self._name))

    def __repr__(self) -> str:
        return repr(self._means.part(self._name))


def predict_setup(sc: Scenario, setup: decode.Setup, **extra: Any) -> Prediction:
    """Return the step model's prediction for a scenario run with ``setup``.

    TPOT is the exact mean over every generated token, from context prompt to prompt +
    generate - 1. The streams and the other overlap modes are computed when first read (by
    ``to_json``, ``bottleneck`` or an engine), so an in-process caller pays for one mode.
    """
    mem = decode.memory(setup, sc.prompt + sc.generate, sc.batch)
    means = _MeanSteps(setup, sc.prompt, sc.generate, sc.batch)
    p = setup.placement
    extra.setdefault("cpu_work", (p.attention != "gpu" and bool(np.any(p.kv.off)), bool(p.groups)))
    return Prediction(
        scenario=sc,
        tpot_s=means.part("tpot")[setup.placement.overlap],
        ttft_s=float(decode.ttft(setup, sc.prompt, sc.batch)),
        streams_s=_Later(means, "streams"),
        memory=mem,
        by_overlap_s=_Later(means, "by_overlap"),
        resolved=extra.pop("resolved", None) or Resolved.of(setup),
        **extra,
    )
