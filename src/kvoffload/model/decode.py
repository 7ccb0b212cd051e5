"""One decode step, layer by layer, and the time per output token over a growing context.

Each layer's work is split into six streams: GPU (a roofline over the bytes it reads from its own
memory and the FLOPs at the dense peak times an efficiency from the profile), CPU (attention over
host-resident KV), host→GPU and GPU→host copies over the link, and disk reads and writes. The
overlap mode says how the streams combine into a step. Layers that are alike (same window, same
weights) are computed once as a class, so sweeps over context × batch stay cheap.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache

import numpy as np
from numpy.typing import ArrayLike

from kvoffload.model import capacity, cpu_rate, kv, tensor_groups, working_memory
from kvoffload.model.routing import Routing, touched_share
from kvoffload.model.search import largest_true, largest_true_linear
from kvoffload.model.transfer import link_time
from kvoffload.spec.hardware import System
from kvoffload.spec.models import Model
from kvoffload.spec.precision import KvFormat, WeightFormat

OVERLAP_MODES = ("none", "perfect", "pipeline", "flexgen")
STREAMS = ("gpu", "cpu", "h2d", "d2h", "disk_read", "disk_write")
STREAM_NAMES = {
    "gpu": "GPU compute and memory",
    "cpu": "CPU work (attention over host-resident KV, CPU-side layers)",
    "h2d": "host→GPU link",
    "d2h": "GPU→host link",
    "disk_read": "disk reads",
    "disk_write": "disk writes",
}


@dataclass(frozen=True)
class Split:
    """Shares of something (weights or KV cache) on the GPU, in host memory and on disk."""

    gpu: float = 1.0
    cpu: float = 0.0
    disk: float = 0.0

    @property
    def off(self) -> float:
        """Return the share that is not on the GPU."""
        return self.cpu + self.disk


@dataclass(frozen=True)
class GroupPlacement:
    """Where one tensor group lives and where it is computed.

    ``compute`` 'gpu': the off-GPU share is copied to the GPU each step (whole modules) and run
    there; 'cpu': the off-GPU share is computed where it lies (host memory, or read from disk into
    it), the activations crossing the link to the CPU and back.
    """

    group: str
    tier: Split
    compute: str = "gpu"

    def __post_init__(self) -> None:
        if self.group not in tensor_groups.GROUPS:
            raise ValueError(f"group must be one of {tensor_groups.GROUPS}, got {self.group!r}")
        if self.compute not in ("gpu", "cpu"):
            raise ValueError(f"compute must be 'gpu' or 'cpu', got {self.compute!r}")


@dataclass(frozen=True)
class Placement:
    """Where weights and KV live, where attention over offloaded KV runs, how streams overlap.

    ``groups`` places tensor groups one by one (the rest stay on the GPU); ``weights`` is then
    the byte-weighted whole, which the memory and the prefill use.
    """

    weights: Split = field(default_factory=Split)
    kv: Split = field(default_factory=Split)
    attention: str = "gpu"  # 'gpu': stream offloaded KV over the link; 'cpu': attend where it lies
    overlap: str = "none"
    pinned: bool = True
    groups: tuple[GroupPlacement, ...] = ()

    def __post_init__(self) -> None:
        if self.attention not in ("gpu", "cpu"):
            raise ValueError(f"attention must be 'gpu' or 'cpu', got {self.attention!r}")
        if self.overlap not in OVERLAP_MODES:
            raise ValueError(f"overlap must be one of {OVERLAP_MODES}, got {self.overlap!r}")


def by_groups(
    model: Model, fmt: WeightFormat, groups: tuple[GroupPlacement, ...], **rest: object
) -> Placement:
    """Return a placement of tensor groups, its whole-model weight shares weighted by bytes."""
    table = tensor_groups.tensor_table(model, fmt)
    per_group = table.by_group(table.nbytes)
    share = {g.group: g.tier for g in groups}
    total = float(per_group.sum())
    tiers = np.zeros(3)
    for i, name in enumerate(tensor_groups.GROUPS):
        s = share.get(name, Split())
        tiers += per_group[i] * np.array([s.gpu, s.cpu, s.disk])
    gpu, cpu, disk = (tiers / total) if total else (1.0, 0.0, 0.0)
    return Placement(weights=Split(float(gpu), float(cpu), float(disk)), groups=groups, **rest)


@dataclass(frozen=True)
class Setup:
    """Everything a step depends on except the context and the batch."""

    system: System
    model: Model
    weights: WeightFormat = WeightFormat.BF16
    kv: KvFormat = KvFormat.BF16
    placement: Placement = field(default_factory=Placement)
    # KV heads the engine stores per layer, where it expands grouped heads (None: the model's own)
    kv_heads_stored: int | None = None
    routing: Routing = field(default_factory=Routing)  # MoE routing skew and expert streaming

    @property
    def cache_model(self) -> Model:
        """Return the model as its cache is stored (with expanded KV heads, if the engine does)."""
        if self.kv_heads_stored is None or self.kv_heads_stored == self.model.n_kv_heads:
            return self.model
        return replace(self.model, n_kv_heads=self.kv_heads_stored)

    def with_overlap(self, overlap: str) -> Setup:
        """Return the same setup with another overlap mode."""
        p = self.placement
        return replace(self, placement=Placement(p.weights, p.kv, p.attention, overlap, p.pinned))


def offloaded(system: System, model: Model, overlap: str = "none") -> Setup:
    """Return the setup with every KV byte in host memory and attention on the GPU (the article's case)."""
    return Setup(system, model, placement=Placement(kv=Split(0, 1, 0), overlap=overlap))


@dataclass(frozen=True)
class Layers:
    """The model's layers grouped into classes of identical layers, plus the output head."""

    count: np.ndarray  # layers in each class
    order: tuple[int, ...]  # the class of each position, embedding-free, head last
    window: np.ndarray  # tokens a layer holds at most (inf: full attention; head, recurrent: 0)
    kv_per_token: np.ndarray  # bytes one token adds to one layer's cache
    weight_bytes: np.ndarray  # bytes of one layer's weights
    expert_bytes: np.ndarray  # of which routed experts
    dense_flops: np.ndarray  # FLOPs per token through the matmuls (active experts only)
    attn_flops: np.ndarray  # FLOPs per token per cached position
    qo_bytes: int  # query out + attention output back, per token, when the CPU attends
    expert_use: tuple[int, int]  # (experts per token, experts) or (1, 1)
    # values of fixed state one request keeps in one layer (gated DeltaNet, Mamba; else 0),
    # scaled by the KV format's state bytes per value in stream_times: a step reads it and
    # writes it back once per request, whatever the context
    state_values: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # bytes and parameters of one layer of each class, per tensor group (tensor_groups.GROUPS)
    group_bytes: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    group_params: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))


@cache
def layers(model: Model, weights: WeightFormat) -> Layers:
    """Return the model's layer classes for a weight format."""
    wb = model.weight_bytes(weights)
    per_layer_expert = np.zeros(model.n_layers)
    per_layer_params = np.zeros(model.n_layers)
    per_layer_expert_params = np.zeros(model.n_layers)
    head_params = 0
    for t in model.tensors():
        if t.layer is None:
            if t.role == "output" or (t.role == "embed" and model.tie_embeddings):
                head_params += t.params
            continue
        per_layer_params[t.layer] += t.params
        if t.role.startswith("exp_"):
            per_layer_expert_params[t.layer] += t.params
    if model.moe:
        # the routed experts' own bytes: a format may store them apart (gpt-oss: MXFP4 experts,
        # 16-bit attention)
        per_layer_expert = np.asarray(wb.experts, dtype=np.float64)
    k, n = (model.moe.experts_per_token, model.moe.n_experts) if model.moe else (1, 1)
    active_params = per_layer_params - per_layer_expert_params * (1 - k / n)
    attn = 2 * model.n_heads * (model.head_dim + model.v_head_dim)
    if model.mla:  # absorbed MLA attends over the latent
        attn = 2 * model.n_heads * (2 * model.mla.kv_lora_rank + model.mla.qk_rope_head_dim)
    spans = model.windows  # 0 for a recurrent layer: it caches no token
    attends = model.attention_layers
    state = model.state_values_per_layer()
    keys = [
        (
            float(spans[i]),
            float(wb.per_layer[i]),
            float(per_layer_expert[i]),
            float(active_params[i]),
            float(state[i]),
            float(attends[i]),
        )
        for i in range(model.n_layers)
    ]
    unique = list(dict.fromkeys(keys))
    order = [unique.index(key) for key in keys]
    # tied embeddings: the output projection reads the embedding table, every step
    head_bytes = wb.output + (wb.embedding if model.tie_embeddings else 0)
    head = (0.0, float(head_bytes), 0.0, float(head_params), 0.0, 0.0)
    unique.append(head)
    order.append(len(unique) - 1)
    arr = np.array(unique)
    count = np.bincount(order, minlength=len(unique)).astype(float)
    attention = arr[:, 5] > 0  # the head and recurrent layers cache no token and attend over none
    group_bytes, group_params = _class_rows(model, weights, order)
    # A recurrent layer's per-token work on its state (a few FLOPs per state value) is left out:
    # beside its matmuls it is small, and its state traffic (state_values) bounds it first.
    return Layers(
        count=count,
        order=tuple(order),
        window=arr[:, 0],
        kv_per_token=np.where(attention, 1.0, 0.0),  # scaled by the KV format in stream_times
        weight_bytes=arr[:, 1],
        # routed experts' bytes, their per-expert biases included (read per touched expert)
        expert_bytes=group_bytes[:, tensor_groups.GROUPS.index("experts")],
        dense_flops=2 * arr[:, 3],
        attn_flops=np.where(attention, float(attn), 0.0),
        qo_bytes=2 * 2 * model.n_heads * model.v_head_dim,
        expert_use=(k, n),
        state_values=arr[:, 4],
        group_bytes=group_bytes,
        group_params=group_params,
    )


def _class_rows(model: Model, weights: WeightFormat, order: list[int]) -> tuple[np.ndarray, ...]:
    """Return per-class rows of the position x group bytes and parameters (a class's first layer)."""
    nbytes, params = tensor_groups.position_groups(model, weights)
    first = [order.index(c) for c in range(max(order) + 1)]
    return nbytes[first], params[first]


@cache
def _classes_first(model: Model, weights: WeightFormat, ndim: int) -> Layers:
    """Return the layer classes with their per-class rows on a leading axis, then ``ndim`` of size 1.

    Elementwise work over a sweep runs several times faster when the class axis (a handful of
    classes) is not the innermost one; combine and _stream_times take either layout.
    """
    lay = layers(model, weights)
    col = (1,) * ndim
    return replace(
        lay,
        **{
            name: getattr(lay, name).reshape(len(lay.count), *col, *getattr(lay, name).shape[1:])
            for name in (
                "window", "kv_per_token", "weight_bytes", "expert_bytes", "dense_flops",
                "attn_flops", "state_values", "group_bytes", "group_params",
            )
        },
    )  # fmt: skip


@dataclass(frozen=True)
class WeightTraffic:
    """One step's weight work per layer class: bytes each side reads, FLOPs, copies, hand-overs."""

    gpu_bytes: np.ndarray  # weight bytes the GPU reads from its memory
    cpu_bytes: np.ndarray  # weight bytes CPU-side matmuls read from host memory
    gpu_flops: np.ndarray
    cpu_flops: np.ndarray
    moved: np.ndarray  # bytes copied host -> GPU (streamed modules)
    from_disk: np.ndarray  # weight bytes read from disk
    hand_overs: np.ndarray  # activation copies each way (CPU-computed groups)


def weight_traffic(setup: Setup, lay: Layers, b: np.ndarray) -> WeightTraffic:
    """Return each class's weight traffic for ``b`` requests (a trailing class axis).

    Routed experts are read only for the experts the batch touches; a streamed group moves
    whole, every expert included.
    """
    p = setup.placement
    k, n = lay.expert_use
    r = setup.routing
    # distinct routed experts the batch reads (a dense model has none: the share multiplies 0)
    active = touched_share(n, k, b, r.effective_experts) if (k, n) != (1, 1) else 1.0
    if not p.groups and r.stream == "all":
        w = p.weights
        read = lay.weight_bytes - lay.expert_bytes + lay.expert_bytes * active
        zero = np.zeros_like(lay.weight_bytes)
        return WeightTraffic(
            read, zero, b * lay.dense_flops, zero, lay.weight_bytes * w.off,
            lay.weight_bytes * w.disk, zero,
        )  # fmt: skip
    experts = tensor_groups.GROUPS.index("experts")
    placed = {g.group: g for g in p.groups}
    gpu_b = cpu_b = gpu_f = cpu_f = moved = disk = 0.0
    crossing = np.zeros_like(lay.weight_bytes)
    for i, name in enumerate(tensor_groups.GROUPS):
        full = lay.group_bytes[..., i]
        if not np.any(full):
            continue
        # groups not placed one by one: on the GPU beside placed groups, else the whole split
        g = placed.get(name, GroupPlacement(name, Split() if p.groups else p.weights))
        read = full * active if i == experts else full
        flops = 2 * b * lay.group_params[..., i] * ((k / n) if i == experts else 1.0)
        off = g.tier.cpu + g.tier.disk
        disk = disk + full * g.tier.disk
        if g.compute == "gpu":
            # a streamed group moves whole, unless the engine fetches only the routed experts it
            # needs (and finds some in a GPU expert cache)
            copied = read * (1 - r.gpu_hit_rate) if i == experts and r.stream == "routed" else full
            gpu_b, gpu_f, moved = gpu_b + read, gpu_f + flops, moved + copied * off
        else:
            gpu_b, gpu_f = gpu_b + read * g.tier.gpu, gpu_f + flops * g.tier.gpu
            cpu_b, cpu_f = cpu_b + read * off, cpu_f + flops * off
            crossing = np.maximum(crossing, np.where(full * off > 0, 1.0, 0.0))
    shape = np.broadcast(b, lay.weight_bytes).shape
    arr = lambda x: np.broadcast_to(np.asarray(x, dtype=np.float64), shape)  # noqa: E731
    return WeightTraffic(
        arr(gpu_b), arr(cpu_b), arr(gpu_f), arr(cpu_f), arr(moved), arr(disk), arr(crossing)
    )


def _kv_token_bytes(model: Model, fmt: KvFormat) -> float:
    return float(kv.attention_layer_token_bytes(model, fmt))  # one attention layer's, per token


def stream_times(setup: Setup, context: ArrayLike, batch: ArrayLike) -> dict[str, np.ndarray]:
    """Return each stream's seconds per layer class, shape broadcast(context, batch) + (classes,)."""
    return _stream_times(setup, context, batch, dense=True)


def _full(x: ArrayLike, shape: tuple[int, ...]) -> np.ndarray:
    """Return ``x`` as a C-contiguous array of ``shape`` (a copy unless it already is one)."""
    if isinstance(x, np.ndarray) and x.shape == shape and x.flags.c_contiguous:
        return x
    out = np.empty(shape)
    out[...] = x
    return out


def _view(x: ArrayLike, shape: tuple[int, ...]) -> np.ndarray:
    """Return ``x`` broadcast to ``shape`` (itself when it has that shape)."""
    return x if isinstance(x, np.ndarray) and x.shape == shape else np.broadcast_to(x, shape)


def _any(x: ArrayLike) -> bool:
    """Return whether any element of ``x`` is nonzero (an array or a number)."""
    return bool(x.any()) if isinstance(x, np.ndarray) else bool(x)


def _stream_times(
    setup: Setup, context: ArrayLike, batch: ArrayLike, *, dense: bool, lay: Layers | None = None
) -> dict[str, np.ndarray]:
    """Return stream_times; ``dense``: the streams that may vary with the context as full arrays.

    A matmul over a broadcast view may round differently from one over a full array, so the
    public stream_times keeps the layouts it has always returned; sweeps that only combine the
    streams skip the copies. ``lay``: the layer classes (see _classes_first), else the model's.
    """
    sysm, p = setup.system, setup.placement
    lay = lay or layers(setup.model, setup.weights)
    s = np.asarray(context, dtype=np.float64)[..., None]
    b = np.asarray(batch, dtype=np.float64)[..., None]
    kvb = lay.kv_per_token * _kv_token_bytes(setup.cache_model, setup.kv)
    held = np.minimum(s, lay.window)
    gpu_attends = p.attention == "gpu"
    # a recurrent layer's fixed state: read once per request and step, and written back (when
    # the GPU runs the layer, an offloaded state goes back over the link like a new token's KV)
    state = b * lay.state_values * kv.state_value_bytes(setup.kv)
    kv_layer = b * held * kvb + state
    new_kv = b * kvb + (state if gpu_attends else 0.0)
    # KV shares may be arrays over the sweep (see spill); give them the class axis
    c = Split(
        *(np.asarray(x, dtype=np.float64)[..., None] for x in (p.kv.gpu, p.kv.cpu, p.kv.disk))
    )

    wt = weight_traffic(setup, lay, b)
    hbm, att_bw = sysm.gpu.streaming_bandwidth, sysm.gpu.attention_rate
    peak = sysm.compute_rate
    # terms that are 0 (or a share that is 1) are left out below: the same values, fewer passes
    kv_off = _any(c.off)
    attn_held = b * lay.attn_flops * held
    kv_rw = kv_layer + state  # the GPU reads the KV and the state, and writes the state back
    if gpu_attends:
        gpu_flops = wt.gpu_flops + attn_held
        kv_read = kv_rw / att_bw
    else:
        gpu_flops = wt.gpu_flops + attn_held * c.gpu
        kv_read = kv_rw * c.gpu / att_bw
    gpu = np.maximum(wt.gpu_bytes / hbm + kv_read, gpu_flops / peak)

    cpu: np.ndarray | float = 0.0
    cpu_attends = (not gpu_attends) and kv_off
    if cpu_attends:
        host_bw = sysm.host.memory_bandwidth.value
        cpu = np.maximum(kv_layer * c.off / host_bw, attn_held * c.off / sysm.host.flops.value)
    if p.groups:  # groups computed where they lie: CPU matmuls at the CPU's matvec rate
        rate = cpu_rate.weight_stream_rate(sysm.host, setup.weights)
        cpu = cpu + np.maximum(wt.cpu_bytes / rate, wt.cpu_flops / sysm.host.flops.value)

    w_moved = wt.moved
    kv_in = kv_layer * c.off if gpu_attends and kv_off else 0.0
    qo = (
        np.where((lay.attn_flops > 0) & (c.off > 0), b * lay.qo_bytes / 2, 0.0)
        if cpu_attends
        else 0.0
    )
    acts = wt.hand_overs * b * setup.model.hidden * 2  # hidden state to the CPU and back (fp16)
    h2d_bytes = w_moved + kv_in
    for extra in (qo, acts):
        if _any(extra):
            h2d_bytes = h2d_bytes + extra
    new_off = new_kv * c.off
    d2h_bytes = new_off + qo + acts
    # copies that each pay the link's latency (counted as integers: a sum of booleans is an "or")
    n_in = wt.hand_overs + (w_moved > 0) + (qo > 0) + (kv_in > 0)
    n_out = wt.hand_overs + (new_off > 0) + (qo > 0)
    h2d = link_time(sysm, h2d_bytes, "h2d", transfers=n_in, pinned=p.pinned)
    d2h = link_time(sysm, d2h_bytes, "d2h", transfers=n_out, pinned=p.pinned)

    st = sysm.storage
    read_bytes = wt.from_disk + kv_layer * c.disk if _any(c.disk) else wt.from_disk
    write_bytes = new_kv * c.disk
    disk_read = read_bytes / st.read_bandwidth.value + (read_bytes > 0) * st.read_latency.value
    disk_write = write_bytes / st.write_bandwidth.value
    shape = gpu.shape
    if dense:
        cpu, h2d, disk_read = _full(cpu, shape), _full(h2d, shape), _full(disk_read, shape)
        if not cpu_attends:
            d2h = _full(d2h, shape)
    return {
        "gpu": gpu,
        "cpu": _view(cpu, shape),
        "h2d": _view(h2d, shape),
        "d2h": _view(d2h, shape),
        "disk_read": _view(disk_read, shape),
        "disk_write": _view(disk_write, shape),
    }


@cache
def _stages(
    order: tuple[int, ...], depth: int = 5
) -> tuple[tuple[int, tuple[tuple[int, int], ...]], ...]:
    """Return the pipeline's distinct stages: how many times each runs and its (resource, class) pairs.

    Resource r works on the layer at position k - r in stage k; the stages come in the order they
    first run, each with the resources that have a layer in it.
    """
    n = len(order)
    counts = Counter(
        tuple(order[k - r] if 0 <= k - r < n else -1 for r in range(depth))
        for k in range(n + depth - 1)
    )
    return tuple(
        (times, tuple((r, li) for r, li in enumerate(layers_in_stage) if li >= 0))
        for layers_in_stage, times in counts.items()
    )


def _pipeline(
    disk_in: np.ndarray,
    link_in: np.ndarray,
    comp: np.ndarray,
    link_out: np.ndarray,
    disk_out: np.ndarray,
    order: tuple[int, ...],
    first: bool = False,
) -> np.ndarray:
    """Five stages in flight: disk reads layer i+2, the link loads i+1, i computes, i-1 and i-2 store.

    Each argument is seconds per layer class; stage k ends when its slowest resource does. With no
    disk traffic this is the three-stage pipeline: the first load and the last store are exposed.
    """
    work = (disk_in, link_in, comp, link_out, disk_out)
    # a resource with no work never ends a stage last (times are never negative): left out
    busy = tuple(_any(w) for w in work)
    total = np.zeros(comp.shape[1:] if first else comp.shape[:-1])
    for times, pairs in _stages(order):
        stage = None
        for r, li in pairs:
            if busy[r]:
                x = work[r][li] if first else work[r][..., li]
                stage = x if stage is None else np.maximum(stage, x)
        if stage is not None:
            total = total + times * stage
    return total


def _class_sum(x: np.ndarray, lay: Layers) -> np.ndarray:
    """Return per-class seconds summed over the model's layers (the class axis dropped)."""
    if lay.window.ndim > 1:  # classes first (see _classes_first)
        return np.tensordot(lay.count, x, axes=1)
    return x @ lay.count


def combine(streams: dict[str, np.ndarray], lay: Layers, overlap: str) -> np.ndarray:
    """Return the step time from per-class stream times under one overlap mode."""
    if overlap == "none":
        return _class_sum(sum(streams[k] for k in STREAMS), lay)
    if overlap == "perfect":
        return np.max(np.stack([_class_sum(streams[k], lay) for k in STREAMS]), axis=0)
    # FlexGen's cost model: the host->GPU load, then the longest of the rest
    if overlap == "flexgen":
        per = streams["h2d"] + np.maximum.reduce(
            [
                streams["d2h"],
                streams["disk_read"],
                streams["disk_write"],
                streams["gpu"] + streams["cpu"],
            ]
        )
        return _class_sum(per, lay)
    if overlap == "pipeline":
        comp = streams["gpu"] + streams["cpu"]
        return _pipeline(
            streams["disk_read"],
            streams["h2d"],
            comp,
            streams["d2h"],
            streams["disk_write"],
            lay.order,
            lay.window.ndim > 1,
        )
    raise ValueError(f"unknown overlap mode {overlap!r}")


@dataclass(frozen=True)
class Step:
    """One decode step: its time and each stream's total (seconds), arrays over the sweep."""

    total: np.ndarray
    streams: dict[str, np.ndarray]


def step(
    setup: Setup, context: ArrayLike, batch: ArrayLike = 1, overlap: str | None = None
) -> Step:
    """Return the decode step at ``context`` tokens already cached, for ``batch`` requests."""
    lay = layers(setup.model, setup.weights)
    per = stream_times(setup, context, batch)
    total = combine(per, lay, overlap or setup.placement.overlap)
    return Step(total, {k: v @ lay.count for k, v in per.items()})


# token_mean: sweeps of at most this many token steps are evaluated token by token, in one call
BRUTE_STEPS = 4096
_CHUNK = 8192  # intervals evaluated per call on the fast path (keeps the temporaries in cache)
_SHORT = 16  # a kinked interval this short is evaluated token by token
_TOL = 1e-13  # a midpoint this close (relative) to the chord: the interval is linear


def token_mean(
    fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
    prompt: ArrayLike,
    generate: int,
    windows: ArrayLike = (),
) -> np.ndarray:
    """Return the exact mean of ``fn`` over the contexts prompt, prompt + 1, ..., prompt + generate - 1.

    ``fn(point, context)`` returns K quantities, shape (K,) + context.shape, at ``context`` tokens
    (an (m, j) array) for the sweep points ``point`` (m indices into the flattened ``prompt``).
    The result has shape (K,) + prompt.shape. Each quantity must be continuous, convex and
    piecewise linear in the context between the ``windows`` and above 0, as every step-model
    quantity is (sums and maxima of terms linear in min(context, window)): then a midpoint on the
    chord proves an interval of tokens linear, and its mean is the chord's. Intervals with a kink
    are split at the crossing of the tangents at their ends until every piece is linear.
    """
    g = int(generate)
    if g < 1:
        raise ValueError(f"generate must be at least 1, got {generate!r}")
    p = np.asarray(prompt, dtype=np.float64)
    shape, p = p.shape, p.ravel()
    n_points = p.size
    if n_points * g <= BRUTE_STEPS:
        out = fn(np.arange(n_points), p[:, None] + np.arange(g, dtype=np.float64))
        return out.mean(axis=-1).reshape(out.shape[:1] + shape)
    # each point's tokens split where the context passes 0 or a window: the linear segments
    w = np.asarray(windows, dtype=np.float64).ravel()
    bounds = np.unique(np.concatenate([[0.0], w[np.isfinite(w) & (w > 0)]]))
    last = np.clip(np.floor(bounds - p[:, None]), -1, g - 1).astype(np.int64)  # last at or below
    lo = np.concatenate([np.zeros((n_points, 1), np.int64), last + 1], axis=1)
    hi = np.concatenate([last, np.full((n_points, 1), g - 1, np.int64)], axis=1)
    pt, seg = np.nonzero(lo <= hi)
    lo, hi = lo[pt, seg], hi[pt, seg]
    parts: list[tuple[np.ndarray, np.ndarray]] = []  # (points, sums over their intervals)
    kinked = []
    for start in range(0, pt.size, _CHUNK):
        sl = slice(start, start + _CHUNK)
        i, j = lo[sl], hi[sl]
        f = fn(pt[sl], p[pt[sl], None] + np.stack([i, (i + j) / 2, j], axis=1))
        kinked.append(_settle(pt[sl], i, j, f[..., 0], f[..., 2], f[..., 1], parts))
    todo = tuple(np.concatenate(x, axis=-1) for x in zip(*kinked, strict=True))
    while todo[0].size:
        todo = _split(fn, p, *todo, parts)
    points = np.concatenate([x for x, _ in parts])
    sums = np.concatenate([s for _, s in parts], axis=1)
    total = np.stack([np.bincount(points, weights=s, minlength=n_points) for s in sums])
    return (total / g).reshape(total.shape[:1] + shape)


def _settle(
    pt: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    f_lo: np.ndarray,
    f_hi: np.ndarray,
    f_mid: np.ndarray,
    parts: list,
) -> tuple[np.ndarray, ...]:
    """Add the sums of the linear intervals to ``parts``; return the kinked ones with their values."""
    chord = (f_lo + f_hi) / 2
    scale = np.maximum(np.maximum(np.abs(f_lo), np.abs(f_hi)), np.abs(f_mid))
    n = hi - lo + 1
    linear = np.all(np.abs(f_mid - chord) <= _TOL * scale, axis=0) | (n <= 2)
    parts.append((pt[linear], n[linear] * chord[:, linear]))
    k = ~linear
    return pt[k], lo[k], hi[k], f_lo[:, k], f_hi[:, k], f_mid[:, k]


def _split(
    fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
    p: np.ndarray,
    pt: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    f_lo: np.ndarray,
    f_hi: np.ndarray,
    f_mid: np.ndarray,
    parts: list,
) -> tuple[np.ndarray, ...]:
    """Resolve kinked intervals: short ones token by token, the rest split in two at a kink."""
    n = hi - lo + 1
    short = n <= _SHORT
    if np.any(short):
        q, a, m = pt[short], lo[short, None], n[short, None]
        steps = np.arange(_SHORT)
        f = fn(q, p[q, None] + np.minimum(a + steps, a + m - 1))
        parts.append((q, np.where(steps < m, f, 0.0).sum(axis=-1)))
    k = ~short
    pt, lo, hi, f_lo, f_hi, f_mid = pt[k], lo[k], hi[k], f_lo[:, k], f_hi[:, k], f_mid[:, k]
    if not pt.size:
        return (pt,)
    # the quantity furthest off its chord; its tangents at both ends cross at its kink
    scale = np.maximum(np.abs(f_lo), np.abs(f_hi)) + np.finfo(np.float64).tiny
    worst = np.argmax(np.abs(f_mid - (f_lo + f_hi) / 2) / scale, axis=0)
    near = fn(pt, p[pt, None] + np.stack([lo + 1, hi - 1], axis=1))
    cols = np.arange(pt.size)
    a, b = f_lo[worst, cols], f_hi[worst, cols]
    slope_lo, slope_hi = near[worst, cols, 0] - a, b - near[worst, cols, 1]
    length = hi - lo
    with np.errstate(divide="ignore", invalid="ignore"):
        x = (b - a - slope_hi * length) / (slope_lo - slope_hi)
    x = np.where(np.isfinite(x), x, length / 2)
    cut = lo + np.clip(np.floor(x), 0, length - 1).astype(np.int64)
    f_cut = fn(pt, p[pt, None] + np.stack([cut, cut + 1], axis=1))
    pt2 = np.concatenate([pt, pt])
    lo2, hi2 = np.concatenate([lo, cut + 1]), np.concatenate([cut, hi])
    f_lo2 = np.concatenate([f_lo, f_cut[..., 1]], axis=1)
    f_hi2 = np.concatenate([f_cut[..., 0], f_hi], axis=1)
    f_mid2 = fn(pt2, p[pt2, None] + ((lo2 + hi2) / 2)[:, None])[..., 0]
    return _settle(pt2, lo2, hi2, f_lo2, f_hi2, f_mid2, parts)


@dataclass(frozen=True)
class MeanStep:
    """The mean decode step over the generated tokens: each overlap mode's and each stream's (s)."""

    by_overlap: dict[str, np.ndarray]
    streams: dict[str, np.ndarray]


def mean_step(
    setup: Setup,
    prompt: ArrayLike,
    generate: int = 1,
    batch: ArrayLike = 1,
    overlaps: tuple[str, ...] = OVERLAP_MODES,
    *,
    streams: bool = True,
) -> MeanStep:
    """Return the exact mean step over ``generate`` tokens after ``prompt``, per overlap mode.

    Every step from context ``prompt`` to ``prompt + generate - 1`` counts; arrays broadcast over
    prompt, batch and the KV shares (see spill). ``streams``: each stream's mean total too.
    """
    lay = layers(setup.model, setup.weights)
    p = setup.placement
    shares = (p.kv.gpu, p.kv.cpu, p.kv.disk)
    inputs = (prompt, batch, *shares)
    shape = np.broadcast_shapes(*(np.shape(x) for x in inputs))
    swept = [np.ndim(x) > 0 for x in inputs[1:]]
    # the prompt over the whole sweep, the rest only where they vary over it
    flat = [
        np.broadcast_to(np.asarray(x, dtype=np.float64), shape).ravel() if on else None
        for x, on in zip(inputs, (True, *swept), strict=True)
    ]
    # token by token (a small sweep): the step's own layouts, so the means are the steps' means
    # bit for bit; else the classes on a leading axis and each call's tokens before its points
    dense = flat[0].size * int(generate) <= BRUTE_STEPS
    lay_fn = lay if dense else _classes_first(setup.model, setup.weights, 3)

    def fn(point: np.ndarray, context: np.ndarray) -> np.ndarray:
        # per point: (m, 1) beside an (m, j) context, else (1, 1, m) beside a (1, j, m) one
        at_point = (lambda f: f[point, None]) if dense else (lambda f: f[point][None, None])
        b, *kv_split = (
            at_point(f) if on else x
            for f, on, x in zip(flat[1:], swept, (batch, *shares), strict=True)
        )
        at = (
            setup
            if not any(swept[1:])
            else replace(setup, placement=replace(p, kv=Split(*kv_split)))
        )
        ctx = context if dense else context.T[None]
        per = _stream_times(at, ctx, b, dense=dense, lay=lay_fn)
        out = [combine(per, lay_fn, m) for m in overlaps]
        if streams:
            out += [_class_sum(per[k], lay_fn) for k in STREAMS]
        if dense:
            return np.stack(out)
        return np.stack(out)[..., 0].transpose(0, 2, 1)

    mean = token_mean(fn, flat[0].reshape(shape), generate, lay.window)
    return MeanStep(
        by_overlap=dict(zip(overlaps, mean, strict=False)),
        streams=dict(zip(STREAMS, mean[len(overlaps) :], strict=True)) if streams else {},
    )


def tpot(
    setup: Setup,
    prompt: ArrayLike,
    generate: int = 1,
    batch: ArrayLike = 1,
    overlap: str | None = None,
) -> np.ndarray:
    """Return the mean decode step (s) over ``generate`` tokens after ``prompt`` (context grows).

    Exact: the mean over every step, from context ``prompt`` to ``prompt + generate - 1``.
    """
    mode = overlap or setup.placement.overlap
    return mean_step(setup, prompt, generate, batch, (mode,), streams=False).by_overlap[mode]


def prefill_flops(model: Model, prompt: ArrayLike, batch: ArrayLike = 1) -> np.ndarray:
    """Return the FLOPs of the prefill: matmuls plus causal attention (windows respected)."""
    lay = layers(model, WeightFormat.BF16)
    s = np.asarray(prompt, dtype=np.float64)[..., None]
    b = np.asarray(batch, dtype=np.float64)[..., None]
    w = lay.window
    # positions attended summed over the prompt: s^2/2 for full layers, capped by the window
    wf = np.minimum(w, s)
    capped = wf * wf / 2 + (s - wf) * wf
    per_class = b * (s * lay.dense_flops + lay.attn_flops * capped)
    return per_class @ lay.count


def ttft(setup: Setup, prompt: ArrayLike, batch: ArrayLike = 1) -> np.ndarray:
    """Return the prefill time (s): compute-bound matmuls and attention, weights streamed once."""
    sysm, p = setup.system, setup.placement
    hbm = sysm.gpu.streaming_bandwidth
    weights = step_weight_bytes(setup.model, setup.weights)
    kv_total = _kv_total(setup, prompt, batch)
    compute = np.maximum(
        prefill_flops(setup.model, prompt, batch) / sysm.compute_rate, weights / hbm
    )
    rate_in = sysm.copy_rate("h2d", pinned=p.pinned)
    rate_out = sysm.copy_rate("d2h", pinned=p.pinned)
    w_in = (
        weights * p.weights.off / rate_in
        + weights * p.weights.disk / sysm.storage.read_bandwidth.value
    )
    kv_out = (
        kv_total * p.kv.off / rate_out + kv_total * p.kv.disk / sysm.storage.write_bandwidth.value
    )
    if p.overlap == "none":
        return compute + w_in + kv_out
    return np.maximum(compute, np.maximum(w_in, kv_out))


def _kv_total(setup: Setup, context: ArrayLike, batch: ArrayLike) -> np.ndarray:
    """Return the batch's KV bytes at ``context`` as the engine stores them."""
    kv_total = kv.batch_bytes(
        setup.cache_model,
        np.asarray(context, dtype=np.int64),
        np.asarray(batch, dtype=np.int64),
        setup.kv,
    )
    return kv_total.astype(np.float64)


def step_weight_bytes(model: Model, weights: WeightFormat) -> float:
    """Return the weight bytes one decode step reads: every layer and the output head (B).

    The embedding table is left out (a step reads one row of it per token); with tied embeddings
    the head reads the table, so it is in.
    """
    lay = layers(model, weights)
    return float(lay.weight_bytes @ lay.count)


@cache
def resident_weight_bytes(model: Model, weights: WeightFormat) -> float:
    """Return the weight bytes a tier must hold: those a step reads plus the embedding table (B).

    This is every tensor of the model (the ``total`` of its weight bytes): the table takes memory
    wherever the weights live even though a step reads only one row of it per token.
    """
    table = 0 if model.tie_embeddings else model.weight_bytes(weights).embedding
    return step_weight_bytes(model, weights) + float(table)


@dataclass(frozen=True)
class Memory:
    """Bytes each tier holds at the end of generation (weights, KV and staging buffers)."""

    gpu: np.ndarray
    cpu: np.ndarray
    disk: np.ndarray
    staging: np.ndarray


def memory(setup: Setup, context: ArrayLike, batch: ArrayLike = 1) -> Memory:
    """Return what each tier must hold at ``context`` tokens for ``batch`` requests.

    Beside the weights and KV each tier homes, the GPU holds transient bytes (``staging``): the
    larger of the decode's buffers (the streamed layer's weights and offloaded KV) and the
    prefill's, where the streamed layer's weights sit beside one layer's prefill working set.
    The two phases alternate, so their working sets do not add up: the prompt's activations
    are freed before the decode fills the KV buffers. The weight buffers are used by both, so
    they add to the prefill's working set. The prompt passes in chunks of
    ``working_memory.CHUNK_TOKENS`` tokens with a fused attention kernel (no score matrix), as
    vLLM and llama.cpp run it; FlexGen, which does neither, has its own memory model.
    """
    p = setup.placement
    lay = layers(setup.model, setup.weights)
    kv_total = _kv_total(setup, context, batch)
    weights = resident_weight_bytes(setup.model, setup.weights)
    s = np.asarray(context, dtype=np.float64)[..., None]
    b = np.asarray(batch, dtype=np.float64)[..., None]
    kvb = lay.kv_per_token * _kv_token_bytes(setup.cache_model, setup.kv)
    weights_staged = weight_traffic(setup, lay, np.ones(1)).moved  # streamed modules, per layer
    staged = weights_staged + (
        b * np.minimum(s, lay.window) * kvb * np.asarray(p.kv.off, dtype=np.float64)[..., None]
        if p.attention == "gpu"
        else 0.0
    )
    buffers = 1 if p.overlap == "none" else 2  # overlap needs the next layer's buffer too
    working = working_memory.prefill_working_bytes(
        setup.model, context, batch, chunk=working_memory.CHUNK_TOKENS, scores=False
    )
    staging = np.maximum(
        buffers * np.max(staged, axis=-1),
        buffers * np.max(np.broadcast_to(weights_staged, staged.shape), axis=-1) + working,
    )
    return Memory(
        gpu=weights * p.weights.gpu + kv_total * p.kv.gpu + staging,
        cpu=weights * p.weights.cpu + kv_total * p.kv.cpu,
        disk=weights * p.weights.disk + kv_total * p.kv.disk,
        staging=staging,
    )


def prefill_reserve(model: Model, batch: ArrayLike = 1) -> np.ndarray:
    """Return the GPU bytes a long prompt's prefill needs beside weights and KV (B).

    One chunk of ``working_memory.CHUNK_TOKENS`` tokens through one layer with a fused attention
    kernel: what ``memory`` reserves for any prompt at least that long.
    """
    return working_memory.prefill_working_bytes(
        model, working_memory.CHUNK_TOKENS, batch, chunk=working_memory.CHUNK_TOKENS, scores=False
    )


def hidden_tokens(setup: Setup, context: ArrayLike, batch: ArrayLike = 1) -> np.ndarray:
    """Return how many offloaded tokens per layer can cross the link under one layer's GPU work.

    Transfer hides behind compute when the next layer's copy takes no longer than this layer's
    GPU time: tokens x batch x KV bytes per token and layer / link rate <= GPU time of a layer.
    Weights streamed from the host take the link first, so their copy comes off that time.
    """
    sysm = setup.system
    on_gpu = replace(setup, placement=Placement())
    gpu = stream_times(on_gpu, context, batch)["gpu"][..., 0]
    rate = sysm.copy_rate("h2d", pinned=setup.placement.pinned)
    b = np.asarray(batch, dtype=np.float64)
    moved = weight_traffic(setup, layers(setup.model, setup.weights), b[..., None]).moved[..., 0]
    weights_in = np.where(
        moved > 0, link_time(sysm, moved, "h2d", pinned=setup.placement.pinned), 0
    )
    per_token = b * _kv_token_bytes(setup.cache_model, setup.kv)
    return np.floor(np.maximum(gpu - weights_in, 0.0) * rate / per_token)


def max_context(
    setup: Setup, budget_s: ArrayLike, batch: ArrayLike = 1, *, limit: int = 10_000_000
) -> np.ndarray:
    """Return the longest context whose decode step meets ``budget_s`` (0: none does; limit: all do)."""
    budget, b = np.broadcast_arrays(
        np.asarray(budget_s, dtype=np.float64), np.asarray(batch, dtype=np.float64)
    )
    return largest_true(lambda s: step(setup, s, b).total <= budget, budget.shape, limit)


def max_batch(
    setup: Setup, context: ArrayLike, budget_s: ArrayLike, *, limit: int = 100_000
) -> np.ndarray:
    """Return the largest batch that meets the step budget and fits every tier (0: none does)."""
    ctx, budget = np.broadcast_arrays(
        np.asarray(context, dtype=np.float64), np.asarray(budget_s, dtype=np.float64)
    )

    def ok(b: np.ndarray) -> np.ndarray:
        mem = memory(setup, ctx.astype(np.int64), b)
        fits = capacity.fits(setup.system, mem.gpu, mem.cpu, mem.disk)
        return (b >= 1) & fits & (step(setup, ctx, np.maximum(b, 1)).total <= budget)

    return largest_true(ok, ctx.shape, limit)


def knee_context(setup: Setup, batch: ArrayLike = 1, *, limit: int = 10_000_000) -> np.ndarray:
    """Return the longest context at which the GPU's own work still outlasts the host→GPU copies."""
    b = np.asarray(batch, dtype=np.float64)

    def ok(s: np.ndarray) -> np.ndarray:
        st = step(setup, s, b).streams
        return st["h2d"] <= st["gpu"]

    return largest_true(ok, b.shape, limit)


def spill(setup: Setup, context: ArrayLike, batch: ArrayLike = 1) -> Setup:
    """Return the setup with KV kept on the GPU while it fits and the rest in host memory.

    The KV shares become arrays over (context, batch): what a server that offloads only on
    overflow would do. The weights' placement is kept.
    """
    p = setup.placement
    kv_total = _kv_total(setup, context, batch)
    # what the GPU holds with every KV byte off it: its weights and the staging buffers, sized
    # for the whole cache streaming (streamed weights and the prefill's working set included)
    held = memory(replace(setup, placement=replace(p, kv=Split(0.0, 1.0, 0.0))), context, batch)
    free = setup.system.gpu_memory - held.gpu
    on_gpu = np.clip(free / np.maximum(kv_total, 1.0), 0.0, 1.0)
    return replace(setup, placement=replace(p, kv=Split(on_gpu, 1.0 - on_gpu, 0.0)))


def spill_weights(setup: Setup, context: float, batch: float = 1, *, iters: int = 40) -> Setup:
    """Return the setup with as much of its GPU weight share kept as fits GPU memory, the rest on the host.

    What an engine does when the weights overflow the GPU (vLLM's ``cpu_offload_gb``, Accelerate's
    device map): the share moved to host memory crosses the link in every step. GPU memory is
    checked with a second staging buffer, so the placement fits in every overlap mode. Unchanged
    when the weights fit; with no weight on the GPU when not even that fits (the caller checks
    ``capacity.fits`` and says so). Host memory is not a reason to keep weights on the GPU.
    """
    p = setup.placement
    if p.groups:
        raise ValueError("spill_weights moves whole-model weight shares, not tensor groups")
    w = p.weights

    def at(gpu: float) -> Setup:
        return replace(setup, placement=replace(p, weights=Split(gpu, w.cpu + w.gpu - gpu, w.disk)))

    def gpu_fits(gpu: float) -> bool:
        mem = memory(at(gpu).with_overlap("pipeline"), context, batch)
        return bool(np.all(capacity.within(mem.gpu, setup.system.gpu_memory)))

    if gpu_fits(w.gpu):
        return setup
    if not gpu_fits(0.0):
        return at(0.0)
    # GPU memory grows with the share kept: the largest fitting share
    return at(largest_true_linear(gpu_fits, 0.0, w.gpu, iters))
