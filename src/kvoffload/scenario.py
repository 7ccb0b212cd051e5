"""Scenario files (the user-facing contract in DESIGN.md) and their prediction."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kvoffload import decode
from kvoffload.errors import InputError
from kvoffload.hardware import System, load_system
from kvoffload.inputs import load_mapping
from kvoffload.models import Model, load_model
from kvoffload.precision import KvFormat, WeightFormat, kv_format, weight_format
from kvoffload.units import format_bytes

ENGINES = ("generic", "llamacpp", "vllm", "flexgen", "zero-inference", "hf-accelerate", "infllm")
_STRICT = ConfigDict(extra="forbid", frozen=True)


class SplitIn(BaseModel):
    """Shares per tier; they must add up to 1."""

    model_config = _STRICT
    gpu: float = Field(0.0, ge=0.0, le=1.0)
    cpu: float = Field(0.0, ge=0.0, le=1.0)
    disk: float = Field(0.0, ge=0.0, le=1.0)

    @field_validator("gpu", "cpu", "disk", mode="before")
    @classmethod
    def _number(cls, v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"must be a number from 0 to 1, got {v!r}")
        return v

    @model_validator(mode="after")
    def _sums_to_one(self) -> SplitIn:
        total = self.gpu + self.cpu + self.disk
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"shares add up to {total:g}; they must add up to 1")
        return self


class PrecisionIn(BaseModel):
    """Weight and KV formats."""

    model_config = _STRICT
    weights: str = "bf16"
    kv: str = "bf16"


class WorkloadIn(BaseModel):
    """Batch, prompt length and tokens generated."""

    model_config = _STRICT
    batch: int = Field(1, ge=1, le=1_000_000, strict=True)
    prompt: int = Field(ge=1, le=100_000_000, strict=True)
    generate: int = Field(1, ge=1, le=1_000_000, strict=True)


class PlacementIn(BaseModel):
    """Where weights and KV live."""

    model_config = _STRICT
    weights: SplitIn = SplitIn(gpu=1.0)
    kv: SplitIn = SplitIn(gpu=1.0)


class ScenarioIn(BaseModel):
    """A scenario file as written."""

    model_config = _STRICT
    hardware: str | dict
    model: str
    engine: str = "generic"
    precision: PrecisionIn = PrecisionIn()
    workload: WorkloadIn
    placement: PlacementIn = PlacementIn()
    attention: Literal["gpu", "cpu"] = "gpu"
    overlap: Literal["none", "perfect", "pipeline", "flexgen"] = "none"
    pinned: bool = Field(True, strict=True)
    options: dict = {}


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
    options: dict = field(default_factory=dict)
    placement_given: bool = True


def _resolve(ref: str, base: Path) -> str:
    candidate = base / ref
    return str(candidate) if not Path(ref).is_absolute() and candidate.exists() else ref


def parse_scenario(raw: dict, *, base: Path = Path("."), name: str = "scenario") -> Scenario:
    """Validate a scenario mapping; relative paths are taken from ``base``."""
    try:
        s = ScenarioIn.model_validate(raw)
    except ValidationError as exc:
        err = next((e for e in exc.errors() if e["type"] == "extra_forbidden"), exc.errors()[0])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "extra_forbidden":
            msg = "unknown field"
        raise InputError(msg, file=name, field=".".join(str(p) for p in err["loc"])) from None
    if s.engine not in ENGINES:
        raise InputError(
            f"engine {s.engine!r} is not known; engines: {', '.join(ENGINES)}",
            file=name,
            field="engine",
        )
    from kvoffload.engines import validate_options  # the engines depend on this module

    try:
        options = validate_options(s.engine, s.options)
    except InputError as exc:
        raise exc.within(file=name, field="options") from None
    try:
        system = load_system(
            s.hardware if isinstance(s.hardware, dict) else _resolve(s.hardware, base)
        )
    except InputError as exc:
        raise exc.within(file=name, field="hardware") from None
    try:
        model = load_model(_resolve(s.model, base))
    except InputError as exc:
        raise exc.within(file=name, field="model") from None
    try:
        wf: WeightFormat = weight_format(s.precision.weights, field="precision.weights")
        kf: KvFormat = kv_format(s.precision.kv, field="precision.kv")
    except InputError as exc:
        raise exc.within(file=name) from None
    pl = s.placement
    placement = decode.Placement(
        weights=decode.Split(pl.weights.gpu, pl.weights.cpu, pl.weights.disk),
        kv=decode.Split(pl.kv.gpu, pl.kv.cpu, pl.kv.disk),
        attention=s.attention,
        overlap=s.overlap,
        pinned=s.pinned,
    )
    if not s.pinned and system.link.pageable_bandwidth is None:
        raise InputError(
            "pinned: false needs link.pageable_bandwidth in the profile", file=name, field="pinned"
        )
    w = s.workload
    return Scenario(
        system,
        model,
        s.engine,
        decode.Setup(system, model, wf, kf, placement),
        w.batch,
        w.prompt,
        w.generate,
        options,
        "placement" in raw,
    )


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    p = Path(path)
    return parse_scenario(load_mapping(p), base=p.parent, name=str(path))


@dataclass(frozen=True)
class Prediction:
    """What one scenario costs."""

    scenario: Scenario
    tpot_s: float
    ttft_s: float
    streams_s: dict[str, float]
    memory: decode.Memory
    by_overlap_s: dict[str, float]
    placement_json: dict[str, Any] | None = None  # an engine's resolved policy, when not generic
    policy: str = ""  # one line saying what the engine chose, for people

    @property
    def bottleneck(self) -> str:
        """Return the stream with the most work per step."""
        key = max(self.streams_s, key=self.streams_s.get)
        return decode.STREAM_NAMES[key]

    def to_json(self) -> dict[str, Any]:
        """Return the prediction as the JSON object documented in the README."""
        sc = self.scenario
        p = sc.setup.placement
        decode_rate = sc.batch / self.tpot_s
        total_time = self.ttft_s + sc.generate * self.tpot_s
        st = self.streams_s
        return {
            "hardware": sc.system.id,
            "model": sc.model.id,
            "engine": sc.engine,
            "workload": {"batch": sc.batch, "prompt": sc.prompt, "generate": sc.generate},
            "overlap": _overlap_of(self.placement_json, p.overlap),
            "tpot_ms": self.tpot_s * 1e3,
            "ttft_ms": self.ttft_s * 1e3,
            "decode_tokens_per_s": decode_rate,
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
            "tpot_ms_by_overlap": {k: v * 1e3 for k, v in self.by_overlap_s.items()},
            "memory": {
                "gpu_bytes": int(self.memory.gpu),
                "cpu_bytes": int(self.memory.cpu),
                "disk_bytes": int(self.memory.disk),
                "staging_bytes": int(self.memory.staging),
                "gpu_capacity_bytes": int(sc.system.gpu.memory.value * sc.system.gpu.count),
                "cpu_capacity_bytes": int(sc.system.host.memory.value),
            },
            "policy": self.policy or None,
            "placement": self.placement_json
            or {
                "weights": vars(p.weights),
                "kv": vars(p.kv),
                "attention": p.attention,
                "overlap": p.overlap,
                "pinned": p.pinned,
                "weights_precision": sc.setup.weights.value,
                "kv_precision": sc.setup.kv.value,
            },
        }


def _overlap_of(placement: dict | None, default: str) -> str:
    value = (placement or {}).get("overlap", default)
    if isinstance(value, bool):  # FlexGen's switch: its own per-layer overlap, or none
        return "flexgen" if value else "none"
    return str(value)


def check_fits(sc: Scenario, mem: decode.Memory, name: str = "scenario") -> None:
    """Refuse a scenario whose GPU or host memory would overflow, saying by how much."""
    tiers = [
        ("GPU memory", float(mem.gpu), sc.system.gpu.memory.value * sc.system.gpu.count),
        ("host memory", float(mem.cpu), sc.system.host.memory.value),
    ]
    if sc.system.storage.capacity is not None:
        tiers.append(("disk", float(mem.disk), sc.system.storage.capacity.value))
    for tier, need, have in tiers:
        if need > have:
            raise InputError(
                f"does not fit: {tier} needs {format_bytes(need)} but has {format_bytes(have)} "
                f"(over by {format_bytes(need - have)})",
                file=name,
                field="placement",
            )


def predict_setup(sc: Scenario, setup: decode.Setup, **extra: Any) -> Prediction:
    """Return the step model's prediction for a scenario run with ``setup``."""
    mem = decode.memory(setup, sc.prompt + sc.generate, sc.batch)
    t = decode._samples(sc.generate)
    per = decode.stream_times(setup, sc.prompt + t, sc.batch)
    lay = decode.layers(sc.model, setup.weights)
    streams = {k: float(np.mean(v @ lay.count)) for k, v in per.items()}
    by_overlap = {m: float(np.mean(decode.combine(per, lay, m))) for m in decode.OVERLAP_MODES}
    return Prediction(
        scenario=sc,
        tpot_s=by_overlap[setup.placement.overlap],
        ttft_s=float(decode.ttft(setup, sc.prompt, sc.batch)),
        streams_s=streams,
        memory=mem,
        by_overlap_s=by_overlap,
        **extra,
    )


def predict(sc: Scenario, *, name: str = "scenario", check: bool = True) -> Prediction:
    """Return the prediction of a scenario; refuse one that does not fit when ``check``."""
    if sc.engine == "generic":
        result = predict_setup(sc, sc.setup)
    else:
        from kvoffload.engines import run_engine

        result = run_engine(sc)
    if check:
        check_fits(sc, result.memory, name)
    return result
