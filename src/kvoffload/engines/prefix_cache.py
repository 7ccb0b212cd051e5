"""A scenario's ``reuse:`` and ``traffic:`` on its engine's prefix cache: checked, then predicted.

The engine's ``PrefixCache`` (engines/spec.py) gives, for one scenario, the setup its prefill runs
with, its reload rule and each tier's bytes. A hit's TTFT is model/reuse.py's on that setup, scaled
by the engine's own prefill over the step model's (1 where the engine prefills as the step model
does; 1/N for N tensor-parallel GPUs, each reloading and prefilling its share): the engine's
recompute TTFT is kept as it was, and a hit changes only what the reuse model says it changes.

Traffic (model/lru.py): each session keeps the KV of its context, ``prefix_tokens + new_tokens +
generate`` tokens; a turn's prompt is its ``prefix_tokens`` (cached from the last turn, when a tier
still holds it) and ``new_tokens`` more. Each tier serves its LRU hit rate at that tier's hit TTFT,
the rest recompute the whole prompt.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import Annotated

import numpy as np
from msgspec import Meta

from kvoffload.engines.spec import CacheRule, EngineSpec
from kvoffload.inputs import catalog
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.units import format_bytes
from kvoffload.model import decode, lru, reuse
from kvoffload.model.decode import Setup
from kvoffload.model.prediction import Prediction, PrefixReuse, Scenario
from kvoffload.model.reuse import CopyPath

# tokens in one cache block or chunk: engines use 1 to 256; 65,536 is 256x the largest
BlockTokens = Annotated[int, Meta(ge=1, le=1 << 16)]


@cache
def constants_of(table: str) -> dict:
    """Return one table of catalog/engine_constants.yaml: values with their kind and source."""
    return catalog.load("engine_constants")[table]


def constants() -> dict:
    """Return the copy paths' constants with their sources (catalog/engine_constants.yaml)."""
    return constants_of("copy")


def dma_copy() -> CopyPath:
    """Return a copy per block with cudaMemcpyAsync (the copy engines): its cost per block."""
    return CopyPath(float(constants()["dma_per_block_us"]["value"]) * 1e-6, 1.0)


def kernel_copy() -> CopyPath:
    """Return a copy by a GPU kernel: a small cost per item, below the DMA rate on large ones."""
    c = constants()
    return CopyPath(
        float(c["kernel_per_item_us"]["value"]) * 1e-6, float(c["kernel_rate_share"]["value"])
    )


def free_gpu_bytes(sc: Scenario, setup: Setup, share: float) -> float:
    """Return the GPU bytes left for KV blocks: ``share`` of GPU memory less weights and buffers."""
    taken = decode.memory(setup, 0, sc.batch).gpu + decode.prefill_reserve(sc.model, sc.batch)
    return max(share * sc.system.gpu_memory - float(taken), 0.0)


def _rule(sc: Scenario, engine: EngineSpec) -> CacheRule:
    """Return the engine's rule for ``sc``, refusing reuse on an engine without a prefix cache."""
    pc = engine.prefix_cache
    if isinstance(pc, str):
        field = "reuse" if sc.reuse is not None else "traffic"
        raise InputError(f"engine {engine.name!r} has no prefix cache; {pc}", field=field)
    return pc.rule(sc)


def check(sc: Scenario, engine: EngineSpec) -> None:
    """Refuse a ``reuse:`` or ``traffic:`` the engine's prefix cache cannot hold, in one line."""
    if sc.reuse is None and sc.traffic is None:
        return
    rule = _rule(sc, engine)
    tiers = engine.prefix_cache.tiers  # a PrefixCache: _rule refused the rest
    hosts = {"cpu": sc.system.host_memory, "disk": sc.system.disk_capacity}
    for tier, cap in rule.capacities.items():
        have = hosts.get(tier)
        if have is not None and cap > have:
            raise InputError(
                f"the {tier} tier of {format_bytes(cap)} is more than the "
                f"{format_bytes(have)} the machine has",
                field=rule.sizes.get(tier, "options"),
            )
    r = sc.reuse
    if r is None:
        return
    if r.cached_tokens > sc.prompt:
        raise InputError(
            f"{r.cached_tokens:,} cached tokens is more than the prompt's {sc.prompt:,}",
            field="reuse.cached_tokens",
        )
    if r.tier not in tiers:
        raise InputError(
            f"engine {engine.name!r} has no {r.tier} tier; its tiers: {', '.join(tiers)}",
            field="reuse.tier",
        )
    if r.tier not in rule.capacities:
        hint = f"; {rule.missing}" if rule.missing else ""
        raise InputError(
            f"engine {engine.name!r} has no {r.tier} tier with these options{hint}",
            field="reuse.tier",
        )
    if r.tier != "gpu" and not rule.capacities[r.tier]:
        raise InputError(
            f"the {r.tier} tier holds nothing: {rule.sizes.get(r.tier, 'its size')} is 0",
            field="reuse.tier",
        )


def _mean_p90(ttfts: np.ndarray, probs: np.ndarray) -> tuple[float, float]:
    """Return the mean and the 90th percentile of a discrete mix of TTFTs."""
    order = np.argsort(ttfts, kind="stable")
    cum = np.cumsum(probs[order])
    p90 = ttfts[order][min(int(np.searchsorted(cum, 0.9 - 1e-12)), len(order) - 1)]
    return float(np.dot(ttfts, probs)), float(p90)


def _traffic(sc: Scenario, rule: CacheRule, scale: float) -> dict:
    """Return the traffic's hit rates, TTFT mean and p90, prefill rate and survival per tier."""
    t = sc.traffic
    setup = rule.setup
    size = float(reuse.cache_bytes(setup, t.prefix_tokens + t.new_tokens + t.generate))
    tr = lru.Traffic(t.sessions, size, t.sessions / t.arrival_rate, t.turn_gap_s)
    tiers = list(rule.capacities)
    hits = lru.tier_hits(tr, [rule.capacities[k] for k in tiers], inclusive=rule.inclusive)
    prompt = t.prefix_tokens + t.new_tokens
    per_tier = [
        reuse.ttft_with_prefix(setup, prompt, t.prefix_tokens, k, rule.reload) for k in tiers
    ]
    recompute = float(per_tier[0].recompute) * scale
    ttfts = np.array([float(x.ttft) * scale for x in per_tier] + [recompute])
    probs = np.append(hits.hit_rate, max(hits.miss_rate, 0.0))
    computed = np.array([prompt - int(x.hit_tokens) for x in per_tier] + [prompt], dtype=float)
    mean, p90 = _mean_p90(ttfts, probs)
    return {
        "hit_rate_by_tier": {k: float(h) for k, h in zip(tiers, hits.hit_rate, strict=True)},
        "ttft_mean_s": mean,
        "ttft_p90_s": p90,
        "prefill_tokens_per_s": float(t.arrival_rate * np.dot(computed, probs)),
        "survival_s_by_tier": {
            k: None if np.isinf(s) else float(s)
            for k, s in zip(tiers, hits.survival_s, strict=True)
        },
        "host_bytes_for_90pct": lru.capacity_for(tr, 0.9),
    }


def apply(pred: Prediction, engine: EngineSpec) -> Prediction:
    """Return ``pred`` with its scenario's prefix hit and traffic (unchanged without either)."""
    sc = pred.scenario
    if sc.reuse is None and sc.traffic is None:
        return pred
    rule = _rule(sc, engine)
    r = sc.reuse
    cached, tier = (0, "gpu") if r is None else (r.cached_tokens, r.tier)
    hit = reuse.ttft_with_prefix(rule.setup, sc.prompt, cached, tier, rule.reload, sc.batch)
    recompute = float(hit.recompute)
    scale = pred.ttft_s / recompute if recompute > 0 else 1.0
    hit_tokens = int(hit.hit_tokens)
    ttft = float(hit.ttft) * scale if hit_tokens else pred.ttft_s
    result = PrefixReuse(
        hit_tokens=hit_tokens,
        load_s=float(hit.load) * scale,
        load_bytes=float(hit.load_bytes),
        prefill_new_s=float(hit.prefill_new) * scale if hit_tokens else pred.ttft_s,
        store_bytes=float(hit.store_bytes),
        tier=None if r is None else r.tier,
        **({} if sc.traffic is None else _traffic(sc, rule, scale)),
    )
    said = (
        f"{hit_tokens:,} of {sc.prompt:,} prompt tokens reloaded from {r.tier}"
        if r is not None
        else ""
    )
    policy = "; ".join(x for x in (pred.policy, said) if x)
    return replace(pred, ttft_s=ttft, ttft_recompute_s=pred.ttft_s, reuse=result, policy=policy)
