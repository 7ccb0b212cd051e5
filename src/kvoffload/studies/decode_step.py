"""One decode step at one context: where the weights fit, what crosses the link, what hides, overlap."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvoffload.inputs.units import format_bytes
from kvoffload.model import capacity, decode, kv
from kvoffload.model.prediction import shortfalls


@dataclass(frozen=True)
class Placed:
    """A step's setup with its weights placed to fit GPU memory, and whether the whole step fits."""

    setup: decode.Setup  # weights: as much on the GPU as fits, the rest in host memory
    weight_bytes: float  # every weight the model has (B)
    streamed_bytes: float  # weight bytes that cross the link in every step (B)
    fits: bool  # GPU memory, host memory and disk hold the step, in every overlap mode
    shortfall: str  # where it does not fit, in words ("" when it fits)

    @property
    def gpu_share(self) -> float:
        """Return the share of the weights kept in GPU memory."""
        return float(self.setup.placement.weights.gpu)

    @property
    def weights_phrase(self) -> str:
        """Return where the weights are, as a phrase ("every weight on the GPU", ...)."""
        g = self.gpu_share
        if g >= 1:
            where = "every weight on the GPU"
        elif g > 0:
            where = f"{100 * g:.0f}% of the weights on the GPU (the rest streamed from host memory)"
        else:
            where = "every weight streamed from host memory"
        return (
            where if self.fits else f"{where} (which does not fit this machine: {self.shortfall})"
        )

    def sentence(self) -> str:
        """Return, in words, where the weights are and what the times below assume."""
        system, fmt = self.setup.system, self.setup.weights.value
        have = f"this GPU's {format_bytes(system.gpu_memory)}"
        size = f"The model's {format_bytes(self.weight_bytes)} of {fmt} weights"
        if not self.fits:
            where = self.weights_phrase.split(" (which does not fit")[0]
            return (
                f"{size} {'fit in' if self.gpu_share >= 1 else 'do not fit in'} {have}, and the "
                f"step does not fit this machine with {where}: {self.shortfall}. The times below "
                "assume that placement anyway, so they are for a step this machine cannot hold."
            )
        if self.gpu_share >= 1:
            return f"{size} fit in {have} beside the step's buffers, so they stay there."
        kept = self.weight_bytes * self.gpu_share
        return (
            f"{size} do not fit in {have}. As an engine that offloads weights does (vLLM's "
            f"cpu_offload_gb, HF Accelerate's device map), {100 * self.gpu_share:.0f}% of them, "
            f"{format_bytes(kept)}, stay on the GPU and the rest is kept in host memory: "
            f"{format_bytes(self.streamed_bytes)} of weights cross the link in every step, beside "
            "the cache, and every time below includes those copies."
        )


def place(setup: decode.Setup, context: int, batch: int = 1) -> Placed:
    """Return ``setup`` with its weights placed to fit GPU memory at ``context`` (``spill_weights``)."""
    placed = decode.spill_weights(setup, context, batch)
    mem = decode.memory(placed.with_overlap("pipeline"), context, batch)
    short = shortfalls(placed.system, mem)
    words = "; ".join(
        f"{tier} needs {format_bytes(need)} but has {format_bytes(have)}"
        for tier, need, have in short
    )
    w = placed.placement.weights
    return Placed(
        setup=placed,
        weight_bytes=decode.resident_weight_bytes(placed.model, placed.weights),
        streamed_bytes=decode.step_weight_bytes(placed.model, placed.weights) * w.off,
        fits=bool(np.all(capacity.fits(placed.system, mem.gpu, mem.cpu, mem.disk))),
        shortfall=words,
    )


@dataclass(frozen=True)
class StepAnatomy:
    """What one offloaded step moves and how long its two busiest streams take."""

    layer_kv_bytes: int  # one layer's cache for the whole batch, crossing the link
    layer_weight_bytes: int  # one decoder layer's weights, read from GPU memory
    layer_streamed_bytes: int  # of which streamed from host memory over the link (0: all resident)
    n_layers: int
    h2d_ms: float  # the whole step's host→GPU copies
    gpu_ms: float  # the whole step's GPU work

    @property
    def over_link(self) -> str:
        """Return what one layer sends over the link, in words."""
        cache = f"{format_bytes(self.layer_kv_bytes)} of cache"
        if not self.layer_streamed_bytes:
            return cache
        return f"{cache} and {format_bytes(self.layer_streamed_bytes)} of its streamed weights"


def anatomy(setup: decode.Setup, context: int, batch: int = 1) -> StepAnatomy:
    """Return one step's per-layer payloads and its link and GPU time at ``context``."""
    s = decode.step(setup, context, batch)
    layer = int(setup.model.weight_bytes(setup.weights).per_layer[0])
    return StepAnatomy(
        layer_kv_bytes=kv.full_layer_bytes(setup.model, context) * batch,
        layer_weight_bytes=layer,
        layer_streamed_bytes=int(layer * setup.placement.weights.off),
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
    layer_gpu_ms: float = 0.0  # one layer's GPU work
    layer_weights_ms: float = 0.0  # the link's time for one layer's streamed weights (0: none)

    def sentence(self, context: int) -> str:
        """Return, in words, what one layer's GPU work hides at ``context``."""
        if self.layer_weights_ms > 0 and self.hidden_tokens == 0:
            return (
                f"Here each layer's streamed weights take the link first: copying them takes "
                f"{self.layer_weights_ms:.2f} ms, longer than the layer's {self.layer_gpu_ms:.2f} ms "
                "of GPU work, so no cache hides behind the compute at any context: the copy is the "
                "step from the first token."
            )
        after = (
            f" once its streamed weights ({self.layer_weights_ms:.2f} ms) have crossed"
            if self.layer_weights_ms > 0
            else ""
        )
        knee = (
            f"The copy outlasts the compute from {self.knee_context:,} tokens on; below that the "
            "weights dominate the GPU's time and a pipeline can hide the cache."
            if self.knee_context > 0
            else "The copy outlasts the compute at every context."
        )
        return (
            f"Under one layer's GPU work at this context, the link can carry "
            f"{self.hidden_tokens:,} tokens of cache{after}: {self.hidden_share_pct:.1f}% of the "
            f"{context:,} that must cross. {knee}"
        )


def hiding(setup: decode.Setup, context: int, batch: int = 1) -> Hiding:
    """Return the tokens one layer's GPU work hides, the knee context, and the hidden share."""
    hidden = int(decode.hidden_tokens(setup, context, batch))
    gpu = float(decode.stream_times(setup, context, batch)["gpu"][..., 0]) * 1e3
    # with no cache to copy, the link carries only the layer's streamed weights
    weights = float(decode.stream_times(setup, 0, batch)["h2d"][..., 0]) * 1e3
    return Hiding(
        hidden, int(decode.knee_context(setup, batch)), 100 * hidden / context, gpu, weights
    )


@dataclass(frozen=True)
class OverlapTpots:
    """TPOT (ms, one generated token: the step at the context) under every overlap mode."""

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
    ms = {m: float(decode.tpot(setup, context, 1, batch, m)) * 1e3 for m in decode.OVERLAP_MODES}
    return OverlapTpots(**ms)
