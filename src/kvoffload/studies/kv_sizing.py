"""KV cache sizes: every catalog model at one context, one model in every KV precision."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from kvoffload.inputs.models import Model, load_model, model_ids
from kvoffload.inputs.precision import KvFormat
from kvoffload.model import kv


def model_sizes(
    tokens: int, fmt: KvFormat = KvFormat.BF16, ids: list[str] | None = None
) -> pd.DataFrame:
    """Return each catalog model's attention layout, KV bytes per token and per request (B)."""
    rows = []
    for ident in ids or model_ids():
        m = load_model(ident)
        attn = [w for w, k in zip(m.layer_windows, m.kinds, strict=True) if k == "attention"]
        windows = sorted({w for w in attn if w is not None})
        rows.append(
            {
                "model": ident,
                "attention": m.attention_kind.upper(),
                "layers": m.n_layers,
                "kv_heads": "latent" if m.mla else m.n_kv_heads,
                "vectors": tuple(m.kv_vectors()),
                "sliding_layers": sum(w is not None for w in attn),
                "state_layers": int(np.count_nonzero(kv.state_bytes_per_layer(m, fmt))),
                "windows": tuple(windows),
                "bytes_per_token": kv.bytes_per_token(m, fmt),
                "per_request_bytes": int(kv.request_bytes(m, tokens, fmt)),
                # a context the model was not built for is shown, but marked as beyond its range
                "max_positions": m.max_positions,
                "beyond_context": m.max_positions is not None and tokens > m.max_positions,
            }
        )
    return pd.DataFrame(rows)


def precision_sizes(model: Model, tokens: int) -> pd.DataFrame:
    """Return one request's KV cache at ``tokens`` in each KV precision (B), and its ratio to bf16."""
    bf16 = int(kv.request_bytes(model, tokens, KvFormat.BF16))
    rows = []
    for fmt in KvFormat:
        b = int(kv.request_bytes(model, tokens, fmt))
        rows.append(
            {
                "precision": fmt.value,
                "bytes_per_token": kv.bytes_per_token(model, fmt),
                "per_request_bytes": b,
                "relative_to_bf16": b / bf16,
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class LayoutRatios:
    """What the attention layout does to one request's cache, from a ``model_sizes`` frame."""

    mha_over_gqa: float  # Llama 2 7B (MHA) over Llama 3 8B (GQA)
    gqa_over_mla: float  # Llama 3.1 405B (GQA) over DeepSeek-V3 (MLA)
    largest_model: str
    largest_bytes: int


def layout_ratios(sizes: pd.DataFrame) -> LayoutRatios:
    """Return the MHA/GQA and GQA/MLA cache ratios and the largest cache in ``sizes``."""
    by_id = sizes.set_index("model")["per_request_bytes"]
    return LayoutRatios(
        mha_over_gqa=float(by_id["llama-2-7b"] / by_id["llama-3.1-8b"]),
        gqa_over_mla=float(by_id["llama-3.1-405b"] / by_id["deepseek-v3"]),
        largest_model=str(by_id.idxmax()),
        largest_bytes=int(by_id.max()),
    )
