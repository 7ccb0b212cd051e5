"""Chapter 05's tables: every alternative against bf16 on the GPU, and the 4-bit checkpoints."""

from __future__ import annotations

from typing import Any

import pandas as pd

from kvoffload.report.styling import show


def _tokens_or_window(n: float) -> str:
    """Return a token count with separators, or 'the window' where RAG caps it (NaN)."""
    return "the window" if pd.isna(n) else f"{n:,.0f}"


def comparison_table(frame: pd.DataFrame) -> Any:
    """Return ``studies.alternatives.comparison`` styled for the page, bookkeeping columns dropped."""
    formats = {
        "TPOT (ms)": "{:.3g}",
        "TPOT change": "{:+.0%}",
        "TTFT (s)": "{:.3g}",
        "longest context, batch 1": _tokens_or_window,
        "largest batch": "{:,}",
    }
    return show(frame.drop(columns=["key", "saved_bytes"]), "alternatives", formats)


def checkpoint_table(int4: pd.DataFrame) -> Any:
    """Return ``studies.alternatives.int4_checkpoints`` styled for the page."""
    return show(
        int4.drop(columns=["total_bytes"]), "int4-checkpoints", {"bits per parameter": "{:.3g}"}
    )
