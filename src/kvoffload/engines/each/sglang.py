"""SGLang: weights and the working KV on the GPU; HiCache keeps the radix cache's pages in host
memory (and a storage backend) and loads a hit back layer by layer under the prefill.

Decode is the step model with everything on the GPU. The prefix cache is the radix tree
(RadixAttention) in the KV pool the GPU has left after the weights (``mem_fraction_static`` of it,
assumed 0.9: SGLang picks it by GPU size). ``enable_hierarchical_cache`` adds HiCache
(sgl-project/sglang docs/advanced_features/hicache_design.md at
5b51a5206e034b12702425526bc6f3b85c697d5b; server_args.py defaults):

- the host pool: ``hicache_ratio`` (default 2.0, more than 1) times the device pool, or
  ``hicache_size`` GB (10^9 bytes) per rank, which overrides the ratio;
- ``hicache_write_policy``: ``write_through`` (default) and ``write_through_selective`` store each
  page in host memory too (inclusive tiers); ``write_back`` stores a page when the GPU evicts it
  (exclusive);
- pages of ``page_size`` tokens (default 1); the ``layer_first`` layout copies a page per layer;
  ``hicache_io_backend: kernel`` (default, GPU-assisted I/O kernels) or ``direct``
  (cudaMemcpyAsync per copy: with pages of 1 token, a copy per token and layer, which on long
  hits costs more than recomputing them);
- the load overlaps the compute by layer: layer N + 1 loads while layer N computes (per-layer CUDA
  events, python/sglang/srt/managers/cache_controller.py ``LayerLoadingEvent`` at
  350cb87962ba6b74fa9f69814e88bf2c21e179ea), with no scheduler step of its own;
- ``hicache_storage_backend: file``: an L3 tier on the profile's disk (its capacity), read into
  host memory and on to the GPU.

One GPU: tensor parallelism is not modelled; a profile with ``gpu.count`` above 1 is refused.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Literal

from msgspec import Meta

from kvoffload.engines import prefix_cache, sglang_attention
from kvoffload.engines.prefix_cache import BlockTokens
from kvoffload.engines.single_gpu import refuse_several_gpus
from kvoffload.engines.spec import CacheRule, EngineSpec, PrefixCache
from kvoffload.inputs.limits import MAX_PARAMS
from kvoffload.inputs.units import format_bytes
from kvoffload.model import decode, reuse
from kvoffload.model.prediction import Prediction, Scenario, predict_setup

GB = 10**9
MAX_HOST_GB = MAX_PARAMS * 4 // GB  # the largest plausible model's fp32 weights, 4.5 PB


class Options(sglang_attention.ServingFlags):
    """SGLang's memory and HiCache options (server_args.py)."""

    mem_fraction_static: Annotated[float, Meta(gt=0.0, le=1.0)] = 0.9
    enable_hierarchical_cache: bool = False
    hicache_ratio: Annotated[float, Meta(gt=1.0, le=1000.0)] = 2.0
    hicache_size: Annotated[float, Meta(ge=0.0, le=MAX_HOST_GB)] = 0.0  # GB per rank; 0: ratio
    hicache_write_policy: Literal["write_through", "write_through_selective", "write_back"] = (
        "write_through"
    )
    page_size: BlockTokens = 1
    hicache_io_backend: Literal["kernel", "direct"] = "kernel"
    hicache_storage_backend: Literal["file"] | None = None


def _setup(sc: Scenario) -> decode.Setup:
    """Return the step model's setup with weights and KV on the GPU, refusing several GPUs; the
    Triton backend's decode attention walks the cache (engines/sglang_attention.py)."""
    refuse_several_gpus(sc, "sglang", "its tensor parallelism is")
    sglang_attention.refuse_serving(sc)
    walk = sglang_attention.walk(sglang_attention.backend(sc), sc.model.mla is not None)
    return decode.Setup(sc.system, sc.model, sc.setup.weights, sc.setup.kv, attention_walk=walk)


def _host_bytes(sc: Scenario, setup: decode.Setup) -> float:
    """Return HiCache's host pool (B): hicache_size GB, else hicache_ratio x the device pool."""
    o = sc.options
    if not o.enable_hierarchical_cache:
        return 0.0
    if o.hicache_size:
        return o.hicache_size * GB
    return o.hicache_ratio * prefix_cache.free_gpu_bytes(sc, setup, o.mem_fraction_static)


def cache_rule(sc: Scenario) -> CacheRule:
    """Return SGLang's prefix cache: the radix cache on the GPU, HiCache's host pool and L3."""
    o = sc.options
    setup = _setup(sc)
    caps = {"gpu": prefix_cache.free_gpu_bytes(sc, setup, o.mem_fraction_static)}
    if o.enable_hierarchical_cache:
        caps["cpu"] = _host_bytes(sc, setup)
        if o.hicache_storage_backend == "file":
            disk = sc.system.disk_capacity
            caps["disk"] = float("inf") if disk is None else disk
    copy = (
        prefix_cache.kernel_copy() if o.hicache_io_backend == "kernel" else prefix_cache.dma_copy()
    )
    return CacheRule(
        setup=setup,
        reload=reuse.Reload(o.page_size, copy, "layerwise", item_spans_layers=False),
        capacities=caps,
        inclusive=o.hicache_write_policy != "write_back",
        sizes={"cpu": "options.hicache_ratio" if not o.hicache_size else "options.hicache_size"},
        missing="enable_hierarchical_cache: true adds host memory, and "
        "hicache_storage_backend: file the disk",
    )


def predict(sc: Scenario) -> Prediction:
    """Return SGLang's prediction: the step model on the GPU, HiCache's host pool in memory."""
    setup = _setup(sc)
    pred = predict_setup(sc, setup)
    o = sc.options
    host = _host_bytes(sc, setup)
    mem = decode.Memory(
        gpu=pred.memory.gpu + (1 - o.mem_fraction_static) * sc.system.gpu_memory,
        cpu=pred.memory.cpu + host,
        disk=pred.memory.disk,
        staging=pred.memory.staging,
    )
    return replace(
        pred,
        memory=mem,
        by_overlap_s={},
        settings={
            "mem_fraction_static": o.mem_fraction_static,
            "enable_hierarchical_cache": o.enable_hierarchical_cache,
            "hicache_host_bytes": host,
            "hicache_write_policy": o.hicache_write_policy,
            "page_size": o.page_size,
            "hicache_io_backend": o.hicache_io_backend,
            "hicache_storage_backend": o.hicache_storage_backend,
            "attention_backend": sglang_attention.backend(sc),
        },
        policy="weights and KV on the GPU; "
        + (
            f"HiCache host pool {format_bytes(host)} ({o.hicache_write_policy}), loads by layer"
            if o.enable_hierarchical_cache
            else "radix prefix cache on the GPU only"
        ),
    )


ENGINE = EngineSpec(
    name="sglang",
    options=Options,
    predict=predict,
    placement_option="options.mem_fraction_static (SGLang keeps weights and KV on the GPU)",
    pin_option=None,
    refuses={
        "attention": "SGLang attends on the GPU; use engine: generic to model CPU attention",
        "overlap": "SGLang keeps its weights on the GPU, so there is nothing to overlap; "
        "use engine: generic to compare overlap modes",
    },
    routing_ignored=((), ""),
    prefix_cache=PrefixCache(tiers=("gpu", "cpu", "disk"), rule=cache_rule),
)
