"""SGLang: weights (less what its offloaders move) and the working KV on the GPU; HiCache keeps the
radix cache's pages in host memory (and a storage backend) and loads a hit back layer by layer.

Decode is the step model with everything on the GPU unless an offloader is on (below). The prefix cache is the radix tree
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

Weights in host memory (python/sglang/srt/utils/offloader.py at
04653fa88f5ce4ea83632c4ad436343db6bc8324, ``create_offloader_from_server_args``):

- ``cpu_offload_gb`` > 0 (``OffloaderV1``): the decoder layers' parameters, in order, go to
  pinned host memory while the bytes so far are below the budget (the one that crosses it goes
  too), and each module with one offloaded copies its whole ``state_dict`` to the GPU before its
  forward (``v.to(device, non_blocking=True)`` on the compute stream, then ``functional_call``):
  the offloaded bytes cross the link every pass, every expert included, nothing overlapped. The
  same walk as vLLM's (engines/vllm_weight_offload.py, its fused parameters).
- else ``offload_group_size`` > 0 (``OffloaderV2``, ``offload_mode: cpu``): the last
  ``offload_num_in_group`` of every group of decoder layers, their routed experts' ``w13_weight``
  and ``w2_weight`` (a dense layer: its MLP), copied on a side stream ``offload_prefetch_step``
  offloaded layers ahead and waited for before the layer runs (engines/prefetch_offload.py). Only
  deepseek_v2.py passes the accessors it needs: another architecture exits 2.

One GPU: tensor parallelism is not modelled; a profile with ``gpu.count`` above 1 is refused.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Literal

import numpy as np
from msgspec import Meta

from kvoffload.engines import prefetch_offload as prefetch
from kvoffload.engines import prefix_cache, sglang_attention
from kvoffload.engines import vllm_weight_offload as vllm_offload
from kvoffload.engines.prefix_cache import BlockTokens
from kvoffload.engines.single_gpu import refuse_several_gpus
from kvoffload.engines.spec import CacheRule, EngineSpec, PrefixCache
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.limits import MAX_PARAMS
from kvoffload.inputs.units import format_bytes
from kvoffload.model import decode, reuse
from kvoffload.model.prediction import Prediction, Scenario, predict_setup

GB = 10**9
GiB = 2**30
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
    # weight offload (offloader.py): GiB a GPU in host memory, copied before each forward (V1)
    cpu_offload_gb: Annotated[float, Meta(ge=0.0, le=MAX_HOST_GB)] = 0.0
    # the prefetch offloader (V2; -1 or 0: off): groups, layers a group, layers ahead, the mode
    offload_group_size: Annotated[int, Meta(ge=-1, le=1 << 16)] = -1
    offload_num_in_group: Annotated[int, Meta(ge=1, le=1 << 16)] = 1
    offload_prefetch_step: Annotated[int, Meta(ge=1, le=1 << 16)] = 1
    offload_mode: Literal["cpu"] = "cpu"


def _v2(sc: Scenario) -> bool:
    """Return whether SGLang runs its prefetch offloader (V1's budget wins where both are set)."""
    o = sc.options
    return not o.cpu_offload_gb and o.offload_group_size > 0


def _v2_segments(sc: Scenario) -> prefetch.Segments:
    """Return what deepseek_v2.py offloads of each layer: the experts' stacks, else the MLP."""
    if sc.model.mla is None:
        raise InputError(
            "SGLang's prefetch offloader (offload_group_size) is wired into deepseek_v2.py alone "
            "(its submodule accessor); this model has no MLA, so SGLang would fail to load it",
            field="options.offload_group_size",
        )
    experts = ("experts.w13_weight", "experts.w2_weight")
    return tuple(
        experts if any(vllm_offload.matches(n, ("experts",)) for n, _ in layer) else ("mlp",)
        for layer in vllm_offload.layer_parameters(sc.model, sc.setup.weights)
    )


def _setup(sc: Scenario) -> decode.Setup:
    """Return the step model's setup with weights and KV on the GPU, refusing several GPUs; the
    Triton backend's decode attention walks the cache (engines/sglang_attention.py)."""
    refuse_several_gpus(sc, "sglang", "its tensor parallelism is")
    sglang_attention.refuse_serving(sc)
    walk = sglang_attention.walk(sglang_attention.backend(sc), sc.model.mla is not None)
    setup = decode.Setup(sc.system, sc.model, sc.setup.weights, sc.setup.kv, attention_walk=walk)
    if not sc.options.cpu_offload_gb:
        return setup
    # V1: the offloaded parameters' modules copied whole before each forward, serially
    moved, _ = vllm_offload.offload(sc, sc.options.cpu_offload_gb * GiB, pinned=True)
    off = min(moved / decode.step_weight_bytes(sc.model, sc.setup.weights), 1.0)
    placement = decode.Placement(
        weights=decode.Split(1 - off, off, 0.0), overlap="none", pinned=True, staged_weights=True
    )
    setup = replace(setup, placement=placement)
    if sc.model.moe is not None:  # a module's whole state_dict: every expert crosses
        setup = replace(setup, routing=replace(setup.routing, stream="all", gpu_hit_rate=0.0))
    return setup


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
    caps = {}  # --disable-radix-cache: the GPU keeps no prefix, no GPU tier
    if not o.disable_radix_cache:
        caps["gpu"] = prefix_cache.free_gpu_bytes(sc, setup, o.mem_fraction_static)
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
        missing="options.disable_radix_cache is true, so the GPU keeps no prefix"
        if o.disable_radix_cache
        else "enable_hierarchical_cache: true adds host memory, and "
        "hicache_storage_backend: file the disk",
    )


def predict(sc: Scenario) -> Prediction:
    """Return SGLang's prediction: the step model on the GPU, HiCache's host pool in memory."""
    setup = _setup(sc)
    pred = predict_setup(sc, setup)
    o = sc.options
    host = _host_bytes(sc, setup)
    gpu, cpu = pred.memory.gpu, pred.memory.cpu
    if o.cpu_offload_gb:  # pinned: each parameter rounded up to a power of two
        moved, held = vllm_offload.offload(sc, o.cpu_offload_gb * GiB, pinned=True)
        cpu = cpu + held - moved
    offloaded: list[int] = []
    if _v2(sc):
        segments = _v2_segments(sc)
        offloaded = np.flatnonzero(prefetch.plan(sc, segments)[0]).tolist()
        pred = prefetch.with_prefetch(sc, setup, pred, segments)
        off, held = prefetch.host_bytes(sc, segments, pinned=True)
        # a layer's tensors live from their copy to the end of its forward: step + 1 at most
        gpu = gpu - off + prefetch.buffer_bytes(sc, segments, o.offload_prefetch_step + 1)
        cpu = cpu + held
    mem = decode.Memory(
        gpu=gpu + (1 - o.mem_fraction_static) * sc.system.gpu_memory,
        cpu=cpu + host,
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
            "cpu_offload_gb": o.cpu_offload_gb,
            "offload_layers": offloaded,
        },
        policy=(
            f"{setup.placement.weights.cpu:.0%} of the weights copied from host memory before "
            "their modules run, every pass; "
            if o.cpu_offload_gb
            else f"the prefetch offloader: {o.offload_num_in_group} of every "
            f"{o.offload_group_size} layers from host memory; "
            if _v2(sc)
            else "weights and KV on the GPU; "
        )
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
    placement_option="options.cpu_offload_gb (or offload_group_size, DeepSeek-style models)",
    pin_option=None,
    refuses={
        "attention": "SGLang attends on the GPU; use engine: generic to model CPU attention",
        "overlap": "SGLang's offloaders have no overlap option (cpu_offload_gb copies before "
        "each module, offload_prefetch_step sets the prefetch); "
        "use engine: generic to compare overlap modes",
    },
    routing_ignored=((), ""),
    prefix_cache=PrefixCache(tiers=("gpu", "cpu", "disk"), rule=cache_rule),
)
