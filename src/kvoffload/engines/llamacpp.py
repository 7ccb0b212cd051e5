"""llama.cpp: ``--n-gpu-layers`` moves layers, weights and their compute, not just the cache.

The last N layers (counting the output layer) live on the GPU and run there
(``i_gpu_start = n_layer + 1 - N`` in llama.cpp's layer placement); the others stay in host
memory and run on the CPU at host memory bandwidth. A layer's KV cache lives with the layer
unless ``no_kv_offload`` keeps all of it in host memory, where attention then runs on the CPU.

Two engine constants, each derived from a published llama.cpp measurement on another machine than
the ones the validation checks, apply to every scenario (both can be overridden in ``options``):

- ``gpu_share``: the share of the GPU's streaming bandwidth that llama.cpp's decode kernels reach
  at batch 1, launch gaps included. From PR #6766: LLaMA 2 7B Q4_0 text generation on an RTX 4090
  at 138.31 tokens/s on master (before CUDA graphs), against that card's measured bandwidth.
- ``split_sync_us``: what each hand-over between the CPU and CUDA backends costs (synchronise,
  copy, wake the CPU threads). From PR #7526: LLaMA 7B Q4_0 on an RTX 3060 Laptop GPU, 66.24
  tokens/s with the cache on the GPU and 45.91 with ``--no-kv-offload`` (threadpool build), whose
  difference is 64 hand-overs per token, two per layer.

The hidden state enters the GPU once per token (the token embeddings stay in host memory) and the
logits come back; with ``no_kv_offload`` every GPU layer hands its attention to the CPU and back.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kvoffload.model import decode, kv
from kvoffload.model.prediction import Prediction, Resolved, Scenario
from kvoffload.spec import catalog


@cache
def constants() -> dict:
    """Return llama.cpp's engine constants with their sources (catalog/engine_constants.yaml)."""
    return catalog.load("engine_constants")["llamacpp"]


def gpu_share_default() -> float:
    """Return the share of streaming bandwidth llama.cpp's decode kernels reach (PR #6766)."""
    return float(constants()["gpu_share"]["value"])


def split_sync_s_default() -> float:
    """Return the seconds one CPU<->GPU hand-over costs (PR #7526)."""
    return float(constants()["split_sync_us"]["value"]) * 1e-6


class Options(BaseModel):
    """llama.cpp's options that decide placement."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    n_gpu_layers: int | None = Field(None, ge=0, le=100_000, strict=True)  # default: everything
    no_kv_offload: bool = Field(False, strict=True)
    gpu_share: float | None = Field(None, gt=0, le=1)  # default: catalog/engine_constants.yaml
    split_sync_us: float | None = Field(None, ge=0, le=100_000)  # default: from PR #7526


def placement(sc: Scenario) -> tuple[int, np.ndarray]:
    """Return (n_gpu_layers, a mask over the layer positions and the output layer on the GPU)."""
    n = sc.model.n_layers
    ngl = sc.options.n_gpu_layers if sc.options.n_gpu_layers is not None else n + 1
    ngl = min(ngl, n + 1)
    i_gpu_start = max(n + 1 - ngl, 0)
    return ngl, np.arange(n + 1) >= i_gpu_start


def _constants(sc: Scenario) -> tuple[float, float]:
    o = sc.options
    share = o.gpu_share if o.gpu_share is not None else gpu_share_default()
    sync = o.split_sync_us * 1e-6 if o.split_sync_us is not None else split_sync_s_default()
    return share, sync


def step_parts(sc: Scenario, context: np.ndarray, batch: float) -> dict[str, np.ndarray]:
    """Return seconds per token on the GPU, on the CPU and crossing devices, over ``context``."""
    system, model = sc.system, sc.model
    share, sync = _constants(sc)
    pinned = sc.pinned_or(True)  # the CUDA backend copies through pinned host buffers
    lay = decode.layers(model, sc.setup.weights)
    _, on_gpu = placement(sc)
    order = np.array(lay.order)
    c = len(lay.count)
    gpu_count = np.bincount(order[on_gpu], minlength=c).astype(float)
    cpu_count = np.bincount(order[~on_gpu], minlength=c).astype(float)
    nkvo = sc.options.no_kv_offload
    kv_split = decode.Split(0.0, 1.0, 0.0) if nkvo else decode.Split()
    gsetup = decode.Setup(
        system,
        model,
        sc.setup.weights,
        sc.setup.kv,
        decode.Placement(kv=kv_split, attention="cpu" if nkvo else "gpu", pinned=pinned),
    )
    ctx = np.asarray(context, dtype=np.float64)
    per = decode.stream_times(gsetup, ctx, batch)
    gpu = per["gpu"] @ gpu_count / share
    attn_cpu = per["cpu"] @ gpu_count  # -nkvo: the GPU layers' attention runs on the CPU
    link = (per["h2d"] + per["d2h"]) @ gpu_count
    # CPU layers: weights and cache streamed from host DRAM, or FLOPs at the CPU's rate
    held = np.minimum(ctx[..., None], lay.window)
    kvb = lay.kv_per_token * float(kv.bytes_per_token_per_layer(model, sc.setup.kv)[0])
    bytes_cpu = lay.weight_bytes + batch * held * kvb
    flops_cpu = batch * (lay.dense_flops + lay.attn_flops * held)
    cpu_layers = (
        np.maximum(
            bytes_cpu / system.host.memory_bandwidth.value, flops_cpu / system.host.flops.value
        )
        @ cpu_count
    )
    crossings = 0.0
    if on_gpu.any():  # the hidden state enters the GPU where the CPU part (or the lookup) ends
        hidden = batch * model.hidden * 2
        crossings = (
            hidden / system.copy_rate("h2d", pinned=pinned) + system.link.latency.value + sync
        )
    if on_gpu[-1]:  # logits come back to the host for sampling
        crossings += (
            batch * model.vocab * 4 / system.copy_rate("d2h", pinned=pinned)
            + system.link.latency.value
            + sync
        )
    if nkvo:  # every GPU layer hands its attention to the CPU and takes the result back
        crossings += 2 * sync * float(gpu_count[lay.attn_flops > 0].sum())
    return {"gpu": gpu, "cpu": cpu_layers + attn_cpu, "link": link + crossings}


def _shares(on_gpu: float, on_cpu: float) -> decode.Split:
    """Return the shares of bytes held on the GPU and in host memory."""
    total = on_gpu + on_cpu
    return decode.Split(on_gpu / total, on_cpu / total, 0.0) if total else decode.Split()


def predict(sc: Scenario) -> Prediction:
    """Return llama.cpp's time per token, prefill and memory for the scenario."""
    system, model = sc.system, sc.model
    t = decode.samples(sc.generate)
    parts = step_parts(sc, sc.prompt + t, sc.batch)
    step = parts["gpu"] + parts["cpu"] + parts["link"]  # llama.cpp runs the graph in order
    ngl, on_gpu = placement(sc)
    lay = decode.layers(model, sc.setup.weights)
    order = np.array(lay.order)
    w_gpu = float(lay.weight_bytes[order[on_gpu]].sum())
    w_cpu = float(lay.weight_bytes[order[~on_gpu]].sum())
    final = sc.prompt + sc.generate
    kv_layers = kv.layer_bytes(model, final, sc.setup.kv) * sc.batch
    gpu_layer_mask = on_gpu[:-1]
    kv_gpu = 0.0 if sc.options.no_kv_offload else float(kv_layers[gpu_layer_mask].sum())
    kv_cpu = float(kv_layers.sum()) - kv_gpu
    # prefill: batches of 32+ tokens copy the CPU layers' weights to the GPU and run there
    on_gpu_setup = decode.Setup(system, model, sc.setup.weights, sc.setup.kv)
    ttft = float(decode.ttft(on_gpu_setup, sc.prompt, sc.batch)) + w_cpu / system.copy_rate(
        "h2d", pinned=sc.pinned_or(True)
    )
    mem = decode.Memory(
        gpu=np.asarray(w_gpu + kv_gpu),
        cpu=np.asarray(w_cpu + kv_cpu),
        disk=np.asarray(0.0),
        staging=np.asarray(0.0),
    )
    first = int(np.argmax(on_gpu)) if on_gpu.any() else model.n_layers + 1
    where = (
        "all on the CPU"
        if not on_gpu.any()
        else f"layers {first}–{model.n_layers - 1} and the output layer on the GPU"
        if first < model.n_layers
        else "the output layer on the GPU"
    )
    kv_where = (
        "all KV in host memory (attention on the CPU)"
        if sc.options.no_kv_offload
        else "each layer's KV with its layer"
    )
    return Prediction(
        scenario=sc,
        tpot_s=float(np.mean(step)),
        ttft_s=ttft,
        streams_s={
            "gpu": float(np.mean(parts["gpu"])),
            "cpu": float(np.mean(parts["cpu"])),
            "h2d": float(np.mean(parts["link"])),
            "d2h": 0.0,
            "disk_read": 0.0,
            "disk_write": 0.0,
        },
        memory=mem,
        by_overlap_s={},
        resolved=Resolved(
            weights=_shares(w_gpu, w_cpu),
            kv=_shares(kv_gpu, kv_cpu),
            attention="cpu" if sc.options.no_kv_offload else "gpu",
            overlap="none",  # llama.cpp runs the graph's nodes in order
            pinned=sc.pinned_or(True),
            weights_format=sc.setup.weights,
            kv_format=sc.setup.kv,
        ),
        settings={
            "n_gpu_layers": ngl,
            "gpu_layers_from": first,
            "no_kv_offload": sc.options.no_kv_offload,
        },
        policy=f"-ngl {ngl}: {where}; {kv_where}",
    )
