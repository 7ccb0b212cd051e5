"""Scenario files as written (the contract in the README), validated, and predicted by their engine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from kvoffload.engines.registry import run_engine, validate_options
from kvoffload.model import decode
from kvoffload.model.prediction import Prediction, Scenario, check_fits, predict_setup
from kvoffload.model.routing import Routing
from kvoffload.model.tensor_groups import GROUPS
from kvoffload.spec.errors import FieldError, InputError
from kvoffload.spec.hardware import load_system
from kvoffload.spec.inputs import load_mapping, stat_mode
from kvoffload.spec.limits import (
    MAX_BATCH,
    MAX_CONTEXT_TOKENS,
    MAX_EXPERTS,
    MAX_GENERATE_TOKENS,
    bound_problem,
)
from kvoffload.spec.models import load_model
from kvoffload.spec.precision import KvFormat, WeightFormat, kv_format, weight_format
from kvoffload.spec.text import Strict, validate

ENGINES = ("generic", "llamacpp", "vllm", "flexgen", "zero-inference", "hf-accelerate", "infllm")
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
    pin_option = PIN_OPTIONS.get(s.engine)
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
