"""vLLM: ``cpu_offload_gb`` streams weights every forward pass; the KV offloading connector is a
prefix cache in host memory that shortens the prefill on a hit and does not touch the decode step.

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

An all-reduce moves 2(N-1)/N of its bytes per GPU (ring all-reduce; NVIDIA/nccl-tests
doc/PERFORMANCE.md at dcf818955fa6e279e03263c984e95384164c24ad, busBw = algBw x 2(n-1)/n). The
profile has no GPU-GPU figure, so it crosses the host link (pinned rate, one latency per
collective), counted in the step's link time.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

import numpy as np
from msgspec import Meta

from kvoffload.engines.spec import EngineSpec
from kvoffload.model import decode, kv
from kvoffload.model.prediction import Prediction, Scenario, predict_setup
from kvoffload.model.transfer import link_time, peer_time
from kvoffload.spec.errors import InputError
from kvoffload.spec.hardware import System
from kvoffload.spec.limits import MAX_PARAMS
from kvoffload.spec.models import Model
from kvoffload.spec.precision import WeightFormat
from kvoffload.spec.text import Strict

GiB = 2**30
# the most GiB of host memory an option may give: the largest plausible model's weights at fp32
# (4 bytes a parameter, the widest weight format), 4 PiB, above any host a profile may describe
MAX_HOST_GIB = MAX_PARAMS * 4 // GiB


HostGib = Annotated[float, Meta(ge=0.0, le=MAX_HOST_GIB)]


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


def _all_reduce_s(system: System, nbytes: float, tp: int) -> float:
    """Return seconds for one ring all-reduce of ``nbytes`` over ``tp`` GPUs on the link."""
    return float(peer_time(system, nbytes, share=2 * (tp - 1) / tp))


def _gather_s(system: System, nbytes: float, tp: int) -> float:
    """Return seconds to gather ``nbytes`` split over ``tp`` GPUs onto the first one."""
    return float(peer_time(system, nbytes, share=(tp - 1) / tp))


def predict(sc: Scenario) -> Prediction:
    """Return vLLM's prediction: weights streamed over the link (UVA) in every step, prefix reuse;
    with several GPUs, one tensor-parallel group."""
    o = sc.options
    system, model = sc.system, sc.model
    tp = system.gpu.count
    heads = kv_heads_per_gpu(model, tp)
    weights = decode.step_weight_bytes(model, sc.setup.weights)
    off = min(o.cpu_offload_gb * GiB / (weights / tp), 1.0)  # of each GPU's 1/tp of the weights
    # UVA: kernels read the offloaded weights over the link as they run, so nothing overlaps
    placement = decode.Placement(
        # vLLM pins the offloaded weights where the platform allows (is_pin_memory_available)
        weights=decode.Split(1 - off, off, 0.0),
        overlap="none",
        pinned=sc.pinned_or(True),
    )
    # the cache as all GPUs hold it: tp x the heads each one keeps (GQA heads may be replicated)
    stored = None if model.mla or heads * tp == model.n_kv_heads else heads * tp
    setup = replace(sc.setup, placement=placement, kv_heads_stored=stored)
    pred = predict_setup(sc, setup)
    if tp > 1:
        pred = _tensor_parallel(sc, setup, pred, tp)
    prompt_kv = float(kv.batch_bytes(setup.cache_model, sc.prompt, sc.batch, sc.setup.kv))
    if model.mla:
        prompt_kv *= tp
    stored_share = min(1.0, o.kv_offloading_size * GiB / prompt_kv) if prompt_kv else 0.0
    hit = o.prefix_hit_rate * stored_share
    # each GPU reloads its own part of the hit over its own link
    reload = hit * prompt_kv / tp / system.copy_rate("h2d", pinned=placement.pinned)
    ttft = (1 - hit) * pred.ttft_s + reload
    mem = decode.Memory(
        gpu=pred.memory.gpu + (1 - o.gpu_memory_utilization) * sc.system.gpu_memory,
        cpu=pred.memory.cpu + o.kv_offloading_size * GiB,
        disk=pred.memory.disk,
        staging=pred.memory.staging,
    )
    return replace(
        pred,
        ttft_s=ttft,
        memory=mem,
        by_overlap_s={},
        settings={
            "cpu_offload_gb": o.cpu_offload_gb,
            "weights_on_host_share": off,
            "kv_offloading_size": o.kv_offloading_size,
            "prefix_hit_rate": o.prefix_hit_rate,
            "tensor_parallel_size": tp,
            "kv_heads_per_gpu": heads,
        },
        policy=f"{off:.0%} of the weights streamed from {'pinned' if placement.pinned else 'pageable'} host memory every step; prefix cache {o.kv_offloading_size:g} GiB, {hit:.0%} of the prompt reloaded instead of recomputed"
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
        _gather_s(system, sc.batch * model.vocab * act, tp),
        2 * _all_reduce_s(system, hidden, tp),
    )
    link = h2d + comm

    def per_token(_point: np.ndarray, context: np.ndarray) -> np.ndarray:
        # the roofline of 1/tp of the bytes and of the FLOPs, then the step with the collectives
        gpu = decode.stream_times(setup, context, sc.batch)["gpu"] / tp
        return np.stack([(gpu + link) @ lay.count, gpu @ lay.count])

    # the exact mean over every generated token: the GPU's roofline is convex and piecewise
    # linear in the context between the windows, the link time does not depend on it
    step, gpu_s = decode.token_mean(per_token, sc.prompt, sc.generate, lay.window)
    comm_prefill = float(np.dot(lay.count, np.where(is_head, 0.0, 1.0))) * 2 * _all_reduce_s(
        system, hidden * sc.prompt, tp
    ) + _gather_s(system, sc.batch * model.vocab * act, tp)
    mem = pred.memory
    if model.mla:  # the latent cache is whole on every GPU
        final = sc.prompt + sc.generate
        latent = float(kv.batch_bytes(model, final, sc.batch, sc.setup.kv))
        mem = replace(mem, gpu=mem.gpu + (tp - 1) * latent)
    streams = dict(pred.streams_s)
    streams["gpu"] = float(gpu_s)
    streams["h2d"] = float(link @ lay.count)
    return replace(
        pred,
        tpot_s=float(step),
        ttft_s=pred.ttft_s / tp + comm_prefill,
        streams_s=streams,
        memory=mem,
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
    routing_ignored=((), ""),
)
