"""A Model from a Hugging Face config.json mapping, its size checked."""

from __future__ import annotations

from typing import Any

from kvoffload.inputs import limits
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.models.architecture import Mla
from kvoffload.inputs.models.config_values import _bool, _ident, _int, _published
from kvoffload.inputs.models.families import (
    _FFN_4X,
    _MLP_ONLY_TYPES,
    _PLAIN_MLP,
    _QKV_BIAS_ONLY,
    _STATE_TYPES,
    _UNTIED_DEFAULT,
)
from kvoffload.inputs.models.layer_types import _layer_types, _nemotron_h_pattern, _windows
from kvoffload.inputs.models.mixers import _deltanet, _mamba, _moe
from kvoffload.inputs.models.model import Model
from kvoffload.inputs.precision import KvFormat, kv_vector_bytes
from kvoffload.inputs.text import NOTE_CHARS, plain_text


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


def _check_size(m: Model) -> None:
    """Refuse a shape whose cache, state or weights the model's int64 arithmetic cannot hold.

    Each number is already within its bound; these products of them are checked in Python
    integers before any per-layer array is built (inputs/limits.py).
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
