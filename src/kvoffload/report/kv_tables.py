"""Chapter 02's tables: every model's cache, one model's cache per precision."""

from __future__ import annotations

import pandas as pd

from kvoffload.inputs.units import format_bytes, format_number


def _sliding(count: int, windows: tuple[int, ...]) -> str:
    return f"{count} (window {', '.join(map(str, windows))})" if count else "—"


def model_kv_table(sizes: pd.DataFrame, tokens: int) -> pd.DataFrame:
    """Return the models' KV sizes formatted for the page (``studies.kv_sizing.model_sizes``)."""
    return pd.DataFrame(
        {
            "model": sizes["model"],
            "attention": sizes["attention"],
            "layers": sizes["layers"],
            "KV heads": sizes["kv_heads"],
            "cached per token and layer": [
                " + ".join(f"{c}×{n}" for c, n in v) for v in sizes["vectors"]
            ],
            "sliding layers": [
                _sliding(n, w)
                for n, w in zip(sizes["sliding_layers"], sizes["windows"], strict=True)
            ],
            "layers with a fixed state": [n or "—" for n in sizes["state_layers"]],
            "bytes per token": sizes["bytes_per_token"],
            f"per request at {tokens:,} tokens": [
                format_bytes(b) + (f" (beyond its {int(n):,}-token context)" if over else "")
                for b, n, over in zip(
                    sizes["per_request_bytes"],
                    sizes["max_positions"],
                    sizes["beyond_context"],
                    strict=True,
                )
            ],
        }
    )


def kv_precision_table(sizes: pd.DataFrame, tokens: int) -> pd.DataFrame:
    """Return one model's cache per KV precision formatted for the page (``precision_sizes``)."""
    return pd.DataFrame(
        {
            "precision": sizes["precision"],
            "bytes per token": sizes["bytes_per_token"],
            f"per request at {tokens:,} tokens": [
                format_bytes(b) for b in sizes["per_request_bytes"]
            ],
            "relative to bf16 (×)": [format_number(r) for r in sizes["relative_to_bf16"]],
        }
    )
