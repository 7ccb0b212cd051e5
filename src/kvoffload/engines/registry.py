"""The engines by name: each one's options schema and its prediction."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from kvoffload.engines import flexgen, infllm, llamacpp, streaming, vllm
from kvoffload.model.prediction import Prediction, Scenario
from kvoffload.spec.errors import InputError
from kvoffload.spec.text import Strict, validate


def _modules() -> dict[str, ModuleType]:
    return {
        "llamacpp": llamacpp,
        "vllm": vllm,
        "flexgen": flexgen,
        "zero-inference": streaming,
        "hf-accelerate": streaming,
        "infllm": infllm,
    }


def options_model(engine: str) -> type[Strict] | None:
    """Return the options schema of an engine (None for generic, which takes none)."""
    if engine == "generic":
        return None
    module = _modules()[engine]
    return module.options_for(engine) if hasattr(module, "options_for") else module.Options


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


def run_engine(sc: Scenario) -> Prediction:
    """Return an engine's prediction for a scenario."""
    return _modules()[sc.engine].predict(sc)
