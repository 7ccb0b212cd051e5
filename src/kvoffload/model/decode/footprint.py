"""What each tier holds: weights, KV and the GPU's staging buffers and prefill working set."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from kvoffload.inputs.models import Model
from kvoffload.model import working_memory
from kvoffload.model.decode.kv_bytes import _kv_class_bytes, _kv_total
from kvoffload.model.decode.layer_classes import layers, resident_weight_bytes
from kvoffload.model.decode.placement import Setup
from kvoffload.model.decode.traffic import staged_weight_bytes


@dataclass(frozen=True)
class Memory:
    """Bytes each tier holds at the end of generation (weights, KV and staging buffers)."""

    gpu: np.ndarray
    cpu: np.ndarray
    disk: np.ndarray
    staging: np.ndarray
    # each GPU's bytes, where an engine places things GPU by GPU (llama.cpp's split); () else
    gpu_each: tuple[float, ...] = ()


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
    kvb = _kv_class_bytes(setup, lay)
    # streamed modules, per layer (none where kernels read them in place)
    weights_staged = (
        staged_weight_bytes(setup, lay) if p.staged_weights else np.zeros_like(lay.weight_bytes)
    )
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
