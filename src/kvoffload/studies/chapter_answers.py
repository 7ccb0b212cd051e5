"""Each per-profile chapter's own answer, for its verdict box: one figure, from the chapter's study.

Every builder takes the result the chapter glues its answer from (the same object, computed once
in the chapter's verdict cell) and names the glue key that holds the same figure, so a test can
hold the box and the prose together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvoffload.inputs.units import format_bytes, format_number

if TYPE_CHECKING:
    from kvoffload.studies.alternatives import Headline as AlternativesHeadline
    from kvoffload.studies.decode_step import OverlapTpots
    from kvoffload.studies.engines_compared import Fastest
    from kvoffload.studies.memory_fit import LongestFit
    from kvoffload.studies.moe_offload import Headline as MoeHeadline
    from kvoffload.studies.tiers import LayerTimes


@dataclass(frozen=True)
class Answer:
    """A chapter's answer: what it asks, one figure with its unit, and what the figure stands beside."""

    label: str  # the chapter's question as a short noun phrase: "One layer's cache over the link"
    value: float  # nan: no answer (the detail says why)
    unit: str  # "ms", "tokens", "tokens/s"
    key: str  # the chapter's glue name that holds the same figure
    detail: str = ""  # plain words after the figure: what it compares with
    digits: int = 3  # significant figures, as ``format_number`` prints them

    @property
    def text(self) -> str:
        """Return the figure as the box and the chapter's prose print it ("none" for no answer)."""
        return "none" if self.value != self.value else format_number(self.value, self.digits)


def layer_move(times: LayerTimes, context: int) -> Answer:
    """Return chapter 01's answer: one layer's K+V over the link, against reading it from HBM."""
    return Answer(
        label=f"One layer's K+V at {context:,} tokens over the link",
        value=times.link_ms,
        unit="ms",
        key="link_ms",
        detail=f"against {format_number(times.gpu_ms)} ms from GPU memory",
    )


def kv_fit(request_bytes: float, fit: LongestFit, context: int) -> Answer:
    """Return chapter 02's answer: the longest context that fits, beside one request's cache bytes."""
    return Answer(
        label="Longest context whose weights and cache fit the GPU, one request",
        value=float(fit.tokens[0]),
        unit="tokens",
        key="fit_b1",
        detail=(
            f"the cache of one {context:,}-token request is {format_bytes(int(request_bytes))}"
        ),
    )


def decode_offloaded(tpots: OverlapTpots, gpu_ms: float, context: int) -> Answer:
    """Return chapter 03's answer: TPOT with the cache offloaded (no overlap) against on the GPU."""
    return Answer(
        label=f"TPOT at {context:,} tokens, cache offloaded, no overlap",
        value=tpots.none,
        unit="ms",
        key="tpot_none",
        detail=f"against {format_number(gpu_ms)} ms with the cache on the GPU",
        digits=4,
    )


def fastest_engine(fastest: Fastest) -> Answer:
    """Return chapter 04's answer: the engine with the shortest step that fits, and that step."""
    if fastest.engine is None:
        return Answer("Fastest engine that fits", float("nan"), "ms", "fastest_ms", "none fits")
    return Answer(
        label="Fastest engine that fits",
        value=fastest.tpot_ms,
        unit="ms per token",
        key="fastest_ms",
        detail=f"with {fastest.engine}",
    )


def best_alternative(head: AlternativesHeadline) -> Answer:
    """Return chapter 05's answer: W4A16 weights with an INT8 cache against offloading the cache."""
    return Answer(
        label="TPOT with W4A16 weights and an INT8 cache instead of offloading",
        value=head.w4kv8_tpot_ms,
        unit="ms",
        key="w4kv8_tpot",
        detail=(
            f"freeing {head.w4kv8_saved}, against {head.offload_tpot} ms with the cache offloaded"
        ),
    )


def own_link(v: dict, link: str, context: int) -> Answer:
    """Return chapter 06's answer: TPOT over this machine's own link, against PCIe 4.0 x16."""
    return Answer(
        label=(
            f"TPOT at {context:,} tokens over this machine's link ({link}, "
            f"{format_number(float(v['own_gbs']))} GB/s achievable), cache offloaded"
        ),
        value=float(v["own_none_ms"]),
        unit="ms",
        key="own_none_ms",
        detail=(
            f"against {format_number(float(v['pcie4_none_ms']), 4)} ms over PCIe 4.0 x16 at the "
            f"catalog's achievable {format_number(float(v['pcie4_gbs']))} GB/s"
        ),
        digits=4,
    )


def moe_choice(head: MoeHeadline) -> Answer:
    """Return chapter 10's answer: the tokens/s of the placement the chapter picks, the model
    whole where it fits, else the faster of experts and whole layers on the CPU."""
    experts = (head.experts_tps, f"routed experts on the CPU ({head.experts_option})")
    layers = (head.layers_tps, f"whole layers on the CPU ({head.layers_option})")
    if head.whole_fits:
        value, how = head.whole_tps, "the model whole, every layer on the GPU"
    elif head.experts_option and head.layers_option:
        value, how = max(experts, layers, key=lambda c: c[0])
    else:
        value, how = experts if head.experts_option else layers
    return Answer(
        label=f"Decode rate of the placement this chapter picks for {head.weights.upper()}",
        value=value,
        unit="tokens/s",
        key="chosen_tps",
        detail=f"{how}, llama.cpp at batch 1",
    )
