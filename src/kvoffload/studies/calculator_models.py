"""What the calculator page reads of each catalog model: its layer classes per weight format
(``decode.layers``, with the parameters vLLM offloads), its KV bytes per token per KV format, its
prefill working set per token and its constants, as JSON-ready values."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from kvoffload.engines import vllm_weight_offload
from kvoffload.inputs.models import Model
from kvoffload.inputs.precision import KvFormat, WeightFormat
from kvoffload.model import decode, kv, working_memory

# the weight formats a catalog model takes: all but the types a .gguf file gives its tensors
WEIGHT_FORMATS = tuple(f for f in WeightFormat if f is not WeightFormat.GGUF)


def _number(x: float) -> float | int:
    """Return ``x`` as an int when it is one (a shorter JSON text, the same double)."""
    x = float(x)
    return int(x) if x.is_integer() and abs(x) < 2**53 else x


def _numbers(values: np.ndarray) -> list:
    return [_number(v) for v in np.asarray(values, dtype=np.float64)]


def runs(items: Iterable[Any]) -> list[list]:
    """Return ``items`` run-length encoded: [[item, count], ...] (equal neighbours merged)."""
    out: list[list] = []
    for item in items:
        if out and out[-1][0] == item:
            out[-1][1] += 1
        else:
            out.append([item, 1])
    return out


def layer_classes(model: Model, fmt: WeightFormat) -> dict[str, Any]:
    """Return ``decode.layers`` for one weight format as the page reads it (windows: None = full)."""
    lay = decode.layers(model, fmt)
    return {
        "count": _numbers(lay.count),
        "order": runs(lay.order),
        "window": [None if np.isinf(w) else _number(w) for w in lay.window],
        "kv_per_token": _numbers(lay.kv_per_token),
        "weight_bytes": _numbers(lay.weight_bytes),
        "expert_bytes": _numbers(lay.expert_bytes),
        "dense_flops": _numbers(lay.dense_flops),
        "attn_flops": _numbers(lay.attn_flops),
        "state_values": _numbers(lay.state_values),
        "resident_bytes": _number(decode.resident_weight_bytes(model, fmt)),
        # vllm_weight_offload: one layer of each class's parameters in vLLM's order (head: none)
        "vllm_params": _vllm_params(model, fmt, lay.order),
    }


def _vllm_params(model: Model, fmt: WeightFormat, order: tuple[int, ...]) -> list[list]:
    """Return, per layer class, the parameter bytes of its first decoder layer, as vLLM offloads."""
    per_layer = vllm_weight_offload.layer_parameters(model, fmt)
    out: list[list] = [[] for _ in range(max(order) + 1)]
    for position, cls in enumerate(order[: model.n_layers]):
        if not out[cls]:
            out[cls] = _numbers(np.asarray([b for _, b in per_layer[position]]))
    return out


def working_row_bytes(model: Model) -> float:
    """Return the prefill working set per token row (B): ``memory``'s chunked, fused-kernel case.

    Without the score matrix, ``working_memory.prefill_working_bytes`` grows linearly with the
    rows a pass holds, ``min(batch x prompt, CHUNK_TOKENS)``: the page multiplies this by them.
    """
    one = working_memory.prefill_working_bytes(
        model, 1, 1, chunk=working_memory.CHUNK_TOKENS, scores=False
    )
    return float(one)


def model_entry(model: Model) -> dict[str, Any]:
    """Return one model's constants, layer classes per weight format and KV bytes per KV format."""
    lay = decode.layers(model, WeightFormat.BF16)
    return {
        "id": model.id,
        "name": model.name,
        "max_positions": model.max_positions,
        "moe": model.moe is not None,
        "expert_use": list(lay.expert_use),
        "qo_bytes": _number(lay.qo_bytes),
        "working_row_bytes": _number(working_row_bytes(model)),
        "attention_layers": int(np.count_nonzero(model.attention_layers)),
        "kv_token_bytes": {
            f.value: _number(kv.attention_layer_token_bytes(model, f)) for f in KvFormat
        },
        "layers": {f.value: layer_classes(model, f) for f in WEIGHT_FORMATS},
    }
