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

import numpy as np

from kvoffload.engines.vllm_weight_offload import layer_parameters
from kvoffload.model.prediction import Scenario


def offloaded_layers(n_layers: int, group_size: int, num_in_group: int) -> np.ndarray:
    """Return, per decoder layer, whether the group pattern offloads it."""
    i = np.arange(n_layers)
    return (
        (i % group_size) >= group_size - num_in_group
        if group_size > 0
        else np.zeros(n_layers, bool)
    )


def matches(name: str, segments: tuple[str, ...]) -> bool:
    """Return whether a parameter's dotted name holds one of the segments (vLLM's rule)."""
    return any(f".{p}." in f".{name}." for p in segments)


def layer_bytes(sc: Scenario, segments: tuple[str, ...]) -> np.ndarray:
    """Return each decoder layer's bytes the offloader would move (one GPU's share), by segments."""
    per_layer = []
    for layer in layer_parameters(sc.model, sc.setup.weights):
        per_layer.append(sum(b for name, b in layer if not segments or matches(name, segments)))
    return np.array(per_layer, dtype=np.float64) / sc.system.gpu.count


def plan(sc: Scenario) -> tuple[np.ndarray, np.ndarray]:
    """Return (the layers offloaded, the bytes each moves per pass: zero where not offloaded)."""
    o = sc.options
    bytes_ = layer_bytes(sc, tuple(o.offload_params))
    chosen = offloaded_layers(sc.model.n_layers, o.offload_group_size, o.offload_num_in_group)
    chosen &= bytes_ > 0  # a layer with no matching parameter is skipped
    return chosen, np.where(chosen, bytes_, 0.0)


def _moved(sc: Scenario) -> list[float]:
    """Return the bytes of every parameter the offloader moves, one GPU's share."""
    o = sc.options
    chosen, _ = plan(sc)
    layers = layer_parameters(sc.model, sc.setup.weights)
    segments = tuple(o.offload_params)
    return [
        b / sc.system.gpu.count
        for i in np.flatnonzero(chosen)
        for name, b in layers[i]
        if not segments or matches(name, segments)
    ]


def copies(sc: Scenario) -> np.ndarray:
    """Return, per decoder layer, the parameters copied to the GPU each pass (one copy each)."""
    o = sc.options
    chosen, _ = plan(sc)
    segments = tuple(o.offload_params)
    layers = layer_parameters(sc.model, sc.setup.weights)
    return np.array(
        [
            sum(1 for name, _ in layer if not segments or matches(name, segments)) if on else 0
            for layer, on in zip(layers, chosen, strict=True)
        ],
        dtype=np.float64,
    )


def host_bytes(sc: Scenario, *, pinned: bool) -> tuple[float, float]:
    """Return (bytes moved to host memory, host bytes they take) on one GPU: pinned, each
    parameter rounded up to a power of two by PyTorch's caching host allocator (as UVA's)."""
    moved = np.array(_moved(sc), dtype=np.float64)
    if not pinned or not moved.size:
        return float(moved.sum()), float(moved.sum())
    rounded = 2.0 ** np.ceil(np.log2(np.maximum(moved, 1.0)))
    return float(moved.sum()), float(rounded.sum())


def buffer_bytes(sc: Scenario) -> float:
    """Return the GPU bytes of the static buffer pool: ``step`` slots of each offloaded
    parameter (one per name, the largest of the layers)."""
    o = sc.options
    chosen, _ = plan(sc)
    widest: dict[str, float] = {}
    layers = layer_parameters(sc.model, sc.setup.weights)
    for i in np.flatnonzero(chosen):
        for name, b in layers[i]:
            if not o.offload_params or matches(name, tuple(o.offload_params)):
                widest[name] = max(widest.get(name, 0.0), b)
    return o.offload_prefetch_step * sum(widest.values()) / sc.system.gpu.count


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
