"""The model's layers grouped into classes of identical layers, and the weight bytes a step reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

import numpy as np

from kvoffload.inputs.models import Model
from kvoffload.inputs.precision import WeightFormat
from kvoffload.model import tensor_groups

_MEMO_ENTRIES = 256  # Layers.derived keeps at most this many keys per Layers, then starts over


@dataclass(frozen=True)
class Layers:
    """The model's layers grouped into classes of identical layers, plus the output head."""

    count: np.ndarray  # layers in each class
    order: tuple[int, ...]  # the class of each position, embedding-free, head last
    window: np.ndarray  # tokens a layer holds at most (inf: full attention; head, recurrent: 0)
    kv_per_token: np.ndarray  # bytes one token adds to one layer's cache
    weight_bytes: np.ndarray  # bytes of one layer's weights
    expert_bytes: np.ndarray  # of which routed experts
    dense_flops: np.ndarray  # FLOPs per token through the matmuls (active experts only)
    attn_flops: np.ndarray  # FLOPs per token per cached position
    qo_bytes: int  # query out + attention output back, per token, when the CPU attends
    expert_use: tuple[int, int]  # (experts per token, experts) or (1, 1)
    # values of fixed state one request keeps in one layer (gated DeltaNet, Mamba; else 0),
    # scaled by the KV format's state bytes per value in stream_times: a step reads it and
    # writes it back once per request, whatever the context
    state_values: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # bytes and parameters of one layer of each class, per tensor group (tensor_groups.GROUPS)
    group_bytes: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    group_params: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    # what the step derives from these classes alone, per setup key (see ``derived``); a new
    # one for every Layers, ``replace`` included, so another layout never reads this one's
    memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def derived(self, key: tuple, make: Callable[[], Any]) -> Any:
        """Return ``make()`` for ``key``, computed once per key for these classes (read-only)."""
        try:
            return self.memo[key]
        except KeyError:
            pass
        except TypeError:  # a key holding an array (shares over a sweep): computed, not kept
            return make()
        value = make()
        for x in value if isinstance(value, tuple) else (value,):
            if isinstance(x, np.ndarray):
                x.flags.writeable = False
        if len(self.memo) >= _MEMO_ENTRIES:  # searches over shares make a key per try
            self.memo.clear()
        self.memo[key] = value
        return value


@cache
def layers(model: Model, weights: WeightFormat) -> Layers:
    """Return the model's layer classes for a weight format."""
    wb = model.weight_bytes(weights)
    per_layer_expert = np.zeros(model.n_layers)
    per_layer_params = np.zeros(model.n_layers)
    per_layer_expert_params = np.zeros(model.n_layers)
    head_params = 0
    for t in model.tensors():
        if t.layer is None:
            if t.role == "output" or (t.role == "embed" and model.tie_embeddings):
                head_params += t.params
            continue
        per_layer_params[t.layer] += t.params
        if t.role.startswith("exp_"):
            per_layer_expert_params[t.layer] += t.params
    if model.moe:
        # the routed experts' own bytes: a format may store them apart (gpt-oss: MXFP4 experts,
        # 16-bit attention)
        per_layer_expert = np.asarray(wb.experts, dtype=np.float64)
    k, n = (model.moe.experts_per_token, model.moe.n_experts) if model.moe else (1, 1)
    active_params = per_layer_params - per_layer_expert_params * (1 - k / n)
    attn = 2 * model.n_heads * (model.head_dim + model.v_head_dim)
    a = model.mla
    if a and a.cache == "full":  # standard attention over every head's decompressed K and V
        attn = 2 * model.n_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim)
    elif a:  # absorbed MLA attends over the latent
        attn = 2 * model.n_heads * (2 * a.kv_lora_rank + a.qk_rope_head_dim)
    spans = model.windows  # 0 for a recurrent layer: it caches no token
    attends = model.attention_layers
    state = model.state_values_per_layer()
    keys = [
        (
            float(spans[i]),
            float(wb.per_layer[i]),
            float(per_layer_expert[i]),
            float(active_params[i]),
            float(state[i]),
            float(attends[i]),
        )
        for i in range(model.n_layers)
    ]
    unique = list(dict.fromkeys(keys))
    order = [unique.index(key) for key in keys]
    # tied embeddings: the output projection reads the embedding table, every step
    head_bytes = wb.output + (wb.embedding if model.tie_embeddings else 0)
    head = (0.0, float(head_bytes), 0.0, float(head_params), 0.0, 0.0)
    unique.append(head)
    order.append(len(unique) - 1)
    arr = np.array(unique)
    count = np.bincount(order, minlength=len(unique)).astype(float)
    attention = arr[:, 5] > 0  # the head and recurrent layers cache no token and attend over none
    group_bytes, group_params = _class_rows(model, weights, order)
    # A recurrent layer's per-token work on its state (a few FLOPs per state value) is left out:
    # beside its matmuls it is small, and its state traffic (state_values) bounds it first.
    return Layers(
        count=count,
        order=tuple(order),
        window=arr[:, 0],
        kv_per_token=np.where(attention, 1.0, 0.0),  # scaled by the KV format in stream_times
        weight_bytes=arr[:, 1],
        # routed experts' bytes, their per-expert biases included (read per touched expert)
        expert_bytes=group_bytes[:, tensor_groups.GROUPS.index("experts")],
        dense_flops=2 * arr[:, 3],
        attn_flops=np.where(attention, float(attn), 0.0),
        qo_bytes=2 * 2 * model.n_heads * model.v_head_dim,
        expert_use=(k, n),
        state_values=arr[:, 4],
        group_bytes=group_bytes,
        group_params=group_params,
    )


def _class_rows(model: Model, weights: WeightFormat, order: list[int]) -> tuple[np.ndarray, ...]:
    """Return per-class rows of the position x group bytes and parameters (a class's first layer)."""
    nbytes, params = tensor_groups.position_groups(model, weights)
    first = [order.index(c) for c in range(max(order) + 1)]
    return nbytes[first], params[first]


@cache
def _classes_first(model: Model, weights: WeightFormat, ndim: int) -> Layers:
    """Return the layer classes with their per-class rows on a leading axis, then ``ndim`` of size 1.

    Elementwise work over a sweep runs several times faster when the class axis (a handful of
    classes) is not the innermost one; combine and _stream_times take either layout.
    """
    lay = layers(model, weights)
    col = (1,) * ndim
    return replace(
        lay,
        **{
            name: getattr(lay, name).reshape(len(lay.count), *col, *getattr(lay, name).shape[1:])
            for name in (
                "window", "kv_per_token", "weight_bytes", "expert_bytes", "dense_flops",
                "attn_flops", "state_values", "group_bytes", "group_params",
            )
        },
    )  # fmt: skip


@cache
def step_weight_bytes(model: Model, weights: WeightFormat) -> float:
    """Return the weight bytes one decode step reads: every layer and the output head (B).

    The embedding table is left out (a step reads one row of it per token); with tied embeddings
    the head reads the table, so it is in.
    """
    lay = layers(model, weights)
    return float(lay.weight_bytes @ lay.count)


@cache
def resident_weight_bytes(model: Model, weights: WeightFormat) -> float:
    """Return the weight bytes a tier must hold: those a step reads plus the embedding table (B).

    This is every tensor of the model (the ``total`` of its weight bytes): the table takes memory
    wherever the weights live even though a step reads only one row of it per token.
    """
    table = 0 if model.tie_embeddings else model.weight_bytes(weights).embedding
    return step_weight_bytes(model, weights) + float(table)
