"""Where llama.cpp puts each tensor: -ngl, the GPU split, tensor overrides, and the rates of the CPU side."""

from __future__ import annotations

import numpy as np

from kvoffload.engines.each.llamacpp.options import Options, _parse_rule
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.units import format_bytes
from kvoffload.model import capacity, cpu_rate, decode, routing, tensor_groups
from kvoffload.model.prediction import Scenario
from kvoffload.model.tensor_groups import TensorTable


def placement(sc: Scenario) -> tuple[int, np.ndarray]:
    """Return (n_gpu_layers, a mask over the layer positions and the output layer on the GPU).

    ``fork: ik_llama``: ``i_gpu_start = n_layer - n_gpu_layers`` and the output layer goes to the
    GPU only when ``n_gpu_layers > n_layer`` (ikawrakow/ik_llama.cpp src/llama.cpp at
    8337e4cd3861406fc04e0854b1409cd1b027fbc9), so ``-ngl n_layer`` keeps the output layer, not
    layer 0, on the CPU.
    """
    n = sc.model.n_layers
    ngl = sc.options.n_gpu_layers if sc.options.n_gpu_layers is not None else n + 1
    ngl = min(ngl, n + 1)
    if sc.options.fork == "ik_llama":
        return ngl, np.append(np.arange(n) >= max(n - ngl, 0), ngl > n)
    i_gpu_start = max(n + 1 - ngl, 0)
    return ngl, np.arange(n + 1) >= i_gpu_start


def is_tensor_parallel(sc: Scenario) -> bool:
    """Return whether every GPU layer's work is split over the GPUs (tensor parallelism):
    llama.cpp's ``-sm tensor`` (a meta device over the GPUs, ggml-org/llama.cpp #19378) or
    ik_llama.cpp's ``-sm graph``."""
    return sc.options.split_mode in ("tensor", "graph")


def split_points(sc: Scenario) -> np.ndarray:
    """Return the cumulative split points over the GPUs, from ``tensor_split`` or free memory.

    ``tensor_split`` all zero (or not given): each device's free memory, equal on a profile's
    alike GPUs and, on mixed ones, each GPU's memory (what is free before the model loads), or
    under tensor parallelism equal shares ("``tensor`` splits tensor segments evenly",
    docs/multi-gpu.md at 5815cb840bfe5be1895c6ca6afcf9ce05d8b486f); else its proportions,
    missing ones zero. Summed and normalised
    (ggml-org/llama.cpp src/llama-model.cpp ``load_tensors`` at
    a5410f046c01d01330c8a42f13b64a211fedf2c3, "calculate the split points").
    """
    count = sc.system.n_gpus
    given = np.zeros(count)
    ts = sc.options.tensor_split[:count]
    given[: len(ts)] = ts
    if given.any():
        shares = given
    elif is_tensor_parallel(sc):  # -sm tensor splits each tensor evenly unless -ts says otherwise
        shares = np.ones(count)
    elif sc.system.more_gpus:  # GPUs of different models: each one's memory stands for its free
        shares = np.array([g.memory.value for g in sc.system.devices])
    else:
        shares = np.ones(count)
    return np.cumsum(shares) / shares.sum()


def gpu_split(sc: Scenario) -> np.ndarray:
    """Return the GPU of each layer position and the output layer (-1: on the CPU).

    ``--split-mode layer`` (the default) and ``row``: GPU layer ``il`` goes to
    ``upper_bound(splits, (il - i_gpu_start) / act_gpu_layers)`` (``load_tensors``, as
    ``split_points``), so each GPU holds a run of consecutive layers in proportion to its
    split (under ``row`` its matrices are then split over every GPU: ``split_rows``);
    ``--split-mode none``: every GPU layer on ``main_gpu``, the one mode that drops the other
    devices (``llama_prepare_model_devices``, src/llama.cpp at
    01649e61c782d88825d9f5affb6acbad0f57fb9b); tensor parallelism: every GPU layer on all GPUs
    at once, GPU 0 standing for the group (``split_tensors`` says what each holds).
    """
    o, count = sc.options, sc.system.n_gpus
    if o.main_gpu >= count:
        raise InputError(
            f"main_gpu {o.main_gpu} names a GPU the profile does not have ({count} GPU(s))",
            field="options.main_gpu",
        )
    if len(o.tensor_split) > count:
        raise InputError(
            f"tensor_split gives {len(o.tensor_split)} proportions for {count} GPU(s)",
            field="options.tensor_split",
        )
    ngl, on_gpu = placement(sc)
    if sc.options.split_mode == "none":
        return np.where(on_gpu, sc.options.main_gpu, -1)
    if is_tensor_parallel(sc):  # every GPU layer on the meta device: GPU 0 stands for all of them
        return np.where(on_gpu, 0, -1)
    act = min(ngl, sc.model.n_layers + 1)
    start = int(np.argmax(on_gpu)) if on_gpu.any() else len(on_gpu)
    pos = (np.arange(len(on_gpu)) - start) / max(act, 1)
    last = sc.system.n_gpus - 1
    gpu = np.minimum(np.searchsorted(split_points(sc), pos, side="right"), last)
    return np.where(on_gpu, gpu, -1)


def layers_per_gpu(sc: Scenario) -> list[int]:
    """Return how many layer positions (the output layer counts) each GPU holds."""
    split = gpu_split(sc)
    if is_tensor_parallel(sc):  # each GPU holds its share of every GPU layer
        return [int(np.count_nonzero(split >= 0))] * sc.system.n_gpus
    return np.bincount(split[split >= 0], minlength=sc.system.n_gpus).tolist()


def override_rules(o: Options) -> tuple[tuple[str, str], ...]:
    """Return the tensor overrides in llama.cpp's order: ``-ot`` entries, then the MoE flags."""
    rules = [_parse_rule(e) for e in o.override_tensor]
    if o.cpu_moe:
        rules.append((EXPS_REGEX, "cpu"))
    rules += [(rf"blk\.{i}{EXPS_REGEX}", "cpu") for i in range(o.n_cpu_moe)]
    return tuple(rules)


# common/common.h LLM_FFN_EXPS_REGEX: the routed-expert tensors (gate, up, down, fused gate_up)
EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"


def tensor_devices(sc: Scenario) -> tuple[TensorTable, np.ndarray]:
    """Return the model's tensors and, per tensor, True where its weights live on a GPU."""
    table, gpus = tensor_gpus(sc)
    return table, gpus >= 0


def tensor_gpus(sc: Scenario) -> tuple[TensorTable, np.ndarray]:
    """Return the model's tensors and, per tensor, the GPU its weights live on (-1: the CPU).

    A tensor goes with its layer (``gpu_split``) unless a tensor override names its buffer: the
    CPU, a numbered GPU (``=CUDA1``), or an unnumbered one (the main GPU where its layer is on
    the CPU). A numbered GPU the profile does not have is refused. Under ``--split-mode row`` a
    matrix's GPU is the one its layer runs on, which holds its share of the rows
    (``split_rows``).
    """
    table = tensor_groups.tensor_table(sc.model, sc.setup.weights)
    layer_gpu = gpu_split(sc)
    gpus = np.where(table.position >= 0, layer_gpu[np.maximum(table.position, 0)], -1)
    rules = override_rules(sc.options)
    if not rules:
        return table, gpus
    forced = tensor_groups.match_overrides(table, rules)
    for device in set(forced.tolist()) - {"", "cpu"}:
        named = int(device[3:]) if device != "gpu" else None
        if named is not None and named >= sc.system.n_gpus:
            raise InputError(
                f"a tensor override names CUDA{named}, but the profile has "
                f"{sc.system.n_gpus} GPU(s) (CUDA0 to CUDA{sc.system.n_gpus - 1})",
                field="options.override_tensor",
            )
        here = forced == device
        gpus = np.where(
            here,
            named if named is not None else np.where(gpus >= 0, gpus, sc.options.main_gpu),
            gpus,
        )
    gpus = np.where(forced == "cpu", -1, gpus)
    return table, gpus.astype(np.int64)


def row_shares(sc: Scenario) -> np.ndarray:
    """Return each GPU's share of a row-split matrix's rows (``split_points``' steps)."""
    return np.diff(split_points(sc), prepend=0.0)


def split_rows(sc: Scenario, table: TensorTable, gpus: np.ndarray) -> np.ndarray:
    """Return, per tensor, whether ``--split-mode row`` splits its matrix by rows over the GPUs.

    Each GPU's buffer list starts with the CUDA split buffer type (``make_gpu_buft_list``,
    ggml-org/llama.cpp src/llama-model.cpp at a5410f046c01d01330c8a42f13b64a211fedf2c3), so a
    GPU-resident weight takes it where the split buffer supports the weight's op: a 2-D
    ``MUL_MAT`` weight, not a stack of experts (``ne[2] > 1``), and only if the GPU its layer
    runs on gets rows (``ggml_backend_cuda_device_supports_op``, ggml/src/ggml-cuda/
    ggml-cuda.cu); the rows go to every GPU in proportion to ``tensor_split``. A weight an
    override sent to a buffer (``-ot``) is not split; norms, biases and the KV stay with the
    layer's GPU.
    """
    shares = row_shares(sc)
    if sc.options.split_mode != "row" or np.count_nonzero(shares > 0) < 2:
        return np.zeros(len(gpus), dtype=bool)
    # a weight an override placed keeps that buffer (match_overrides: '' where none matched)
    forced = tensor_groups.match_overrides(table, override_rules(sc.options)) != ""
    own = shares[np.maximum(gpus, 0)] > 0
    return (gpus >= 0) & table.matrix & ~forced & own & (table.position >= 0)


def split_tensors(sc: Scenario, table: TensorTable, gpus: np.ndarray) -> np.ndarray:
    """Return, per tensor, whether its weights are split over the GPUs: ``split_rows`` under
    ``row``; under tensor parallelism every GPU-resident matrix and stack of experts.

    ``-sm tensor`` puts each GPU layer on a meta device that splits every weight over the GPUs
    in proportion to ``split_points`` (the query, key, value, gate and up projections by their
    output rows, the attention output and down projections by their input, so that each ends in
    a partial sum; a MoE layer's experts along their FFN width) and keeps the norms and biases
    whole on every GPU (``GGML_BACKEND_SPLIT_AXIS_MIRRORED``; docs/multi-gpu.md and the meta
    backend, ggml-org/llama.cpp #19378). A weight an override placed keeps that buffer.
    """
    if sc.options.split_mode == "row":
        return split_rows(sc, table, gpus)
    shares = row_shares(sc)
    if not is_tensor_parallel(sc) or np.count_nonzero(shares > 0) < 2:
        return np.zeros(len(gpus), dtype=bool)
    forced = tensor_groups.match_overrides(table, override_rules(sc.options)) != ""
    stacks = table.routed & (table.rows > 1)
    return (gpus >= 0) & (table.matrix | stacks) & ~forced & (table.position >= 0)


def gpu_bytes_each(
    sc: Scenario, table: TensorTable, gpus: np.ndarray, kv_layers: np.ndarray
) -> np.ndarray:
    """Return the bytes each GPU holds: its tensors' weights (``tensor_gpus``' answer; its share
    of each split matrix) and the KV of the layers it runs; under tensor parallelism its share
    of every split weight and of the KV (split by heads), and every other GPU tensor whole."""
    count = sc.system.n_gpus
    split = split_tensors(sc, table, gpus)
    whole = (gpus >= 0) & ~split
    shares = row_shares(sc)
    layer_gpu = gpu_split(sc)[:-1]
    kv_here = (layer_gpu >= 0) & (not sc.options.no_kv_offload)
    if split.any() and is_tensor_parallel(sc):  # the rest whole on every GPU, the KV by its heads
        forced = tensor_groups.match_overrides(table, override_rules(sc.options)) != ""
        own = whole & forced  # a weight an override sent to one GPU stays there
        placed = np.bincount(gpus[own], weights=table.nbytes[own], minlength=count)
        mirrored = float(table.nbytes[whole & ~forced].sum())
        kv_split = float(kv_layers[kv_here].sum())
        return placed + mirrored + (float(table.nbytes[split].sum()) + kv_split) * shares
    weights = np.bincount(gpus[whole], weights=table.nbytes[whole], minlength=count)
    weights = weights + float(table.nbytes[split].sum()) * shares
    kv = np.bincount(layer_gpu[kv_here], weights=kv_layers[kv_here], minlength=count)
    return weights + kv


def cpu_weight_rate(sc: Scenario, *, threads: int | None = None) -> float:
    """Return the rate (B/s) at which CPU-side matmuls stream their weights (model/cpu_rate.py);
    ``threads``: a count other than ``-t`` (the prefill's ``-tb``), None for ``-t``."""
    o = sc.options
    count = threads if threads is not None else o.threads
    return cpu_rate.weight_stream_rate(sc.system.host, sc.setup.weights, count, o.numa)


def host_read_rate(sc: Scenario) -> float:
    """Return the rate (B/s) at which CPU attention reads host memory under ``numa``."""
    o, host = sc.options, sc.system.host
    return cpu_rate.host_stream_rate(host, o.threads or host.matmul_threads, o.numa)


def _read_bytes(sc: Scenario, table: TensorTable, batch: float) -> np.ndarray:
    """Return the bytes a step reads of each tensor: routed experts only where the batch routes."""
    k, n = decode.layers(sc.model, sc.setup.weights).expert_use
    touched = float(routing.touched_share(n, k, batch, sc.setup.routing.effective_experts))
    return table.nbytes * np.where(table.routed, touched, 1.0)


def paged_bytes(sc: Scenario, w_cpu: float, kv_cpu: float) -> float:
    """Return the host-resident weight bytes past host capacity that mmap leaves on disk."""
    if sc.options.no_mmap:
        return 0.0
    over = w_cpu + kv_cpu - capacity.host_capacity(sc.system)
    return min(max(over, 0.0), w_cpu)


def tensor_groups_summary(table: TensorTable, on_gpu: np.ndarray, layer_on_gpu: np.ndarray) -> str:
    """Return which groups the overrides moved off (or onto) their layer's device, in words."""
    layer_dev = np.where(table.position >= 0, layer_on_gpu[np.maximum(table.position, 0)], False)
    off = table.by_group(table.nbytes, layer_dev & ~on_gpu)
    on = table.by_group(table.nbytes, ~layer_dev & on_gpu)
    words = [
        f"{g} to the CPU ({format_bytes(b)})"
        for g, b in zip(tensor_groups.GROUPS, off, strict=True)
        if b
    ]
    words += [
        f"{g} to the GPU ({format_bytes(b)})"
        for g, b in zip(tensor_groups.GROUPS, on, strict=True)
        if b
    ]
    return ", ".join(words) or "nothing moved"
