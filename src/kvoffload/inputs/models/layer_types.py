"""Each layer's type and attention span, from layer_types or as each family derives them."""

from __future__ import annotations

from kvoffload.inputs import limits
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.models.config_values import _bool, _int, _int_list
from kvoffload.inputs.models.families import (
    _LAYER_TYPES,
    _MLP_ONLY_TYPES,
    _NEMOTRON_H_BLOCKS,
    _STATE_TYPES,
)


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
