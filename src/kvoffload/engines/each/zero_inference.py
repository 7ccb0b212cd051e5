"""DeepSpeed ZeRO-Inference: weights streamed layer by layer from host memory or disk, prefetched
while a layer computes (from NVMe, the disk read of a later layer runs beside the copy of the next
one); it can keep the KV cache in host memory with attention on the CPU, and quantise weights to 4
bits. It uses pageable host memory unless told otherwise, except its NVMe swap buffers, which are
pinned.

Several GPUs: ZeRO-Inference runs one process per GPU (``deepspeed --num_gpus N run_model.py``),
each with ``batch_size // world_size`` prompts (DeepSpeedExamples
inference/huggingface/zero_inference/run_model.py at 45b4b7156c8794a3452a5a7d03dbd8d797068569);
ZeRO stage 3 keeps 1/N of every parameter on each rank and all-gathers a layer before it runs
(deepspeedai/DeepSpeed deepspeed/runtime/zero/partition_parameters.py at
57073d130ce9daa8def95de83480670139bd0ff2, ``_partition_param`` / ``_allgather_params``): each rank
copies its 1/N in from host memory, the drive serves every rank's part, and the all-gather brings
in the other (N-1)/N, a GPU-to-GPU copy (``transfer.peer_time``: the link's peer figures where
the profile gives them, else staged through host memory).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

import numpy as np
from msgspec import UnsetType

from kvoffload.engines.layer_streaming import PINNED, TIER, copies_pinned
from kvoffload.engines.spec import EngineSpec
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.precision import KvFormat, WeightFormat
from kvoffload.inputs.text import Strict
from kvoffload.model import decode, kv
from kvoffload.model.prediction import Prediction, Scenario, predict_setup
from kvoffload.model.transfer import peer_time


class Options(Strict):
    """ZeRO-Inference's options."""

    weights: Literal["gpu", "cpu", "disk"] = "cpu"
    kv_offload: bool = False
    quantize_weights: bool = False  # 4-bit group-wise weights (int4_g64)
    pinned_given: bool | UnsetType = PINNED

    @property
    def pinned(self) -> bool:
        """Return the ``pinned`` option: False unless the file says true."""
        return self.pinned_given is True


# -- ZeRO-Inference's offloaded KV cache -------------------------------------------------------
# tjruwase/transformers branch kvcache-offload-cpu at 35515d7deb03200e0f835120ed40e817a9f6dd06 (the
# fork DeepSpeedExamples' zero_inference requirements.txt installs) allocates the host buffer in
# each model file once the prompt is in, ``max_len = prompt_len + max_new_tokens - 1``:
# - models/llama/modeling_llama.py: ``[layers, 2, batch, num_key_value_heads, max_len, head_dim]``
#   by ``torch.empty(buffer_shape, pin_memory=...)``: grouped heads, in the default dtype (fp32;
#   from_pretrained restores it after loading, modeling_utils.py ``dtype_orig``), and the decode
#   step sends the query over as ``query_states.float().to('cpu')``;
# - models/opt/modeling_opt.py: ``[layers, 2, batch, num_heads, max_len, head_dim]``, fp32 too;
# - models/bloom/modeling_bloom.py: keys and values apart, ``dtype=hidden_states.dtype``.
# The grouped heads are expanded (``repeat_kv``) only for the CPU's attention, after the copy.
_FORK_KV = {"llama": "kv_heads", "opt": "heads", "bloom": "heads"}


def cpu_kv_passes(sc: Scenario) -> float:
    """Return how many times the fork's CPU attention touches each expanded cached value.

    In the decode step, models/llama/modeling_llama.py (the fork above) takes the layer's host
    buffer as a view and calls ``repeat_kv`` on it: ``expand`` then ``reshape``, which copies,
    since an expanded dimension cannot be merged into a view, so each of K and V is read grouped
    (1/n_rep of the expanded bytes) and written expanded (1) before the two matmuls read it (1).
    A PyTorch CPU op is taken to cost by the bytes it touches, read or written: 2 + 1/n_rep
    passes over the expanded cache against the matmuls' one. ``repeat_kv`` returns its input
    when n_rep is 1, as do the OPT and BLOOM files (no grouped heads).
    """
    m = sc.model
    if _FORK_KV.get(m.model_type) != "kv_heads" or m.n_kv_heads == m.n_heads:
        return 1.0
    return 2.0 + m.n_kv_heads / m.n_heads


def offloaded_kv_bytes(sc: Scenario, batch: int) -> float:
    """Return the bytes of ZeRO-Inference's host KV buffers for ``batch`` prompts, as its
    transformers fork allocates them."""
    m = sc.model
    kind = _FORK_KV.get(m.model_type)
    if kind is None:
        raise InputError(
            f"ZeRO-Inference's KV offload exists only in its transformers fork's {', '.join(_FORK_KV)} "
            f"model files; model_type {m.model_type!r} has none",
            field="options.kv_offload",
        )
    heads = m.n_kv_heads if kind == "kv_heads" else m.n_heads
    fmt = sc.setup.kv if m.model_type == "bloom" else KvFormat.FP32
    max_len = sc.prompt + sc.generate - 1
    return float(kv.batch_bytes(replace(m, n_kv_heads=heads), max_len, batch, fmt))


# -- the engine -------------------------------------------------------------------------------
def predict(sc: Scenario) -> Prediction:
    """Return ZeRO-Inference's prediction."""
    o = sc.options
    kv_offload = o.kv_offload
    placement = decode.Placement(
        weights=TIER[o.weights],
        kv=decode.Split(0, 1, 0) if kv_offload else decode.Split(),
        attention="cpu" if kv_offload else "gpu",
        overlap="pipeline",
        # ZeRO reads NVMe-resident weights asynchronously (libaio) into page-locked swap buffers
        # (AsyncPartitionedParameterSwapper pins them), so from disk its copies are pinned
        pinned=copies_pinned(sc, pinned_buffers=o.weights == "disk"),
    )
    # run_model.py's --quant_bits 4: every nn.Linear and nn.Embedding weight quantised at load
    # (quantized_initialization, group 64 on dim 1, asymmetric), copied over the link as stored
    # and dequantised on the GPU before each matmul
    fmt = WeightFormat.INT4_G64 if o.quantize_weights else sc.setup.weights
    # the step's CPU attention reads the cache as the fork's attention uses it: repeat_kv expands
    # grouped heads to one per query head before the matmuls (its allocation is offloaded_kv_bytes)
    heads = sc.model.n_heads if kv_offload else None
    passes = cpu_kv_passes(sc) if kv_offload else 1.0
    setup = replace(
        sc.setup, weights=fmt, placement=placement, kv_heads_stored=heads, cpu_kv_passes=passes
    )
    n = sc.system.gpu.count
    pred = predict_setup(sc, setup) if n == 1 else _zero_ranks(sc, setup, n)
    mem = pred.memory
    batch = sc.batch if n == 1 else (sc.batch // n) * n  # every rank's prompts
    host_kv = offloaded_kv_bytes(sc, batch) if kv_offload else 0.0
    if kv_offload:  # host memory: the weights kept there and the fork's own KV buffers
        weights_cpu = decode.resident_weight_bytes(sc.model, fmt) * placement.weights.cpu
        mem = replace(mem, cpu=np.asarray(weights_cpu + host_kv))
    what = f"weights streamed from {o.weights}" if o.weights != "gpu" else "weights on the GPU"
    extras = (", KV in host memory with CPU attention" if kv_offload else "") + (
        ", 4-bit weights" if fmt is WeightFormat.INT4_G64 else ""
    )
    ranks = (
        f"; {n} ranks of {sc.batch // n} prompts, ZeRO-3 all-gathers each layer" if n > 1 else ""
    )
    settings: dict[str, Any] = {"weights": o.weights, "kv_offload": kv_offload}
    if kv_offload:
        settings["offloaded_kv_bytes"] = host_kv
    if n > 1:
        settings |= {"ranks": n, "prompts_per_rank": sc.batch // n}
    return replace(
        pred,
        memory=mem,
        by_overlap_s={},
        settings=settings,
        policy=f"{what} layer by layer (prefetched, {'pinned' if placement.pinned else 'pageable'}){extras}{ranks}",
    )


def _zero_ranks(sc: Scenario, setup: decode.Setup, n: int) -> Prediction:
    """Return ZeRO-Inference on ``n`` GPUs: one rank per GPU, batch // n prompts each."""
    rank_batch = sc.batch // n
    if rank_batch < 1:
        raise InputError(
            f"ZeRO-Inference gives each of the {n} GPUs batch // {n} prompts (run_model.py); "
            f"batch {sc.batch} leaves a GPU without one",
            field="workload.batch",
        )
    p = setup.placement
    w = p.weights
    # each rank copies its 1/n of a layer over its link; the shared drive serves all n parts
    rank_w = decode.Split(1 - w.off / n, w.cpu / n, w.disk / n)
    rank = replace(setup, placement=replace(p, weights=rank_w))
    lay = decode.layers(sc.model, setup.weights)
    gather = peer_time(sc.system, lay.weight_bytes, share=(n - 1) / n)

    def per_token(_point: np.ndarray, context: np.ndarray) -> np.ndarray:
        per = dict(decode.stream_times(rank, context, rank_batch))
        per["disk_read"] = decode.stream_times(setup, context, rank_batch)["disk_read"]
        per["h2d"] = per["h2d"] + gather
        step = decode.combine(per, lay, "pipeline")
        return np.stack([step, *(per[k] @ lay.count for k in decode.STREAMS)])

    # the exact mean over every generated token: the pipeline's stages are maxima of streams
    # convex and piecewise linear in the context between the windows, so their sum is too
    tpot, *streams = decode.token_mean(per_token, sc.prompt, sc.generate, lay.window)
    # prefill: the rank's own part over its link, then the all-gathers, the drive reading it all
    step_w = decode.step_weight_bytes(sc.model, setup.weights)
    link_in = step_w * w.off / n / sc.system.copy_rate("h2d", pinned=p.pinned)
    disk_in = step_w * w.disk / sc.system.storage.read_bandwidth.value
    gathers = float(np.dot(gather, lay.count))
    ttft = max(float(decode.ttft(rank, sc.prompt, rank_batch)), link_in + gathers + disk_in)
    # memory: the weights once (partitioned), every rank's cache, and each rank's gathered layers
    b_eff = rank_batch * n
    one = decode.memory(setup, sc.prompt + sc.generate, b_eff)
    staging = n * 2 * float(lay.weight_bytes.max())
    mem = decode.Memory(
        gpu=np.asarray(float(one.gpu) - float(one.staging) + staging),
        cpu=one.cpu,
        disk=one.disk,
        staging=np.asarray(staging),
    )
    base = predict_setup(sc, setup)
    return replace(
        base,
        tpot_s=float(tpot),
        ttft_s=ttft,
        streams_s={k: float(v) for k, v in zip(decode.STREAMS, streams, strict=True)},
        memory=mem,
    )


ENGINE = EngineSpec(
    name="zero-inference",
    options=Options,
    predict=predict,
    placement_option="options.weights (gpu, cpu or disk) and options.kv_offload",
    pin_option="pinned",
    refuses={
        "attention": "say options.kv_offload: true to keep the KV cache in host memory "
        "and attend on the CPU",
        "overlap": "ZeRO-Inference always prefetches the next layer (pipeline) and has "
        "no overlap option; use engine: generic to compare overlap modes",
    },
    routing_ignored=((), ""),
)
