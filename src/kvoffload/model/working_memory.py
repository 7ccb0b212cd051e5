"""One layer's working set in the prefill: the activations a GPU holds while a prompt passes a layer.

A layer runs in stages and frees each stage's temporaries before the next, so the GPU must hold the
largest stage of the largest layer, not the sum. The stages follow FlexGen's PyTorch layers
(FlexLLMGen flexllmgen/pytorch_backend.py @ 004ffef8, ``mha`` L298-365 and ``mlp`` L569-584), fp16:

- attention, at the softmax: the layer's input and its normed copy, q, k and v (one row per
  token), and the score matrix twice, since ``torch.where`` (L340) and ``F.softmax`` (L342) each
  return a new one while the last is still referenced; plus the boolean causal mask (L336);
- attention, after the value product: the same rows, one score matrix (``attn_weights`` stays
  referenced until ``mha`` returns), the value and its reshaped copy (L344-346);
- MLP: the input, the intermediate activation (gate, up and their product for a gated MLP) and
  the output (L577-582).

Eager attention builds the whole (query × key) score matrix: ``batch × heads × prompt²`` entries
when the prompt passes at once, as in FlexGen and Hugging Face. Engines that prefill in chunks
with a fused attention kernel (vLLM's FlashAttention backends, llama.cpp with flash attention)
keep the scores in on-chip tiles and hold only a chunk's rows: ``scores=False`` with ``chunk``.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numpy.typing import ArrayLike

from kvoffload.inputs.models import Model

FP16 = 2  # bytes per activation: engines keep activations in fp16 or bf16
MASK = 1  # bytes per entry of the boolean causal mask
# Tokens one forward pass of a chunked prefill takes across the batch: vLLM's default
# max_num_batched_tokens on GPUs under 70 GiB when serving (vllm/engine/arg_utils.py,
# EngineArgs defaults: UsageContext.OPENAI_API_SERVER 2048) and llama.cpp's default n_batch.
CHUNK_TOKENS = 2048


@cache
def _widths(model: Model) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per distinct layer: (rows held at the softmax, after the value product, in the MLP, has scores).

    Widths are activation elements per token; the layers are reduced to their distinct kinds.
    """
    h, nh = model.hidden, model.n_heads
    if model.mla:  # the prefill expands the latent into every head's k and v
        a = model.mla
        q = k = nh * (a.qk_nope_head_dim + a.qk_rope_head_dim)
        v = o = nh * a.v_head_dim
    else:
        q = nh * model.head_dim
        k = model.n_kv_heads * model.head_dim
        v = model.n_kv_heads * model.v_head_dim
        o = nh * model.v_head_dim
    gated = 3 if model.mlp == "gated" else 1  # gate, up and their product; else one activation
    dense = gated * model.intermediate
    moe = model.moe
    kinds = getattr(model, "kinds", ("attention",) * model.n_layers)
    moe_layers = model.moe_layers or (False,) * model.n_layers
    rows = set()
    for i in range(model.n_layers):
        if moe and moe_layers[i]:
            width = gated * (
                moe.experts_per_token * moe.expert_intermediate
                + moe.n_shared_experts * moe.shared_intermediate
            )
        else:
            width = dense
        rows.add((kinds[i] == "attention", width))
    attends, mlp = (np.array(x) for x in zip(*sorted(rows), strict=True))
    base = 2 * h + q + k + v  # input, normed input, q, k, v
    at_softmax = np.full(len(mlp), float(base))
    after_value = at_softmax + 2 * o  # the value and its reshaped copy
    return at_softmax, after_value, 2.0 * h + mlp, attends.astype(bool)


@cache
def _fused_widths(model: Model) -> tuple[float, float]:
    """Return the bytes per row of the largest attention and MLP stage with no score matrix.

    Rows are never negative, so the largest stage of rows x width is rows x the largest width,
    the same product ``prefill_stage_bytes`` takes over every layer kind.
    """
    at_softmax, after_value, mlp, _ = _widths(model)
    attention = np.max(np.maximum(FP16 * at_softmax, FP16 * after_value))
    return float(attention), float(np.max(FP16 * mlp))


def prefill_stage_bytes(
    model: Model,
    prompt: ArrayLike,
    batch: ArrayLike = 1,
    *,
    chunk: int | None = None,
    scores: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Return the bytes of the largest attention stage and of the largest MLP stage of one layer.

    ``prompt`` tokens of each of ``batch`` requests pass the layer: all at once (``chunk=None``)
    or at most ``chunk`` tokens per pass across the batch. With ``scores`` the attention builds
    the score matrix over the whole prompt (eager attention); without, a fused kernel keeps it
    on chip. Arrays broadcast over ``prompt`` and ``batch``.
    """
    if not scores:  # no score matrix: each stage is the rows times its widest layer's width
        s, b = np.asarray(prompt, dtype=np.float64), np.asarray(batch, dtype=np.float64)
        rows = b * s if chunk is None else np.minimum(b * s, float(chunk))
        attention, mlp = _fused_widths(model)
        return rows * attention, rows * mlp
    s = np.asarray(prompt, dtype=np.float64)[..., None]
    b = np.asarray(batch, dtype=np.float64)[..., None]
    rows = b * s if chunk is None else np.minimum(b * s, float(chunk))
    at_softmax, after_value, mlp, attends = _widths(model)
    per_row = np.where(attends, s, 0.0) if scores else np.zeros_like(s * at_softmax)
    score = FP16 * model.n_heads * per_row  # one score matrix row (all heads) per query row
    mask = MASK * per_row
    attention = rows * np.maximum(
        FP16 * at_softmax + 2 * score + mask, FP16 * after_value + score + mask
    )
    return np.max(attention, axis=-1), np.max(rows * FP16 * mlp, axis=-1)


def prefill_working_bytes(
    model: Model,
    prompt: ArrayLike,
    batch: ArrayLike = 1,
    *,
    chunk: int | None = None,
    scores: bool = True,
) -> np.ndarray:
    """Return the bytes one layer's prefill holds at its peak (the largest stage of any layer)."""
    attention, mlp = prefill_stage_bytes(model, prompt, batch, chunk=chunk, scores=scores)
    return np.maximum(attention, mlp)
