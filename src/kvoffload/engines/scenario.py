"""Scenario files as written (the contract in the README), validated, and predicted by their engine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from kvoffload.engines import prefix_cache
from kvoffload.engines.registry import ENGINES, engine_memory, run_engine, validate_options
from kvoffload.engines.spec import SET_BY_ENGINE, EngineSpec
from kvoffload.inputs.errors import FieldError, InputError
from kvoffload.inputs.files import load_mapping, stat_mode
from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.limits import (
    MAX_ARRIVAL_RATE,
    MAX_BATCH,
    MAX_CONTEXT_TOKENS,
    MAX_EXPERTS,
    MAX_GENERATE_TOKENS,
    MAX_SESSIONS,
    MAX_TURN_GAP_S,
    bound_problem,
)
from kvoffload.inputs.models import load_model
from kvoffload.inputs.precision import KvFormat, WeightFormat, kv_format, weight_format
from kvoffload.inputs.text import Strict, validate
from kvoffload.model import decode
from kvoffload.model.prediction import (
    Prediction,
    PrefixRequest,
    Scenario,
    SessionTraffic,
    check_fits,
)
from kvoffload.model.routing import Routing
from kvoffload.model.tensor_groups import GROUPS


def _bounded(name: str, value: int, maximum: int, what: str) -> None:
    """Raise a FieldError naming the bound when ``value`` exceeds ``maximum``."""
    problem = bound_problem(value, maximum, what)
    if problem:
        raise FieldError(name, problem)


Share = Annotated[float, Meta(ge=0.0, le=1.0)]
Positive = Annotated[int, Meta(ge=1)]


class SplitIn(Strict):
    """Shares per tier; they must add up to 1."""

    gpu: Share = 0.0
    cpu: Share = 0.0
    disk: Share = 0.0

    def __post_init__(self) -> None:
        """Check that the shares add up to 1."""
        super().__post_init__()
        total = self.gpu + self.cpu + self.disk
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"shares add up to {total:g}; they must add up to 1")


class PrecisionIn(Strict):
    """Weight and KV formats."""

    weights: str = "bf16"
    kv: str = "bf16"


class WorkloadIn(Strict, kw_only=True):
    """Batch, prompt length and tokens generated."""

    batch: Positive = 1
    prompt: Positive
    generate: Positive = 1

    def __post_init__(self) -> None:
        """Check each number, then the context, against its plausible maximum."""
        super().__post_init__()
        _bounded("batch", self.batch, MAX_BATCH, "requests in a batch")
        _bounded("prompt", self.prompt, MAX_CONTEXT_TOKENS, "tokens of context")
        _bounded("generate", self.generate, MAX_GENERATE_TOKENS, "generated tokens")
        problem = bound_problem(
            self.prompt + self.generate, MAX_CONTEXT_TOKENS, "tokens of context"
        )
        if problem:
            raise ValueError(f"prompt + generate: {problem}")


class GroupIn(SplitIn):
    """One tensor group's shares per tier and where it is computed."""

    compute: Literal["gpu", "cpu"] = "gpu"


class PlacementIn(Strict):
    """Where weights and KV live; ``weights`` as written, read by :func:`weight_placement`."""

    weights: Any = msgspec.field(default_factory=lambda: {"gpu": 1.0})
    kv: SplitIn = msgspec.field(default_factory=lambda: SplitIn(gpu=1.0))


def weight_placement(raw: Any) -> SplitIn | dict[str, GroupIn]:
    """Return ``placement.weights`` as one split over the tiers, or a split per tensor group."""
    if not isinstance(raw, dict):
        raise InputError("must be a mapping of tiers (gpu, cpu, disk) or of tensor groups")
    if set(raw) <= {"gpu", "cpu", "disk"}:
        return validate(raw, SplitIn)
    unknown = sorted(str(k) for k in set(raw) - set(GROUPS))
    if unknown:
        raise InputError(
            f"{', '.join(unknown)}: not a tier (gpu, cpu, disk) or a tensor group "
            f"({', '.join(GROUPS)})"
        )
    out = {}
    for group, split in raw.items():
        try:
            out[group] = validate(split, GroupIn)
        except InputError as exc:
            raise exc.within(field=group) from None
    return out


class RoutingIn(Strict):
    """How a MoE model routes, where measured (see model/routing.py)."""

    effective_experts: Positive | None = None
    stream: Literal["all", "routed"] = "all"
    gpu_hit_rate: Share = 0.0

    def __post_init__(self) -> None:
        """Check the routed experts against their plausible maximum."""
        super().__post_init__()
        if self.effective_experts is not None:
            _bounded("effective_experts", self.effective_experts, MAX_EXPERTS, "routed experts")


Tokens = Annotated[int, Meta(ge=0)]


class ReuseIn(Strict, kw_only=True):
    """A request whose prompt starts with cached tokens: how many, and where they are."""

    cached_tokens: Tokens
    tier: Literal["gpu", "cpu", "disk"] = "cpu"

    def __post_init__(self) -> None:
        """Check the cached tokens against their plausible maximum."""
        super().__post_init__()
        _bounded("cached_tokens", self.cached_tokens, MAX_CONTEXT_TOKENS, "tokens of context")


class TrafficIn(Strict, kw_only=True):
    """Sessions whose turns share the prefix cache (model/lru.py)."""

    sessions: Positive
    prefix_tokens: Tokens
    new_tokens: Positive
    generate: Positive = 1
    turn_gap_s: Annotated[float, Meta(ge=0.0, le=MAX_TURN_GAP_S)] = 0.0
    arrival_rate: Annotated[float, Meta(gt=0.0, le=MAX_ARRIVAL_RATE)]

    def __post_init__(self) -> None:
        """Check each count's bound, then that no session's turns come sooner than turn_gap_s."""
        super().__post_init__()
        _bounded("sessions", self.sessions, MAX_SESSIONS, "sessions")
        for name in ("prefix_tokens", "new_tokens", "generate"):
            _bounded(name, getattr(self, name), MAX_CONTEXT_TOKENS, "tokens of context")
        total = self.prefix_tokens + self.new_tokens + self.generate
        problem = bound_problem(total, MAX_CONTEXT_TOKENS, "tokens of context")
        if problem:
            raise ValueError(f"prefix_tokens + new_tokens + generate: {problem}")
        if self.arrival_rate * self.turn_gap_s > self.sessions:
            raise FieldError(
                "arrival_rate",
                f"{self.arrival_rate:g} requests/s over {self.sessions:,} sessions is one turn "
                f"every {self.sessions / self.arrival_rate:g} s per session, sooner than "
                f"turn_gap_s {self.turn_gap_s:g}; at most sessions / turn_gap_s = "
                f"{self.sessions / self.turn_gap_s:g}",
            )


class ScenarioIn(Strict, kw_only=True):
    """A scenario file as written."""

    hardware: str | dict
    model: str
    engine: str = "generic"
    precision: PrecisionIn = msgspec.field(default_factory=PrecisionIn)
    workload: WorkloadIn
    placement: PlacementIn = msgspec.field(default_factory=PlacementIn)
    attention: Literal["gpu", "cpu"] = "gpu"
    overlap: Literal["none", "perfect", "pipeline", "flexgen"] = "none"
    pinned: bool = True
    routing: RoutingIn = msgspec.field(default_factory=RoutingIn)
    options: dict = msgspec.field(default_factory=dict)
    reuse: ReuseIn | None = None
    traffic: TrafficIn | None = None


def _resolve(ref: str, base: Path) -> str:
    """Return ``ref`` taken from ``base`` when a file is there, else as given; never raises."""
    candidate = base / ref
    return (
        str(candidate) if not Path(ref).is_absolute() and stat_mode(candidate) is not None else ref
    )


def _refuse_ignored(engine: EngineSpec, raw: dict, name: str) -> None:
    """Refuse a field the chosen engine would accept and drop, naming what expresses it."""
    for field in SET_BY_ENGINE:
        if field in raw and field in engine.refuses:
            raise InputError(
                f"engine {engine.name!r} sets {field} itself; {engine.refuses[field]}",
                file=name,
                field=field,
            )
    ignored, instead = engine.routing_ignored
    routing = raw.get("routing") or {}
    for field in ignored:
        if field in routing:
            raise InputError(
                f"engine {engine.name!r} does not read routing.{field}; {instead}",
                file=name,
                field=f"routing.{field}",
            )


def parse_scenario(raw: dict, *, base: Path = Path("."), name: str = "scenario") -> Scenario:
    """Validate a scenario mapping; relative paths are taken from ``base``."""
    try:
        s = validate(raw, ScenarioIn)
    except InputError as exc:
        raise exc.within(file=name) from None
    try:
        weights = weight_placement(s.placement.weights)
    except InputError as exc:
        raise exc.within(file=name, field="placement.weights") from None
    if s.engine not in ENGINES:
        raise InputError(
            f"engine {s.engine!r} is not known; engines: {', '.join(ENGINES)}",
            file=name,
            field="engine",
        )
    engine = ENGINES[s.engine]
    if engine.placement_option is not None and "placement" in raw:
        raise InputError(
            f"engine {s.engine!r} sets its own placement; say it with "
            f"{engine.placement_option} instead",
            file=name,
            field="placement",
        )
    _refuse_ignored(engine, raw, name)
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
    if isinstance(weights, SplitIn):
        w = weights
        placement = decode.Placement(weights=decode.Split(w.gpu, w.cpu, w.disk), **rest)
    else:
        groups = tuple(
            decode.GroupPlacement(g, decode.Split(x.gpu, x.cpu, x.disk), x.compute)
            for g, x in weights.items()
        )
        placement = decode.by_groups(model, wf, groups, **rest)
    if not s.pinned and system.link.pageable_bandwidth is None:
        raise InputError(
            "pinned: false needs link.pageable_bandwidth in the profile", file=name, field="pinned"
        )
    pin_option = engine.pin_option
    explicit = pin_option is not None and pin_option in s.options  # given, so validated
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
    traffic = None
    if s.traffic is not None:
        t = s.traffic
        try:
            model.check_context(
                t.prefix_tokens + t.new_tokens + t.generate,
                what="prefix_tokens + new_tokens + generate = ",
            )
        except InputError as exc:
            raise exc.within(file=name, field="traffic.prefix_tokens") from None
        traffic = SessionTraffic(
            t.sessions, t.prefix_tokens, t.new_tokens, t.generate, t.turn_gap_s, t.arrival_rate
        )
    reuse = None if s.reuse is None else PrefixRequest(s.reuse.cached_tokens, s.reuse.tier)
    sc = Scenario(
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
        reuse=reuse,
        traffic=traffic,
    )
    try:
        prefix_cache.check(sc, engine)
    except InputError as exc:
        raise exc.within(file=name) from None
    return sc


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    p = Path(path)
    return parse_scenario(load_mapping(p), base=p.parent, name=str(path))


def held_memory(sc: Scenario, *, name: str = "scenario") -> decode.Memory:
    """Return the bytes a scenario holds where, untimed (a search's fit); refusals as predict's."""
    try:
        return engine_memory(sc)
    except InputError as exc:
        raise exc.within(file=name) from None


def predict(sc: Scenario, *, name: str = "scenario", check: bool = True) -> Prediction:
    """Return the prediction of a scenario; refuse one that does not fit when ``check``."""
    try:
        result = prefix_cache.apply(run_engine(sc), ENGINES[sc.engine])
    except InputError as exc:  # an engine's refusal names the scenario's file too
        raise exc.within(file=name) from None
    if check:
        check_fits(sc, result.memory, name)
    return result
