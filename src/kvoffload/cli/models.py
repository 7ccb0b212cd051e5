"""``kvoffload models``: list the catalog's models, show one (or an imported config.json)."""

from __future__ import annotations

import argparse
from typing import Any

from kvoffload.cli.output import print_json


def model_json(model: Any) -> dict[str, Any]:
    """Return what ``models show --json`` prints for ``model``."""
    from kvoffload.inputs.precision import WeightFormat
    from kvoffload.model.kv import bytes_per_token

    out = {
        "id": model.id,
        "name": model.name,
        "source": model.source,
        "model_type": model.model_type,
        "layers": model.n_layers,
        "hidden_size": model.hidden,
        "attention": model.attention_kind,
        "heads": model.n_heads,
        "kv_heads": model.n_kv_heads,
        "head_dim": model.head_dim,
        "v_head_dim": model.v_head_dim,
        "layer_windows": list(model.layer_windows),
        "vocab_size": model.vocab,
        "intermediate_size": model.intermediate,
        "tie_embeddings": model.tie_embeddings,
        "params": model.params,
        "active_params": model.active_params,
        "published_params": model.published_params,
        "kv_bytes_per_token_bf16": bytes_per_token(model),
        "weight_bytes": {
            f.value: model.weight_bytes(f).total
            for f in WeightFormat
            if f is not WeightFormat.GGUF or hasattr(model, "type_bytes")
        },
    }
    if hasattr(model, "type_bytes"):  # read from a .gguf file: its own bytes, exactly
        out["gguf"] = gguf_bytes(model)
    if model.mla:
        out["mla"] = {
            "kv_lora_rank": model.mla.kv_lora_rank,
            "qk_rope_head_dim": model.mla.qk_rope_head_dim,
        }
    if model.moe:
        out["moe"] = {
            "experts": model.moe.n_experts,
            "experts_per_token": model.moe.experts_per_token,
            "shared_experts": model.moe.n_shared_experts,
            "moe_layers": sum(model.moe_layers),
        }
    return out


def gguf_bytes(model: Any) -> dict[str, Any]:
    """Return a GGUF model's bytes as the file stores them: total, per tensor group, per type."""
    import numpy as np

    from kvoffload.inputs.precision import WeightFormat
    from kvoffload.model.tensor_groups import GROUPS, tensor_table

    table = tensor_table(model, WeightFormat.GGUF)
    sums = np.bincount(table.group, weights=table.nbytes, minlength=len(GROUPS))
    return {
        "total": model.weight_bytes(WeightFormat.GGUF).total,
        "groups": {g: int(b) for g, b in zip(GROUPS, sums, strict=True) if b},
        "types": dict(sorted(model.type_bytes().items(), key=lambda kv: -kv[1])),
    }


def list_models(_: argparse.Namespace) -> int:
    """Print one line per catalog model: id, name, attention, layers, parameters."""
    from kvoffload.inputs.models import load_model, model_ids

    for ident in model_ids():
        m = load_model(ident)
        print(
            f"{ident:<16} {m.name:<24} {m.attention_kind:<4} {m.n_layers:>4} layers  {m.params / 1e9:8.2f} B params"
        )
    return 0


def show_model(args: argparse.Namespace) -> int:
    """Print a model's architecture, parameters, KV bytes and weight sizes, or its JSON."""
    from kvoffload.inputs.models import load_model
    from kvoffload.inputs.units import format_bytes

    model = load_model(args.model)
    info = model_json(model)
    if args.json:
        print_json(info)
        return 0
    print(f"{model.id}: {model.name}  ({model.source})")
    # attention layers by window; recurrent (state) and MLP-only layers by kind
    attn = [w for w, k in zip(model.layer_windows, model.kinds, strict=True) if k == "attention"]
    windows = set(attn)
    parts = [
        f"{sum(1 for w in attn if w == x)} layers {'full' if x is None else f'window {x}'}"
        for x in sorted(windows, key=lambda v: -1 if v is None else v)
    ]
    others = {
        "linear_attention": "gated DeltaNet (state)",
        "mamba": "Mamba (state)",
        "mlp": "MLP only",
    }
    for kind, label in others.items():
        n = sum(1 for k in model.kinds if k == kind)
        if n:
            parts.append(f"{n} layers {label}")
    span = "full attention" if windows == {None} and len(parts) == 1 else ", ".join(parts)
    print(
        f"  {model.n_layers} layers, hidden {model.hidden}, {model.attention_kind.upper()}: "
        f"{model.n_heads} heads, {model.n_kv_heads} KV heads, head_dim {model.head_dim}; {span}"
    )
    if model.mla:
        print(
            f"  MLA: caches kv_lora_rank {model.mla.kv_lora_rank} + rope {model.mla.qk_rope_head_dim} per token and layer"
        )
    if model.moe:
        print(
            f"  MoE: {model.moe.n_experts} experts, {model.moe.experts_per_token} per token, "
            f"{model.moe.n_shared_experts} shared, {sum(model.moe_layers)} MoE layers"
        )
    published = (
        f" (published {model.published_params / 1e9:.4g} B)" if model.published_params else ""
    )
    print(
        f"  parameters: {model.params / 1e9:.4g} B total, {model.active_params / 1e9:.4g} B active{published}"
    )
    print(f"  KV cache: {info['kv_bytes_per_token_bf16']} B per token (bf16, all layers)")
    print("  weights:")
    for fmt, total in info["weight_bytes"].items():
        print(f"    {fmt:<7} {format_bytes(total)}")
    if "gguf" in info:
        print(f"  as the file stores them: {format_bytes(info['gguf']['total'])}")
        for group, total in info["gguf"]["groups"].items():
            print(f"    {group:<14} {format_bytes(total)}")
        types = ", ".join(f"{k} {format_bytes(v)}" for k, v in info["gguf"]["types"].items())
        print(f"  by ggml type: {types}")
    return 0
