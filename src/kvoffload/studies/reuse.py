"""Offload for reuse: a prefix cache in host memory, reloaded once per hit instead of recomputed.

A request whose prompt starts with tokens an earlier turn computed reloads their KV blocks from
host memory (or disk, or a network store) once, prefills only its new tokens, and decodes from
GPU memory. The questions: how much a hit cuts TTFT, from which prompt length it beats recompute
on each link, what hit rate a host cache of a given size gives a multi-turn traffic, how many
conversations each tier holds, and what decoding from GPU memory saves against streaming the
cache over the link every step. The cache rule is vLLM's native KV offloading connector
(``--kv-offloading-size``): blocks of 16 tokens, one DMA copy per block, loaded before the
request's first forward pass, every full block written through to host memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from msgspec.structs import replace

from kvoffload.engines.registry import ENGINES
from kvoffload.inputs.figures import Figure, Kind
from kvoffload.inputs.hardware import System, build_part
from kvoffload.inputs.models import Model, load_model
from kvoffload.inputs.units import Dim, format_bandwidth, format_bytes, format_number
from kvoffload.model import capacity, decode, lru, reuse
from kvoffload.model.decode import Setup
from kvoffload.model.prediction import Scenario
from kvoffload.model.reuse import Reload
from kvoffload.studies.beyond import with_link
from kvoffload.studies.chapter_answers import Answer

MODELS = ("llama-3.1-8b", "llama-3.1-70b")
PROMPTS = np.unique(np.geomspace(1_024, 131_072, 29).astype(np.int64))  # 1K..128K tokens
LINKS = ("pcie4-x16", "pcie5-x16", "nvlink-c2c")  # catalog link parts a host tier is reached by
# vLLM's native connector (vllm/v1/kv_offload/cpu/spec.py and worker/cpu_gpu.py at
# 0072b0b7443bdddf17824c78d4feae8e1fc12fb4): 16-token blocks spanning every layer, one
# cudaMemcpyAsync per block, the load done before the request is scheduled (one engine step)
ENGINE = "vllm"  # the prefix cache the chapter runs: vLLM's native KV offloading connector
# a network KV store (LMCache's remote backend, Mooncake) reached at one 100 GbE port's line rate
REMOTE = Figure(
    12.5e9,
    Dim.BANDWIDTH,
    Kind.ASSUMED,
    "ieee-802.3ba-2010",
    "one 100 Gb/s Ethernet port (IEEE 802.3ba, 100GBASE) at its full line rate, 12.5 GB/s: an "
    "assumed network KV store, protocol overhead left out",
)


@dataclass(frozen=True)
class Traffic:
    """Multi-turn sessions sharing one prefix cache (the scenario's ``traffic:``)."""

    sessions: int = 200
    prefix_tokens: int = 8_000  # tokens each turn's prompt shares with the session's last turn
    new_tokens: int = 200  # tokens each turn adds
    generate: int = 200  # tokens each turn's answer adds
    turn_gap_s: float = 30.0  # no turn comes sooner than this after the session's last
    arrival_rate: float = 5.0  # turns per second over all sessions

    @property
    def prompt(self) -> int:
        """Return a turn's prompt: the cached prefix and the new tokens."""
        return self.prefix_tokens + self.new_tokens

    @property
    def kept_tokens(self) -> int:
        """Return the tokens each session keeps cached after a turn: prompt and answer."""
        return self.prompt + self.generate


@dataclass(frozen=True)
class Cache:
    """A prefix cache on one machine: the setup its requests run, its reload rule, its host bytes."""

    setup: Setup
    reload: Reload

    @property
    def system(self) -> System:
        """Return the machine."""
        return self.setup.system


def cache(system: System, model: Model) -> Cache:
    """Return vLLM's native prefix cache for ``model`` on ``system``, as the engine declares it.

    The setup and the reload rule (16-token blocks, one DMA copy per block, the load before the
    request's first forward pass, one scheduler step per hit) are the engine's own
    (engines/each/vllm.py ``cache_rule``), with its default options.
    """
    spec = ENGINES[ENGINE]
    sc = Scenario(
        system=system,
        model=model,
        engine=ENGINE,
        setup=Setup(system, model),
        batch=1,
        prompt=1,
        generate=1,
        options=spec.options(),
    )
    rule = spec.prefix_cache.rule(sc)
    return Cache(rule.setup, rule.reload)


def with_remote(system: System) -> System:
    """Return the system with its disk tier replaced by the network store (REMOTE's rate)."""
    return replace(system, storage=replace(system.storage, read_bandwidth=REMOTE))


def fits_gpu(c: Cache, context: np.ndarray | int) -> np.ndarray:
    """Return whether the weights, the cache of ``context`` tokens and the prefill fit the GPU."""
    mem = decode.memory(c.setup, context)
    need = mem.gpu + decode.prefill_reserve(c.setup.model)
    return capacity.within(need, c.system.gpu_memory)


def gpu_cache_bytes(c: Cache) -> float:
    """Return the GPU bytes left for cached blocks beside the weights and the prefill's buffers."""
    taken = decode.memory(c.setup, 0).gpu + decode.prefill_reserve(c.setup.model)
    return max(float(c.system.gpu_memory - taken), 0.0)


def ttft_sweep(c: Cache, prompts: np.ndarray, shares: np.ndarray, tier: str = "cpu") -> np.ndarray:
    """Return TTFT (s) with a hit from ``tier``, prompts by rows, the cached share by columns."""
    p = np.asarray(prompts, dtype=np.int64)[:, None]
    cached = (p * np.asarray(shares, dtype=np.float64)[None, :]).astype(np.int64)
    return reuse.ttft_with_prefix(c.setup, p, cached, tier, c.reload).ttft


def _reuse(c: Cache, prompts: np.ndarray, new_tokens: int, tier: str) -> reuse.ReuseTime:
    p = np.asarray(prompts, dtype=np.int64)
    return reuse.ttft_with_prefix(c.setup, p, np.maximum(p - new_tokens, 0), tier, c.reload)


def ttft_frame(
    system: System,
    models: tuple[str, ...] = MODELS,
    prompts: np.ndarray = PROMPTS,
    new_tokens: int = 200,
) -> pd.DataFrame:
    """Return, per model and prompt, TTFT recomputed and with all but ``new_tokens`` from host memory.

    A model whose weights and cache do not fit the GPU at a prompt is left out there (a prefix
    cache serves decode from GPU memory); ``fits`` says where.
    """
    rows = []
    for mid in models:
        c = cache(system, load_model(mid))
        r = _reuse(c, prompts, new_tokens, "cpu")
        rows.append(
            pd.DataFrame(
                {
                    "model": c.setup.model.name,
                    "prompt": prompts,
                    "recompute (ms)": r.recompute * 1e3,
                    "host hit (ms)": r.ttft * 1e3,
                    "reload (ms)": r.load * 1e3,
                    "new tokens' prefill (ms)": r.prefill_new * 1e3,
                    "reloaded": r.load_bytes,
                    "fits": fits_gpu(c, prompts),
                }
            )
        )
    out = pd.concat(rows, ignore_index=True)
    return out.assign(speedup=out["recompute (ms)"] / out["host hit (ms)"])


def fit_note(system: System, models: tuple[str, ...] = MODELS, prompt: int = 1_024) -> str:
    """Return a sentence naming the models whose weights do not fit the GPU ('' when all fit)."""
    out = []
    for mid in models:
        c = cache(system, load_model(mid))
        if not bool(fits_gpu(c, prompt)):
            weights = decode.memory(c.setup, 0).gpu
            out.append(
                f"{c.setup.model.name} is left out: its weights and buffers, "
                f"{format_bytes(float(weights))}, do not fit the {format_bytes(system.gpu_memory)} "
                "of GPU memory, and a prefix cache serves a model that decodes from GPU memory"
            )
    return "; ".join(out) + "." if out else ""


@dataclass(frozen=True)
class Route:
    """One way cached blocks reach the GPU: the system to use and the tier they come from."""

    name: str
    system: System
    tier: str
    rate: Figure  # the slower of the link and the tier's own read rate


def routes(system: System) -> list[Route]:
    """Return the host tier over each catalog link, the profile's NVMe disk and a network store."""
    out = []
    for lid in LINKS:
        part = build_part("link", lid)
        out.append(
            Route(
                f"host memory over {part.name}", with_link(system, lid), "cpu", part.h2d_bandwidth
            )
        )
    disk = system.storage
    out.append(Route(f"NVMe disk ({disk.name})", system, "disk", disk.read_bandwidth))
    out.append(Route("network store, 100 GbE", with_remote(system), "disk", REMOTE))
    return out


def break_even_frame(system: System, model: Model, context: int = 32_000) -> pd.DataFrame:
    """Return per path: its copy rate, the shortest prompt a hit beats recompute at, and TTFTs."""
    rows = []
    for p in routes(system):
        c = cache(p.system, model)
        r = reuse.ttft_with_prefix(c.setup, context, context, p.tier, c.reload)
        rate = reuse.tier_rate(c.setup, p.tier, c.reload)
        rows.append(
            {
                "path": p.name,
                "copy rate": rate,
                "rate": format_bandwidth(rate),
                "break-even prompt": reuse.break_even_prompt(c.setup, p.tier, c.reload),
                f"hit at {format_number(context)} (ms)": float(r.ttft) * 1e3,
                "recompute (ms)": float(r.recompute) * 1e3,
                "rate kind": p.rate.kind.value,
                "source": p.rate.source,
            }
        )
    return pd.DataFrame(rows)


def lru_traffic(c: Cache, t: Traffic) -> lru.Traffic:
    """Return the traffic as the LRU model reads it: sessions, bytes kept each, turn gaps."""
    size = float(reuse.cache_bytes(c.setup, t.kept_tokens))
    return lru.Traffic(t.sessions, size, t.sessions / t.arrival_rate, t.turn_gap_s)


def hit_rates(c: Cache, t: Traffic, host_bytes: np.ndarray) -> np.ndarray:
    """Return the share of turns a host cache of each size serves (write-through LRU)."""
    return lru.hit_rate(lru_traffic(c, t), host_bytes)


def hit_rate_frame(c: Cache, t: Traffic, points: int = 61) -> pd.DataFrame:
    """Return hit rate against host cache size, from 1% of what every session keeps to 150% of
    it or of the machine's host memory, whichever is larger."""
    tr = lru_traffic(c, t)
    whole = tr.sessions * tr.size
    caps = np.geomspace(0.01 * whole, 1.5 * max(whole, c.system.host_memory), points)
    return pd.DataFrame({"host cache": caps, "hit rate": hit_rates(c, t, caps)})


@dataclass(frozen=True)
class HostAnswer:
    """The traffic on this machine's host memory: hit rate, bytes for 90%, sessions kept."""

    hit_rate: float  # with the whole host memory as the cache
    bytes_for_90: float
    session_bytes: float
    survival_s: float  # how long a session stays cached after a turn (inf: all fit)

    def sentence(self, t: Traffic, host_memory: float) -> str:
        """Return what the machine's host memory does for the traffic, in one sentence."""
        whole = format_bytes(host_memory)
        if self.hit_rate >= 1.0:
            return (
                f"All {t.sessions:,} sessions' caches fit the {whole} of host memory together, so "
                "every turn after a session's first finds its prefix there."
            )
        stays = format_number(self.survival_s)
        if self.hit_rate <= 0.0:
            return (
                f"With the whole {whole} of host memory as the cache, no turn hits: the other "
                f"sessions push a session's blocks out {stays} s after its turn, sooner than the "
                f"{format_number(t.turn_gap_s)} s before its next one comes (LRU's cliff)."
            )
        return (
            f"With the whole {whole} of host memory as the cache, "
            f"{format_number(100 * self.hit_rate)}% of the turns hit: a session's blocks stay "
            f"{stays} s after its turn, longer than some of its gaps and shorter than others."
        )


def host_answer(c: Cache, t: Traffic) -> HostAnswer:
    """Return the traffic's hit rate with the machine's host memory as the cache."""
    tr = lru_traffic(c, t)
    hits = lru.tier_hits(tr, [c.system.host_memory])
    return HostAnswer(
        float(hits.hit_rate[0]), lru.capacity_for(tr, 0.9), tr.size, float(hits.survival_s[0])
    )


def sessions_frame(c: Cache, t: Traffic) -> pd.DataFrame:
    """Return per tier its bytes, the bytes one session keeps, and how many sessions fit."""
    per = float(reuse.cache_bytes(c.setup, t.kept_tokens))
    tiers = [
        ("GPU memory (beside the weights)", gpu_cache_bytes(c)),
        ("host memory", float(c.system.host_memory)),
    ]
    if c.system.disk_capacity is not None:
        tiers.append(("disk", float(c.system.disk_capacity)))
    return pd.DataFrame(
        {
            "tier": [n for n, _ in tiers],
            "capacity": [cap for _, cap in tiers],
            "per session": per,
            "sessions that fit": [int(cap // per) for _, cap in tiers],
        }
    )


def decode_frame(
    c: Cache, contexts: np.ndarray = PROMPTS, generate: int = 200, new_tokens: int = 200
) -> pd.DataFrame:
    """Return per context: a host hit's TTFT, and TPOT decoding from GPU memory vs streaming.

    Reuse keeps the cache in host memory between turns and on the GPU while a turn decodes;
    per-step offload streams it over the link on every step (``decode.offloaded``).
    """
    ctx = np.asarray(contexts, dtype=np.int64)
    streamed = decode.offloaded(c.system, c.setup.model)
    r = _reuse(c, ctx, new_tokens, "cpu")
    on_gpu = decode.tpot(c.setup, ctx, generate) * 1e3
    off = decode.tpot(streamed, ctx, generate) * 1e3
    return pd.DataFrame(
        {
            "context": ctx,
            "host hit TTFT (ms)": r.ttft * 1e3,
            "TPOT, cache on the GPU (ms)": on_gpu,
            "TPOT, cache streamed (ms)": off,
            "streamed / on GPU": off / on_gpu,
            "fits": fits_gpu(c, ctx + generate),
        }
    )


@dataclass(frozen=True)
class Headline:
    """A host hit at one long prompt against recomputing it, and where a hit starts to pay."""

    prompt: int
    cached: int
    ttft_ms: float
    recompute_ms: float
    break_even: int  # prompt tokens from which a host hit beats recompute (0: none up to 4M)
    fits: bool  # the model's weights and this prompt's cache fit the GPU

    @property
    def speedup(self) -> float:
        """Return recompute over the hit's TTFT."""
        return self.recompute_ms / self.ttft_ms

    def sentence(self) -> str:
        """Return the hit against recompute in one sentence (or why there is none)."""
        n = format_number(self.prompt)
        if not self.fits:
            return (
                f"On this machine the model's weights and a {n}-token prompt's cache do not fit "
                "the GPU, so there is no decode from GPU memory for a prefix cache to serve."
            )
        return (
            f"A {n}-token prompt whose first {format_number(self.cached)} tokens sit in host "
            f"memory starts in {format_number(self.ttft_ms)} ms; recomputing it takes "
            f"{format_number(self.recompute_ms)} ms, {format_number(self.speedup)} times as long."
        )


def headline(c: Cache, prompt: int = 32_000, new_tokens: int = 200) -> Headline:
    """Return a host hit's TTFT against recompute at ``prompt`` tokens, all but the new cached."""
    r = _reuse(c, np.asarray(prompt), new_tokens, "cpu")
    return Headline(
        prompt,
        int(r.hit_tokens),
        float(r.ttft) * 1e3,
        float(r.recompute) * 1e3,
        reuse.break_even_prompt(c.setup, "cpu", c.reload),
        bool(fits_gpu(c, prompt)),
    )


def answer(head: Headline, new_tokens: int = 200) -> Answer:
    """Return chapter 11's answer: a host hit's TTFT at a long prompt, against recomputing it."""
    if not head.fits:
        return Answer(
            f"TTFT at {head.prompt:,} tokens, prefix from host memory",
            float("nan"),
            "ms",
            "hit_ttft_ms",
            "the model and this prompt's cache do not fit the GPU",
        )
    return Answer(
        label=(
            f"TTFT at {head.prompt:,} tokens, all but the last {new_tokens:,} reloaded from "
            "host memory"
        ),
        value=head.ttft_ms,
        unit="ms",
        key="hit_ttft_ms",
        detail=(
            f"against {format_number(head.recompute_ms)} ms to recompute the whole prompt, "
            f"{format_number(head.speedup)}x faster"
        ),
    )
