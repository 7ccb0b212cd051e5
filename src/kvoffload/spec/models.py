"""Model architectures: HF config.json import, parameter tensors, weight bytes per precision."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from kvoffload.spec import catalog
from kvoffload.spec.errors import InputError
from kvoffload.spec.inputs import load_mapping
from kvoffload.spec.precision import (
    WeightFormat,
    fp4_bytes,
    ggml_bytes,
    use_more_bits,
)

# Families whose MLP is up -> activation -> down (no gate): OPT, BLOOM, GPT-2 and kin.
_PLAIN_MLP = {"opt", "bloom", "gpt2", "gpt_neox", "gptj", "falcon", "phi", "gpt_bigcode"}
# Families whose config omits the FFN width because the architecture fixes it at 4 x hidden.
_FFN_4X = {"bloom", "gpt2", "gpt_bigcode", "gptj", "falcon"}
# Families whose embeddings are untied when the config says nothing (their config class default).
_UNTIED_DEFAULT = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
    "deepseek_v2", "deepseek_v3", "gpt_oss",
}  # fmt: skip
_LAYER_TYPES = {"full_attention", "sliding_attention", "chunked_attention"}


@dataclass(frozen=True)
class Tensor:
    """One weight tensor class in a layer: ``count`` matrices of rows x cols (vectors: rows=1)."""

    role: str
    layer: int | None
    rows: int
    cols: int
    count: int = 1
    vector: bool = False

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
class Moe:
    """Mixture of experts: routed experts, how many a token uses, shared experts."""

    n_experts: int
    experts_per_token: int
    expert_intermediate: int
    n_shared_experts: int = 0
    shared_intermediate: int = 0
    expert_bias: bool = False


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
    layer_windows: tuple[int | None, ...]  # per layer: None = full attention, else window tokens
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
    embed_proj_dim: int | None = None
    attention_sinks: bool = False
    native_dtype: str = "bf16"
    published_params: float | None = None
    published_active_params: float | None = None
    published_source: str = ""
    hf_id: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

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
        """True when any layer attends over a bounded window."""
        return any(w is not None for w in self.layer_windows)

    # -- parameters ------------------------------------------------------------------------
    def tensors(self) -> tuple[Tensor, ...]:
        """Return every weight tensor class of the model."""
        return _tensors(self)

    @property
    def params(self) -> int:
        """Return the total number of parameters."""
        return sum(t.params for t in self.tensors())

    @property
    def active_params(self) -> int:
        """Return the parameters one token touches (all of them for a dense model)."""
        if not self.moe:
            return self.params
        unused = self.moe.n_experts - self.moe.experts_per_token
        idle = sum(
            t.params // t.count * unused for t in self.tensors() if t.role.startswith("exp_")
        )
        return self.params - idle

    def tensor_bytes(self, fmt: WeightFormat) -> tuple[tuple[Tensor, int], ...]:
        """Return every weight tensor class with its bytes in format ``fmt``."""
        return tuple((t, _tensor_bytes(self, t, fmt)) for t in self.tensors())

    def weight_bytes(self, fmt: WeightFormat) -> WeightBytes:
        """Return the weight bytes in format ``fmt``: per layer, embeddings, output layer."""
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
    for i in range(m.n_layers):
        out.extend(_attention_tensors(m, i))
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
    t = [
        Tensor("attn_q", i, q, h),
        Tensor("attn_k", i, kv, h),
        Tensor("attn_v", i, v, h),
        Tensor("attn_o", i, h, nh * m.v_head_dim),
    ]
    if m.attention_bias:
        t.append(Tensor("bias", i, 1, q + kv + v, vector=True))
    if m.o_bias:
        t.append(Tensor("bias", i, 1, h, vector=True))
    if m.qk_norm:
        t.append(Tensor("norm", i, 1, 2 * m.head_dim, vector=True))
    if m.attention_sinks:
        t.append(Tensor("sinks", i, 1, nh, vector=True))
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
        if e.expert_bias:
            t += [Tensor("bias", i, 1, n * (2 * f + h) + n, vector=True)]
        if e.n_shared_experts:
            fs = e.shared_intermediate * e.n_shared_experts
            t += [
                Tensor("shexp_gate", i, fs, h),
                Tensor("shexp_up", i, fs, h),
                Tensor("shexp_down", i, h, fs),
            ]
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
    "attn_", "ffn_", "exp_", "shexp_",
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
    linear = t.role.startswith(_DECODER_LINEAR)
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
def _int(cfg: dict, *keys: str, default: Any = ..., minimum: int = 1) -> Any:
    """Return the first of ``keys`` present and not null, as a positive int."""
    for key in keys:
        if cfg.get(key) is not None:
            v = cfg[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                raise InputError(f"must be an integer >= {minimum}, got {v!r}", field=key)
            return v
    if default is ...:
        raise InputError("required field is missing", field=keys[0])
    return default


def _bool(cfg: dict, key: str, default: bool) -> bool:
    v = cfg.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise InputError(f"must be true or false, got {v!r}", field=key)
    return v


def _windows(cfg: dict, mt: str, n_layers: int) -> tuple[int | None, ...]:
    window = cfg.get("sliding_window")
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int) or window < 1
    ):
        raise InputError(
            f"must be a positive integer or null, got {window!r}", field="sliding_window"
        )
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != n_layers:
            raise InputError(f"must list one type per layer ({n_layers})", field="layer_types")
        out: list[int | None] = []
        for i, kind in enumerate(types):
            if kind not in _LAYER_TYPES:
                raise InputError(
                    f"unsupported attention type {kind!r}; known: {', '.join(sorted(_LAYER_TYPES))}",
                    field=f"layer_types[{i}]",
                )
            if kind == "full_attention":
                out.append(None)
            elif kind == "chunked_attention":
                out.append(_int(cfg, "attention_chunk_size"))
            else:
                if window is None:
                    raise InputError("sliding layers need sliding_window", field="sliding_window")
                out.append(window)
        return tuple(out)
    if window is None:
        return (None,) * n_layers
    if mt in ("gemma2",):  # transformers' Gemma2: even layers slide, odd layers are global
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
    n = _int(cfg, "n_routed_experts", "num_local_experts", "num_experts", default=None)
    if not n:
        return None, ()
    k = _int(cfg, "num_experts_per_tok", "experts_per_token", "num_experts_per_token")
    if k > n:
        raise InputError(f"{k} exceeds the {n} experts", field="num_experts_per_tok")
    f = _int(cfg, "moe_intermediate_size", "intermediate_size")
    shared = _int(cfg, "n_shared_experts", default=0, minimum=0)
    shared_f = _int(cfg, "moe_intermediate_size", default=f) if shared else 0
    if cfg.get("shared_expert_intermediate_size"):  # Qwen-MoE: one shared expert of its own width
        shared, shared_f = 1, _int(cfg, "shared_expert_intermediate_size")
    first_dense = _int(cfg, "first_k_dense_replace", default=0, minimum=0)
    freq = _int(cfg, "moe_layer_freq", "decoder_sparse_step", default=1)
    dense_only = set(cfg.get("mlp_only_layers") or [])
    layers = tuple(
        i >= first_dense and i % freq == 0 and i not in dense_only for i in range(n_layers)
    )
    return Moe(n, k, f, shared, shared_f, expert_bias=(mt == "gpt_oss")), layers


def from_hf_config(
    cfg: dict, *, ident: str, name: str | None = None, source: str = "", meta: dict | None = None
) -> Model:
    """Build a Model from a Hugging Face config.json mapping."""
    if not isinstance(cfg, dict):
        raise InputError("config must be a mapping")
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers keep the LM inside
        cfg = {**cfg["text_config"], "model_type": cfg["text_config"].get("model_type", "")}
    mt = str(cfg.get("model_type", "")).lower()
    hidden = _int(cfg, "hidden_size", "n_embd", "d_model", "n_embed")
    n_layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers")
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
        if cfg.get("head_dim") is None and hidden % n_heads:
            raise InputError(
                f"hidden size {hidden} is not divisible by {n_heads} heads; give head_dim",
                field="head_dim",
            )
        head_dim = _int(cfg, "head_dim", default=hidden // n_heads)
        v_head_dim = head_dim
    default_ffn = 4 * hidden if mt in _FFN_4X else ...
    intermediate = _int(cfg, "intermediate_size", "ffn_dim", "n_inner", default=default_ffn)
    moe, moe_layers = _moe(cfg, mt, n_layers)
    tie = _bool(cfg, "tie_word_embeddings", mt not in _UNTIED_DEFAULT)
    proj = cfg.get("word_embed_proj_dim") if mt == "opt" else None
    meta = meta or {}
    published = meta.get("published_params") or {}
    return Model(
        id=ident,
        name=name or ident,
        source=source,
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
        layer_windows=_windows(cfg, mt, n_layers),
        mla=mla,
        moe=moe,
        moe_layers=moe_layers,
        attention_bias=_bool(cfg, "attention_bias", mt in ("qwen2", "opt", "bloom"))
        or _bool(cfg, "qkv_bias", False),
        o_bias=mt in ("opt", "bloom", "gpt_oss")
        or (mt != "qwen2" and _bool(cfg, "attention_bias", False)),
        mlp_bias=_bool(cfg, "mlp_bias", mt in ("opt", "bloom")) and not moe,
        norm_bias=mt in ("opt", "bloom"),
        norms_per_layer=4 if mt.startswith("gemma2") or mt.startswith("gemma3") else 2,
        qk_norm=mt in ("qwen3", "qwen3_moe", "gemma3"),
        learned_positions=(_int(cfg, "max_position_embeddings") + 2) if mt == "opt" else 0,
        embed_proj_dim=proj if isinstance(proj, int) and proj > 0 else None,
        attention_sinks=mt == "gpt_oss",
        native_dtype=str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"),
        published_params=published.get("value"),
        published_active_params=published.get("active"),
        published_source=str(published.get("source", "")),
        hf_id=str(meta.get("hf_id", "")),
    )


# -- loading --------------------------------------------------------------------------------
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
            file=str(path),
        )
    src = raw.get("source") or {}
    url = src.get("url", "") if isinstance(src, dict) else str(src)
    try:
        return from_hf_config(
            cfg,
            ident=str(raw.get("id", ident)),
            name=raw.get("name"),
            source=url or str(path),
            meta=raw,
        )
    except InputError as exc:
        raise exc.within(file=str(path), field="config") from None


def load_model(ref: str | Path) -> Model:
    """Return a Model from a catalog id, a HF config.json, or a model YAML file."""
    text = str(ref)
    if text in catalog.model_paths():
        return _catalog_model(text)
    path = Path(text)
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    if path.suffix.lower() in {".json", ".yaml", ".yml"} or path.exists():
        raw = load_mapping(path)
        ident = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
        ident = ident.lower() or "model"
        if "config" in raw and isinstance(raw["config"], dict):
            return _from_model_file(raw, path, ident)
        try:
            return from_hf_config(raw, ident=ident, source=str(path))
        except InputError as exc:
            raise exc.within(file=str(path)) from None
    raise catalog.unknown_id("model", text, catalog.model_paths())
