"""llama.cpp's prefill: the prompt in ubatches, each op run where its batch sends it.

The prompt's tokens (every sequence's) go through the graph ``n_ubatch`` at a time (``-ub``,
default 512; the last ubatch takes the rest). An op whose weights are in host memory runs on the
GPU when the CUDA backend asks for it: ``ggml_backend_cuda_device_offload_op`` wants an op whose
batch (``get_op_batch_size``: ``ne[1]`` of a matmul, ``ne[2]`` of a MoE matmul) is at least
``op_offload_min_batch_size``, 32 unless ``GGML_OP_OFFLOAD_MIN_BATCH`` says otherwise
(ggml-org/llama.cpp ggml/src/ggml-cuda/ggml-cuda.cu at 00108827d87949b538ad1821f81a6b111827fcda).
The scheduler then copies the weights to the GPU for that ubatch, every ubatch, and only the
experts the ubatch routes to (``ggml_backend_sched_compute_splits``); smaller batches compute on
the CPU where the weights are. ik_llama.cpp (``fork: ik_llama``) offloads a MoE op only when
``batch x active experts >= 32 x experts`` (its ggml-cuda.cu ``ggml_backend_cuda_offload_op`` at
8337e4cd3861406fc04e0854b1409cd1b027fbc9).

The copy runs at the link's pinned rate from the CUDA host buffer (``--no-mmap``, where
``GGML_CUDA_NO_PINNED`` is unset) and at its pageable rate from mapped file pages: the loader
avoids the host buffer type when it maps the model (src/llama-model-loader.cpp at
3074b500a5fffba5c9b84a7c14e4dc2248b3653c, "avoid using a host buffer when using mmap").

Every ubatch runs the whole graph, so the GPU reads its weights once per ubatch, of a MoE
tensor the experts that ubatch routes to: with small ubatches a MoE's prefill is bound by those
reads (PR #15631's ``-ub`` sweeps of Qwen3-30B-A3B on an RTX 4090 rise with the ubatch).

On the GPU, quantised GGUF matmuls run on the integer tensor cores (MMQ) where the GPU has them:
the profile's ``flops_int8`` at ``mmq_int8_share`` (fitted on PR #7676, catalog/
engine_constants.yaml); other weights at the profile's bf16 rate.
"""

from __future__ import annotations

import numpy as np

from kvoffload.engines.each.llamacpp.options import mmq_share_default
from kvoffload.engines.each.llamacpp.placement import cpu_weight_rate, layers_per_gpu, row_shares
from kvoffload.inputs.hardware import Gpu
from kvoffload.inputs.precision import WeightFormat
from kvoffload.model import decode, routing
from kvoffload.model.prediction import Scenario
from kvoffload.model.tensor_groups import TensorTable

OFFLOAD_MIN_BATCH = 32  # ggml-cuda.cu: op_offload_min_batch_size without GGML_OP_OFFLOAD_MIN_BATCH


def is_gguf_quant(fmt: WeightFormat) -> bool:
    """Return whether ``fmt`` is a quantised GGUF format (legacy, k-quant or i-quant blocks)."""
    return fmt.value.startswith(("q", "iq"))


def _gpu_prefill_rate(gpu: Gpu, fmt: WeightFormat) -> float:
    """Return one GPU's FLOP/s for llama.cpp's prefill matmuls: MMQ on its int8 tensor cores
    for a quantised GGUF format, else its dense rate as GEMMs reach it."""
    if gpu.flops_int8 is None or not is_gguf_quant(fmt):
        return gpu.compute_rate
    return gpu.flops_int8.value * mmq_share_default()


def prefill_rate(sc: Scenario) -> float:
    """Return the FLOP/s of llama.cpp's prefill matmuls on the scenario's GPU and weights.

    GPUs of different models (``more_gpus``) run their layers one after another: the rate is
    the layers' harmonic mean of their GPUs' rates.
    """
    fmt = sc.setup.weights
    counts = np.asarray(layers_per_gpu(sc), dtype=np.float64) if sc.system.more_gpus else None
    if counts is None or not counts.sum():
        return _gpu_prefill_rate(sc.system.gpu, fmt)
    rates = np.array([_gpu_prefill_rate(g, fmt) for g in sc.system.devices])
    return float(counts.sum() / (counts / rates).sum())


def _row_split_rate(sc: Scenario, table: TensorTable, split: np.ndarray, rate: float) -> float:
    """Return the prefill's FLOP/s with split weights: under ``--split-mode row`` the split
    matrices' FLOPs (``split``) run on every GPU at once, each its share of the rows (the slowest
    share last), the rest at ``rate``; under tensor parallelism all of it, the attention (split
    by heads) included."""
    if not split.any():
        return rate
    fmt = sc.setup.weights
    total = float(decode.prefill_flops(sc.model, sc.prompt, sc.batch))
    if sc.options.split_mode == "row":
        mine = 2.0 * sc.prompt * sc.batch * float(table.params[split].sum())
    else:
        mine = total
    rates = np.array([_gpu_prefill_rate(g, fmt) for g in sc.system.devices])
    seconds = (total - mine) / rate + mine * float(np.max(row_shares(sc) / rates))
    return total / seconds


def weights_pinned(sc: Scenario) -> bool:
    """Return whether host-resident weights sit in pinned memory (the CUDA host buffer)."""
    return sc.options.no_mmap and not sc.options.no_pinned


def offloaded(sc: Scenario, table: TensorTable, tokens: int) -> np.ndarray:
    """Return, per tensor, whether a ubatch of ``tokens`` runs its op on the GPU (never with
    ``--no-op-offload``: ``cparams.op_offload`` false keeps each op with its weights)."""
    if tokens < OFFLOAD_MIN_BATCH or sc.options.no_op_offload:
        return np.zeros(len(table.nbytes), dtype=bool)
    if sc.options.fork != "ik_llama":
        return np.ones(len(table.nbytes), dtype=bool)
    k, n = decode.layers(sc.model, sc.setup.weights).expert_use
    return ~table.routed | (tokens * k >= OFFLOAD_MIN_BATCH * n)


def _ubatch_s(sc: Scenario, table: TensorTable, on_gpu: np.ndarray, tokens: int) -> float:
    """Return the seconds one ubatch of ``tokens`` spends on host-resident weights."""
    k, n = decode.layers(sc.model, sc.setup.weights).expert_use
    touched = float(routing.touched_share(n, k, tokens, sc.setup.routing.effective_experts))
    read = table.nbytes * np.where(table.routed, touched, 1.0)  # the experts the ubatch uses
    host = ~on_gpu & (table.position >= 0)  # the token embeddings are looked up, not multiplied
    up = host & offloaded(sc, table, tokens)
    here = host & ~up
    upload = float(read[up].sum()) / sc.system.copy_rate("h2d", pinned=weights_pinned(sc))
    flops = 2 * tokens * table.params * np.where(table.routed, k / n, 1.0)
    cpu = max(
        float(read[here].sum()) / cpu_weight_rate(sc, threads=sc.options.threads_batch),
        float(flops[here].sum()) / sc.system.host.flops.value,
    )
    return upload + cpu


def gpu_read_bytes(sc: Scenario, table: TensorTable, reads: np.ndarray) -> float:
    """Return the weight bytes the GPU reads over the prompt: every ubatch runs the whole graph,
    so each reads the ``reads`` tensors again, of a MoE tensor the experts that ubatch routes to."""
    k, n = decode.layers(sc.model, sc.setup.weights).expert_use
    full, rest = divmod(sc.prompt * sc.batch, sc.options.ubatch)

    def one(tokens: int) -> float:
        touched = float(routing.touched_share(n, k, tokens, sc.setup.routing.effective_experts))
        return float((table.nbytes * np.where(table.routed, touched, 1.0))[reads].sum())

    return full * one(sc.options.ubatch) + (one(rest) if rest else 0.0)


def ttft(sc: Scenario, table: TensorTable, on_gpu: np.ndarray, split: np.ndarray) -> float:
    """Return llama.cpp's prefill time (s): the GPU's work plus each ubatch's host-side weights
    (``split``: the matrices ``--split-mode row`` splits over the GPUs)."""
    tokens = sc.prompt * sc.batch
    full, rest = divmod(tokens, sc.options.ubatch)
    host = ~on_gpu & (table.position >= 0)
    # the GPU reads its own weights and, once a ubatch is big enough, the ones copied to it,
    # every ubatch again (the token embeddings are looked up in host memory)
    uploaded = host & offloaded(sc, table, min(tokens, sc.options.ubatch))
    gpu_bytes = gpu_read_bytes(sc, table, (on_gpu | uploaded) & (table.position >= 0))
    setup = decode.Setup(sc.system, sc.model, sc.setup.weights, sc.setup.kv)
    rate = _row_split_rate(sc, table, split, prefill_rate(sc))
    gpu = float(decode.ttft(setup, sc.prompt, sc.batch, rate=rate, gpu_weight_bytes=gpu_bytes))
    host_s = full * _ubatch_s(sc, table, on_gpu, sc.options.ubatch)
    if rest:
        host_s += _ubatch_s(sc, table, on_gpu, rest)
    return gpu + host_s
