"""vLLM's prefetch offloading (``--offload-group-size``): whole layers copied ahead of their turn.

``PrefetchOffloader`` (vllm-project/vllm vllm/model_executor/offloader/prefetch.py at
04db319915b0b83919a1dd90512f49b0359655b2, adapted from SGLang's offloader; its options in
vllm/config/offload.py at 00593fa7a4832bdabac6fcd06c1710d13c462fbf, chosen by ``offload_backend``
"auto" wherever ``offload_group_size`` > 0):

- **Which.** Of the decoder layers ``make_layers`` hands it, layer ``i`` is offloaded where
  ``i % offload_group_size >= offload_group_size - offload_num_in_group`` (the last
  ``num_in_group`` of every group: 8 and 2 give 6, 7, 14, 15, ...). Of such a layer, every
  parameter, or with ``offload_params`` those whose dotted name holds one of its segments
  (``f".{p}." in f".{name}."``: ``experts`` matches ``mlp.experts.w13_weight``, ``w13`` does not);
  a layer none of whose parameters match is not offloaded. The parameters live in pinned host
  memory.
- **The buffers.** ``offload_prefetch_step`` slots of every offloaded parameter (by name, shape and
  dtype) on the GPU; offloaded layer ``j`` uses slot ``j % step``.
- **The schedule, every forward pass.** Before offloaded layer ``j`` runs, the compute stream waits
  for its copy; after it runs, the copy of offloaded layer ``(j + step) % M`` into the slot it
  freed is queued on the one copy stream (H2D, at the pinned rate, the whole parameters: every
  expert of a MoE layer). The first ``step`` copies of a pass are queued by the previous pass's
  last offloaded layers.

The pass is simulated layer by layer: ``end(l) = max(end(l - 1), copied(j)) + t(l)`` where ``l``
is offloaded layer ``j``, ``copied(j) = max(queued(j), copied(j - 1)) + c(j)``, with ``queued``
the end of the layer that queues it. A copy queued in the previous pass counts from that pass's
compute after the layer that queued it (taken as this pass's), and the copy stream as free from
the start of the previous pass's last offloaded layer: bounds that never make a copy earlier than
it runs; and a pass is never shorter than the copy stream's work, every copy once. The copies
are taken in layer order, as they queue wherever ``step`` is at most the offloaded layers' count
(above it, vLLM's circular index queues them out of order: approximated). Every term is a sum or maximum of terms linear in the context: the pass stays convex and
piecewise linear, as ``decode.token_mean`` needs.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from kvoffload.engines.vllm_weight_offload import layer_parameters, matches, pinned_bytes
from kvoffload.inputs.precision import WeightFormat
from kvoffload.model import decode
from kvoffload.model.prediction import Prediction, Scenario
from kvoffload.model.transfer import all_reduce_time, gather_time, link_time


def offloaded_layers(n_layers: int, group_size: int, num_in_group: int) -> np.ndarray:
    """Return, per decoder layer, whether the group pattern offloads it."""
    i = np.arange(n_layers)
    return (
        (i % group_size) >= group_size - num_in_group
        if group_size > 0
        else np.zeros(n_layers, bool)
    )


Segments = tuple[tuple[str, ...], ...]  # per decoder layer: the parameter segments it moves


def vllm_segments(sc: Scenario) -> Segments:
    """Return vLLM's choice per layer: ``offload_params`` for every layer (empty: all)."""
    return (tuple(sc.options.offload_params),) * sc.model.n_layers


def _chosen(sc: Scenario, segments: Segments) -> list[list[tuple[str, float]]]:
    """Return each decoder layer's offloaded (name, bytes) parameters, one GPU's share."""
    o, count = sc.options, sc.system.gpu.count
    pattern = offloaded_layers(sc.model.n_layers, o.offload_group_size, o.offload_num_in_group)
    layers = layer_parameters(sc.model, sc.setup.weights)
    return [
        [(n, b / count) for n, b in layer if not seg or matches(n, seg)] if on else []
        for layer, on, seg in zip(layers, pattern, segments, strict=True)
    ]


def plan(sc: Scenario, segments: Segments) -> tuple[np.ndarray, np.ndarray]:
    """Return (the layers offloaded, the bytes each moves per pass: zero where not offloaded);
    a layer none of whose parameters match is skipped."""
    moved = np.array([sum(b for _, b in layer) for layer in _chosen(sc, segments)])
    return moved > 0, moved


def copies(sc: Scenario, segments: Segments) -> np.ndarray:
    """Return, per decoder layer, the parameters copied to the GPU each pass (one copy each)."""
    return np.array([len(layer) for layer in _chosen(sc, segments)], dtype=np.float64)


def host_bytes(sc: Scenario, segments: Segments, *, pinned: bool) -> tuple[float, float]:
    """Return (bytes moved to host memory, host bytes they take) on one GPU: pinned, each
    parameter rounded up to a power of two by PyTorch's caching host allocator (as UVA's)."""
    moved = np.array([b for layer in _chosen(sc, segments) for _, b in layer], dtype=np.float64)
    held = pinned_bytes(moved) if pinned else moved
    return float(moved.sum()), float(held.sum())


def buffer_bytes(sc: Scenario, segments: Segments, slots: int) -> float:
    """Return the GPU bytes of ``slots`` copies of each offloaded parameter (by name, the largest
    of the layers): vLLM's static pool has ``step`` slots; SGLang keeps a layer's tensors from
    their copy to the end of its forward, ``step + 1`` at most."""
    widest: dict[str, float] = {}
    for layer in _chosen(sc, segments):
        for name, b in layer:
            widest[name] = max(widest.get(name, 0.0), b)
    return slots * sum(widest.values())


def pass_seconds(layer_s: np.ndarray, copy_s: np.ndarray, step: int) -> np.ndarray:
    """Return the forward pass's seconds from each decoder layer's compute (``layer_s``, layers
    last, any leading shape) and each layer's copy (``copy_s``; zero: not offloaded)."""
    n = layer_s.shape[-1]
    where = np.flatnonzero(copy_s > 0)
    m = len(where)
    total = layer_s.sum(axis=-1)
    if m == 0:
        return total
    after = total[..., None] - np.cumsum(layer_s, axis=-1)  # compute after each layer ends
    ends: list[np.ndarray] = []
    # the copy stream, free from the start of the previous pass's last offloaded layer
    free = -(after[..., where[-1]] + layer_s[..., where[-1]])
    end = np.zeros_like(total)
    j = 0
    for li in range(n):
        if j < m and li == where[j]:
            # queued after offloaded layer i = (j - step) mod m ran: in this pass where it comes
            # first, else in the previous one, that pass's compute after it still to run
            i = (j - step) % m
            queued = ends[where[i]] if i < j else -after[..., where[i]]
            free = np.maximum(queued, free) + copy_s[li]
            end = np.maximum(end, free)  # the layer waits for its copy
            j += 1
        end = end + layer_s[..., li]
        ends.append(end)
    # the one copy stream moves every offloaded layer once a pass: a pass is never shorter
    return np.maximum(end, copy_s.sum())


def with_prefetch(
    sc: Scenario,
    setup: decode.Setup,
    pred: Prediction,
    segments: Segments,
    tp: int = 1,
    chunk_tokens: int | None = None,
) -> Prediction:
    """Return the prediction with the offloader's copies in every forward pass: each decode step
    one pass, each prefill chunk of ``chunk_tokens`` one; ``setup``: all weights on the GPU,
    ``pred`` its prediction; ``tp`` GPUs in one tensor-parallel group (two all-reduces a layer)."""
    system, model, o = sc.system, sc.model, sc.options
    lay = decode.layers(model, setup.weights)
    order = np.array(lay.order[: model.n_layers])
    head = len(lay.count) - 1
    _, moved = plan(sc, segments)
    pinned = sc.pinned_or(True)
    copy_s = np.where(
        moved > 0,
        link_time(system, moved, "h2d", transfers=copies(sc, segments), pinned=pinned),
        0.0,
    )
    hidden = sc.batch * model.hidden * (4 if setup.weights is WeightFormat.FP32 else 2)
    comm = 2 * all_reduce_time(system, hidden, tp) if tp > 1 else 0.0
    tail = gather_time(system, sc.batch * model.vocab * 2, tp) if tp > 1 else 0.0
    step = o.offload_prefetch_step

    def per_token(_point: np.ndarray, context: np.ndarray) -> np.ndarray:
        gpu = decode.stream_times(setup, context, sc.batch)["gpu"] / tp
        one = pass_seconds(gpu[..., order] + comm, copy_s, step)
        return np.stack([one + gpu[..., head] + tail, gpu @ lay.count])

    tpot, gpu_s = decode.token_mean(per_token, sc.prompt, sc.generate, lay.window)
    # prefill: each chunk's pass, its compute shared evenly among the layers, the same copies
    chunks = -(-sc.prompt * sc.batch // (chunk_tokens or sc.prompt * sc.batch))
    per_chunk = np.full(model.n_layers, pred.ttft_s / chunks / model.n_layers)
    ttft = chunks * float(pass_seconds(per_chunk, copy_s, step))
    streams = dict(pred.streams_s)
    streams["gpu"] = float(gpu_s)
    streams["h2d"] = float(copy_s.sum())
    return replace(pred, tpot_s=float(tpot), ttft_s=ttft, streams_s=streams)
