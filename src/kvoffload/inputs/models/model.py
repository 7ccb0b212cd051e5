"""Model: an architecture with its weight tensors, parameters and weight bytes counted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kvoffload.inputs.models.architecture import Architecture, Tensor
from kvoffload.inputs.models.tensor_bytes import _tensor_bytes
from kvoffload.inputs.models.tensors import _tensors
from kvoffload.inputs.precision import WeightFormat


class Model(Architecture):
    """A decoder-only transformer's shape, enough to size its weights and KV cache."""

    # A subclass with no fields of its own, so that the tensor lists (tensors.py) read an
    # Architecture and this module counts them: the imports go one way. __init__, equality,
    # hashing, pickling and dataclasses.replace are Architecture's.
    # The model is frozen: what is counted from its tensors is counted once per instance and
    # kept in its __dict__ (outside the dataclass fields, so equality, hashing and
    # dataclasses.replace do not see it). Cached arrays are read-only.
    def _memo(self, key: Any, make: Any) -> Any:
        memo = self.__dict__.setdefault("_counted", {})
        if key not in memo:
            memo[key] = make()
        return memo[key]

    def tensors(self) -> tuple[Tensor, ...]:
        """Return every weight tensor class of the model."""
        return self._memo("tensors", lambda: _tensors(self))

    @property
    def ships_mxfp4_experts(self) -> bool:
        """True when the model is published with its routed experts in MXFP4 (gpt-oss)."""
        return self.moe is not None and self.model_type == "gpt_oss"

    @property
    def params(self) -> int:
        """Return the total number of parameters."""
        return self._memo("params", lambda: sum(t.params for t in self.tensors()))

    @property
    def active_params(self) -> int:
        """Return the parameters one token runs through (all of them for a dense model).

        For a mixture of experts: every parameter but the routed experts a token does not use
        and, when the embeddings are untied, the input embedding table, which a token only
        looks a row up in. This is how OpenAI counts gpt-oss's active parameters (model card,
        arXiv 2508.10925: 5.13 B for gpt-oss-120b, the unembedding in, the embedding out).
        """
        if not self.moe:
            return self.params
        unused = self.moe.n_experts - self.moe.experts_per_token
        idle = 0
        for t in self.tensors():
            if t.role.startswith("exp_") or t.expert:
                idle += t.params // t.count * unused
            elif t.role == "embed" and not self.tie_embeddings:
                idle += t.params
        return self.params - idle

    def tensor_bytes(self, fmt: WeightFormat) -> tuple[tuple[Tensor, int], ...]:
        """Return every weight tensor class with its bytes in format ``fmt``."""
        return self._memo(
            ("tensor_bytes", fmt),
            lambda: tuple((t, _tensor_bytes(self, t, fmt)) for t in self.tensors()),
        )

    def weight_bytes(self, fmt: WeightFormat) -> WeightBytes:
        """Return the weight bytes in format ``fmt``: per layer, embeddings, output layer."""
        return self._memo(("weight_bytes", fmt), lambda: self._count_weight_bytes(fmt))

    def _count_weight_bytes(self, fmt: WeightFormat) -> WeightBytes:
        per_layer = np.zeros(self.n_layers, dtype=np.int64)
        experts = np.zeros(self.n_layers, dtype=np.int64)
        embedding = output = 0
        for t, b in self.tensor_bytes(fmt):
            if t.layer is not None:
                per_layer[t.layer] += b
                if t.role.startswith("exp_"):
                    experts[t.layer] += b
            elif t.role == "output" or (t.role == "norm_final"):
                output += b
            else:
                embedding += b
        per_layer.flags.writeable = False
        experts.flags.writeable = False
        return WeightBytes(fmt, per_layer, int(embedding), int(output), experts)


@dataclass(frozen=True)
class WeightBytes:
    """Weight bytes of a model in one format, split where engines split them."""

    fmt: WeightFormat
    per_layer: np.ndarray  # bytes of each repeating layer
    embedding: int  # token (and position) embeddings
    output: int  # final norm and output projection (lm_head); 0 extra when tied in HF formats
    experts: np.ndarray | None = None  # of per_layer, the routed experts' matrices (0: dense)

    @property
    def total(self) -> int:
        """Return all bytes."""
        return int(self.per_layer.sum()) + self.embedding + self.output
