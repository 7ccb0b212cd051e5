"""Model architectures: HF config.json import, parameter tensors, weight bytes per precision."""

from __future__ import annotations

import stat
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from kvoffload.spec import catalog, limits
from kvoffload.spec.errors import InputError
from kvoffload.spec.inputs import (
    check_path,
    display_name,
    is_finite_number,
    load_mapping,
    stat_mode,
)
from kvoffload.spec.precision import (
    KvFormat,
    WeightFormat,
    fp4_bytes,
    ggml_bytes,
    kv_vector_bytes,
    use_more_bits,
)
from kvoffload.spec.text import NOTE_CHARS, plain_text

# Families whose MLP is up -> activation -> down (no gate): OPT, BLOOM, GPT-2 and kin.
# Nemotron-H's MLP blocks are up -> relu^2 -> down (NemotronHMLP).
_PLAIN_MLP = {
    "opt", "bloom", "gpt2", "gpt_neox", "gptj", "falcon", "phi", "gpt_bigcode", "nemotron_h",
}  # fmt: skip
# Families whose config omits the FFN width because the architecture fixes it at 4 x hidden.
_FFN_4X = {"bloom", "gpt2", "gpt_bigcode", "gptj", "falcon"}
# Families whose embeddings are untied when the config says nothing (their config class default).
_UNTIED_DEFAULT = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next",
    "deepseek_v2", "deepseek_v3", "gpt_oss", "glm4_moe", "llama4", "llama4_text", "jamba",
    "bamba", "granitemoehybrid", "nemotron_h", "falcon_h1",
}  # fmt: skip
# layer_types entries: attention over a span of tokens (a per-token KV cache) ...
_ATTENTION_TYPES = {"full_attention", "sliding_attention", "chunked_attention", "attention"}
# ... or a recurrent mixer that keeps a fixed state per request: gated DeltaNet (Qwen3-Next's
# "linear_attention") and Mamba ("mamba", GraniteMoeHybrid's layer_types).
_STATE_TYPES = {"linear_attention", "mamba"}
# ... or no token mixer at all: a block that is only an MLP (Nemotron-H's "-" blocks), which keeps
# neither a per-token cache nor a state.
_MLP_ONLY_TYPES = {"mlp"}
_LAYER_TYPES = _ATTENTION_TYPES | _STATE_TYPES | _MLP_ONLY_TYPES
# Nemotron-H's block names: hybrid_override_pattern characters (vLLM's ALL_DECODER_LAYER_TYPES,
# vllm/model_executor/models/nemotron_h.py @ 8744bb09) and the layers_block_type names of
# transformers' NemotronHConfig (configuration_nemotron_h.py @ 13923c63: "M" is
# "linear_attention", "*" "full_attention"; older files say "mamba" and "attention").
_NEMOTRON_H_BLOCKS = {
    "M": "mamba", "mamba": "mamba", "linear_attention": "mamba",
    "*": "attention", "attention": "attention", "full_attention": "attention",
    "-": "mlp", "mlp": "mlp",
}  # fmt: skip
# Families whose attention_bias puts a bias on q, k and v only, not on o_proj (transformers:
# Qwen2Attention, Glm4MoeAttention's o_proj is nn.Linear(..., bias=False)).
_QKV_BIAS_ONLY = {"qwen2", "glm4_moe"}


@dataclass(frozen=True)
class Tensor:
    """One weight tensor class in a layer: ``count`` matrices of rows x cols (vectors: rows=1)."""

    role: str
    layer: int | None
    rows: int
    cols: int
    count: int = 1
    vector: bool = False
    expert: bool = False  # one per routed expert (a token uses only its experts' copies)

    @property
    def params(self) -> int:
        """Return the number of parameters."""
        return self.rows * self.cols * self.count


@dataclass(frozen=True)
class Mla:
    """Multi-head latent attention (DeepSeek): what the cache holds per token and layer."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None


@dataclass(frozen=True)
class GatedDeltaNet:
    """Gated DeltaNet linear attention (Qwen3-Next ``linear_attention`` layers).

    Shapes from transformers' ``Qwen3NextGatedDeltaNet`` (src/transformers/models/qwen3_next/
    modeling_qwen3_next.py @ 01cdc608): q and k have ``num_k_heads`` heads of ``head_k_dim``,
    v has ``num_v_heads`` of ``head_v_dim``; a depthwise causal conv1d of ``conv_kernel`` taps
    runs over q, k and v together.
    """

    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_kernel: int

    @property
    def key_dim(self) -> int:
        """Return the width of q (and of k)."""
        return self.num_k_heads * self.head_k_dim

    @property
    def value_dim(self) -> int:
        """Return the width of v (and of the output gate z)."""
        return self.num_v_heads * self.head_v_dim

    @property
    def conv_dim(self) -> int:
        """Return the channels of the conv1d: q, k and v."""
        return 2 * self.key_dim + self.value_dim

    @property
    def state_values(self) -> int:
        """Return the values one request keeps per layer: recurrent state plus conv state.

        Recurrent state: ``num_v_heads x head_k_dim x head_v_dim`` (q and k are repeated up to
        the value heads before the delta rule). Conv state: ``conv_kernel - 1`` past inputs of
        every conv channel, as vLLM allocates it (MambaStateShapeCalculator.
        gated_delta_net_state_shape, vllm/model_executor/layers/mamba/mamba_utils.py @
        2afe1e85) and causal-conv1d's update kernel keeps it; transformers pads it to
        ``conv_kernel`` positions (one more column per channel).
        """
        recurrent = self.num_v_heads * self.head_k_dim * self.head_v_dim
        return recurrent + (self.conv_kernel - 1) * self.conv_dim


@dataclass(frozen=True)
class Mamba:
    """A Mamba mixer: Mamba-1 (Jamba) or Mamba-2 (Bamba, GraniteMoeHybrid).

    Mamba-1 (transformers' ``JambaMambaMixer``): ``d_inner`` channels, each with a
    ``d_state`` state; ``dt_rank`` is the width of the time-step projection. Mamba-2
    (``GraniteMoeHybridMambaLayer``, adapted from ``Mamba2Mixer``): ``n_heads`` heads of
    ``head_dim`` with a ``d_state`` state per head channel; B and C come in ``n_groups``.
    """

    version: int  # 1 or 2
    d_inner: int
    d_state: int
    d_conv: int
    n_heads: int = 0
    head_dim: int = 0
    n_groups: int = 1
    dt_rank: int = 0
    conv_bias: bool = True
    proj_bias: bool = False  # in_proj's bias (and out_proj's, unless out_bias says otherwise)
    out_bias: bool | None = None  # Falcon-H1: out_proj's bias is projectors_bias
    gated_norm: bool = True  # Mamba-2's gated RMSNorm over d_inner (optional in Falcon-H1)

    @property
    def conv_dim(self) -> int:
        """Return the channels of the conv1d (Mamba-2 also convolves B and C)."""
        if self.version == 1:
            return self.d_inner
        return self.d_inner + 2 * self.n_groups * self.d_state

    @property
    def state_values(self) -> int:
        """Return the values one request keeps per layer: SSM state plus conv state.

        As vLLM allocates them (MambaStateShapeCalculator.mamba1_state_shape /
        mamba2_state_shape, vllm/model_executor/layers/mamba/mamba_utils.py @ 2afe1e85): conv
        state ``(d_conv - 1) x conv_dim``; SSM state ``d_inner x d_state`` (Mamba-1) or
        ``n_heads x head_dim x d_state`` (Mamba-2).
        """
        if self.version == 1:
            ssm = self.d_inner * self.d_state
        else:
            ssm = self.n_heads * self.head_dim * self.d_state
        return ssm + (self.d_conv - 1) * self.conv_dim


@dataclass(frozen=True)
class Moe:
    """Mixture of experts: routed experts, how many a token uses, shared experts."""

    n_experts: int
    experts_per_token: int
    expert_intermediate: int
    n_shared_experts: int = 0
    shared_intermediate: int = 0
    expert_bias: bool = False
    shared_expert_gate: bool = False  # Qwen-MoE: a sigmoid gate (hidden -> 1) on the shared expert
    router_bias: bool = False  # DeepSeek-V3 / GLM-4.5 e_score_correction_bias (one per expert)


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer's shape, enough to size its weights and KV cache."""

    id: str
    name: str
    source: str
    model_type: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    v_head_dim: int
    vocab: int
    intermediate: int
    mlp: str  # 'gated' or 'plain'
    tie_embeddings: bool
    # per layer: None = full attention, else the tokens it holds at most (sliding window or
    # attention chunk); 0 for a layer with no per-token cache (a recurrent state layer)
    layer_windows: tuple[int | None, ...]
    mla: Mla | None = None
    moe: Moe | None = None
    moe_layers: tuple[bool, ...] = ()
    attention_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    norm_bias: bool = False
    norms_per_layer: int = 2
    qk_norm: bool = False
    learned_positions: int = 0
    # the longest context the model is built for (config max_position_embeddings, rope scaling
    # included where the config folds it in, as Llama 3.1's 131,072); None: not stated (ALiBi)
    max_positions: int | None = None
    embed_proj_dim: int | None = None
    attention_sinks: bool = False
    # per layer: 'attention', 'linear_attention' (gated DeltaNet), 'mamba' or 'mlp' (a block with
    # no token mixer, Nemotron-H's "-"); () = all attention
    layer_kinds: tuple[str, ...] = ()
    deltanet: GatedDeltaNet | None = None
    mamba: Mamba | None = None
    # Falcon-H1 (FalconH1DecoderLayer): every attention layer also runs a Mamba-2 mixer on the
    # same input, so it keeps a KV cache per token and a Mamba state per request
    parallel_mamba: bool = False
    # per layer: whether it has an MLP after its mixer; () = every layer (Nemotron-H's blocks
    # hold one module each: a Mamba-2 or attention block has no MLP)
    mlp_layers: tuple[bool, ...] = ()
    attn_output_gate: bool = False  # Qwen3-Next: q_proj also yields a sigmoid gate per head
    native_dtype: str = "bf16"
    published_params: float | None = None
    published_active_params: float | None = None
    published_source: str = ""
    hf_id: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    # -- hashing: every functools.cache lookup hashes the model, so its hash is computed once ---
    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(tuple(getattr(self, f) for f in _MODEL_FIELDS)))

    def __hash__(self) -> int:
        return self._hash

    def __getstate__(self) -> dict[str, Any]:
        # a str's hash differs between processes: an unpickled copy computes its own
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__post_init__()

    # -- attention -------------------------------------------------------------------------
    @property
    def attention_kind(self) -> str:
        """Return 'mla', 'mha', 'mqa' or 'gqa'."""
        if self.mla:
            return "mla"
        if self.n_kv_heads == self.n_heads:
            return "mha"
        return "mqa" if self.n_kv_heads == 1 else "gqa"

    def kv_vectors(self) -> tuple[tuple[int, int], ...]:
        """Return the cached vectors per token and layer as (count, length) pairs."""
        if self.mla:
            return ((1, self.mla.kv_lora_rank + self.mla.qk_rope_head_dim),)
        return ((self.n_kv_heads, self.head_dim), (self.n_kv_heads, self.v_head_dim))

    @property
    def windows(self) -> np.ndarray:
        """Return per-layer attention spans as floats (inf for full attention)."""
        return np.array([np.inf if w is None else float(w) for w in self.layer_windows])

    @property
    def has_sliding_window(self) -> bool:
        """True when any attention layer attends over a bounded window (or chunk)."""
        return any(w is not None and w > 0 for w in self.layer_windows)

    def check_context(self, tokens: int, *, what: str = "") -> None:
        """Refuse ``tokens`` of context beyond what the model is built for (max_position_embeddings)."""
        if self.max_positions is not None and tokens > self.max_positions:
            raise InputError(
                f"{what}{tokens:,} tokens is beyond {self.id}'s context of "
                f"{self.max_positions:,} (max_position_embeddings)"
            )

    @property
    def kinds(self) -> tuple[str, ...]:
        """Return each layer's token mixer: 'attention', 'linear_attention', 'mamba' or 'mlp'.

        'mlp' is a block with no token mixer. With ``parallel_mamba`` an 'attention' layer also
        runs a Mamba-2 mixer beside its attention (Falcon-H1).
        """
        return self.layer_kinds or ("attention",) * self.n_layers

    @property
    def attention_layers(self) -> np.ndarray:
        """Return a mask of the layers that keep a per-token KV cache."""
        return np.array([k == "attention" for k in self.kinds], dtype=bool)

    @property
    def mamba_layers(self) -> np.ndarray:
        """Return a mask of the layers that run a Mamba mixer (alone or beside attention)."""
        return np.array(
            [k == "mamba" or (self.parallel_mamba and k == "attention") for k in self.kinds],
            dtype=bool,
        )

    def has_mlp(self, layer: int) -> bool:
        """True when ``layer`` has an MLP (dense or MoE) after its token mixer."""
        return self.mlp_layers[layer] if self.mlp_layers else True

    def state_values_per_layer(self) -> np.ndarray:
        """Return the values of fixed state one request keeps in each layer.

        0 in an attention layer and in an MLP-only block; an attention layer with a parallel
        Mamba mixer (Falcon-H1) keeps the Mamba state besides its per-token KV cache.
        """
        mamba = self.mamba.state_values if self.mamba else 0
        sizes = {
            "attention": mamba if self.parallel_mamba else 0,
            "linear_attention": self.deltanet.state_values if self.deltanet else 0,
            "mamba": mamba,
            "mlp": 0,
        }
        return np.array([sizes[k] for k in self.kinds], dtype=np.int64)

    # -- parameters ------------------------------------------------------------------------
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
        for t in self.tensors():
            b = _tensor_bytes(self, t, fmt)
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


# the fields a Model's hash and equality cover, in order (as the dataclass's own __hash__)
_MODEL_FIELDS = tuple(f.name for f in fields(Model))


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


# -- tensors -------------------------------------------------------------------------------
def _tensors(m: Model) -> tuple[Tensor, ...]:
    h = m.hidden
    out: list[Tensor] = []
    emb_dim = m.embed_proj_dim or h
    out.append(Tensor("embed", None, m.vocab, emb_dim))
    if m.learned_positions:
        out.append(Tensor("pos", None, m.learned_positions, h))
    if m.embed_proj_dim and m.embed_proj_dim != h:
        out.append(Tensor("proj", None, h, m.embed_proj_dim))
        out.append(Tensor("proj", None, m.embed_proj_dim, h))
    if m.model_type == "bloom":  # word_embeddings_layernorm
        out.append(Tensor("norm_embed", None, 1, 2 * h, vector=True))
    kinds = m.kinds
    for i in range(m.n_layers):
        if kinds[i] == "linear_attention":
            out.extend(_deltanet_tensors(m, i))
        elif kinds[i] == "mamba":
            out.extend(_mamba_tensors(m, i))
        elif kinds[i] == "attention":
            out.extend(_attention_tensors(m, i))
            if m.parallel_mamba:  # Falcon-H1: a Mamba-2 mixer beside the attention
                out.extend(_mamba_tensors(m, i))
        if m.has_mlp(i):  # an 'mlp' block is only this
            out.extend(_mlp_tensors(m, i))
        norms = m.norms_per_layer * (2 if m.norm_bias else 1)  # a LayerNorm has a bias too
        out.append(Tensor("norm", i, 1, h, count=norms, vector=True))
    out.append(Tensor("norm_final", None, 1, h * (2 if m.norm_bias else 1), vector=True))
    if not m.tie_embeddings:
        out.append(Tensor("output", None, m.vocab, emb_dim))
    return tuple(out)


def _attention_tensors(m: Model, i: int) -> list[Tensor]:
    h, nh = m.hidden, m.n_heads
    if m.mla:
        a = m.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        t = []
        if a.q_lora_rank:
            t += [
                Tensor("attn_q_a", i, a.q_lora_rank, h),
                Tensor("norm", i, 1, a.q_lora_rank, vector=True),
                Tensor("attn_q_b", i, nh * qk, a.q_lora_rank),
            ]
        else:
            t.append(Tensor("attn_q", i, nh * qk, h))
        t += [
            Tensor("attn_kv_a", i, a.kv_lora_rank + a.qk_rope_head_dim, h),
            Tensor("norm", i, 1, a.kv_lora_rank, vector=True),
            Tensor("attn_kv_b", i, nh * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank),
            Tensor("attn_o", i, h, nh * a.v_head_dim),
        ]
        return t
    q, kv, v = nh * m.head_dim, m.n_kv_heads * m.head_dim, m.n_kv_heads * m.v_head_dim
    gate = q if m.attn_output_gate else 0  # Qwen3-Next: q_proj is 2 x heads x head_dim wide
    t = [
        Tensor("attn_q", i, q + gate, h),
        Tensor("attn_k", i, kv, h),
        Tensor("attn_v", i, v, h),
        Tensor("attn_o", i, h, nh * m.v_head_dim),
    ]
    if m.attention_bias:
        t.append(Tensor("bias", i, 1, q + gate + kv + v, vector=True))
    if m.o_bias:
        t.append(Tensor("bias", i, 1, h, vector=True))
    if m.qk_norm:
        t.append(Tensor("norm", i, 1, 2 * m.head_dim, vector=True))
    if m.attention_sinks:
        t.append(Tensor("sinks", i, 1, nh, vector=True))
    return t


def _deltanet_tensors(m: Model, i: int) -> list[Tensor]:
    """Gated DeltaNet: transformers' Qwen3NextGatedDeltaNet (modeling_qwen3_next.py @ 01cdc608)."""
    d = m.deltanet
    assert d is not None
    h = m.hidden
    return [
        # in_proj_qkvz: q, k (key_dim each), v and the output gate z (value_dim each); no bias
        Tensor("ssm_in", i, 2 * d.key_dim + 2 * d.value_dim, h),
        Tensor("ssm_ba", i, 2 * d.num_v_heads, h),  # in_proj_ba: beta and the decay input a
        Tensor("ssm_conv1d", i, d.conv_dim, d.conv_kernel, vector=True),  # depthwise, no bias
        Tensor("ssm_a", i, 1, 2 * d.num_v_heads, vector=True),  # dt_bias and A_log
        Tensor("norm", i, 1, d.head_v_dim, vector=True),  # gated RMSNorm over each value head
        Tensor("ssm_out", i, h, d.value_dim),  # out_proj, no bias
    ]


def _mamba_tensors(m: Model, i: int) -> list[Tensor]:
    """Mamba-1 as transformers' JambaMambaMixer (modeling_jamba.py @ 97bb61d0), Mamba-2 as
    GraniteMoeHybridMambaLayer (modeling_granitemoehybrid.py @ 1c0ff25f), NemotronHMamba2Mixer
    (modeling_nemotron_h.py @ 008d9e95) and FalconH1Mixer (modeling_falcon_h1.py @ 001f85b3:
    d_inner is mamba_d_ssm, the gated norm only with mamba_rms_norm, out_proj's bias
    projectors_bias)."""
    s = m.mamba
    assert s is not None
    h, di = m.hidden, s.d_inner
    out_bias = s.proj_bias if s.out_bias is None else s.out_bias
    # Mamba-1: x and the gate; Mamba-2: the gate, x|B|C (the conv's input) and dt
    in_rows = 2 * di if s.version == 1 else di + s.conv_dim + s.n_heads
    t = [Tensor("ssm_in", i, in_rows, h)]
    t.append(Tensor("ssm_conv1d", i, s.conv_dim, s.d_conv, vector=True))
    if s.version == 1:
        t += [
            Tensor("ssm_x", i, s.dt_rank + 2 * s.d_state, di),  # x_proj: dt, B, C; no bias
            Tensor("ssm_dt", i, di, s.dt_rank),  # dt_proj
            Tensor("ssm_a", i, di, s.d_state, vector=True),  # A_log
            # dt_proj bias, D, and Jamba's RMSNorms over dt, B and C
            Tensor("ssm_d", i, 1, 2 * di + s.dt_rank + 2 * s.d_state, vector=True),
        ]
    else:
        # dt_bias, A_log, D (one per head) and the gated RMSNorm over d_inner
        norm = di if s.gated_norm else 0
        t.append(Tensor("ssm_d", i, 1, 3 * s.n_heads + norm, vector=True))
    t.append(Tensor("ssm_out", i, h, di))
    if s.conv_bias:
        t.append(Tensor("bias", i, 1, s.conv_dim, vector=True))
    biases = in_rows * s.proj_bias + h * out_bias
    if biases:
        t.append(Tensor("bias", i, 1, biases, vector=True))
    return t


def _mlp_tensors(m: Model, i: int) -> list[Tensor]:
    h = m.hidden
    if m.moe and m.moe_layers[i]:
        e = m.moe
        n, f = e.n_experts, e.expert_intermediate
        t = [
            Tensor("router", i, n, h),
            Tensor("exp_gate", i, f, h, count=n),
            Tensor("exp_up", i, f, h, count=n),
            Tensor("exp_down", i, h, f, count=n),
        ]
        if e.expert_bias:  # gpt-oss: gate_up and down biases per expert, and the router's
            t += [
                Tensor("bias", i, 1, 2 * f + h, count=n, vector=True, expert=True),
                Tensor("bias", i, 1, n, vector=True),
            ]
        if e.router_bias:
            t.append(Tensor("bias", i, 1, n, vector=True))  # e_score_correction_bias
        if e.n_shared_experts:
            fs = e.shared_intermediate * e.n_shared_experts
            t += [
                Tensor("shexp_gate", i, fs, h),
                Tensor("shexp_up", i, fs, h),
                Tensor("shexp_down", i, h, fs),
            ]
            if e.shared_expert_gate:
                t.append(Tensor("shexp_gate_inp", i, 1, h, vector=True))
        return t
    f = m.intermediate
    if m.mlp == "gated":
        t = [Tensor("ffn_gate", i, f, h), Tensor("ffn_up", i, f, h), Tensor("ffn_down", i, h, f)]
    else:
        t = [Tensor("ffn_up", i, f, h), Tensor("ffn_down", i, h, f)]
    if m.mlp_bias:
        t.append(Tensor("bias", i, 1, f * (2 if m.mlp == "gated" else 1) + h, vector=True))
    return t


# -- bytes per tensor, as each quantiser stores it ------------------------------------------
_DECODER_LINEAR = (
    "attn_", "ffn_", "exp_", "shexp_", "ssm_",
)  # fmt: skip
_GGUF_BASE = {
    WeightFormat.Q8_0: "q8_0",
    WeightFormat.Q6_K: "q6_k",
    WeightFormat.Q5_K_M: "q5_k",
    WeightFormat.Q4_0: "q4_0",
    WeightFormat.Q4_K_M: "q4_k",
}
_K_M = (WeightFormat.Q4_K_M, WeightFormat.Q5_K_M)
# llama.cpp's "attention-v-like" tensors (category_is_attn_v in src/llama-quant.cpp)
_ATTN_V = ("attn_v", "attn_kv_b")
_FFN_DOWN = ("ffn_down", "exp_down", "shexp_down")
# ModelOpt NVFP4 exports two fp32 scalars per quantised matrix: weight_scale_2 and input_scale.
_NVFP4_TENSOR_SCALES = 8


def _tensor_bytes(m: Model, t: Tensor, fmt: WeightFormat) -> int:
    if fmt is WeightFormat.FP32:
        return 4 * t.params
    if fmt in (WeightFormat.BF16, WeightFormat.FP16):
        return 2 * t.params
    if fmt.is_gguf:
        if t.vector or t.role == "router":
            return 4 * t.params  # llama.cpp keeps 1-D tensors and the MoE router in f32
        return t.count * ggml_bytes(t.rows, t.cols, _gguf_type(m, t, fmt))
    if fmt in (WeightFormat.MXFP4, WeightFormat.NVFP4):
        if t.vector or not _fp4_tensor(m, t, fmt):
            return 2 * t.params  # everything else stays bf16 in these checkpoints
        scalars = _NVFP4_TENSOR_SCALES if fmt is WeightFormat.NVFP4 else 0
        return t.count * (fp4_bytes(t.rows, t.cols, fmt) + scalars)
    linear = t.role.startswith(_DECODER_LINEAR) and not t.vector
    if not linear:
        return 2 * t.params  # embeddings, lm_head, norms, router stay 16-bit in HF checkpoints
    if fmt in (WeightFormat.FP8, WeightFormat.INT8):
        return t.count * t.rows * (t.cols + 2)  # one byte per weight, one 16-bit scale per row
    # int4, group 128: 4-bit weights, an fp16 scale and a 4-bit zero point per group
    groups = -(-t.cols // 128)
    return t.count * t.rows * (t.cols // 2 + groups * 2 + (groups + 1) // 2)


def _fp4_tensor(m: Model, t: Tensor, fmt: WeightFormat) -> bool:
    """True when an FP4 checkpoint of ``m`` stores the matrix ``t`` in FP4.

    MXFP4 as gpt-oss ships it: only the routed experts (config.json quantization_config
    modules_to_not_convert = self_attn, mlp.router, embed_tokens, lm_head); a dense model has no
    experts, so its decoder linears take MXFP4 instead (Quark's MXFP4 configs, exclude [lm_head]).
    NVFP4 as NVIDIA ModelOpt exports it: every decoder linear; its default config disables the
    quantizers of lm_head and the MoE routers, and embeddings and norms are not linears.
    """
    if fmt is WeightFormat.MXFP4 and m.moe:
        return t.role.startswith("exp_")
    return t.role.startswith(_DECODER_LINEAR)


def _gguf_type(m: Model, t: Tensor, fmt: WeightFormat) -> str:
    """Return llama.cpp's ggml type for a matrix (llama_tensor_get_type, src/llama-quant.cpp)."""
    base = _GGUF_BASE[fmt]
    if t.role == "output" or (t.role == "embed" and m.tie_embeddings):
        return "q8_0" if fmt is WeightFormat.Q8_0 else "q6_k"
    if t.layer is None:
        return base
    eight_experts = m.moe is not None and m.moe.n_experts == 8
    if eight_experts and t.role in ("attn_k", *_ATTN_V):
        return "q8_0"  # llama.cpp bumps 8-expert models' (Mixtral's) attn_k and attn_v to q8_0
    if fmt not in _K_M:
        return base
    more = use_more_bits(t.layer, m.n_layers)
    if t.role in _ATTN_V:
        if more:
            return "q6_k"
        # llama.cpp gives 70B-class models (8 query heads per KV head) q5_k for a q4_k attn_v
        seventy_b = m.n_layers == 80 and m.n_heads == 8 * m.n_kv_heads
        return "q5_k" if seventy_b and fmt is WeightFormat.Q4_K_M else base
    if t.role in _FFN_DOWN and more:
        return "q6_k"
    if eight_experts and t.role == "attn_o" and fmt is WeightFormat.Q4_K_M:
        return "q5_k"
    return base


# -- HF config.json import ------------------------------------------------------------------
# The largest value each config.json integer may take (spec/limits.py says why); an integer
# not named here is a width, at most MAX_INTERMEDIATE.
_MAXIMA: dict[str, int] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers"), limits.MAX_LAYERS),
    **dict.fromkeys(
        (
            "num_attention_heads", "n_head", "num_heads", "num_key_value_heads", "num_kv_heads",
            "n_head_kv", "linear_num_key_heads", "linear_num_value_heads", "mamba_n_heads",
            "mamba_num_heads",
        ),
        limits.MAX_HEADS,
    ),
    **dict.fromkeys(
        (
            "head_dim", "attention_head_dim", "qk_rope_head_dim", "qk_nope_head_dim",
            "v_head_dim", "kv_lora_rank", "linear_key_head_dim", "linear_value_head_dim",
            "mamba_d_head", "mamba_head_dim",
        ),
        limits.MAX_HEAD_DIM,
    ),
    **dict.fromkeys(
        ("hidden_size", "n_embd", "d_model", "n_embed", "q_lora_rank", "mamba_dt_rank"),
        limits.MAX_HIDDEN,
    ),
    **dict.fromkeys(("vocab_size", "padded_vocab_size"), limits.MAX_VOCAB),
    **dict.fromkeys(
        (
            "n_routed_experts", "num_local_experts", "num_experts", "num_experts_per_tok",
            "experts_per_token", "num_experts_per_token", "n_shared_experts",
        ),
        limits.MAX_EXPERTS,
    ),
    **dict.fromkeys(
        ("max_position_embeddings", "n_positions", "seq_length", "attention_chunk_size"),
        limits.MAX_CONTEXT_TOKENS,
    ),
    **dict.fromkeys(
        (
            "full_attention_interval", "no_rope_layer_interval", "attn_layer_period",
            "attn_layer_offset", "max_window_layers", "interleave_moe_layer_step",
            "expert_layer_period", "expert_layer_offset", "decoder_sparse_step",
            "first_k_dense_replace", "moe_layer_freq",
        ),
        limits.MAX_LAYERS,
    ),
    **dict.fromkeys(
        (
            "mamba_expand", "mamba_d_conv", "conv_kernel", "linear_conv_kernel_dim",
            "mamba_d_state", "ssm_state_size", "mamba_n_groups", "n_groups",
        ),
        limits.MAX_STATE_DIM,
    ),
}  # fmt: skip


def _bounded(value: int, key: str) -> int:
    """Return ``value``, refusing one above the plausible maximum for ``key``."""
    problem = limits.bound_problem(value, _MAXIMA.get(key, limits.MAX_INTERMEDIATE))
    if problem:
        raise InputError(problem, field=key)
    return value


def _int(cfg: dict, *keys: str, default: Any = ..., minimum: int = 1) -> Any:
    """Return the first of ``keys`` present and not null, as a bounded positive int."""
    for key in keys:
        if cfg.get(key) is not None:
            v = cfg[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                shown = repr(v) if len(repr(v)) <= 60 else f"a {type(v).__name__}"
                raise InputError(f"must be an integer >= {minimum}, got {shown}", field=key)
            return _bounded(v, key)
    if default is ...:
        raise InputError("required field is missing", field=keys[0])
    if isinstance(default, int) and not isinstance(default, bool):
        return _bounded(default, keys[0])
    return default


def _int_list(cfg: dict, key: str, n_layers: int) -> list[int] | None:
    """Return ``cfg[key]`` as a list of layer indices, or None when absent."""
    v = cfg.get(key)
    if v is None:
        return None
    if not isinstance(v, list) or any(
        isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in v
    ):
        raise InputError(f"must be a list of layer indices (0 to {n_layers - 1})", field=key)
    return v


def _bool(cfg: dict, key: str, default: bool) -> bool:
    v = cfg.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise InputError(f"must be true or false, got {v!r}", field=key)
    return v


def _layer_types(cfg: dict, mt: str, n_layers: int) -> list[str] | None:
    """Return each layer's type as transformers names it, or None when the config implies none.

    ``layer_types`` (or GraniteMoeHybrid's alias ``layers_block_type``) when the file has it;
    otherwise derived as each family's config class derives it:
    - qwen3_next: layer i is ``full_attention`` when (i + 1) % full_attention_interval == 0,
      else ``linear_attention`` (Qwen3NextConfig.__post_init__, transformers
      configuration_qwen3_next.py @ 008e5743; the released config.json has no layer_types);
    - llama4_text: ``chunked_attention`` on RoPE layers, ``full_attention`` on NoPE layers;
      no_rope_layers, when empty or absent, is int((i + 1) % no_rope_layer_interval != 0) with
      interval 4 (Llama4TextConfig.__post_init__, configuration_llama4.py @ 008e5743);
    - jamba: ``attention`` when i % attn_layer_period == attn_layer_offset, else ``mamba``
      (JambaConfig.layers_block_type, configuration_jamba.py @ 161d2bed);
    - bamba: ``attention`` for the layers in attn_layer_indices, else ``mamba``;
    - granitemoehybrid: all ``mamba`` (GraniteMoeHybridConfig.layers_block_type);
    - nemotron_h: one block per character of hybrid_override_pattern (or per entry of
      layers_block_type): ``mamba``, ``attention`` or ``mlp`` (see ``_nemotron_h_blocks``);
    - falcon_h1: all ``attention``, each with a parallel Mamba-2 mixer (FalconH1Config's
      layers_block_type is "hybrid" for every layer, configuration_falcon_h1.py @ 020a37d2).
    """
    if mt == "nemotron_h":
        return _nemotron_h_blocks(cfg, n_layers)
    if mt == "falcon_h1":
        named = cfg.get("layers_block_type", cfg.get("layer_types"))
        if named is not None and (
            not isinstance(named, list)
            or len(named) != n_layers
            or any(not isinstance(t, str) or t != "hybrid" for t in named)
        ):
            raise InputError(
                f"Falcon-H1 layers are all 'hybrid' (attention beside Mamba-2), {n_layers} of them",
                field="layers_block_type",
            )
        return ["attention"] * n_layers
    types = cfg.get("layer_types")
    if types is None:
        types = cfg.get("layers_block_type")
    if types is not None:
        if not isinstance(types, list) or len(types) != n_layers:
            raise InputError(f"must list one type per layer ({n_layers})", field="layer_types")
        return list(types)
    if cfg.get("hybrid_override_pattern") is not None:
        raise InputError(
            f"block patterns are read for model_type nemotron_h only, not {mt or 'unknown'!r}",
            field="hybrid_override_pattern",
        )
    if mt == "qwen3_next" or cfg.get("full_attention_interval") is not None:
        every = _int(cfg, "full_attention_interval", default=4)
        return [
            "linear_attention" if (i + 1) % every else "full_attention" for i in range(n_layers)
        ]
    if mt == "llama4_text":
        if cfg.get("attention_chunk_size", 8192) is None:
            return None
        rope = cfg.get("no_rope_layers") or []
        if not rope:
            every = _int(cfg, "no_rope_layer_interval", default=4)
            rope = [int((i + 1) % every != 0) for i in range(n_layers)]
        if not isinstance(rope, list) or len(rope) < n_layers:
            raise InputError(f"must list a flag per layer ({n_layers})", field="no_rope_layers")
        return ["chunked_attention" if r else "full_attention" for r in rope[:n_layers]]
    if mt == "jamba":
        period = _int(cfg, "attn_layer_period", default=8)
        offset = _int(cfg, "attn_layer_offset", default=4, minimum=0)
        return ["attention" if i % period == offset else "mamba" for i in range(n_layers)]
    attn = _int_list(cfg, "attn_layer_indices", n_layers)
    if attn is not None:
        at = set(attn)
        return ["attention" if i in at else "mamba" for i in range(n_layers)]
    if mt == "granitemoehybrid":
        return ["mamba"] * n_layers
    return None


def _nemotron_h_pattern(cfg: dict) -> tuple[str, list | str | None]:
    """Return the field Nemotron-H names its blocks in, and its value (None when absent)."""
    for key in ("hybrid_override_pattern", "layers_block_type", "layer_types"):
        if cfg.get(key) is not None:
            return key, cfg[key]
    return "hybrid_override_pattern", None


def _nemotron_h_blocks(cfg: dict, n_layers: int) -> list[str]:
    """Return Nemotron-H's block kinds: ``M`` Mamba-2, ``*`` attention, ``-`` MLP only.

    Each block is one module after one RMSNorm (NemotronHBlock, transformers
    modeling_nemotron_h.py @ 008d9e95; vLLM's NemotronH*DecoderLayer, nemotron_h.py @ 8744bb09):
    a Mamba-2 or attention block has no MLP and an MLP block no token mixer. MoE blocks (``E``,
    Nemotron 3) are refused.
    """
    key, pattern = _nemotron_h_pattern(cfg)
    if pattern is None:
        raise InputError("required field is missing", field="hybrid_override_pattern")
    if not isinstance(pattern, (str, list)):
        raise InputError("must be a string of block characters or a list", field=key)
    blocks = list(pattern)
    if len(blocks) != n_layers:
        raise InputError(
            f"must give one block per layer ({n_layers}), got {len(blocks)}", field=key
        )
    out = []
    for i, block in enumerate(blocks):
        kind = _NEMOTRON_H_BLOCKS.get(block) if isinstance(block, str) else None
        if kind is None:
            reason = (
                "MoE blocks (Nemotron 3) are not supported"
                if block in ("E", "moe")
                else f"unknown block {block!r}"
            )
            raise InputError(
                f"{reason}; known: M (Mamba-2), * (attention), - (MLP)", field=f"{key}[{i}]"
            )
        out.append(kind)
    return out


def _windows(cfg: dict, mt: str, n_layers: int) -> tuple[int | None, ...]:
    window = cfg.get("sliding_window")
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            shown = repr(window) if len(repr(window)) <= 60 else f"a {type(window).__name__}"
            raise InputError(
                f"must be a positive integer or null, got {shown}", field="sliding_window"
            )
        problem = limits.bound_problem(window, limits.MAX_CONTEXT_TOKENS, "tokens")
        if problem:
            raise InputError(problem, field="sliding_window")
    types = _layer_types(cfg, mt, n_layers)
    if types is not None:
        out: list[int | None] = []
        for i, kind in enumerate(types):
            if not isinstance(kind, str) or kind not in _LAYER_TYPES:
                shown = repr(kind) if len(repr(kind)) <= 60 else f"a {type(kind).__name__}"
                raise InputError(
                    f"unsupported layer type {shown}; known: {', '.join(sorted(_LAYER_TYPES))}",
                    field=f"layer_types[{i}]",
                )
            if kind in _STATE_TYPES or kind in _MLP_ONLY_TYPES:
                out.append(0)  # no per-token cache: a fixed state per request, or nothing
            elif kind in ("full_attention", "attention"):
                out.append(None)
            elif kind == "chunked_attention":
                chunk = 8192 if mt == "llama4_text" else ...  # Llama4TextConfig's default
                out.append(_int(cfg, "attention_chunk_size", default=chunk))
            else:
                if window is None:
                    raise InputError("sliding layers need sliding_window", field="sliding_window")
                out.append(window)
        return tuple(out)
    if window is None:
        return (None,) * n_layers
    # transformers' Gemma2 and gpt-oss (GptOssConfig: "sliding_attention" if (i + 1) % 2, else
    # "full_attention", configuration_gpt_oss.py): even layers slide, odd layers are global
    if mt in ("gemma2", "gpt_oss"):
        return tuple(window if i % 2 == 0 else None for i in range(n_layers))
    pattern = cfg.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 1:  # Gemma 3: every pattern-th layer is global
        return tuple(None if (i + 1) % pattern == 0 else window for i in range(n_layers))
    if mt.startswith("qwen"):  # Qwen: slides only when asked, from max_window_layers on
        if not _bool(cfg, "use_sliding_window", False):
            return (None,) * n_layers
        first = _int(cfg, "max_window_layers", default=0, minimum=0)
        return tuple(window if i >= first else None for i in range(n_layers))
    if not _bool(cfg, "use_sliding_window", True):
        return (None,) * n_layers
    return (window,) * n_layers


def _moe(cfg: dict, mt: str, n_layers: int) -> tuple[Moe | None, tuple[bool, ...]]:
    n = _int(cfg, "n_routed_experts", "num_local_experts", "num_experts", default=None, minimum=0)
    if not n:  # absent, or 0 (GraniteMoeHybrid's dense models)
        return None, ()
    k = _int(cfg, "num_experts_per_tok", "experts_per_token", "num_experts_per_token")
    if k > n:
        raise InputError(f"{k} exceeds the {n} experts", field="num_experts_per_tok")
    f = _int(cfg, "moe_intermediate_size", "intermediate_size")
    shared = _int(cfg, "n_shared_experts", default=0, minimum=0)
    shared_f = _int(cfg, "moe_intermediate_size", default=f) if shared else 0
    if cfg.get("shared_expert_intermediate_size"):  # Qwen-MoE: one shared expert of its own width
        shared, shared_f = 1, _int(cfg, "shared_expert_intermediate_size")
    if mt == "llama4_text":  # Llama4TextMoe: shared_expert = Llama4TextMLP(config), width f
        shared, shared_f = 1, f
    if mt == "granitemoehybrid":  # shared_mlp beside block_sparse_moe in every layer
        shared, shared_f = 1, _int(cfg, "shared_intermediate_size", default=1024)
    dense_only = set(_int_list(cfg, "mlp_only_layers", n_layers) or [])
    if mt == "llama4_text":
        moe_at = _int_list(cfg, "moe_layers", n_layers)
        if moe_at is None:  # Llama4TextConfig: range(step - 1, layers, step)
            step = _int(cfg, "interleave_moe_layer_step", default=1)
            moe_at = list(range(step - 1, n_layers, step))
        moe_set = set(moe_at)
        layers = tuple(i in moe_set for i in range(n_layers))
    elif mt == "jamba":  # JambaConfig.layers_num_experts
        period = _int(cfg, "expert_layer_period", default=2)
        offset = _int(cfg, "expert_layer_offset", default=1, minimum=0)
        layers = tuple(i % period == offset for i in range(n_layers))
    elif cfg.get("decoder_sparse_step") is not None:  # Qwen-MoE: (i + 1) % step == 0
        step = _int(cfg, "decoder_sparse_step")
        layers = tuple((i + 1) % step == 0 and i not in dense_only for i in range(n_layers))
    else:  # DeepSeek: first_k_dense_replace dense layers, then every moe_layer_freq-th
        first_dense = _int(cfg, "first_k_dense_replace", default=0, minimum=0)
        freq = _int(cfg, "moe_layer_freq", default=1)
        layers = tuple(
            i >= first_dense and i % freq == 0 and i not in dense_only for i in range(n_layers)
        )
    # e_score_correction_bias, one fp32 value per routed expert: DeepSeek-V3's noaux_tc router
    # and GLM-4.5's Glm4MoeTopkRouter (a buffer stored in the checkpoint)
    router_bias = mt == "glm4_moe" or cfg.get("topk_method") == "noaux_tc"
    return (
        Moe(
            n,
            k,
            f,
            shared,
            shared_f,
            expert_bias=(mt == "gpt_oss"),
            shared_expert_gate=bool(cfg.get("shared_expert_intermediate_size")),
            router_bias=router_bias,
        ),
        layers,
    )


def _deltanet(cfg: dict, kinds: tuple[str, ...]) -> GatedDeltaNet | None:
    if "linear_attention" not in kinds:
        return None
    d = GatedDeltaNet(
        num_k_heads=_int(cfg, "linear_num_key_heads"),
        num_v_heads=_int(cfg, "linear_num_value_heads"),
        head_k_dim=_int(cfg, "linear_key_head_dim"),
        head_v_dim=_int(cfg, "linear_value_head_dim"),
        conv_kernel=_int(cfg, "linear_conv_kernel_dim"),
    )
    if d.num_v_heads % d.num_k_heads:
        raise InputError(
            f"{d.num_v_heads} value heads is not a multiple of {d.num_k_heads} key heads",
            field="linear_num_value_heads",
        )
    return d


def _mamba(
    cfg: dict, mt: str, hidden: int, kinds: tuple[str, ...], parallel: bool = False
) -> Mamba | None:
    """Mamba-1 for Jamba (JambaConfig), Mamba-2 for the mamba_n_heads configs (Bamba,
    GraniteMoeHybrid, Falcon-H1) and Nemotron-H's; defaults are those config classes' own."""
    if "mamba" not in kinds and not parallel:
        return None
    if mt == "nemotron_h":
        return _nemotron_h_mamba(cfg)
    if mt == "falcon_h1":
        return _falcon_h1_mamba(cfg, hidden)
    expand = _int(cfg, "mamba_expand", default=2)
    d_inner = expand * hidden
    conv = _int(cfg, "mamba_d_conv", default=4)
    conv_bias = _bool(cfg, "mamba_conv_bias", True)
    proj_bias = _bool(cfg, "mamba_proj_bias", False)
    if mt == "jamba":
        rank = cfg.get("mamba_dt_rank", "auto")
        dt_rank = -(-hidden // 16) if rank == "auto" else _int(cfg, "mamba_dt_rank")
        return Mamba(
            1,
            d_inner,
            _int(cfg, "mamba_d_state", default=16),
            conv,
            dt_rank=dt_rank,
            conv_bias=conv_bias,
            proj_bias=proj_bias,
        )
    n_heads = _int(cfg, "mamba_n_heads")
    head = cfg.get("mamba_d_head", "auto")
    head_dim = d_inner // n_heads if head == "auto" else _int(cfg, "mamba_d_head")
    if n_heads * head_dim != d_inner:
        raise InputError(
            f"{n_heads} heads x {head_dim} is not mamba_expand x hidden_size = {d_inner}",
            field="mamba_d_head",
        )
    return Mamba(
        2,
        d_inner,
        _int(cfg, "mamba_d_state"),
        conv,
        n_heads=n_heads,
        head_dim=head_dim,
        n_groups=_int(cfg, "mamba_n_groups", default=1),
        conv_bias=conv_bias,
        proj_bias=proj_bias,
    )


def _nemotron_h_mamba(cfg: dict) -> Mamba:
    """NemotronHMamba2Mixer: d_inner = mamba_num_heads x mamba_head_dim, state ssm_state_size,
    n_groups groups, conv_kernel taps; use_bias on in_proj and out_proj (transformers
    modeling_nemotron_h.py @ 008d9e95; vLLM's MambaMixer2 call in nemotron_h.py @ 8744bb09).
    Defaults are NemotronHConfig's (configuration_nemotron_h.py @ 13923c63), which also reads
    the older names mamba_n_groups, mamba_d_conv and mamba_conv_bias."""
    n_heads = _int(cfg, "mamba_num_heads", default=128)
    head_dim = _int(cfg, "mamba_head_dim", default=64)
    return Mamba(
        2,
        n_heads * head_dim,
        _int(cfg, "ssm_state_size", default=128),
        _int(cfg, "conv_kernel", "mamba_d_conv", default=4),
        n_heads=n_heads,
        head_dim=head_dim,
        n_groups=_int(cfg, "n_groups", "mamba_n_groups", default=8),
        conv_bias=_bool(cfg, "use_conv_bias", _bool(cfg, "mamba_conv_bias", True)),
        proj_bias=_bool(cfg, "use_bias", False),
    )


def _falcon_h1_mamba(cfg: dict, hidden: int) -> Mamba:
    """FalconH1Mixer (modeling_falcon_h1.py @ 001f85b3): d_inner is mamba_d_ssm (else
    mamba_expand x hidden_size), the gated RMSNorm only with mamba_rms_norm, in_proj's bias
    mamba_proj_bias and out_proj's projectors_bias; defaults are FalconH1Config's
    (configuration_falcon_h1.py @ 020a37d2)."""
    if cfg.get("mamba_d_ssm") is not None:
        d_inner = _int(cfg, "mamba_d_ssm")
    else:
        d_inner = _int(cfg, "mamba_expand", default=2) * hidden
    n_heads = _int(cfg, "mamba_n_heads", default=128)
    head = cfg.get("mamba_d_head", "auto")
    head_dim = d_inner // n_heads if head in ("auto", None) else _int(cfg, "mamba_d_head")
    if n_heads * head_dim != d_inner:
        raise InputError(
            f"{n_heads} heads x {head_dim} is not mamba_d_ssm = {d_inner}", field="mamba_d_head"
        )
    return Mamba(
        2,
        d_inner,
        _int(cfg, "mamba_d_state", default=256),
        _int(cfg, "mamba_d_conv", default=4),
        n_heads=n_heads,
        head_dim=head_dim,
        n_groups=_int(cfg, "mamba_n_groups", default=1),
        conv_bias=_bool(cfg, "mamba_conv_bias", True),
        proj_bias=_bool(cfg, "mamba_proj_bias", False),
        out_bias=_bool(cfg, "projectors_bias", False),
        gated_norm=_bool(cfg, "mamba_rms_norm", False),
    )


def from_hf_config(
    cfg: dict, *, ident: str, name: str | None = None, source: str = "", meta: dict | None = None
) -> Model:
    """Build a Model from a Hugging Face config.json mapping."""
    if not isinstance(cfg, dict):
        raise InputError("config must be a mapping")
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers keep the LM inside
        text = cfg["text_config"]
        inner = {**text, "model_type": text.get("model_type", "")}
        if "tie_word_embeddings" not in text and "tie_word_embeddings" in cfg:
            inner["tie_word_embeddings"] = cfg["tie_word_embeddings"]  # the wrapper's own flag
        cfg = inner
    mt = plain_text(cfg.get("model_type") or "", field="model_type").lower()
    hidden = _int(cfg, "hidden_size", "n_embd", "d_model", "n_embed")
    depth: Any = ...
    if mt == "nemotron_h":  # newer NemotronHConfig files count the layers in their block list
        pattern = _nemotron_h_pattern(cfg)[1]
        depth = len(pattern) if isinstance(pattern, (str, list)) and pattern else ...
    n_layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers", default=depth)
    n_heads = _int(cfg, "num_attention_heads", "n_head", "num_heads")
    if cfg.get("multi_query") is True:
        n_kv = 1
    else:
        n_kv = _int(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv", default=n_heads)
    if n_heads % n_kv:
        raise InputError(
            f"{n_heads} attention heads is not a multiple of {n_kv} KV heads",
            field="num_key_value_heads",
        )
    vocab = _int(cfg, "vocab_size", "padded_vocab_size")
    mla = None
    if cfg.get("kv_lora_rank") is not None:
        mla = Mla(
            kv_lora_rank=_int(cfg, "kv_lora_rank"),
            qk_rope_head_dim=_int(cfg, "qk_rope_head_dim"),
            qk_nope_head_dim=_int(cfg, "qk_nope_head_dim"),
            v_head_dim=_int(cfg, "v_head_dim"),
            q_lora_rank=_int(cfg, "q_lora_rank", default=None),
        )
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        v_head_dim = mla.v_head_dim
    else:
        # Nemotron-H's older files name it attention_head_dim
        head_keys = ("head_dim", "attention_head_dim") if mt == "nemotron_h" else ("head_dim",)
        if all(cfg.get(k) is None for k in head_keys) and hidden % n_heads:
            raise InputError(
                f"hidden size {hidden} is not divisible by {n_heads} heads; give head_dim",
                field="head_dim",
            )
        head_dim = _int(cfg, *head_keys, default=hidden // n_heads)
        v_head_dim = head_dim
    default_ffn = 4 * hidden if mt in _FFN_4X else ...
    ffn_keys = ("intermediate_size", "ffn_dim", "n_inner")
    if mt == "llama4_text":  # dense layers: intermediate_size_mlp (experts: intermediate_size)
        ffn_keys = ("intermediate_size_mlp", *ffn_keys)
    if mt == "granitemoehybrid":  # its MLP is shared_mlp; intermediate_size sizes the experts
        ffn_keys = ("shared_intermediate_size", *ffn_keys)
    intermediate = _int(cfg, *ffn_keys, default=default_ffn)
    # Nemotron-H's MoE blocks are refused (_nemotron_h_blocks); its n_routed_experts defaults
    # mean nothing without them
    moe, moe_layers = (None, ()) if mt == "nemotron_h" else _moe(cfg, mt, n_layers)
    windows = _windows(cfg, mt, n_layers)
    types = _layer_types(cfg, mt, n_layers) or []
    kinds = tuple(t if t in _STATE_TYPES | _MLP_ONLY_TYPES else "attention" for t in types)
    parallel_mamba = mt == "falcon_h1"
    tie = _bool(cfg, "tie_word_embeddings", mt not in _UNTIED_DEFAULT)
    proj = _int(cfg, "word_embed_proj_dim", default=None) if mt == "opt" else None
    meta = meta or {}
    published = _published(meta)
    ident = _ident(ident, field="id")
    model = Model(
        id=ident,
        name=plain_text(name, field="name") if name else ident,
        source=plain_text(source, field="source", max_chars=NOTE_CHARS),
        model_type=mt or "unknown",
        n_layers=n_layers,
        hidden=hidden,
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        vocab=vocab,
        intermediate=intermediate,
        mlp="plain" if mt in _PLAIN_MLP else "gated",
        tie_embeddings=tie,
        layer_windows=windows,
        mla=mla,
        moe=moe,
        moe_layers=moe_layers,
        attention_bias=_bool(cfg, "attention_bias", mt in ("qwen2", "opt", "bloom"))
        or _bool(cfg, "qkv_bias", False),
        o_bias=mt in ("opt", "bloom", "gpt_oss")
        or (mt not in _QKV_BIAS_ONLY and _bool(cfg, "attention_bias", False)),
        mlp_bias=_bool(cfg, "mlp_bias", mt in ("opt", "bloom")) and not moe,
        norm_bias=mt in ("opt", "bloom"),
        norms_per_layer=(
            4 if mt.startswith(("gemma2", "gemma3")) else 1 if mt == "nemotron_h" else 2
        ),
        qk_norm=mt in ("qwen3", "qwen3_moe", "qwen3_next", "gemma3")
        or (mt == "glm4_moe" and _bool(cfg, "use_qk_norm", False)),
        learned_positions=(_int(cfg, "max_position_embeddings") + 2) if mt == "opt" else 0,
        max_positions=_int(
            cfg, "max_position_embeddings", "n_positions", "seq_length", default=None
        ),
        embed_proj_dim=proj if isinstance(proj, int) and proj > 0 else None,
        attention_sinks=mt == "gpt_oss",
        layer_kinds=kinds if any(k != "attention" for k in kinds) else (),
        deltanet=_deltanet(cfg, kinds),
        mamba=_mamba(cfg, mt, hidden, kinds, parallel_mamba),
        parallel_mamba=parallel_mamba,
        mlp_layers=tuple(k == "mlp" for k in kinds) if mt == "nemotron_h" else (),
        attn_output_gate=_bool(cfg, "attn_output_gate", mt == "qwen3_next"),
        native_dtype=plain_text(
            cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16", field="torch_dtype"
        ),
        published_params=published.get("value"),
        published_active_params=published.get("active"),
        published_source=published.get("source", ""),
        hf_id=_ident(meta.get("hf_id") or "", field="hf_id"),
    )
    _check_size(model)
    return model


def _ident(value: Any, *, field: str) -> str:
    """Return an id: one line of plain text of at most MAX_ID_CHARS characters."""
    return plain_text(value, field=field, max_chars=limits.MAX_ID_CHARS)


def _published(meta: dict) -> dict:
    """Return a model file's published_params: value and active (positive numbers), source."""
    published = meta.get("published_params")
    if published is None:
        return {}
    if not isinstance(published, dict):
        raise InputError("must be a mapping of value, active and source", field="published_params")
    out: dict = {}
    for key in ("value", "active"):
        v = published.get(key)
        if v is None:
            continue
        if not is_finite_number(v) or not 0 < v <= limits.MAX_PARAMS:
            raise InputError(
                f"must be a number of parameters from 1 to {limits.MAX_PARAMS:.3g}",
                field=f"published_params.{key}",
            )
        out[key] = v
    source = published.get("source", "")
    out["source"] = plain_text(source, field="published_params.source", max_chars=NOTE_CHARS)
    return out


def _check_size(m: Model) -> None:
    """Refuse a shape whose cache, state or weights the model's int64 arithmetic cannot hold.

    Each number is already within its bound; these products of them are checked in Python
    integers before any per-layer array is built (spec/limits.py).
    """
    vector = max(
        sum(count * kv_vector_bytes(length, fmt) for count, length in m.kv_vectors())
        for fmt in KvFormat
    )
    per_token = vector * sum(k == "attention" for k in m.kinds)
    if per_token > limits.MAX_KV_BYTES_PER_TOKEN:
        raise InputError(
            f"one token's KV cache over all layers would be {per_token:,} bytes; at most "
            f"{limits.MAX_KV_BYTES_PER_TOKEN:,} are modelled",
            field="num_hidden_layers",
        )
    state = sum(int(v) for v in m.state_values_per_layer()) * 4
    if state > limits.MAX_STATE_BYTES_PER_REQUEST:
        raise InputError(
            f"one request's recurrent state would be {state:,} bytes; at most "
            f"{limits.MAX_STATE_BYTES_PER_REQUEST:,} are modelled",
            field="num_hidden_layers",
        )
    if m.params > limits.MAX_PARAMS:
        raise InputError(
            f"{m.params:,} parameters is more than the {limits.MAX_PARAMS:,} this tool models",
            field="num_hidden_layers",
        )


# -- loading --------------------------------------------------------------------------------
_MODEL_SUFFIXES = {".json", ".yaml", ".yml"}


def model_ids() -> list[str]:
    """Return the catalog's model ids."""
    return list(catalog.model_paths())


@cache
def _catalog_model(ident: str) -> Model:
    path = catalog.model_paths()[ident]
    return _from_model_file(catalog.load(f"models/{ident}"), path, ident)


def _from_model_file(raw: dict, path: Path, ident: str) -> Model:
    cfg = raw.get("config")
    if not isinstance(cfg, dict):
        raise InputError(
            "a model file needs a 'config' mapping (the HF config.json)",
            field="config",
            file=display_name(str(path)),
        )
    src = raw.get("source") or {}
    url = src.get("url", "") if isinstance(src, dict) else src
    try:  # the file's own fields first, so that their errors are not placed under config
        _ident(raw.get("id", ident), field="id")
        if raw.get("name"):
            plain_text(raw["name"], field="name")
        if url:
            plain_text(url, field="source", max_chars=NOTE_CHARS)
        _ident(raw.get("hf_id") or "", field="hf_id")
        _published(raw)
    except InputError as exc:
        raise exc.within(file=display_name(str(path))) from None
    try:
        return from_hf_config(
            cfg,
            ident=raw.get("id", ident),
            name=raw.get("name"),
            source=url or str(path),
            meta=raw,
        )
    except InputError as exc:
        raise exc.within(file=display_name(str(path)), field="config") from None


def load_model(ref: str | Path) -> Model:
    """Return a Model from a catalog id, a HF config.json, or a model YAML file."""
    text = str(ref)
    if text in catalog.model_paths():
        return _catalog_model(text)
    try:
        path = Path(check_path(text))
    except InputError:
        if "/" in text or Path(text[-8:]).suffix.lower() in _MODEL_SUFFIXES:
            raise
        raise catalog.unknown_id("model", text, catalog.model_paths()) from None
    if _is(path, stat.S_ISDIR) and _is(path / "config.json", stat.S_ISREG):
        path = path / "config.json"
    if path.suffix.lower() in _MODEL_SUFFIXES or _is(path, None):
        raw = load_mapping(path)
        ident = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
        ident = ident.lower() or "model"
        if "config" in raw and isinstance(raw["config"], dict):
            return _from_model_file(raw, path, ident)
        try:
            return from_hf_config(raw, ident=ident, source=str(path))
        except InputError as exc:
            raise exc.within(file=display_name(str(path))) from None
    raise catalog.unknown_id("model", text, catalog.model_paths())


def _is(path: Path, kind: Any) -> bool:
    """True when ``path`` exists (and, given ``kind``, is that kind of file); never raises."""
    mode = stat_mode(path)
    return mode is not None and (kind is None or kind(mode))
