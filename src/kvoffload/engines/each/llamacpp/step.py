"""llama.cpp's decode step: GPU, CPU and the hand-overs between them, over a context."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kvoffload.engines.each.llamacpp import attention, row_split, tensor_parallel
from kvoffload.engines.each.llamacpp.options import gpu_op_s_default, split_sync_s_default
from kvoffload.engines.each.llamacpp.placement import (
    _read_bytes,
    cpu_weight_rate,
    gpu_split,
    host_read_rate,
    is_tensor_parallel,
    placement,
    row_shares,
    split_tensors,
    tensor_gpus,
)
from kvoffload.model import decode, kv, tensor_groups, transfer
from kvoffload.model.prediction import Scenario
from kvoffload.model.tensor_groups import TensorTable


def replays_graphs(sc: Scenario, gpu_runs: int) -> bool:
    """Return whether the token's GPU kernels replay as CUDA graphs, given how many separate runs
    of GPU ops the token's graph has (``gpu_runs``: more than one where weights or KV in host
    memory split it).

    ``cuda_graphs`` says whether the build captures graphs at all. A split graph keeps them in
    llama.cpp (a graph per split, keyed by its first node, since PR #18934, 2026-01-19; before it
    the one graph per device was re-captured split after split until capture was disabled: set
    ``cuda_graphs: false`` for an older build), not in ik_llama.cpp, where "with partial offload
    CUDA graphs get disabled after just a few splits" (ikawrakow, ik_llama.cpp PR #1040,
    2025-12-06).
    """
    o = sc.options
    return o.cuda_graphs and not (o.fork == "ik_llama" and gpu_runs > 1)


def _constants(sc: Scenario, gpu_runs: int) -> tuple[float, float]:
    """Return (seconds each matmul on a GPU adds to a step, seconds per CPU<->GPU hand-over)."""
    o = sc.options
    graphs = replays_graphs(sc, gpu_runs)
    op = o.gpu_op_us * 1e-6 if o.gpu_op_us is not None else gpu_op_s_default(graphs)
    sync = o.split_sync_us * 1e-6 if o.split_sync_us is not None else split_sync_s_default()
    return op, sync


def matmul_ops(table: TensorTable) -> np.ndarray:
    """Return which tensors a decode step multiplies by, one op each: the 2-D matrices and each
    routed-expert stack (one MUL_MAT_ID), in the layers and the output layer."""
    stacks = table.routed & (table.rows > 1)
    return (table.matrix | stacks) & (table.position >= 0)


def _hand_overs(sc: Scenario, table: TensorTable, gpus: np.ndarray) -> tuple[int, int, int]:
    """Return the device changes along one token's graph: (host->GPU, GPU->host, GPU->GPU).

    Each layer runs its matmuls in order, each where its weights are (``gpus``: each tensor's
    GPU, -1 the CPU; norms and biases go with the op they follow), and its attention where its
    KV lives (its layer's GPU), after the attention projections; the token embedding is looked
    up in host memory and the logits are sampled there.
    """
    n_layers = sc.model.n_layers
    layer_gpu = gpu_split(sc)[:-1]
    kv_gpu = np.where(sc.options.no_kv_offload, -1, layer_gpu)
    norms = tensor_groups.GROUPS.index("norms")
    attention = tensor_groups.GROUPS.index("attention")
    bias = np.char.endswith(np.asarray(table.names, dtype=str), ".bias")
    ops = np.flatnonzero((table.group != norms) & ~bias & (table.position >= 0))
    ops = ops[table.position[ops] <= n_layers]
    pos = table.position[ops]
    # within a layer: the attention projections (0), its attention (1), the other ops (2), each
    # in table order; the output layer's ops in table order
    rank = np.where((table.group[ops] == attention) & (pos < n_layers), 0, 2)
    keys_pos = np.concatenate([pos, np.arange(n_layers)])
    keys_rank = np.concatenate([rank, np.ones(n_layers, dtype=rank.dtype)])
    keys_order = np.concatenate([ops, np.zeros(n_layers, dtype=ops.dtype)])
    where = np.concatenate([np.asarray(gpus, dtype=np.int64)[ops], kv_gpu.astype(np.int64)])
    inner = where[np.lexsort((keys_order, keys_rank, keys_pos))]
    seq = np.concatenate([[-1], inner, [-1]])  # embedding lookup and sampling on the host
    a, b = seq[:-1], seq[1:]
    ups = int(np.count_nonzero((a < 0) & (b >= 0)))
    downs = int(np.count_nonzero((a >= 0) & (b < 0)))
    peers = int(np.count_nonzero((a >= 0) & (b >= 0) & (a != b)))
    return ups, downs, peers


def _mixed_rates(
    sc: Scenario,
    table: TensorTable,
    gpus: np.ndarray,
    read: np.ndarray,
    flops: np.ndarray,
    split: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return, per position, the seconds its GPU-resident weights take to read and to compute,
    each at its own GPU's streaming bandwidth and dense rate (a row-split matrix: its slowest
    GPU's share), and the attention rate and dense rate of the GPU its layer runs on (GPUs of
    different models, ``more_gpus``)."""
    devices = sc.system.devices
    bandwidth = np.array([g.streaming_bandwidth for g in devices])
    compute = np.array([g.compute_rate for g in devices])
    attend = np.array([g.attention_rate for g in devices])
    shares = row_shares(sc)
    here = np.maximum(gpus, 0)
    on_gpu = gpus >= 0
    per_byte = np.where(split, float(np.max(shares / bandwidth)), 1 / bandwidth[here])
    per_flop = np.where(split, float(np.max(shares / compute)), 1 / compute[here])
    w_s = table.by_position(read * per_byte, on_gpu)
    f_s = table.by_position(flops * per_flop, on_gpu)
    layer = np.maximum(gpu_split(sc), 0)  # a position on the CPU attends there: any rate serves
    if split.any() and is_tensor_parallel(sc):  # each GPU attends over its heads: the slowest
        slowest = np.ones(len(layer))
        attend_tp = slowest / float(np.max(shares / attend))
        return w_s, f_s, attend_tp, slowest / float(np.max(shares / compute))
    return w_s, f_s, attend[layer], compute[layer]


def step_parts(sc: Scenario, context: np.ndarray, batch: float) -> dict[str, np.ndarray]:
    """Return seconds per token on the GPU, on the CPU and crossing devices, over ``context``."""
    return _step_parts_at(sc, batch)(context)


def _step_parts_at(sc: Scenario, batch: float) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """Return step_parts over a context for one scenario and batch, the rest computed once."""
    system, model = sc.system, sc.model
    pinned = sc.pinned_or(True)  # the CUDA backend copies through pinned host buffers
    table, gpus = tensor_gpus(sc)
    ups, downs, peers = _hand_overs(sc, table, gpus)
    per_op, sync = _constants(sc, ups)  # each host->GPU hand-over starts a run of GPU ops
    on_gpu = gpus >= 0
    lay = decode.layers(model, sc.setup.weights)
    k, n = lay.expert_use
    read = _read_bytes(sc, table, batch)  # bytes a step reads per tensor
    flops = 2 * batch * table.params * np.where(table.routed, k / n, 1.0)
    # a split matrix (row split, tensor parallelism) is read and multiplied on every GPU at once,
    # each its share: alike GPUs take as long as the largest share
    split = split_tensors(sc, table, gpus)
    largest = float(np.max(row_shares(sc)))
    parallel = np.where(split, largest, 1.0)
    # tensor parallelism splits each GPU layer's attention by heads, its cache with them
    heads = largest if split.any() and is_tensor_parallel(sc) else 1.0
    w_gpu = table.by_position(read * parallel, on_gpu)
    w_cpu = table.by_position(read, ~on_gpu)
    f_gpu = table.by_position(flops * parallel, on_gpu)
    f_cpu = table.by_position(flops, ~on_gpu)
    _, layer_on_gpu = placement(sc)
    kv_gpu_layer = np.append(layer_on_gpu[:-1] & (not sc.options.no_kv_offload), False)
    # attention over each position's cache, one request's bytes and FLOPs per cached token
    pos_class = np.array(lay.order)
    window = lay.window[pos_class]
    kvb = lay.kv_per_token[pos_class] * float(
        kv.attention_layer_token_bytes(sc.setup.cache_model, sc.setup.kv)
    )
    # a recurrent layer (gated DeltaNet, Mamba) reads its fixed state and writes it back each step
    state = 2 * batch * lay.state_values[pos_class] * kv.state_value_bytes(sc.setup.kv)
    attn_per_token = lay.attn_flops[pos_class]
    gpu_att = np.where(kv_gpu_layer, 1.0, 0.0)
    hbm, att_bw = system.gpu.streaming_bandwidth, system.gpu.attention_rate
    host_bw, host_flops = host_read_rate(sc), system.host.flops.value
    # a cache in a ggml block format costs more than its bytes to attend over (attention.py): its
    # bytes count as this many bytes at the f16 rate (1 for f16), the recurrent state as itself
    gpu_kv_scale = att_bw / attention.gpu_kv_rate(sc)
    cpu_kv_scale = host_bw / attention.cpu_kv_rate(sc)
    # without flash attention, the scores each cached position adds (0 with it)
    scores = lay.kv_per_token[pos_class] * attention.score_bytes(sc)
    cpu_rate_w = cpu_weight_rate(sc)
    activations = batch * model.hidden * 4  # llama.cpp's activations are f32
    lat = system.link.latency.value
    link = ups * (activations / system.copy_rate("h2d", pinned=pinned) + lat + sync)
    logits_on_gpu = bool(
        on_gpu[
            (table.position == model.n_layers)
            & (table.group == tensor_groups.GROUPS.index("output"))
        ].any()
    )
    down_bytes = np.full(downs, activations, dtype=np.float64)
    if logits_on_gpu and downs:  # the last hand-over brings the logits back for sampling
        down_bytes[-1] = batch * model.vocab * 4
    link = link + float((down_bytes / system.copy_rate("d2h", pinned=pinned) + lat + sync).sum())
    # from one GPU to another (a layer split's boundary, a tensor another GPU holds): the
    # activations pass between them (transfer.peer_time: the link's peer figures where given)
    link = link + peers * float(transfer.peer_time(system, activations))
    link = link + row_split.exchange_s(sc, table, split, batch)
    link = link + tensor_parallel.exchange_s(sc, table, split, batch)
    # each matmul on a GPU adds a fixed time (its launch and tail, and those of the small ops
    # around it): a routed-expert stack is one op (MUL_MAT_ID)
    gpu_ops = int(np.count_nonzero(matmul_ops(table) & on_gpu))
    mixed = _mixed_rates(sc, table, gpus, read, flops, split) if system.more_gpus else None

    def at(context: np.ndarray) -> dict[str, np.ndarray]:
        held = np.minimum(np.asarray(context, dtype=np.float64)[..., None], window)
        kv_bytes = batch * held * kvb
        score_bytes = batch * held * scores
        gpu_kv = kv_bytes * gpu_kv_scale + state + score_bytes
        cpu_kv = kv_bytes * cpu_kv_scale + state + score_bytes
        attn_flops = batch * held * attn_per_token
        if mixed is None:
            per_position = np.maximum(
                w_gpu / hbm + gpu_kv * gpu_att * heads / att_bw,
                (f_gpu + attn_flops * gpu_att * heads) / system.compute_rate,
            )
        else:  # each tensor at its own GPU's rates, attention at its layer's GPU's
            w_s, f_s, att_pos, compute_pos = mixed
            per_position = np.maximum(
                w_s + gpu_kv * gpu_att / att_pos, f_s + attn_flops * gpu_att / compute_pos
            )
        gpu = per_position.sum(axis=-1) + gpu_ops * per_op
        cpu = np.maximum(
            w_cpu / cpu_rate_w + cpu_kv * (1 - gpu_att) / host_bw,
            (f_cpu + attn_flops * (1 - gpu_att)) / host_flops,
        ).sum(axis=-1)
        return {"gpu": gpu, "cpu": cpu, "link": np.broadcast_to(link, np.shape(gpu))}

    return at
