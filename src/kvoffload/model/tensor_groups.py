"""A model's weight tensors by layer position and group, with their GGUF names and bytes.

Each decoder layer's tensors fall in groups — attention, dense MLP, shared experts, routed experts,
the router, norms — and the model has its embeddings and an output layer. Placement by group (which
tier holds a group and where it is computed) and llama.cpp's per-tensor overrides (``-ot``) both
read this table. GGUF names follow llama.cpp's ``LLM_TENSOR_NAMES`` (``blk.N.ffn_up_exps.weight``
and so on), so an override's regular expression can be matched as llama.cpp matches it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np

from kvoffload.inputs.models import Model, Tensor
from kvoffload.inputs.precision import WeightFormat

LAYER_GROUPS = ("attention", "mlp", "shared_experts", "experts", "router", "norms")
GROUPS = (*LAYER_GROUPS, "embeddings", "output")

# tensor role -> (group, GGUF base name); roles are those inputs/models.py gives its tensors
_ROLES = {
    "attn_q": ("attention", "attn_q"),
    "attn_k": ("attention", "attn_k"),
    "attn_v": ("attention", "attn_v"),
    "attn_o": ("attention", "attn_output"),
    "attn_q_a": ("attention", "attn_q_a"),
    "attn_q_b": ("attention", "attn_q_b"),
    "attn_kv_a": ("attention", "attn_kv_a_mqa"),
    "attn_kv_b": ("attention", "attn_kv_b"),
    "sinks": ("attention", "attn_sinks"),
    "ffn_gate": ("mlp", "ffn_gate"),
    "ffn_up": ("mlp", "ffn_up"),
    "ffn_down": ("mlp", "ffn_down"),
    "exp_gate": ("experts", "ffn_gate_exps"),
    "exp_up": ("experts", "ffn_up_exps"),
    "exp_down": ("experts", "ffn_down_exps"),
    "shexp_gate": ("shared_experts", "ffn_gate_shexp"),
    "shexp_up": ("shared_experts", "ffn_up_shexp"),
    "shexp_down": ("shared_experts", "ffn_down_shexp"),
    "router": ("router", "ffn_gate_inp"),
    "shexp_gate_inp": ("shared_experts", "ffn_gate_inp_shexp"),
    # recurrent token mixers (gated DeltaNet, Mamba) sit where attention does
    "ssm_in": ("attention", "ssm_in"),
    "ssm_ba": ("attention", "ssm_ba"),
    "ssm_conv1d": ("attention", "ssm_conv1d"),
    "ssm_a": ("attention", "ssm_a"),
    "ssm_x": ("attention", "ssm_x"),
    "ssm_dt": ("attention", "ssm_dt"),
    "ssm_d": ("attention", "ssm_d"),
    "ssm_out": ("attention", "ssm_out"),
    "norm": ("norms", "attn_norm"),
    "embed": ("embeddings", "token_embd"),
    "pos": ("embeddings", "position_embd"),
    "proj": ("embeddings", "embd_proj"),
    "norm_embed": ("embeddings", "token_embd_norm"),
    "norm_final": ("output", "output_norm"),
    "output": ("output", "output"),
}


# llama.cpp names biases after their matrix: blk.N.attn_q.bias, blk.N.ffn_up_exps.bias, ...
_BIAS_NAMES = {
    "attention": "attn_q.bias",
    "mlp": "ffn_up.bias",
    "experts": "ffn_up_exps.bias",
    "shared_experts": "ffn_up_shexp.bias",
}


@dataclass(frozen=True)
class TensorTable:
    """Every weight tensor of a model in one format: where it sits, its group, name and bytes.

    ``position`` is the decoder layer (0..n_layers-1), ``n_layers`` for the output layer (the
    final norm and the output projection) and -1 for the input embeddings.
    """

    names: tuple[str, ...]
    position: np.ndarray  # int
    group: np.ndarray  # index into GROUPS
    nbytes: np.ndarray  # bytes in the weight format
    params: np.ndarray  # parameters
    n_positions: int  # decoder layers + the output layer
    rows: np.ndarray  # output features of one matrix (ggml ne[1]; vectors: 1)
    cols: np.ndarray  # input features of one matrix (ggml ne[0])
    # one 2-D matrix the activations are multiplied by (a MUL_MAT weight): not a vector, not a
    # stack of routed experts, not an embedding table looked up by row (a tied one, read as the
    # output projection, is)
    matrix: np.ndarray

    @property
    def routed(self) -> np.ndarray:
        """Return which tensors are routed experts (a step reads only the experts it routes to)."""
        return self.group == GROUPS.index("experts")

    def by_position(self, values: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Return ``values`` summed per position (0..n_positions-1), over ``mask`` if given."""
        keep = self.position >= 0 if mask is None else (self.position >= 0) & mask
        return np.bincount(
            self.position[keep], weights=np.asarray(values, dtype=np.float64)[keep],
            minlength=self.n_positions,
        )  # fmt: skip

    def by_group(self, values: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Return ``values`` summed per group (in GROUPS order), over ``mask`` if given."""
        keep = np.ones(len(self.names), dtype=bool) if mask is None else mask
        return np.bincount(
            self.group[keep], weights=np.asarray(values, dtype=np.float64)[keep],
            minlength=len(GROUPS),
        )  # fmt: skip


def _group_and_name(t: Tensor, previous: str) -> tuple[str, str]:
    """Return a tensor's group and GGUF base name; a bias belongs to the tensors before it."""
    if t.role == "bias":
        return previous, _BIAS_NAMES.get(previous, f"{previous}.bias")
    if t.role == "norm" and previous == "attention":
        return "norms", "attn_q_norm"  # q/k norms and MLA's latent norms sit inside attention
    return _ROLES[t.role]


@cache
def tensor_table(model: Model, fmt: WeightFormat) -> TensorTable:
    """Return the model's tensors in ``fmt`` with positions, groups, GGUF names and bytes."""
    names, position, group, nbytes, params = [], [], [], [], []
    rows, cols, matrix = [], [], []
    previous = "attention"
    for t, size in model.tensor_bytes(fmt):
        g, base = _group_and_name(t, previous)
        if t.role != "bias" and g != "norms":
            previous = g
        if t.layer is None:
            pos = -1 if g == "embeddings" else model.n_layers
            if g == "embeddings" and t.role == "embed" and model.tie_embeddings:
                pos = model.n_layers  # tied: the output projection reads the embedding table
            names.append(base if base.endswith(".bias") else f"{base}.weight")
        else:
            pos = t.layer
            names.append(f"blk.{t.layer}.{base}" + ("" if base.endswith(".bias") else ".weight"))
        position.append(pos)
        group.append(GROUPS.index(g))
        nbytes.append(size)
        params.append(t.params)
        rows.append(t.rows)
        cols.append(t.cols)
        looked_up = g == "embeddings" and pos != model.n_layers
        matrix.append(not t.vector and t.count == 1 and not looked_up)
    return TensorTable(
        names=tuple(names),
        position=np.array(position, dtype=np.int64),
        group=np.array(group, dtype=np.int64),
        nbytes=np.array(nbytes, dtype=np.float64),
        params=np.array(params, dtype=np.float64),
        n_positions=model.n_layers + 1,
        rows=np.array(rows, dtype=np.float64),
        cols=np.array(cols, dtype=np.float64),
        matrix=np.array(matrix, dtype=bool),
    )


def match_overrides(table: TensorTable, rules: tuple[tuple[str, str], ...]) -> np.ndarray:
    """Return, per tensor, the device the first matching ``(regex, device)`` rule names, or ''.

    llama.cpp tests each ``--override-tensor`` pattern in order with ``std::regex_search`` against
    the tensor name and takes the first that matches (src/llama-model.cpp, tensor_buft_overrides).
    """
    return _matches(table.names, rules)


@lru_cache(maxsize=512)
def _matches(names: tuple[str, ...], rules: tuple[tuple[str, str], ...]) -> np.ndarray:
    """Return match_overrides' answer for one model's tensor names (read-only, kept per rules).

    A search over placements (kvoffload advise, the calculator's table) asks the same model and
    rules many times; the regular expressions over thousands of names dominated its time.
    """
    out = np.full(len(names), "", dtype=object)
    compiled = [(re.compile(p), d) for p, d in rules]
    if compiled:
        for i, name in enumerate(names):
            for pattern, device in compiled:
                if pattern.search(name):
                    out[i] = device
                    break
    out.flags.writeable = False
    return out


@cache
def position_groups(model: Model, fmt: WeightFormat) -> tuple[np.ndarray, np.ndarray]:
    """Return bytes and parameters per (position, group): decoder layers, then the output layer.

    The input embeddings (position -1) are left out: a step reads one row of them per token.
    """
    table = tensor_table(model, fmt)
    keep = table.position >= 0
    shape = (table.n_positions, len(GROUPS))
    nbytes, params = np.zeros(shape), np.zeros(shape)
    np.add.at(nbytes, (table.position[keep], table.group[keep]), table.nbytes[keep])
    np.add.at(params, (table.position[keep], table.group[keep]), table.params[keep])
    return nbytes, params
