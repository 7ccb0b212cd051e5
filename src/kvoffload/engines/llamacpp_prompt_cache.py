"""llama.cpp's host prompt cache (``--cache-ram``): slots' states saved to host memory, restored.

ggml-org/llama.cpp PR #16391 ("server : host-memory prompt caching", merged October 2025): when a
slot takes a task with a different prompt, the server saves the slot's whole sequence state
(``llama_state_seq_get_data``: every cached token's K and V) to host memory, and on a new task
hot-swaps in the cached prompt sharing the longest prefix with it when that saves work; only the
rest of the prompt is computed. ``--cache-ram`` MiB (``cache_ram_mib = 8192`` in common/common.h;
0 disables, -1 no limit) bounds it, the oldest entry evicted first.

So: the GPU tier is the slot itself (its KV for the scenario's context, a slot per request of the
batch); the host tier holds what the slots gave up (exclusive, write-back); a hit is the common
prefix, to the token (block 1), the last prompt token computed; a restore copies the state back
tensor by tensor, K and V of each attention layer (two copies per layer, each at the per-copy cost
of a copy-engine transfer), from ordinary pageable host memory (the profile's pageable rate, its
pinned rate where it gives none), before the suffix is computed (serial).
"""

from __future__ import annotations

import numpy as np

from kvoffload.engines import prefix_cache
from kvoffload.engines.spec import CacheRule
from kvoffload.model import decode, reuse
from kvoffload.model.prediction import Scenario

MiB = 2**20


def cache_rule(sc: Scenario) -> CacheRule:
    """Return llama.cpp's prompt cache: the slots on the GPU, ``cache_ram`` MiB in host memory."""
    setup = decode.Setup(sc.system, sc.model, sc.setup.weights, sc.setup.kv)
    ram = sc.options.cache_ram
    caps = {"gpu": float(reuse.cache_bytes(setup, sc.prompt + sc.generate, sc.batch))}
    if ram:
        caps["cpu"] = sc.system.host_memory if ram < 0 else ram * MiB
    copies = 2 * int(np.count_nonzero(sc.model.attention_layers))  # K and V of each layer
    restore = reuse.Reload(
        1,
        reuse.CopyPath(0.0),
        "serial",
        per_hit_s=copies * prefix_cache.dma_copy().per_item_s,
        pinned=sc.system.link.pageable_bandwidth is None,
    )
    return CacheRule(
        setup=setup,
        reload=restore,
        capacities=caps,
        inclusive=False,
        sizes={"cpu": "options.cache_ram"},
        missing="options.cache_ram (MiB, default 8192) keeps prompts in host memory",
    )
