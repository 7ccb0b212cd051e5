"""Values read from a config mapping: bounded integers, booleans, layer lists, ids, counts."""

from __future__ import annotations

from typing import Any

from kvoffload.inputs import limits
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.files import is_finite_number
from kvoffload.inputs.text import NOTE_CHARS, plain_text

# The largest value each config.json integer may take (inputs/limits.py says why); an integer
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
