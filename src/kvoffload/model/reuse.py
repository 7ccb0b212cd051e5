"""A request whose prompt starts with cached tokens: the blocks reloaded, the new tokens prefilled.

A prefix cache (vLLM's KV offloading connector, LMCache, SGLang HiCache, TensorRT-LLM's host
offload, llama.cpp's host prompt cache) keeps the KV of computed blocks in GPU memory, host memory
or on disk. When a request's prompt starts with ``cached`` tokens it already holds, the engine
copies those blocks back once instead of recomputing them; decode then runs from GPU memory.

- hit tokens: the cached tokens rounded down to whole blocks of the engine's block size, leaving
  the prompt's last token to compute when the engine must (its logits start the decode);
- reload: a fixed cost per hit, one per copied item (a block, or a block of one layer) and the
  bytes at the tier's copy rate; a tier below host memory reads through it (disk, then the link);
- prefill of the new tokens: their matmuls, and attention over every position before them, the
  cached prefix included (``decode.ttft`` with ``cached``);
- how the engine combines them: in turn (the load finishes before the request's first forward
  pass) or layer by layer (layer i + 1 loads while layer i computes: n layers of l = load / n and
  c = compute / n take l + (n - 1) max(l, c) + c).

Arrays in, arrays out; broadcasting over prompt, cached tokens and batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from kvoffload.model import decode
from kvoffload.model.decode import Setup

TIERS = ("gpu", "cpu", "disk")
COMBINES = ("serial", "layerwise")


@dataclass(frozen=True)
class CopyPath:
    """How one engine copies cached blocks to the GPU: per-item cost and share of the link rate."""

    per_item_s: float  # fixed seconds per copied item (a DMA descriptor, a kernel's work item)
    rate_share: float = 1.0  # share of the pinned link rate the copies reach on large items


@dataclass(frozen=True)
class Reload:
    """An engine's prefix-cache rule: blocks, what one copy moves, and how loads meet compute."""

    block_tokens: int  # hits are whole blocks of this many tokens
    copy: CopyPath
    combine: str = "serial"  # 'serial': load, then prefill; 'layerwise': under the compute
    per_hit_s: float = 0.0  # fixed seconds per hit (a scheduler step, the lookup)
    item_spans_layers: bool = True  # one item holds a block of every layer (else one per layer)
    recompute_last: bool = True  # the prompt's last token is computed even when it is cached
    pinned: bool = True  # the host copy sits in page-locked memory

    def __post_init__(self) -> None:
        if self.block_tokens < 1:
            raise ValueError(f"block_tokens must be at least 1, got {self.block_tokens}")
        if self.combine not in COMBINES:
            raise ValueError(f"combine must be one of {COMBINES}, got {self.combine!r}")


def hit_tokens(prompt: ArrayLike, cached: ArrayLike, rule: Reload) -> np.ndarray:
    """Return the prompt tokens served from the cache: whole blocks, at most prompt - 1 if need be."""
    p = np.asarray(prompt, dtype=np.int64)
    usable = np.minimum(np.asarray(cached, dtype=np.int64), p - int(rule.recompute_last))
    return np.maximum(usable, 0) // rule.block_tokens * rule.block_tokens


def cache_bytes(setup: Setup, tokens: ArrayLike, batch: ArrayLike = 1) -> np.ndarray:
    """Return the bytes of the first ``tokens`` tokens' cache, per the engine's layout (no state)."""
    t = np.asarray(tokens, dtype=np.int64)
    full = decode._kv_total(setup, t, batch)
    # a recurrent layer's state is not a block of tokens: it is recomputed, not reloaded
    return full - decode._kv_total(setup, np.zeros_like(t), batch)


def items(setup: Setup, hit: ArrayLike, batch: ArrayLike, rule: Reload) -> np.ndarray:
    """Return how many copies a reload of ``hit`` tokens takes (blocks, times layers if per layer)."""
    blocks = np.asarray(hit, dtype=np.float64) / rule.block_tokens * np.asarray(batch)
    if rule.item_spans_layers:
        return blocks
    return blocks * int(np.count_nonzero(setup.model.attention_layers))


def tier_rate(setup: Setup, tier: str, rule: Reload) -> float:
    """Return the rate (B/s) at which cached bytes in ``tier`` reach the GPU (inf: already there)."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    if tier == "gpu":
        return float("inf")
    sysm = setup.system
    link = sysm.copy_rate("h2d", pinned=rule.pinned) * rule.copy.rate_share
    if tier == "cpu":
        return link
    # disk: read into host memory and copied on, the two pipelined: the slower of them
    return min(link, sysm.storage.read_bandwidth.value)


def load_time(
    setup: Setup, hit: ArrayLike, tier: str, rule: Reload, batch: ArrayLike = 1
) -> np.ndarray:
    """Return seconds to bring ``hit`` cached tokens per request from ``tier`` to the GPU."""
    h = np.asarray(hit, dtype=np.float64)
    rate = tier_rate(setup, tier, rule)
    if np.isinf(rate):
        return np.zeros(np.broadcast_shapes(h.shape, np.shape(batch)))
    nbytes = cache_bytes(setup, h.astype(np.int64), batch)
    copies = items(setup, h, batch, rule)
    t = rule.per_hit_s + copies * rule.copy.per_item_s + nbytes / rate
    return np.where(h > 0, t, 0.0)


@dataclass(frozen=True)
class ReuseTime:
    """One request with a cached prefix: its TTFT and the parts it is made of (s, B, tokens)."""

    ttft: np.ndarray
    recompute: np.ndarray  # the same request with nothing cached
    hit_tokens: np.ndarray
    load: np.ndarray
    load_bytes: np.ndarray
    prefill_new: np.ndarray
    store_bytes: np.ndarray  # the new full blocks written back to the cache (write-through)

    @property
    def load_bandwidth(self) -> np.ndarray:
        """Return the bytes reloaded per second of the load (0 where nothing is reloaded)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.load > 0, self.load_bytes / self.load, 0.0)


def ttft_with_prefix(
    setup: Setup,
    prompt: ArrayLike,
    cached: ArrayLike,
    tier: str,
    rule: Reload,
    batch: ArrayLike = 1,
) -> ReuseTime:
    """Return the TTFT of ``batch`` requests whose first ``cached`` prompt tokens sit in ``tier``."""
    p = np.asarray(prompt, dtype=np.int64)
    hit = hit_tokens(p, cached, rule)
    load = load_time(setup, hit, tier, rule, batch)
    new = decode.ttft(setup, p, batch, cached=hit)
    if rule.combine == "serial":
        total = load + new
    else:  # layer i + 1 loads while layer i computes: the first load and the last compute show
        n = max(int(np.count_nonzero(setup.model.attention_layers)), 1)
        total = (load + new) / n + (n - 1) * np.maximum(load, new) / n
    full_blocks = p // rule.block_tokens * rule.block_tokens
    stored = np.maximum(cache_bytes(setup, full_blocks, batch) - cache_bytes(setup, hit, batch), 0)
    return ReuseTime(
        ttft=np.asarray(total, dtype=np.float64),
        recompute=np.asarray(decode.ttft(setup, p, batch), dtype=np.float64),
        hit_tokens=hit,
        load=np.asarray(load, dtype=np.float64),
        load_bytes=cache_bytes(setup, hit, batch).astype(np.float64),
        prefill_new=np.asarray(new, dtype=np.float64),
        store_bytes=stored.astype(np.float64),
    )


BREAK_EVEN_LIMIT = 1 << 22  # the longest prompt break_even_prompt tries (tokens)
BREAK_EVEN_POINTS = 400  # the prompts of its first, log-spaced pass


def break_even_grid(rule: Reload, limit: int = BREAK_EVEN_LIMIT) -> np.ndarray:
    """Return the prompts break_even_prompt tries first: log-spaced, two blocks to ``limit``."""
    return np.unique(np.geomspace(rule.block_tokens * 2, limit, BREAK_EVEN_POINTS).astype(np.int64))


def break_even_prompt(
    setup: Setup, tier: str, rule: Reload, batch: int = 1, *, limit: int = BREAK_EVEN_LIMIT
) -> int:
    """Return the shortest prompt (tokens) whose reload from ``tier`` beats recomputing it whole.

    The prompt is taken as cached but for its last block; 0 when no prompt up to ``limit`` gains.
    """
    p = break_even_grid(rule, limit)
    r = ttft_with_prefix(setup, p, p, tier, rule, batch)
    gains = np.nonzero(r.ttft < r.recompute)[0]
    if not gains.size:
        return 0
    i = int(gains[0])
    if i == 0:
        return int(p[0])
    # refine between the last prompt that loses and the first that gains
    lo, hi = int(p[i - 1]), int(p[i])
    fine = np.arange(lo, hi + 1, dtype=np.int64)
    f = ttft_with_prefix(setup, fine, fine, tier, rule, batch)
    return int(fine[np.argmax(f.ttft < f.recompute)])
