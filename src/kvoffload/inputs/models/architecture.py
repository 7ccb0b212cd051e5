"""Model architectures: the shapes of a model and of its attention, mixers and experts."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

import numpy as np

from kvoffload.inputs.errors import InputError


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
    """Multi-head latent attention (DeepSeek): what the cache holds per token and layer.

    ``cache`` is what an engine keeps: the latent and its rope part (``latent``, every engine
    by default), that and a transposed copy of the latent for V (``latent_and_v``: ik_llama.cpp's
    ``-mla 1``), or every head's decompressed keys and values (``full``: ``-mla 0``, standard
    attention).
    """

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None
    cache: Literal["latent", "latent_and_v", "full"] = "latent"


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
class Architecture:
    """A decoder-only transformer's shape as its config gives it (Model counts its weights)."""

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
        object.__setattr__(self, "_hash", hash(tuple(getattr(self, f) for f in _FIELDS)))

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
        a = self.mla
        if a and a.cache == "full":
            return (
                (self.n_heads, a.qk_nope_head_dim + a.qk_rope_head_dim),
                (self.n_heads, a.v_head_dim),
            )
        if a:
            latent = ((1, a.kv_lora_rank + a.qk_rope_head_dim),)
            return (*latent, (1, a.kv_lora_rank)) if a.cache == "latent_and_v" else latent
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


# the fields an Architecture's hash and equality cover, in order (as the dataclass's own __hash__)
_FIELDS = tuple(f.name for f in fields(Architecture))
