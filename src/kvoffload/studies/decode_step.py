"""One decode step at one context: what crosses the link, what hides behind compute, overlap."""

from __future__ import annotations

from dataclasses import dataclass

from kvoffload.model import decode, kv


@dataclass(frozen=True)
class StepAnatomy:
    """What one offloaded step moves and how long its two busiest streams take."""

    layer_kv_bytes: int  # one layer's cache for the whole batch, crossing the link
    layer_weight_bytes: int  # one decoder layer's weights, read from GPU memory
    n_layers: int
    h2d_ms: float  # the whole step's host→GPU copies
    gpu_ms: float  # the whole step's GPU work


def anatomy(setup: decode.Setup, context: int, batch: int = 1) -> StepAnatomy:
    """Return one step's per-layer payloads and its link and GPU time at ``context``."""
    s = decode.step(setup, context, batch)
    return StepAnatomy(
        layer_kv_bytes=kv.full_layer_bytes(setup.model, context) * batch,
        layer_weight_bytes=int(setup.model.weight_bytes(setup.weights).per_layer[0]),
        n_layers=setup.model.n_layers,
        h2d_ms=float(s.streams["h2d"]) * 1e3,
        gpu_ms=float(s.streams["gpu"]) * 1e3,
    )


@dataclass(frozen=True)
class Hiding:
    """How much of the offloaded cache a layer's GPU work can hide."""

    hidden_tokens: int  # tokens per layer the link carries under one layer's GPU work
    knee_context: int  # the longest context at which the GPU work still outlasts the copy
    hidden_share_pct: float  # hidden tokens as a share (%) of the context


def hiding(setup: decode.Setup, context: int, batch: int = 1) -> Hiding:
    """Return the tokens one layer's GPU work hides, the knee context, and the hidden share."""
    hidden = int(decode.hidden_tokens(setup, context, batch))
    return Hiding(hidden, int(decode.knee_context(setup, batch)), 100 * hidden / context)


@dataclass(frozen=True)
class OverlapTpots:
    """TPOT (ms) of one step under every overlap mode."""

    none: float
    pipeline: float
    flexgen: float
    perfect: float

    @property
    def saving_pct(self) -> float:
        """Return the most (%) that overlap can save against running every stream in turn."""
        return 100 * (1 - self.perfect / self.none)


def overlap_tpots(setup: decode.Setup, context: int, batch: int = 1) -> OverlapTpots:
    """Return TPOT (ms) at ``context`` under each overlap mode."""
    ms = {m: float(decode.step(setup, context, batch, m).total) * 1e3 for m in decode.OVERLAP_MODES}
    return OverlapTpots(**ms)
