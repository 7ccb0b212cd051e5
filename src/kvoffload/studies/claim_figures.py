"""The recomputations the article's claims name: each returns one number (s, B, B/s, a ratio)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from kvoffload.inputs.hardware import build_part, load_system
from kvoffload.inputs.models import load_model
from kvoffload.inputs.precision import kv_format, weight_format
from kvoffload.inputs.units import Dim, parse_quantity
from kvoffload.model import decode, kv, transfer
from kvoffload.studies import decode_budget


# -- recomputations: each returns one number in base units (s, B, B/s) or a plain ratio ---------
def _offloaded(system: str, model: str) -> decode.Setup:
    return decode.offloaded(load_system(system), load_model(model))


def part_figure(kind: str, ident: str, field: str) -> float:
    """Return a catalog part's figure, e.g. ('gpu', 'a100-80gb-sxm', 'memory_bandwidth')."""
    value = getattr(build_part(kind, ident), field)
    return float(value.value)


def system_figure(system: str, path: str) -> float:
    """Return a system's figure by 'part.field'."""
    part, field = path.split(".")
    return float(getattr(getattr(load_system(system), part), field).value)


def layer_kv_bytes(model: str, tokens: int, half: bool = False) -> float:
    """Return one layer's K+V bytes at ``tokens`` (or K alone with ``half``)."""
    b = kv.full_layer_bytes(load_model(model), tokens)
    return b / 2 if half else float(b)


def layer_move_time(system: str, model: str, tokens: int, tier: str) -> float:
    """Return seconds to move one layer's K+V over a tier ('gpu', 'link', 'host', 'storage')."""
    t = {x.key: x for x in transfer.tiers(load_system(system))}[tier]
    return float(t.time(layer_kv_bytes(model, tokens)))


def layer_move_ratio(system: str, model: str, tokens: int, tier: str) -> float:
    """Return a tier's time for one layer's K+V over the GPU memory's time."""
    return layer_move_time(system, model, tokens, tier) / layer_move_time(
        system, model, tokens, "gpu"
    )


def step_link_time(system: str, model: str, tokens: int, batch: int = 1) -> float:
    """Return the seconds per decode step spent copying every layer's cache to the GPU."""
    return float(decode.step(_offloaded(system, model), tokens, batch).streams["h2d"])


def per_token_link_time(system: str, model: str, all_layers: bool = True) -> float:
    """Return the link time that one cached token adds per step (all layers, or one layer)."""
    m = load_model(model)
    s = load_system(system)
    per_layer = float(kv.attention_layer_token_bytes(m)) / s.link.h2d_bandwidth.value
    return per_layer * (m.n_layers if all_layers else 1)


def layer_gpu_time(system: str, model: str, tokens: int, batch: int = 1) -> float:
    """Return one full-attention layer's GPU time (weights and cache read, or FLOPs)."""
    return float(decode.stream_times(_offloaded(system, model), tokens, batch)["gpu"][..., 0])


def layer_stall_time(system: str, model: str, tokens: int) -> float:
    """Return how long the GPU waits per layer for the next layer's cache."""
    return layer_move_time(system, model, tokens, "link") - layer_gpu_time(system, model, tokens)


def layer_link_over_gpu(system: str, model: str, tokens: int) -> float:
    """Return one layer's copy time over its GPU time."""
    return layer_move_time(system, model, tokens, "link") / layer_gpu_time(system, model, tokens)


def gpu_time_ratio(system: str, model: str, tokens: int, batch: int, base: int = 1) -> float:
    """Return how much the GPU's per-step work grows from batch ``base`` to ``batch``."""
    st = _offloaded(system, model)
    a = float(decode.step(st, tokens, base).streams["gpu"])
    b = float(decode.step(st, tokens, batch).streams["gpu"])
    return b / a


def link_time_ratio(system: str, model: str, tokens: int, batch: int, base: int = 1) -> float:
    """Return how much the per-step link time grows from batch ``base`` to ``batch``."""
    return step_link_time(system, model, tokens, batch) / step_link_time(
        system, model, tokens, base
    )


def batch_slope_changes(system: str, model: str, tokens: int, max_batch: int = 64) -> float:
    """Return how many times TPOT's slope against batch jumps (more than 5x) as HBM fills."""
    s, m = load_system(system), load_model(model)
    b = np.arange(1, max_batch + 1)
    t = decode.step(decode.spill(decode.Setup(s, m), tokens, b), tokens, b).total
    d = np.diff(t)
    jumps = d[1:] / d[:-1]
    return float(np.sum(jumps > 5))


def batch_vs_context_growth(system: str, model: str, tokens: int, batch: int = 1) -> float:
    """Return d ln(link time)/d ln(batch) over d ln(link time)/d ln(context): 1 means alike."""
    st = _offloaded(system, model)
    t0 = float(decode.step(st, tokens, batch).streams["h2d"])
    tb = float(decode.step(st, tokens, 2 * batch).streams["h2d"])
    ts = float(decode.step(st, 2 * tokens, batch).streams["h2d"])
    return math.log(tb / t0) / math.log(ts / t0)


def llamacpp_offloadable_layers(model: str) -> float:
    """Return the layers llama.cpp offers to offload: the repeating layers plus the output layer."""
    return float(load_model(model).n_layers + 1)


def llamacpp_device_crossings(model: str, n_gpu_layers: int) -> float:
    """Return how often the hidden state changes device per token with -ngl N (contiguous split)."""
    n = load_model(model).n_layers
    i_gpu_start = max(
        n + 1 - n_gpu_layers, 0
    )  # llama.cpp: layers from here on (and the output) on the GPU
    return float(0 < i_gpu_start <= n)


def harmonic_midpoint(fast: float, slow: float) -> float:
    """Return tokens/s with half the layers at each speed: times add, so rates combine harmonically."""
    return 2 / (1 / fast + 1 / slow)


def arithmetic_midpoint(fast: float, slow: float) -> float:
    """Return the average of two rates."""
    return (fast + slow) / 2


def nvme_random_share(storage: str, request: str, queue_depth: int) -> float:
    """Return effective random-read bandwidth at a request size and queue depth over sequential."""
    st = build_part("storage", storage)
    size = parse_quantity(request, Dim.BYTES)
    return float(transfer.nvme_bandwidth(st, size, queue_depth) / st.read_bandwidth.value)


def weight_bytes(model: str, precision: str) -> float:
    """Return a model's weight bytes in a format."""
    return float(load_model(model).weight_bytes(weight_format(precision)).total)


def kv_ratio(model: str, fmt: str) -> float:
    """Return a KV format's bytes over bf16's."""
    m = load_model(model)
    return kv.bytes_per_token(m, kv_format(fmt)) / kv.bytes_per_token(m)


def tpot(
    system: str,
    model: str,
    tokens: int,
    batch: int = 1,
    overlap: str = "none",
    kv_on_gpu: bool = False,
    generate: int = 1,
) -> float:
    """Return TPOT (s, ``decode.tpot``) after ``tokens`` with all KV in host memory (or on the GPU)."""
    s, m = load_system(system), load_model(model)
    st = decode.Setup(s, m) if kv_on_gpu else decode.offloaded(s, m, overlap)
    return float(decode.tpot(st, tokens, generate, batch, overlap))


def tpot_w4_change(system: str, model: str, tokens: int, generate: int = 1) -> float:
    """Return TPOT with int4 weights over TPOT with bf16 weights, everything on the GPU."""
    s, m = load_system(system), load_model(model)
    w4 = decode.Setup(s, m, weight_format("int4"))
    return float(
        decode.tpot(w4, tokens, generate) / decode.tpot(decode.Setup(s, m), tokens, generate)
    )


def max_context(system: str, model: str, budget: str, batch: int = 1) -> float:
    """Return the longest context (tokens) whose TPOT meets a budget and fits, all KV in host memory."""
    budget_s = parse_quantity(budget, Dim.TIME)
    return float(decode_budget.longest_within(_offloaded(system, model), budget_s, batch))


def storage_step_time(system: str, model: str, tokens: int) -> float:
    """Return the seconds to read every layer's cache from storage once (KV on NVMe)."""
    s, m = load_system(system), load_model(model)
    return float(kv.request_bytes(m, tokens)) / s.storage.read_bandwidth.value


def hbm_kv_time(system: str, model: str, tokens: int) -> float:
    """Return the seconds for the GPU to read the whole cache from its own memory."""
    s, m = load_system(system), load_model(model)
    return float(kv.request_bytes(m, tokens)) / s.gpu.memory_bandwidth.value


def link_over_hbm(system: str, model: str, tokens: int) -> float:
    """Return the link time of the whole cache over the GPU memory's time for it."""
    return step_link_time(system, model, tokens) / hbm_kv_time(system, model, tokens)


def model_layers(model: str) -> float:
    """Return the number of repeating layers."""
    return float(load_model(model).n_layers)


def link_time_at(model: str, tokens: int, rate: str) -> float:
    """Return the seconds to copy one request's whole cache at a given link rate."""
    return float(kv.request_bytes(load_model(model), tokens)) / parse_quantity(rate, Dim.BANDWIDTH)


def link_over_hbm_at(system: str, model: str, tokens: int, rate: str) -> float:
    """Return the copy time of the whole cache at ``rate`` over the GPU memory's time for it."""
    return link_time_at(model, tokens, rate) / hbm_kv_time(system, model, tokens)


def layer_attention_time(system: str, model: str, tokens: int, batch: int = 1) -> float:
    """Return one full-attention layer's attention alone on the GPU: read its K and V, or its FLOPs.

    The article's "attention of one layer" (0.25 ms at 128K): the layer's weights are not in it.
    """
    s, m = load_system(system), load_model(model)
    lay = decode.layers(m, weight_format("bf16"))
    read = batch * kv.full_layer_bytes(m, tokens) / s.gpu.attention_rate
    flops = batch * float(np.max(lay.attn_flops)) * tokens / s.compute_rate
    return float(max(read, flops))


def layer_link_over_attention(system: str, model: str, tokens: int) -> float:
    """Return one layer's copy over the link over that layer's attention time on the GPU."""
    return layer_move_time(system, model, tokens, "link") / layer_attention_time(
        system, model, tokens
    )


def step_flops(model: str, tokens: int, batch: int = 1) -> float:
    """Return one decode step's FLOPs over every layer and the head: matmuls plus attention."""
    lay = decode.layers(load_model(model), weight_format("bf16"))
    per_token = lay.dense_flops + lay.attn_flops * np.minimum(tokens, lay.window)
    return float(batch * (per_token @ lay.count))


def flops_ratio(model: str, tokens: int, batch: int, base: int = 1) -> float:
    """Return how much a decode step's FLOPs (연산량) grow from batch ``base`` to ``batch``."""
    return step_flops(model, tokens, batch) / step_flops(model, tokens, base)


def copy_per_token_ratio(system: str, model: str, tokens: int, batch: int) -> float:
    """Return the link time per generated token at ``batch`` over that at batch 1 (cache in host memory).

    1 means batching does not share the copy out: each request brings its own cache.
    """
    return (
        step_link_time(system, model, tokens, batch) / batch / step_link_time(system, model, tokens)
    )


def cpu_attention_layer_bytes(model: str, batch: int = 1) -> float:
    """Return the bytes one layer moves over the link per step when attention runs beside the cache.

    The query goes to the CPU with the new token's K and V, the attention output comes back
    (FlexGen ``--cpu``, ZeRO-Inference's KV offload); the cache itself does not cross.
    """
    m = load_model(model)
    lay = decode.layers(m, weight_format("bf16"))
    return float(batch * (lay.qo_bytes + kv.attention_layer_token_bytes(m)))


def system_ratio(system: str, num: str, den: str) -> float:
    """Return one system figure over another, each given as 'part.field'."""
    return system_figure(system, num) / system_figure(system, den)


def tpot_penalty(
    system: str, model: str, tokens: int, weights: str = "bf16", kv_fmt: str = "bf16", base: int = 0
) -> float:
    """Return how much slower TPOT gets with a format (or ``tokens`` instead of ``base``), 0 if faster.

    Everything on the GPU; a penalty is TPOT over the bf16 TPOT (at ``base`` tokens when given),
    less one, and never below zero: a change that speeds decode up carries no penalty.
    """
    s, m = load_system(system), load_model(model)
    variant = decode.Setup(s, m, weight_format(weights), kv_format(kv_fmt))
    ratio = decode.tpot(variant, tokens, 1) / decode.tpot(decode.Setup(s, m), base or tokens, 1)
    return float(max(ratio - 1, 0.0))


def storage_context_within(system: str, model: str, budget: str) -> float:
    """Return the longest context (tokens) whose whole cache storage reads once within ``budget``."""
    s, m = load_system(system), load_model(model)
    budget_s = parse_quantity(budget, Dim.TIME)
    return float(budget_s * s.storage.read_bandwidth.value / kv.request_bytes(m, 1))


def model_positions(model: str) -> float:
    """Return the longest context a model is built for (its max_position_embeddings)."""
    return float(load_model(model).max_positions)


FUNCTIONS: dict[str, Callable[..., float]] = {
    f.__name__: f
    for f in (
        part_figure, system_figure, layer_kv_bytes, layer_move_time, layer_move_ratio, step_link_time,
        per_token_link_time, layer_gpu_time, layer_stall_time, layer_link_over_gpu, gpu_time_ratio,
        link_time_ratio, batch_slope_changes, batch_vs_context_growth, llamacpp_offloadable_layers,
        llamacpp_device_crossings, harmonic_midpoint, arithmetic_midpoint, nvme_random_share,
        weight_bytes, kv_ratio, tpot, tpot_w4_change, max_context, storage_step_time, hbm_kv_time,
        link_over_hbm, model_layers, link_time_at, link_over_hbm_at, layer_attention_time,
        layer_link_over_attention, step_flops, flops_ratio, copy_per_token_ratio,
        cpu_attention_layer_bytes, system_ratio, tpot_penalty, storage_context_within,
        model_positions,
    )
}  # fmt: skip
