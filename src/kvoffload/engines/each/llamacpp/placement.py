"""Where llama.cpp puts each tensor: -ngl, the GPU split, tensor overrides, and the rates of the CPU side."""

from __future__ import annotations

import numpy as np

from kvoffload.engines.each.llamacpp.options import Options, _parse_rule
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


def gpu_split(sc: Scenario) -> np.ndarray:
    """Return the GPU of each layer position and the output layer (-1: on the CPU).

    ``--split-mode layer`` (the default) with no ``--tensor-split``: the split points are each
    device's free memory, normalised and summed, and GPU layer ``il`` goes to
    ``upper_bound(splits, (il - i_gpu_start) / act_gpu_layers)`` (ggml-org/llama.cpp
    src/llama-model.cpp ``load_tensors`` at a5410f046c01d01330c8a42f13b64a211fedf2c3). The GPUs of
    a profile are alike, so each holds an equal run of consecutive layers.
    """
    ngl, on_gpu = placement(sc)
    count = sc.system.gpu.count
    act = min(ngl, sc.model.n_layers + 1)
    start = int(np.argmax(on_gpu)) if on_gpu.any() else len(on_gpu)
    splits = np.arange(1, count + 1) / count
    pos = (np.arange(len(on_gpu)) - start) / max(act, 1)
    return np.where(on_gpu, np.searchsorted(splits, pos, side="right"), -1)


def gpu_boundaries(sc: Scenario) -> int:
    """Return how many times a token's graph passes from one GPU to the next (layer split)."""
    used = gpu_split(sc)
    return max(len(set(used[used >= 0].tolist())) - 1, 0)


def layers_per_gpu(sc: Scenario) -> list[int]:
    """Return how many layer positions (the output layer counts) each GPU holds."""
    split = gpu_split(sc)
    return np.bincount(split[split >= 0], minlength=sc.system.gpu.count).tolist()


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
    """Return the model's tensors and, per tensor, True where its weights live on the GPU."""
    table = tensor_groups.tensor_table(sc.model, sc.setup.weights)
    _, layer_on_gpu = placement(sc)
    on_gpu = np.where(table.position >= 0, layer_on_gpu[np.maximum(table.position, 0)], False)
    forced = tensor_groups.match_overrides(table, override_rules(sc.options))
    on_gpu = np.where(forced == "gpu", True, np.where(forced == "cpu", False, on_gpu))
    return table, on_gpu.astype(bool)


def cpu_weight_rate(sc: Scenario) -> float:
    """Return the rate (B/s) at which CPU-side matmuls stream their weights (model/cpu_rate.py)."""
    o = sc.options
    return cpu_rate.weight_stream_rate(sc.system.host, sc.setup.weights, o.threads, o.numa)


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
