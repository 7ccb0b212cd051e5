"""TensorRT-LLM: weights and KV on the GPU; with block reuse and a host cache, the blocks the GPU
evicts are offloaded to host memory and onboarded again when a later prompt reuses them.

Decode is the step model with everything on the GPU. ``KvCacheConfig``
(https://nvidia.github.io/TensorRT-LLM/llm-api/reference/KvCacheConfig.html):
``enable_block_reuse`` (default true) keeps filled blocks in a radix tree for prefix reuse;
``tokens_per_block`` (default 32) tokens per block, every layer packed in one block (the docs' KV
Cache System page); ``free_gpu_memory_fraction`` (default 0.9) of the GPU memory free after the
weights for KV blocks; ``host_cache_size`` (an int, bytes; None: no host tier) for the secondary
pool. Blocks go to host memory when the GPU pool evicts them (offload on eviction: exclusive
tiers) and are copied back block by block ("onboarded", one DMA copy per block) before the
request's prefill runs on them (serial).

One GPU: tensor parallelism is not modelled; a profile with ``gpu.count`` above 1 is refused.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

from msgspec import Meta

from kvoffload.engines import prefix_cache
from kvoffload.engines.prefix_cache import BlockTokens
from kvoffload.engines.single_gpu import refuse_several_gpus
from kvoffload.engines.spec import CacheRule, EngineSpec, PrefixCache
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.limits import MAX_PARAMS
from kvoffload.inputs.text import Strict
from kvoffload.inputs.units import format_bytes
from kvoffload.model import decode, reuse
from kvoffload.model.prediction import Prediction, Scenario, predict_setup

MAX_HOST_BYTES = MAX_PARAMS * 4  # the largest plausible model's fp32 weights, 4.5 PB


class Options(Strict):
    """TensorRT-LLM's KvCacheConfig fields that decide the prefix cache."""

    enable_block_reuse: bool = True
    tokens_per_block: BlockTokens = 32
    free_gpu_memory_fraction: Annotated[float, Meta(gt=0.0, le=1.0)] = 0.9
    host_cache_size: Annotated[int, Meta(ge=0, le=MAX_HOST_BYTES)] = 0  # bytes; 0: none


def _setup(sc: Scenario) -> decode.Setup:
    """Return the step model's setup with weights and KV on the GPU, refusing several GPUs."""
    refuse_several_gpus(sc, "trtllm", "its tensor parallelism is")
    return decode.Setup(sc.system, sc.model, sc.setup.weights, sc.setup.kv)


def cache_rule(sc: Scenario) -> CacheRule:
    """Return TensorRT-LLM's block reuse: the GPU pool, then the host pool it offloads into."""
    o = sc.options
    if not o.enable_block_reuse:
        raise InputError(
            "enable_block_reuse: false turns the prefix cache off; leave it true for reuse: "
            "or traffic:",
            field="options.enable_block_reuse",
        )
    setup = _setup(sc)
    caps = {"gpu": o.free_gpu_memory_fraction * prefix_cache.free_gpu_bytes(sc, setup, 1.0)}
    if o.host_cache_size:
        caps["cpu"] = float(o.host_cache_size)
    return CacheRule(
        setup=setup,
        reload=reuse.Reload(o.tokens_per_block, prefix_cache.dma_copy(), "serial"),
        capacities=caps,
        inclusive=False,
        sizes={"cpu": "options.host_cache_size"},
        missing="options.host_cache_size (bytes) adds a host pool",
    )


def predict(sc: Scenario) -> Prediction:
    """Return TensorRT-LLM's prediction: the step model on the GPU, the host pool in memory."""
    o = sc.options
    pred = predict_setup(sc, _setup(sc))
    host = float(o.host_cache_size)
    mem = replace(pred.memory, cpu=pred.memory.cpu + host)
    return replace(
        pred,
        memory=mem,
        by_overlap_s={},
        settings={
            "enable_block_reuse": o.enable_block_reuse,
            "tokens_per_block": o.tokens_per_block,
            "free_gpu_memory_fraction": o.free_gpu_memory_fraction,
            "host_cache_size": o.host_cache_size,
        },
        policy="weights and KV on the GPU; "
        + (
            f"blocks evicted from the GPU offloaded to a {format_bytes(host)} host pool"
            if host
            else "block reuse on the GPU only"
        ),
    )


ENGINE = EngineSpec(
    name="trtllm",
    options=Options,
    predict=predict,
    placement_option="options.free_gpu_memory_fraction (TensorRT-LLM keeps weights and KV on "
    "the GPU)",
    pin_option=None,
    refuses={
        "attention": "TensorRT-LLM attends on the GPU; use engine: generic to model CPU attention",
        "overlap": "TensorRT-LLM keeps its weights on the GPU, so there is nothing to overlap; "
        "use engine: generic to compare overlap modes",
    },
    routing_ignored=((), ""),
    prefix_cache=PrefixCache(tiers=("gpu", "cpu"), rule=cache_rule),
)
