"""What an engine declares about itself: the one entry the registry and scenario files read."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kvoffload.model.prediction import Prediction, Scenario
from kvoffload.spec.text import Strict

# Top-level scenario fields only the step model (`generic`) reads: an engine that places itself
# sets them too, so each is refused beside it with what that engine does instead.
SET_BY_ENGINE = ("attention", "overlap")


class _Required:
    """The default of an EngineSpec field the engine must declare (the registry refuses it)."""

    def __repr__(self) -> str:
        return "<required>"


REQUIRED: Any = _Required()


@dataclass(frozen=True, kw_only=True)
class EngineSpec:
    """One engine, declared once in its own module as ``ENGINE = EngineSpec(...)``.

    - ``name``: the scenario's ``engine:``;
    - ``options``: the schema of its ``options:`` (a Strict struct), None when it takes none;
    - ``predict``: the scenario's prediction;
    - ``placement_option``: the options through which it places weights and KV (a ``placement:``
      beside it is refused, pointing here); None only for the step model, which reads
      ``placement:``, ``attention:`` and ``overlap:`` as given;
    - ``pin_option``: its option saying whether host buffers are page-locked (None: none), which
      the scenario's ``pinned:`` may not contradict;
    - ``refuses``: for each of SET_BY_ENGINE, what to say when it is given beside the engine
      (empty for the step model);
    - ``routing_ignored``: the ``routing:`` fields it does not read and what to say instead
      (``((), "")``: it reads them all).
    """

    name: str = REQUIRED
    options: type[Strict] | None = REQUIRED
    predict: Callable[[Scenario], Prediction] = REQUIRED
    placement_option: str | None = REQUIRED
    pin_option: str | None = REQUIRED
    refuses: Mapping[str, str] = REQUIRED
    routing_ignored: tuple[tuple[str, ...], str] = REQUIRED


class EngineSpecError(TypeError):
    """An engine's declaration is incomplete or of the wrong type (a programming error)."""
