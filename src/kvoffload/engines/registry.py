"""The engines by name: the ``ENGINE`` of every module in ``engines.each``, checked at import."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import msgspec

from kvoffload.engines import each
from kvoffload.engines.spec import (
    REQUIRED,
    SET_BY_ENGINE,
    EngineSpec,
    EngineSpecError,
    PrefixCache,
)
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.text import Strict, validate
from kvoffload.model.decode import Memory
from kvoffload.model.prediction import Prediction, Scenario
from kvoffload.model.reuse import TIERS
from kvoffload.model.routing import Routing

_ROUTING_FIELDS = tuple(f.name for f in dataclasses.fields(Routing))


def _problem(spec: EngineSpec) -> tuple[str, str] | None:
    """Return (field, what is wrong) for the first field of ``spec`` that is not declared right."""
    for f in dataclasses.fields(EngineSpec):
        if getattr(spec, f.name) is REQUIRED:
            return f.name, "is missing: every field of EngineSpec must be declared"
    if not isinstance(spec.name, str) or not spec.name:
        return "name", "must be a non-empty string"
    o = spec.options
    if o is not None and not (isinstance(o, type) and issubclass(o, Strict)):
        return "options", "must be a inputs.text.Strict subclass or None"
    if not callable(spec.predict):
        return "predict", "must be a function of a Scenario returning a Prediction"
    if spec.memory is not None and not callable(spec.memory):
        return "memory", "must be a function of a Scenario returning its Memory, or None"
    if spec.placement_option is not None and (
        not isinstance(spec.placement_option, str) or not spec.placement_option
    ):
        return "placement_option", "must name the options that place the engine, or be None"
    if spec.pin_option is not None:
        names = () if o is None else tuple(x.encode_name for x in msgspec.structs.fields(o))
        if spec.pin_option not in names or not hasattr(o, spec.pin_option):
            return "pin_option", f"{spec.pin_option!r} is not one of its options {names}"
    refuses = spec.refuses
    want = set() if spec.placement_option is None else set(SET_BY_ENGINE)
    if not isinstance(refuses, Mapping) or set(refuses) != want:
        return "refuses", (
            f"must be a mapping of {', '.join(SET_BY_ENGINE)} to what to say instead"
            if want
            else "must be empty for the step model (placement_option None)"
        )
    if any(not isinstance(m, str) or not m for m in refuses.values()):
        return "refuses", "each message must be a non-empty string"
    ignored = spec.routing_ignored
    if not (isinstance(ignored, tuple) and len(ignored) == 2 and isinstance(ignored[1], str)):
        return "routing_ignored", "must be (routing fields, message)"
    fields, message = ignored
    if not isinstance(fields, tuple) or any(x not in _ROUTING_FIELDS for x in fields):
        return "routing_ignored", f"its fields must be a tuple of {', '.join(_ROUTING_FIELDS)}"
    if bool(fields) != bool(message):
        return "routing_ignored", "a message goes with the fields, and none without"
    return _cache_problem(spec.prefix_cache)


def _cache_problem(pc: object) -> tuple[str, str] | None:
    """Return ("prefix_cache", what is wrong) unless it is a PrefixCache or what to use instead."""
    if isinstance(pc, str):
        return None if pc else ("prefix_cache", "must say what to use instead when it is a string")
    if not isinstance(pc, PrefixCache):
        return "prefix_cache", "must be a PrefixCache or a string saying what to use instead"
    tiers = pc.tiers
    if (
        not isinstance(tiers, tuple)
        or not tiers
        or tiers[0] != "gpu"
        or len(set(tiers)) != len(tiers)
        or any(t not in TIERS for t in tiers)
        or list(tiers) != sorted(tiers, key=TIERS.index)
    ):
        return "prefix_cache", f"its tiers must be 'gpu' and then some of {TIERS[1:]}, in order"
    if not callable(pc.rule):
        return "prefix_cache", "its rule must be a function of a Scenario returning a CacheRule"
    return None


def engine_table(*specs: EngineSpec) -> dict[str, EngineSpec]:
    """Return the engines by name, in order; EngineSpecError names an engine and its bad field."""
    table: dict[str, EngineSpec] = {}
    for spec in specs:
        if not isinstance(spec, EngineSpec):
            raise EngineSpecError(f"{spec!r} is not an EngineSpec")
        problem = _problem(spec)
        if problem:
            name = spec.name if isinstance(spec.name, str) else repr(spec.name)
            raise EngineSpecError(f"engine {name!r}: EngineSpec.{problem[0]} {problem[1]}")
        if spec.name in table:
            raise EngineSpecError(f"engine {spec.name!r} is declared twice")
        table[spec.name] = spec
    return table


# The order engines are listed in (messages, tables): these first, then any other module sorted.
_FIRST = (
    "generic",
    "llamacpp",
    "vllm",
    "flexgen",
    "zero_inference",
    "hf_accelerate",
    "infllm",
    "sglang",
    "trtllm",
)


def engine_modules() -> tuple[ModuleType, ...]:
    """Return every module of ``engines.each`` (one per engine), the known ones first."""
    names = sorted(m.name for m in pkgutil.iter_modules(each.__path__))
    ordered = [n for n in _FIRST if n in names] + [n for n in names if n not in _FIRST]
    return tuple(importlib.import_module(f"{each.__name__}.{n}") for n in ordered)


def _declaration(module: ModuleType) -> EngineSpec:
    """Return a module's ``ENGINE``; EngineSpecError names the module when it declares none."""
    if not hasattr(module, "ENGINE"):
        raise EngineSpecError(f"engine module {module.__name__} declares no ENGINE")
    return module.ENGINE


ENGINES: dict[str, EngineSpec] = engine_table(*(_declaration(m) for m in engine_modules()))


def options_model(engine: str) -> type[Strict] | None:
    """Return the options schema of an engine (None for generic, which takes none)."""
    return ENGINES[engine].options


def validate_options(engine: str, raw: dict) -> Any:
    """Validate a scenario's ``options:`` for its engine; one-line errors naming the field."""
    schema = options_model(engine)
    if schema is None:
        if raw:
            raise InputError(f"engine {engine!r} takes no options")
        return None
    return validate(
        raw or {},
        schema,
        unknown=lambda _key, known: f"unknown option for {engine}; options: {', '.join(known)}",
    )


def _check_gpus(spec: EngineSpec, sc: Scenario) -> None:
    """Refuse GPUs of different models for an engine that runs alike GPUs only."""
    if sc.system.more_gpus and not spec.mixed_gpus:
        raise InputError(
            f"engine {spec.name} runs alike GPUs (one model, gpu.count of them); a profile with "
            "more_gpus runs on engine: llamacpp",
            field="hardware.more_gpus",
        )


def run_engine(sc: Scenario) -> Prediction:
    """Return an engine's prediction for a scenario."""
    spec = ENGINES[sc.engine]
    _check_gpus(spec, sc)
    return spec.predict(sc)


def engine_memory(sc: Scenario) -> Memory:
    """Return the bytes a scenario holds where, without its timing where the engine can."""
    spec = ENGINES[sc.engine]
    _check_gpus(spec, sc)
    return spec.memory(sc) if spec.memory is not None else spec.predict(sc).memory
