"""vLLM: ``cpu_offload_gb`` reads weights from host memory every forward pass; the KV offloading
connector is a prefix cache in host memory that shortens the prefill on a hit and does not touch
the decode step.

``cpu_offload_gb`` moves parameters, module by module, to pinned host memory and, where UVA is
available (pinned memory: every CUDA platform but restricted WSL), leaves the GPU a CUDA view of
them (``UVAOffloader`` in vllm-project/vllm vllm/model_executor/offloader/uva.py at
00593fa7a4832bdabac6fcd06c1710d13c462fbf: ``p.data = get_accelerator_view_from_cpu_tensor``).
The kernels then read those weights over the link as they run (zero-copy): all of a dense
layer, but of a MoE layer's routed experts only those its tokens pick, as the fused MoE kernel
reads only their weights. With ``VLLM_WEIGHT_OFFLOADING_DISABLE_UVA=1`` (``disable_uva``), or
before V1, each offloaded module's whole ``state_dict`` is copied to the GPU before its forward
(``functional_call``), every expert included.

Several GPUs run as one tensor-parallel group, ``tensor_parallel_size`` = ``gpu.count``
(vllm-project/vllm vllm/model_executor/layers/linear.py at
9e109c9887e38c51fc16b0da89760c5bd7c293c9): column-parallel layers split their outputs and
``QKVParallelLinear`` the query heads over the GPUs; when there are fewer KV heads than GPUs each
GPU keeps one, replicated (``num_kv_head_replicas``). ``RowParallelLinear`` ends the attention
output and the MLP with ``tensor_model_parallel_all_reduce`` of the hidden state: two all-reduces
per layer. The logits are gathered to the first GPU (logits_processor.py ``_gather_logits`` at
307e0861d40948561f7ecd5289e0cc2585871b5d). So each GPU holds 1/N of the weights and of the cache
(whole heads), and does 1/N of each layer's work; an MLA latent cache is not split by heads and is
held whole on every GPU (its read is still counted at 1/N per GPU: a simplification).
``cpu_offload_gb`` is "the space in GiB to offload to CPU, per GPU"; ``kv_offloading_size`` is
"the total buffer size summed across all TP ranks" (vLLM's engine arguments).

The prefix cache (a scenario's ``reuse:`` and ``traffic:``, engines/prefix_cache.py): the GPU tier
is vLLM's own prefix caching (``enable_prefix_caching`` on by default) in the KV memory left under
``gpu_memory_utilization``; ``kv_offloading_size`` > 0 turns on the KV connector
(vllm/config/vllm.py ``_post_init_kv_transfer_config`` at 000fc94b754f66aeb60ef5acf1ea2e94cdc65164):

- ``kv_offloading_backend: native``: the OffloadingConnector with ``cpu_bytes_to_use`` =
  ``kv_offloading_size`` GiB of pinned host memory (vllm/v1/kv_offload/cpu/spec.py and
  worker/cpu_gpu.py at 0072b0b7443bdddf17824c78d4feae8e1fc12fb4). Hits are whole blocks of
  ``block_size`` tokens (default the GPU block, 16); since 0.12.0 (PR #27743) one block spans every
  layer, so a reload is one ``swap_blocks`` cudaMemcpyAsync (DMA) per block. The scheduler's
  ``get_num_new_matched_tokens`` returns an asynchronous load: the request is scheduled only after
  the worker reports the load done (serial, one scheduler step per hit: the constant
  ``vllm.per_hit_ms``). Every block that fills is stored (``_get_reqs_to_store``, write-through),
  so the tiers are inclusive. Host memory only: no disk tier.
- ``kv_offloading_backend: lmcache``: LMCache's connector; LMCache owns its buffer
  (lmcache/v1/config.py at 3ecd72f84ee028571d17a9694d910b5339d33874: ``chunk_size`` 256,
  ``max_local_cpu_size`` 5.0 GB per worker, ``local_disk``/``max_local_disk_size``,
  ``use_layerwise`` off): chunks of ``chunk_size`` tokens copied by its own kernels, retrieved
  before the forward pass (serial; layer by layer with ``use_layerwise``), written through after
  each prefill chunk; a disk tier with ``local_disk``.
- ``prefix_hit_rate`` (deprecated; use ``reuse:``): the share of the prompt reloaded at the link's
  rate, as before; refused beside ``reuse:`` or ``traffic:``.

An all-reduce moves 2(N-1)/N of its bytes per GPU (ring all-reduce; NVIDIA/nccl-tests
doc/PERFORMANCE.md at dcf818955fa6e279e03263c984e95384164c24ad, busBw = algBw x 2(n-1)/n). The
collective is a ring of 2(N-1) steps, each a GPU-to-GPU copy of a 1/N chunk with the link's
latency (``transfer.all_reduce_time``: the link's peer figures where the profile gives them, else
staged through host memory), counted in the step's link time.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Literal

import numpy as np
from msgspec import Meta

from kvoffload.engines import prefetch_offload as prefetch
from kvoffload.engines import prefix_cache
from kvoffload.engines import vllm_weight_offload as vllm_offload
from kvoffload.engines.prefix_cache import BlockTokens
from kvoffload.engines.spec import CacheRule, EngineSpec, PrefixCache
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.limits import MAX_PARAMS
from kvoffload.inputs.models import Model
from kvoffload.inputs.precision import WeightFormat
from kvoffload.inputs.text import Strict
from kvoffload.model import decode, kv, reuse
from kvoffload.model.prediction import Prediction, Scenario, predict_setup
from kvoffload.model.transfer import all_reduce_time, gather_time, link_time

GiB = 2**30
# the most GiB of host memory an option may give: the largest plausible model's weights at fp32
# (4 bytes a parameter, the widest weight format), 4 PiB, above any host a profile may describe
MAX_HOST_GIB = MAX_PARAMS * 4 // GiB


HostGib = Annotated[float, Meta(ge=0.0, le=MAX_HOST_GIB)]
# parameter-name segments (vLLM's --cpu-offload-params / --offload-params), a few short names
ParamSegments = Annotated[
    tuple[Annotated[str, Meta(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.]+$")], ...],
    Meta(max_length=64),
]


class Options(Strict):
    """vLLM's offloading options."""

    # GiB of weights per GPU kept in pinned host memory
    cpu_offload_gb: HostGib = 0.0
    # GiB of host memory for prefix-cache blocks
    kv_offloading_size: HostGib = 0.0
    # share of the prompt found in that cache
    prefix_hit_rate: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.0
    # the share of each GPU's memory vLLM may use (vllm/config/cache.py @ c1d86421: default 0.9);
    # it leaves the rest to others, so the rest counts as taken
    gpu_memory_utilization: Annotated[float, Meta(gt=0.0, le=1.0)] = 0.9
    # the KV connector kv_offloading_size turns on: vLLM's own, or LMCache
    kv_offloading_backend: Literal["native", "lmcache"] = "native"
    block_size: BlockTokens = 16  # tokens per offloaded block (native; the GPU block)
    chunk_size: BlockTokens = 256  # LMCache's tokens per chunk
    max_local_cpu_size: HostGib = 5.0  # LMCache's host buffer, GB per worker (one per GPU)
    local_disk: bool = False  # LMCache keeps chunks on the profile's disk too
    max_local_disk_size: HostGib = 0.0  # GB of it
    use_layerwise: bool = False  # LMCache loads layer by layer under the compute
    # VLLM_WEIGHT_OFFLOADING_DISABLE_UVA=1 (and vLLM before V1): offloaded modules copied whole
    # to the GPU before each forward, instead of read in place by the kernels
    disable_uva: bool = False
    # the prompt tokens one scheduler step prefills (chunked prefill); default: vllm serve's
    max_num_batched_tokens: Annotated[int, Meta(ge=1, le=1 << 24)] | None = None
    # --max-model-len (a request longer than it is rejected), --max-num-seqs (at most that many
    # requests in a step), --tensor-parallel-size (the profile's GPU count: vLLM runs them as
    # one group), --enforce-eager (no CUDA graphs: accepted, with no term of its own; the
    # launches' cost at small batches is not modelled)
    max_model_len: Annotated[int, Meta(ge=1, le=1 << 25)] | None = None
    max_num_seqs: Annotated[int, Meta(ge=1, le=1 << 20)] | None = None
    tensor_parallel_size: Annotated[int, Meta(ge=1, le=64)] | None = None
    enforce_eager: bool = False
    # weight offloading's backend (vllm/config/offload.py): auto takes prefetch where
    # offload_group_size > 0, else UVA (cpu_offload_gb); each ignores the other's options
    offload_backend: Literal["auto", "uva", "prefetch"] = "auto"
    # UVA: only parameters whose dotted names hold one of these segments ("experts",
    # "experts.w2_weight"; vllm_weight_offload.vllm_name); empty: any, in order
    cpu_offload_params: ParamSegments = ()
    # prefetch (engines/prefetch_offload.py): the last offload_num_in_group of every
    # offload_group_size decoder layers in host memory, each copied offload_prefetch_step
    # offloaded layers ahead; offload_params: only their parameters with these segments
    offload_group_size: Annotated[int, Meta(ge=0, le=1 << 16)] = 0
    offload_num_in_group: Annotated[int, Meta(ge=1, le=1 << 16)] = 1
    offload_prefetch_step: Annotated[int, Meta(ge=0, le=1 << 16)] = 1
    offload_params: ParamSegments = ()
    # --no-enable-prefix-caching: no GPU prefix tier (a hit only from the connector's);
    # --swap-space (GiB of CPU swap for preempted requests; V1 no longer swaps) and
    # --enable-chunked-prefill (V1 always chunks, by max_num_batched_tokens): no term of their own
    enable_prefix_caching: bool = True
    swap_space: HostGib | None = None
    enable_chunked_prefill: bool | None = None


def prefetch_active(o: Options) -> bool:
    """Return whether vLLM runs the prefetch offloader: chosen, or by auto with a group size."""
    return o.offload_backend == "prefetch" or (
        o.offload_backend == "auto" and o.offload_group_size > 0
    )


def uva_budget(o: Options) -> float:
    """Return the bytes per GPU UVA offloads: ``cpu_offload_gb``, unless prefetch runs instead."""
    return 0.0 if prefetch_active(o) else o.cpu_offload_gb * GiB


def refuse_offload(o: Options) -> None:
    """Refuse what OffloadConfig's validator refuses for the prefetch offloader."""
    if not prefetch_active(o):
        return
    if o.offload_num_in_group > o.offload_group_size:
        raise InputError(
            f"options.offload_num_in_group ({o.offload_num_in_group}) must be <= "
            f"offload_group_size ({o.offload_group_size}), as vLLM's OffloadConfig requires",
            field="options.offload_num_in_group",
        )
    if o.offload_prefetch_step < 1:
        raise InputError(
            "options.offload_prefetch_step must be >= 1 when prefetch offloading is enabled",
            field="options.offload_prefetch_step",
        )


def refuse_serving(sc: Scenario) -> None:
    """Refuse what ``vllm serve`` refuses for the scenario's requests under its own limits."""
    o = sc.options
    tokens = sc.prompt + sc.generate
    if o.max_model_len is not None and tokens > o.max_model_len:
        raise InputError(
            f"options.max_model_len is {o.max_model_len} but a request holds {tokens} tokens "
            "(prompt + generate): vLLM rejects it",
            field="options.max_model_len",
        )
    if o.max_num_seqs is not None and sc.batch > o.max_num_seqs:
        raise InputError(
            f"options.max_num_seqs is {o.max_num_seqs} but the batch is {sc.batch}: vLLM runs "
            "at most that many requests in a step",
            field="options.max_num_seqs",
        )
    tp = o.tensor_parallel_size
    if tp is not None and tp != sc.system.gpu.count:
        raise InputError(
            f"options.tensor_parallel_size is {tp} but the profile has {sc.system.gpu.count} "
            "GPU(s) of its kind: vLLM runs the profile's GPUs as one group (say gpus: or "
            "hardware.gpu.count to match)",
            field="options.tensor_parallel_size",
        )


# vllm serve's chunked-prefill budget (EngineArgs' batch defaults for the OpenAI API server,
# vllm-project/vllm vllm/engine/arg_utils.py at 99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b): 8192
# tokens a step on a GPU of 70 GiB or more that is not an A100 (PR #17885), else 2048
BATCHED_TOKENS_LARGE, BATCHED_TOKENS = 8192, 2048
LARGE_GPU_BYTES = 70 * 2**30


def batched_tokens(sc: Scenario) -> int:
    """Return the prompt tokens one scheduler step prefills: the option, else vllm serve's."""
    if sc.options.max_num_batched_tokens is not None:
        return sc.options.max_num_batched_tokens
    gpu = sc.system.gpu
    large = gpu.memory.value >= LARGE_GPU_BYTES and "a100" not in gpu.name.lower()
    return BATCHED_TOKENS_LARGE if large else BATCHED_TOKENS


def _chunk_reads_s(sc: Scenario, setup: decode.Setup) -> float:
    """Return the seconds the prefill's later chunks spend reading the offloaded weights again.

    Each scheduler step is a forward pass over at most ``batched_tokens`` prompt tokens, and
    each reads every offloaded weight over the link (a chunk of thousands of tokens routes to
    every expert); ``decode.ttft`` counts the first such read.
    """
    w = setup.placement.weights
    if not w.off:
        return 0.0
    passes = -(-sc.prompt * sc.batch // batched_tokens(sc))
    per_gpu = decode.step_weight_bytes(sc.model, setup.weights) * w.off / sc.system.gpu.count
    rate = sc.system.copy_rate("h2d", pinned=setup.placement.pinned)
    return max(passes - 1, 0) * per_gpu / rate


def kv_heads_per_gpu(model: Model, tp: int) -> int:
    """Return the KV heads each GPU caches, refusing a split vLLM refuses (its ``divide``)."""
    if model.n_heads % tp:
        raise InputError(
            f"vLLM's tensor parallelism splits the {model.n_heads} attention heads over "
            f"tensor_parallel_size = {tp} GPUs, which does not divide them",
            field="hardware.gpu.count",
        )
    if model.mla:
        return 1  # the latent, whole on every GPU
    n_kv = model.n_kv_heads
    if (tp >= n_kv and tp % n_kv) or (tp < n_kv and n_kv % tp):
        raise InputError(
            f"vLLM's tensor parallelism splits (or replicates) the {n_kv} KV heads over "
            f"tensor_parallel_size = {tp} GPUs, which neither divides the other",
            field="hardware.gpu.count",
        )
    return max(n_kv // tp, 1)


def _setup(sc: Scenario) -> tuple[decode.Setup, float, int]:
    """Return the setup vLLM runs (weights streamed by UVA), the offloaded share, KV heads per GPU."""
    o, model, tp = sc.options, sc.model, sc.system.gpu.count
    refuse_offload(o)
    heads = kv_heads_per_gpu(model, tp)
    weights = decode.step_weight_bytes(model, sc.setup.weights)
    # the decoder-layer parameters the budget takes, whole (vllm_offload), of each GPU's 1/tp
    moved, _ = vllm_offload.offload(
        sc, uva_budget(o), pinned=sc.pinned_or(True), segments=tuple(o.cpu_offload_params)
    )
    off = min(moved / (weights / tp), 1.0)
    # UVA: kernels read the offloaded weights over the link as they run, so nothing overlaps
    placement = decode.Placement(
        # vLLM pins the offloaded weights where the platform allows (is_pin_memory_available)
        weights=decode.Split(1 - off, off, 0.0),
        overlap="none",
        pinned=sc.pinned_or(True),
        # UVA: the kernels read the pinned copy in place, through no GPU buffer; without it,
        # functional_call copies each offloaded module's state_dict to the GPU for its forward
        staged_weights=o.disable_uva,
    )
    # the cache as all GPUs hold it: tp x the heads each one keeps (GQA heads may be replicated)
    stored = None if model.mla or heads * tp == model.n_kv_heads else heads * tp
    setup = replace(sc.setup, placement=placement, kv_heads_stored=stored)
    if model.moe is not None:  # UVA: of the offloaded routed experts, those the batch picks cross
        stream = "all" if o.disable_uva else "routed"
        setup = replace(setup, routing=replace(setup.routing, stream=stream, gpu_hit_rate=0.0))
    return setup, off, heads


def _host_cache_bytes(o: Options, tp: int) -> tuple[float, float]:
    """Return the connector's (host, disk) bytes: vLLM's buffer, or LMCache's per worker."""
    if not o.kv_offloading_size:
        return 0.0, 0.0
    if o.kv_offloading_backend == "native":
        return o.kv_offloading_size * GiB, 0.0
    disk = o.max_local_disk_size * GiB * tp if o.local_disk else 0.0
    return o.max_local_cpu_size * GiB * tp, disk


def cache_rule(sc: Scenario) -> CacheRule:
    """Return vLLM's prefix cache: its own on the GPU, then the KV connector's tiers."""
    o = sc.options
    if o.prefix_hit_rate:
        raise InputError(
            "prefix_hit_rate is deprecated and may not be given beside reuse: or traffic:; "
            "say the cached tokens with reuse.cached_tokens",
            field="options.prefix_hit_rate",
        )
    setup, _, _ = _setup(sc)
    host, disk = _host_cache_bytes(o, sc.system.gpu.count)
    caps = {}  # without prefix caching the GPU keeps no prefix: no GPU tier
    if o.enable_prefix_caching:
        caps["gpu"] = prefix_cache.free_gpu_bytes(sc, setup, o.gpu_memory_utilization)
    if o.kv_offloading_size:
        caps["cpu"] = host
    if o.kv_offloading_backend == "lmcache" and o.local_disk:
        caps["disk"] = disk
    lmcache = o.kv_offloading_backend == "lmcache"
    per_hit = float(prefix_cache.constants_of("vllm")["per_hit_ms"]["value"]) * 1e-3
    rule = (
        reuse.Reload(
            o.chunk_size,
            prefix_cache.kernel_copy(),
            "layerwise" if o.use_layerwise else "serial",
            item_spans_layers=not o.use_layerwise,
        )
        if lmcache
        else reuse.Reload(o.block_size, prefix_cache.dma_copy(), "serial", per_hit)
    )
    size = "options.max_local_cpu_size" if lmcache else "options.kv_offloading_size"
    return CacheRule(
        setup=setup,
        reload=rule,
        capacities=caps,
        inclusive=True,
        sizes={"cpu": size, "disk": "options.max_local_disk_size"},
        missing=(
            "options.enable_prefix_caching is false, so the GPU keeps no prefix"
            if not o.enable_prefix_caching
            else "options.kv_offloading_size turns on the KV connector (host memory)"
            if not o.kv_offloading_size
            else "LMCache adds one with kv_offloading_backend: lmcache and local_disk: true"
            if not lmcache
            else "LMCache adds one with local_disk: true"
        ),
    )


def memory(sc: Scenario) -> decode.Memory:
    """Return vLLM's memory for the scenario, untimed (what a search for a fit asks)."""
    setup, _, _ = _setup(sc)
    return _memory(sc, decode.memory(setup, sc.prompt + sc.generate, sc.batch))


def _memory(sc: Scenario, mem: decode.Memory) -> decode.Memory:
    """Return vLLM's memory from the step model's for its setup: with several GPUs the latent
    cache whole on each, the GPU share it leaves unused, and the connector's buffers."""
    o, tp = sc.options, sc.system.gpu.count
    final = sc.prompt + sc.generate
    if tp > 1 and sc.model.mla:  # the latent cache is whole on every GPU
        latent = float(kv.batch_bytes(sc.model, final, sc.batch, sc.setup.kv))
        mem = replace(mem, gpu=mem.gpu + (tp - 1) * latent)
    host, disk = _host_cache_bytes(o, tp)
    # pinned offloaded parameters take their size rounded up to a power of two (vllm_offload)
    moved, held = vllm_offload.offload(
        sc, uva_budget(o), pinned=sc.pinned_or(True), segments=tuple(o.cpu_offload_params)
    )
    gpu = mem.gpu
    if prefetch_active(o):  # its layers' parameters pinned on the host, its slots on the GPU
        segments = prefetch.vllm_segments(sc)
        off, pinned = prefetch.host_bytes(sc, segments, pinned=sc.pinned_or(True))
        slots = o.offload_prefetch_step  # the static pool
        gpu = gpu - (off - prefetch.buffer_bytes(sc, segments, slots)) * tp
        mem = replace(mem, cpu=mem.cpu + pinned * tp)
    return decode.Memory(
        gpu=gpu + (1 - o.gpu_memory_utilization) * sc.system.gpu_memory,
        cpu=mem.cpu + host + (held - moved) * tp,
        disk=mem.disk + disk,
        staging=mem.staging,
    )


def predict(sc: Scenario) -> Prediction:
    """Return vLLM's prediction: weights streamed over the link (UVA) in every step, prefix reuse;
    with several GPUs, one tensor-parallel group."""
    o = sc.options
    refuse_serving(sc)
    system, model = sc.system, sc.model
    tp = system.gpu.count
    setup, off, heads = _setup(sc)
    placement = setup.placement
    pred = predict_setup(sc, setup)
    if tp > 1:
        pred = _tensor_parallel(sc, setup, pred, tp)
    pred = replace(pred, ttft_s=pred.ttft_s + _chunk_reads_s(sc, setup))
    prefetched: list[int] = []
    if prefetch_active(o):
        segments = prefetch.vllm_segments(sc)
        pred = prefetch.with_prefetch(sc, setup, pred, segments, tp, batched_tokens(sc))
        prefetched = np.flatnonzero(prefetch.plan(sc, segments)[0]).tolist()
    prompt_kv = float(kv.batch_bytes(setup.cache_model, sc.prompt, sc.batch, sc.setup.kv))
    if model.mla:
        prompt_kv *= tp
    stored_share = min(1.0, o.kv_offloading_size * GiB / prompt_kv) if prompt_kv else 0.0
    hit = o.prefix_hit_rate * stored_share
    # each GPU reloads its own part of the hit over its own link
    reload = hit * prompt_kv / tp / system.copy_rate("h2d", pinned=placement.pinned)
    ttft = (1 - hit) * pred.ttft_s + reload
    return replace(
        pred,
        ttft_s=ttft,
        memory=_memory(sc, pred.memory),
        by_overlap_s={},
        settings={
            "cpu_offload_gb": o.cpu_offload_gb,
            "weights_on_host_share": off,
            "kv_offloading_size": o.kv_offloading_size,
            "prefix_hit_rate": o.prefix_hit_rate,
            "tensor_parallel_size": tp,
            "kv_heads_per_gpu": heads,
            "max_num_batched_tokens": batched_tokens(sc),
            "offload_backend": "prefetch" if prefetch_active(o) else "uva",
            "prefetch_layers": prefetched,
        },
        policy=(
            f"{len(prefetched)} layers copied from host memory "
            f"{o.offload_prefetch_step} offloaded layer(s) ahead every pass"
            if prefetch_active(o)
            else f"{off:.0%} of the weights streamed from {'pinned' if placement.pinned else 'pageable'} host memory every step"
        )
        + f"; prefix cache {o.kv_offloading_size:g} GiB"
        # the deprecated prefix_hit_rate's share; a reuse: block says its own hit (prefix_cache)
        + (f", {hit:.0%} of the prompt reloaded instead of recomputed" if o.prefix_hit_rate else "")
        + (f"; tensor parallel over {tp} GPUs, two all-reduces per layer" if tp > 1 else ""),
    )


def _tensor_parallel(sc: Scenario, setup: decode.Setup, pred: Prediction, tp: int) -> Prediction:
    """Return one GPU's share of the step (1/tp of each layer) plus the collectives."""
    system, model = sc.system, sc.model
    lay = decode.layers(model, setup.weights)
    off = setup.placement.weights.off
    moved = lay.weight_bytes * off / tp
    h2d = link_time(system, moved, "h2d", transfers=moved > 0, pinned=setup.placement.pinned)
    act = 4 if setup.weights is WeightFormat.FP32 else 2
    is_head = np.arange(len(lay.count)) == len(lay.count) - 1
    hidden = sc.batch * model.hidden * act
    comm = np.where(
        is_head,
        gather_time(system, sc.batch * model.vocab * act, tp),
        2 * all_reduce_time(system, hidden, tp),
    )
    link = h2d + comm

    def per_token(_point: np.ndarray, context: np.ndarray) -> np.ndarray:
        # the roofline of 1/tp of the bytes and of the FLOPs, then the step with the collectives
        gpu = decode.stream_times(setup, context, sc.batch)["gpu"] / tp
        return np.stack([(gpu + link) @ lay.count, gpu @ lay.count])

    # the exact mean over every generated token: the GPU's roofline is convex and piecewise
    # linear in the context between the windows, the link time does not depend on it
    step, gpu_s = decode.token_mean(per_token, sc.prompt, sc.generate, lay.window)
    comm_prefill = float(np.dot(lay.count, np.where(is_head, 0.0, 1.0))) * 2 * all_reduce_time(
        system, hidden * sc.prompt, tp
    ) + gather_time(system, sc.batch * model.vocab * act, tp)
    streams = dict(pred.streams_s)
    streams["gpu"] = float(gpu_s)
    streams["h2d"] = float(link @ lay.count)
    return replace(
        pred,
        tpot_s=float(step),
        ttft_s=pred.ttft_s / tp + comm_prefill,
        streams_s=streams,
    )


ENGINE = EngineSpec(
    name="vllm",
    options=Options,
    predict=predict,
    placement_option="options.cpu_offload_gb",
    pin_option=None,
    refuses={
        "attention": "vLLM attends on the GPU and has no option to attend on the CPU; "
        "use engine: generic to model CPU attention",
        "overlap": "vLLM reads offloaded weights over the link as its kernels run and has no "
        "overlap option; use engine: generic to compare overlap modes",
    },
    routing_ignored=(
        ("stream", "gpu_hit_rate"),
        "vLLM's kernels read offloaded experts in place (UVA), only those the batch picks, with "
        "no GPU expert cache; options.disable_uva copies whole modules; leave routing.stream and "
        "routing.gpu_hit_rate out",
    ),
    prefix_cache=PrefixCache(tiers=("gpu", "cpu", "disk"), rule=cache_rule),
    memory=memory,
)
