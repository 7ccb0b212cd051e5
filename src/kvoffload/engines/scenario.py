"""Scenario files as written (the contract in the README), validated, and predicted by their engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kvoffload.engines.registry import run_engine, validate_options
from kvoffload.model import decode
from kvoffload.model.prediction import Prediction, Scenario, check_fits, predict_setup
from kvoffload.model.routing import Routing
from kvoffload.model.tensor_groups import GROUPS
from kvoffload.spec.errors import InputError
from kvoffload.spec.hardware import load_system
from kvoffload.spec.inputs import is_finite_number, load_mapping, stat_mode
from kvoffload.spec.limits import (
    MAX_BATCH,
    MAX_CONTEXT_TOKENS,
    MAX_EXPERTS,
    MAX_GENERATE_TOKENS,
    bound_problem,
)
from kvoffload.spec.models import load_model
from kvoffload.spec.precision import KvFormat, WeightFormat, kv_format, weight_format

ENGINES = ("generic", "llamacpp", "vllm", "flexgen", "zero-inference", "hf-accelerate", "infllm")
_STRICT = ConfigDict(extra="forbid", frozen=True)
# Engine options that say whether the host buffers copied from are page-locked; the scenario's
# `pinned:` sets the same thing for every engine, so the two may not disagree.
PIN_OPTIONS = {"zero-inference": "pinned", "hf-accelerate": "pinned", "flexgen": "pin_weight"}
# The options through which each engine decides where weights and KV live (a `placement:` beside
# one of these engines would be silently replaced, so it is refused and pointed here).
PLACEMENT_OPTIONS = {
    "llamacpp": "options.n_gpu_layers (and options.no_kv_offload)",
    "vllm": "options.cpu_offload_gb",
    "flexgen": "options.percent (wG wC cG cC aG aC), or leave it out to search",
    "zero-inference": "options.weights (gpu, cpu or disk) and options.kv_offload",
    "hf-accelerate": "options.weights (gpu, cpu or disk)",
    "infllm": "options.n_local, options.topk and options.cached_blocks",
}
# Top-level fields only the step model (`generic`) reads: beside another engine each would be
# accepted and dropped, so it is refused with what that engine does instead (its option, or the
# fixed behaviour its source has). Read from each engine's predict(); keep in step with them.
ENGINE_ONLY_FIELDS: dict[str, dict[str, str]] = {
    "attention": {
        "llamacpp": "say options.no_kv_offload: true to keep the KV cache in host memory "
        "and attend on the CPU",
        "vllm": "vLLM attends on the GPU and has no option to attend on the CPU; "
        "use engine: generic to model CPU attention",
        "flexgen": "say options.cpu_attention: true to attend on the CPU (FlexGen's --cpu)",
        "zero-inference": "say options.kv_offload: true to keep the KV cache in host memory "
        "and attend on the CPU",
        "hf-accelerate": "Accelerate attends on the GPU and has no option to attend on the CPU; "
        "use engine: generic to model CPU attention",
        "infllm": "InfLLM attends on the GPU over the blocks it selects; set options.topk, "
        "options.n_local and options.cached_blocks instead",
    },
    "overlap": {
        "llamacpp": "llama.cpp runs the graph's nodes in order and has no overlap option; "
        "use engine: generic to compare overlap modes",
        "vllm": "vLLM reads offloaded weights over the link as its kernels run and has no "
        "overlap option; use engine: generic to compare overlap modes",
        "flexgen": "say options.overlap: true (FlexGen's overlap) or false (none) instead",
        "zero-inference": "ZeRO-Inference always prefetches the next layer (pipeline) and has "
        "no overlap option; use engine: generic to compare overlap modes",
        "hf-accelerate": "Accelerate copies each layer in before it runs (none) and has no "
        "overlap option; use engine: generic to compare overlap modes",
        "infllm": "InfLLM always prefetches the selected blocks (pipeline) and has no overlap "
        "option; use engine: generic to compare overlap modes",
    },
}
# Routing fields an engine does not read: FlexGen's cost model reads every weight of a layer;
# llama.cpp and InfLLM never copy weights to the GPU per step, so there is nothing to stream.
ROUTING_IGNORED: dict[str, tuple[tuple[str, ...], str]] = {
    "flexgen": (
        ("effective_experts", "stream", "gpu_hit_rate"),
        "FlexGen's cost model reads every weight of a layer each step and has no routing; "
        "use engine: generic or llamacpp for a MoE model's routing",
    ),
    "llamacpp": (
        ("stream", "gpu_hit_rate"),
        "llama.cpp computes each expert where it lies and never streams experts to the GPU; "
        "say where experts live with options.n_cpu_moe, options.cpu_moe or "
        "options.override_tensor instead",
    ),
    "infllm": (
        ("stream", "gpu_hit_rate"),
        "InfLLM keeps every weight on the GPU, so no expert is streamed; "
        "leave routing.stream and routing.gpu_hit_rate out",
    ),
}


def _bounded(value: int, maximum: int, what: str) -> int:
    """Return ``value``; a ValueError naming the bound when it exceeds ``maximum``."""
    problem = bound_problem(value, maximum, what)
    if problem:
        raise ValueError(problem)
    return value


class SplitIn(BaseModel):
    """Shares per tier; they must add up to 1."""

    model_config = _STRICT
    gpu: float = Field(0.0, ge=0.0, le=1.0)
    cpu: float = Field(0.0, ge=0.0, le=1.0)
    disk: float = Field(0.0, ge=0.0, le=1.0)

    @field_validator("gpu", "cpu", "disk", mode="before")
    @classmethod
    def _number(cls, v: Any) -> Any:
        if not is_finite_number(v):
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
    batch: int = Field(1, ge=1, strict=True)
    prompt: int = Field(ge=1, strict=True)
    generate: int = Field(1, ge=1, strict=True)

    @field_validator("batch")
    @classmethod
    def _batch_bound(cls, v: int) -> int:
        return _bounded(v, MAX_BATCH, "requests in a batch")

    @field_validator("prompt")
    @classmethod
    def _prompt_bound(cls, v: int) -> int:
        return _bounded(v, MAX_CONTEXT_TOKENS, "tokens of context")

    @field_validator("generate")
    @classmethod
    def _generate_bound(cls, v: int) -> int:
        return _bounded(v, MAX_GENERATE_TOKENS, "generated tokens")

    @model_validator(mode="after")
    def _context_bound(self) -> WorkloadIn:
        problem = bound_problem(
            self.prompt + self.generate, MAX_CONTEXT_TOKENS, "tokens of context"
        )
        if problem:
            raise ValueError(f"prompt + generate: {problem}")
        return self


class GroupIn(SplitIn):
    """One tensor group's shares per tier and where it is computed."""

    compute: Literal["gpu", "cpu"] = "gpu"


class PlacementIn(BaseModel):
    """Where weights and KV live: the weights as one split, or split by tensor group."""

    model_config = _STRICT
    weights: SplitIn | dict[str, GroupIn] = SplitIn(gpu=1.0)
    kv: SplitIn = SplitIn(gpu=1.0)

    @field_validator("weights", mode="before")
    @classmethod
    def _tiers_or_groups(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            raise ValueError("must be a mapping of tiers (gpu, cpu, disk) or of tensor groups")
        keys = set(v)
        if keys <= {"gpu", "cpu", "disk"}:
            return SplitIn.model_validate(v)
        unknown = sorted(str(k) for k in keys - set(GROUPS))
        if unknown:
            raise ValueError(
                f"{', '.join(unknown)}: not a tier (gpu, cpu, disk) or a tensor group "
                f"({', '.join(GROUPS)})"
            )
        out = {}
        for group, split in v.items():
            try:
                out[group] = GroupIn.model_validate(split)
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(x) for x in err["loc"])
                msg = err["msg"].removeprefix("Value error, ")
                raise ValueError(f"{group}{'.' + where if where else ''}: {msg}") from None
        return out


class RoutingIn(BaseModel):
    """How a MoE model routes, where measured (see model/routing.py)."""

    model_config = _STRICT
    effective_experts: int | None = Field(None, ge=1, strict=True)
    stream: Literal["all", "routed"] = "all"
    gpu_hit_rate: float = Field(0.0, ge=0.0, le=1.0)

    @field_validator("effective_experts")
    @classmethod
    def _experts_bound(cls, v: int | None) -> int | None:
        return None if v is None else _bounded(v, MAX_EXPERTS, "routed experts")


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
    routing: RoutingIn = RoutingIn()
    options: dict = {}


def _resolve(ref: str, base: Path) -> str:
    """Return ``ref`` taken from ``base`` when a file is there, else as given; never raises."""
    candidate = base / ref
    return (
        str(candidate) if not Path(ref).is_absolute() and stat_mode(candidate) is not None else ref
    )


def _refuse_ignored(engine: str, raw: dict, name: str) -> None:
    """Refuse a field the chosen engine would accept and drop, naming what expresses it."""
    if engine == "generic":
        return
    for field, instead in ENGINE_ONLY_FIELDS.items():
        if field in raw:
            raise InputError(
                f"engine {engine!r} sets {field} itself; {instead[engine]}",
                file=name,
                field=field,
            )
    ignored, instead = ROUTING_IGNORED.get(engine, ((), ""))
    routing = raw.get("routing") or {}
    for field in ignored:
        if field in routing:
            raise InputError(
                f"engine {engine!r} does not read routing.{field}; {instead}",
                file=name,
                field=f"routing.{field}",
            )


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
    if s.engine != "generic" and "placement" in raw:
        raise InputError(
            f"engine {s.engine!r} sets its own placement; say it with "
            f"{PLACEMENT_OPTIONS[s.engine]} instead",
            file=name,
            field="placement",
        )
    _refuse_ignored(s.engine, raw, name)
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
    rest = {
        "kv": decode.Split(pl.kv.gpu, pl.kv.cpu, pl.kv.disk),
        "attention": s.attention,
        "overlap": s.overlap,
        "pinned": s.pinned,
    }
    if isinstance(pl.weights, SplitIn):
        w = pl.weights
        placement = decode.Placement(weights=decode.Split(w.gpu, w.cpu, w.disk), **rest)
    else:
        groups = tuple(
            decode.GroupPlacement(g, decode.Split(x.gpu, x.cpu, x.disk), x.compute)
            for g, x in pl.weights.items()
        )
        placement = decode.by_groups(model, wf, groups, **rest)
    if not s.pinned and system.link.pageable_bandwidth is None:
        raise InputError(
            "pinned: false needs link.pageable_bandwidth in the profile", file=name, field="pinned"
        )
    pin_option = PIN_OPTIONS.get(s.engine)
    explicit = pin_option is not None and pin_option in options.model_fields_set
    if "pinned" in raw and explicit and getattr(options, pin_option) != s.pinned:
        raise InputError(
            f"pinned: {str(s.pinned).lower()} contradicts options.{pin_option}; give one",
            file=name,
            field="pinned",
        )
    w = s.workload
    try:
        model.check_context(w.prompt + w.generate, what="prompt + generate = ")
    except InputError as exc:
        raise exc.within(file=name, field="workload.prompt") from None
    return Scenario(
        system,
        model,
        s.engine,
        decode.Setup(
            system,
            model,
            wf,
            kf,
            placement,
            routing=Routing(s.routing.effective_experts, s.routing.stream, s.routing.gpu_hit_rate),
        ),
        w.batch,
        w.prompt,
        w.generate,
        options,
        pinned=s.pinned if "pinned" in raw else None,
    )


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    p = Path(path)
    return parse_scenario(load_mapping(p), base=p.parent, name=str(path))


def predict(sc: Scenario, *, name: str = "scenario", check: bool = True) -> Prediction:
    """Return the prediction of a scenario; refuse one that does not fit when ``check``."""
    if sc.engine == "generic":
        result = predict_setup(sc, sc.setup)
    else:
        try:
            result = run_engine(sc)
        except InputError as exc:  # an engine's refusal names the scenario's file too
            raise exc.within(file=name) from None
    if check:
        check_fits(sc, result.memory, name)
    return result
