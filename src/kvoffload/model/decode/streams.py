"""The six streams of one decode step (GPU, CPU, link each way, disk each way), per layer class."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from kvoffload.model import cpu_rate, kv
from kvoffload.model.decode.kv_bytes import _kv_class_bytes
from kvoffload.model.decode.layer_classes import Layers, layers
from kvoffload.model.decode.placement import Setup, Split
from kvoffload.model.decode.traffic import weight_traffic
from kvoffload.model.transfer import link_time

STREAMS = ("gpu", "cpu", "h2d", "d2h", "disk_read", "disk_write")
STREAM_NAMES = {
    "gpu": "GPU compute and memory",
    "cpu": "CPU work (attention over host-resident KV, CPU-side layers)",
    "h2d": "host→GPU link",
    "d2h": "GPU→host link",
    "disk_read": "disk reads",
    "disk_write": "disk writes",
}


def cpu_stream_name(attends: bool, matmuls: bool) -> str:
    """Return what the 'cpu' stream holds, in words: CPU attention, CPU-side matmuls, or both."""
    if attends and not matmuls:
        return "CPU attention over host-resident KV"
    if matmuls and not attends:
        return "CPU-side matmuls (weights in host memory)"
    return STREAM_NAMES["cpu"]


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
    setup: Setup,
    context: ArrayLike,
    batch: ArrayLike,
    *,
    dense: bool | None,
    lay: Layers | None = None,
) -> dict[str, np.ndarray]:
    """Return stream_times; ``dense``: the streams that may vary with the context as full arrays.

    A matmul over a broadcast view may round differently from one over a full array, so the
    public stream_times keeps the layouts it has always returned; sweeps that only combine the
    streams skip the copies (views of one shape), and ``dense=None`` returns them as computed
    (numbers or smaller arrays), for a caller that only adds them up (overlap 'none').
    ``lay``: the layer classes (see _classes_first), else the model's.
    """
    sysm, p = setup.system, setup.placement
    lay = lay or layers(setup.model, setup.weights)
    s = np.asarray(context, dtype=np.float64)[..., None]
    b = np.asarray(batch, dtype=np.float64)[..., None]
    kvb = _kv_class_bytes(setup, lay)
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
        if setup.attention_walk is not None:  # the kernel's tiles, in turn (none: no cache held)
            kv_read = np.maximum(kv_read, setup.attention_walk.seconds(held))
    else:
        gpu_flops = wt.gpu_flops + attn_held * c.gpu
        kv_read = kv_rw * c.gpu / att_bw
    gpu = np.maximum(wt.gpu_bytes / hbm + kv_read, gpu_flops / peak)

    cpu: np.ndarray | float = 0.0
    cpu_attends = (not gpu_attends) and kv_off
    if cpu_attends:
        host_bw = sysm.host.memory_bandwidth.value
        cpu = np.maximum(kv_layer * c.off / host_bw, attn_held * c.off / sysm.host.attention_rate)
        if setup.cpu_kv_passes != 1.0:
            cpu = cpu * setup.cpu_kv_passes
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
    if dense is None:
        return {"gpu": gpu, "cpu": cpu, "h2d": h2d, "d2h": d2h, "disk_read": disk_read,
                "disk_write": disk_write}  # fmt: skip
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
