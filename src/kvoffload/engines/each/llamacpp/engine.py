"""llama.cpp's prediction and its registry entry."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from kvoffload.engines.each.llamacpp import (
    attention,
    fit,
    kv_cells,
    prefill,
    row_split,
    tensor_parallel,
)
from kvoffload.engines.each.llamacpp.options import Options, ser_experts
from kvoffload.engines.each.llamacpp.placement import (
    _read_bytes,
    gpu_bytes_each,
    gpu_split,
    is_tensor_parallel,
    layers_per_gpu,
    override_rules,
    paged_bytes,
    placement,
    split_tensors,
    tensor_gpus,
    tensor_groups_summary,
)
from kvoffload.engines.each.llamacpp.step import _step_parts_at
from kvoffload.engines.llamacpp_prompt_cache import cache_rule
from kvoffload.engines.spec import EngineSpec, PrefixCache
from kvoffload.inputs.units import format_bytes
from kvoffload.model import decode, tensor_groups
from kvoffload.model.prediction import Prediction, Resolved, Scenario


def _shares(on_gpu: float, on_cpu: float) -> decode.Split:
    """Return the shares of bytes held on the GPU and in host memory."""
    total = on_gpu + on_cpu
    return decode.Split(on_gpu / total, on_cpu / total, 0.0) if total else decode.Split()


@dataclass(frozen=True)
class _Held:
    """Where a scenario's weights and KV sit: each tensor's device and the bytes per place."""

    table: tensor_groups.TensorTable
    gpus: np.ndarray  # each tensor's GPU (-1: the CPU), tensor_gpus' answer
    on_gpu: np.ndarray
    w_gpu: float
    w_cpu: float  # the token embeddings included
    kv_gpu: float
    kv_cpu: float
    paged: float  # weights past host capacity, left as file pages (mmap)
    gpu_each: tuple[float, ...] = ()  # each GPU's weights and KV, with several GPUs

    @property
    def memory(self) -> decode.Memory:
        """Return the bytes on the GPU, in host memory and read from disk."""
        return decode.Memory(
            gpu=np.asarray(self.w_gpu + self.kv_gpu),
            cpu=np.asarray(self.w_cpu + self.kv_cpu - self.paged),
            disk=np.asarray(self.paged),
            staging=np.asarray(0.0),
            gpu_each=self.gpu_each,
        )


# ik_llama.cpp's -mla: what an MLA model's cache holds (options.py); 2 and 3 the latent alone
MLA_CACHE = {0: "full", 1: "latent_and_v", 2: "latent", 3: "latent"}


def _as_run(sc: Scenario) -> Scenario:
    """Return the scenario as the engine runs it: the placement ``--fit`` picks where none is
    given; under ``-ser`` its tokens use fewer experts; under ik_llama.cpp's ``-mla 0`` or ``1``
    an MLA model caches more than the latent."""
    sc = fit.fitted(sc, lambda probe: _gpu_bytes_each(_held(_as_run(probe))), gpu_split)
    model = sc.model
    moe = model.moe
    if moe is not None and sc.options.ser:
        k = ser_experts(sc.options, moe.experts_per_token)
        if k != moe.experts_per_token:
            model = replace(model, moe=replace(moe, experts_per_token=k))
    if model.mla is not None and sc.options.mla is not None:
        cache = MLA_CACHE[sc.options.mla]
        if cache != model.mla.cache:
            model = replace(model, mla=replace(model.mla, cache=cache))
    if model is sc.model:
        return sc
    return replace(sc, model=model, setup=replace(sc.setup, model=model))


def _gpu_bytes_each(held: _Held) -> tuple[float, ...]:
    """Return each GPU's weights and KV (one GPU: all of them)."""
    return held.gpu_each or (held.w_gpu + held.kv_gpu,)


def _held(sc: Scenario) -> _Held:
    """Return where the scenario's weights and its final context's KV sit."""
    _, layer_on_gpu = placement(sc)
    table, gpus = tensor_gpus(sc)
    on_gpu = gpus >= 0
    w_gpu = float(table.nbytes[on_gpu].sum())
    w_cpu = float(table.nbytes[~on_gpu].sum())
    kv_layers = kv_cells.layer_bytes(sc)  # what llama.cpp allocates (-c, -np, --swa-full)
    kv_gpu = 0.0 if sc.options.no_kv_offload else float(kv_layers[layer_on_gpu[:-1]].sum())
    kv_cpu = float(kv_layers.sum()) - kv_gpu
    each = (
        tuple(gpu_bytes_each(sc, table, gpus, kv_layers).tolist()) if sc.system.n_gpus > 1 else ()
    )
    if each and is_tensor_parallel(sc):  # the weights every GPU keeps whole count once each
        w_gpu = float(sum(each)) - kv_gpu
    paged = paged_bytes(sc, w_cpu, kv_cpu)
    return _Held(table, gpus, on_gpu, w_gpu, w_cpu, kv_gpu, kv_cpu, paged, each)


def memory(sc: Scenario) -> decode.Memory:
    """Return the scenario's memory without its timing (what a search for a fit asks)."""
    attention.flash_attention(sc)  # a quantised V cache without it is refused here too
    if is_tensor_parallel(sc):
        tensor_parallel.check(sc)
    return _held(_as_run(sc)).memory


def predict(sc: Scenario) -> Prediction:
    """Return llama.cpp's time per token, prefill and memory for the scenario."""
    given, sc = sc, _as_run(sc)
    kv_cells.refuse(sc)
    system, model, o = sc.system, sc.model, sc.options
    if is_tensor_parallel(sc):
        tensor_parallel.check(sc)
    parts_at = _step_parts_at(sc, sc.batch)

    def per_token(_point: np.ndarray, context: np.ndarray) -> np.ndarray:
        p = parts_at(context)
        # llama.cpp runs the graph in order: the step is the sum of its parts
        return np.stack([p["gpu"] + p["cpu"] + p["link"], p["gpu"], p["cpu"], p["link"]])

    # the exact mean over every generated token (each part convex and piecewise linear in the
    # context between the windows: sums of maxima of terms linear in min(context, window))
    windows = decode.layers(model, sc.setup.weights).window
    tpot, gpu_s, cpu_s, link_s = decode.token_mean(per_token, sc.prompt, sc.generate, windows)
    ngl, layer_on_gpu = placement(sc)
    held = _held(sc)
    table, on_gpu, w_cpu = held.table, held.on_gpu, held.w_cpu
    w_gpu, kv_gpu, kv_cpu, paged = held.w_gpu, held.kv_gpu, held.kv_cpu, held.paged
    split = split_tensors(sc, table, held.gpus)  # row split or tensor parallel (none otherwise)
    ttft = prefill.ttft(sc, table, on_gpu, split)  # ubatches; ops on host weights where they run
    # --split-mode row: every ubatch's chunks pass each split matrix's input and output between GPUs
    ttft += row_split.prefill_s(sc, table, split)
    # tensor parallelism: each ubatch's all-reduces
    ttft += tensor_parallel.prefill_s(sc, table, split)
    ttft += attention.prefill_score_s(sc)  # without flash attention, the scores' passes
    if paged:  # mmap: weights past host capacity stay file pages, read back from disk every step
        step_read = float(_read_bytes(sc, table, sc.batch)[~on_gpu].sum()) / w_cpu
        disk_s = paged * step_read / system.storage.read_bandwidth.value
        tpot = tpot + disk_s
    else:
        disk_s = 0.0
    mem = held.memory
    first = int(np.argmax(layer_on_gpu)) if layer_on_gpu.any() else model.n_layers + 1
    where = (
        "all on the CPU"
        if not layer_on_gpu.any()
        else f"layers {first}–{model.n_layers - 1} and the output layer on the GPU"
        if first < model.n_layers
        else "the output layer on the GPU"
    )
    rules = override_rules(o)
    moved = (
        []
        if not rules
        else [
            f"{len(rules)} tensor override(s): {tensor_groups_summary(table, on_gpu, layer_on_gpu)}"
        ]
    )
    tp_split = bool(split.any()) and is_tensor_parallel(sc)
    reduces = tensor_parallel.collectives(table, split) if tp_split else 0
    kv_where = (
        "all KV in host memory (attention on the CPU)"
        if o.no_kv_offload
        else "each layer's KV split over the GPUs by heads"
        if tp_split
        else "each layer's KV with its layer"
    )
    tp = (
        [f"-sm {o.split_mode}: every GPU layer split over {system.n_gpus} GPUs, "
         f"{reduces} all-reduces a token"]
        if tp_split
        else []
    )  # fmt: skip
    return Prediction(
        scenario=given,
        tpot_s=float(tpot),
        ttft_s=ttft,
        streams_s={
            "gpu": float(gpu_s),
            "cpu": float(cpu_s),
            "h2d": float(link_s),
            "d2h": 0.0,
            "disk_read": float(disk_s),
            "disk_write": 0.0,
        },
        memory=mem,
        by_overlap_s={},
        resolved=Resolved(
            weights=_shares(w_gpu, w_cpu),
            kv=_shares(kv_gpu, kv_cpu),
            attention="cpu" if o.no_kv_offload else "gpu",
            overlap="none",  # llama.cpp runs the graph's nodes in order
            pinned=sc.pinned_or(True),
            weights_format=sc.setup.weights,
            kv_format=sc.setup.kv,
        ),
        settings={
            "n_gpu_layers": ngl,
            "gpu_layers_from": first,
            "no_kv_offload": o.no_kv_offload,
            "n_cpu_moe": o.n_cpu_moe,
            # --fit's choice where it set the placement (none given and all on the GPU too big)
            "fit": {
                "n_gpu_layers": o.n_gpu_layers,
                "tensor_split": list(o.tensor_split),
                "override_tensor": list(o.override_tensor),
            }
            if fit.applies(given) and (o.n_gpu_layers is not None or o.override_tensor)
            else None,
            "layers_per_gpu": layers_per_gpu(sc),  # the output layer counts, as in -ngl
            "split_mode": o.split_mode,
            "all_reduces_per_token": reduces,
            "experts_per_token": model.moe.experts_per_token if model.moe else None,
            "tensor_split": list(o.tensor_split),
            "gpu_bytes_each": list(held.gpu_each),
            "cpu_moe": o.cpu_moe,
            "override_tensor": list(o.override_tensor),
            "weights_on_cpu_by_group": {
                g: float(b)
                for g, b in zip(
                    tensor_groups.GROUPS, table.by_group(table.nbytes, ~on_gpu), strict=True
                )
                if b
            },
        },
        cpu_work=(o.no_kv_offload and kv_cpu > 0, bool((~on_gpu & (table.position >= 0)).any())),
        policy="; ".join([f"-ngl {ngl}: {where}", *moved, *tp, kv_where, *_paging(paged)]),
    )


def _paging(paged: float) -> list[str]:
    """Return, when mmap leaves weights on disk, the policy's words for it."""
    return [f"mmap: {format_bytes(paged)} of weights read from disk each step"] if paged else []


ENGINE = EngineSpec(
    name="llamacpp",
    mixed_gpus=True,
    options=Options,
    predict=predict,
    placement_option="options.n_gpu_layers (and options.no_kv_offload)",
    pin_option=None,
    refuses={
        "attention": "say options.no_kv_offload: true to keep the KV cache in host memory "
        "and attend on the CPU",
        "overlap": "llama.cpp runs the graph's nodes in order and has no overlap option; "
        "use engine: generic to compare overlap modes",
    },
    # llama.cpp never copies weights to the GPU per step, so there is nothing to stream
    routing_ignored=(
        ("stream", "gpu_hit_rate"),
        "llama.cpp computes each expert where it lies and never streams experts to the GPU; "
        "say where experts live with options.n_cpu_moe, options.cpu_moe or "
        "options.override_tensor instead",
    ),
    prefix_cache=PrefixCache(tiers=("gpu", "cpu"), rule=cache_rule),
    memory=memory,
)
