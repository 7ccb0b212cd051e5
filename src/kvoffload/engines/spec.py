"""What an engine declares about itself: the one entry the registry and scenario files read."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kvoffload.inputs.text import Strict
from kvoffload.model.decode import Memory, Setup
from kvoffload.model.prediction import Prediction, Scenario
from kvoffload.model.reuse import Reload

# Top-level scenario fields only the step model (`generic`) reads: an engine that places itself
# sets them too, so each is refused beside it with what that engine does instead.
SET_BY_ENGINE = ("attention", "overlap")


class _Required:
    """The default of an EngineSpec field the engine must declare (the registry refuses it)."""

    def __repr__(self) -> str:
        return "<required>"


REQUIRED: Any = _Required()

# what an engine without a prefix cache says to a scenario's reuse: or traffic:
NO_PREFIX_CACHE = (
    "use engine: vllm (kv_offloading_size), sglang (enable_hierarchical_cache), trtllm "
    "(host_cache_size) or llamacpp (cache_ram), which keep one"
)


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
      (``((), "")``: it reads them all);
    - ``prefix_cache``: its prefix cache (a ``PrefixCache``), or, for an engine without one, what
      to use instead when a scenario gives ``reuse:`` or ``traffic:`` (by default, the engines
      that have one);
    - ``memory``: the scenario's memory without its timing (what a search for a fit asks many
      times); None: the memory of ``predict``'s answer;
    - ``mixed_gpus``: it runs a profile whose ``more_gpus`` mixes GPU models (else refused).
    """

    name: str = REQUIRED
    options: type[Strict] | None = REQUIRED
    predict: Callable[[Scenario], Prediction] = REQUIRED
    placement_option: str | None = REQUIRED
    pin_option: str | None = REQUIRED
    refuses: Mapping[str, str] = REQUIRED
    routing_ignored: tuple[tuple[str, ...], str] = REQUIRED
    prefix_cache: PrefixCache | str = NO_PREFIX_CACHE
    memory: Callable[[Scenario], Memory] | None = None
    mixed_gpus: bool = False  # it places work GPU by GPU, so GPUs of different models may mix


@dataclass(frozen=True, kw_only=True)
class CacheRule:
    """An engine's prefix cache for one scenario: how hits reload, and each tier's bytes.

    - ``setup``: the setup its prefill runs with (the reload's bytes and the new tokens' prefill);
    - ``reload``: blocks, copy path and how loads meet compute (model/reuse.py);
    - ``capacities``: bytes each tier it has with these options can hold, fastest first;
    - ``inclusive``: every tier stores each block (write-through), else each holds what the
      tier above evicts (write-back);
    - ``sizes``: per tier, the option that sizes it (named when it does not fit);
    - ``missing``: what to say about a tier it has not got with these options ('' if nothing).
    """

    setup: Setup
    reload: Reload
    capacities: Mapping[str, float]
    inclusive: bool
    sizes: Mapping[str, str]
    missing: str = ""


@dataclass(frozen=True, kw_only=True)
class PrefixCache:
    """What an engine's prefix cache can be: its tiers, and its rule for one scenario."""

    tiers: tuple[str, ...]  # every tier it may have, fastest first ('gpu' always first)
    rule: Callable[[Scenario], CacheRule]


class EngineSpecError(TypeError):
    """An engine's declaration is incomplete or of the wrong type (a programming error)."""
