"""Chapter 05's tables: every alternative against bf16 on the GPU, and the 4-bit checkpoints."""

from __future__ import annotations

import pandas as pd

from kvoffload.inputs.units import format_change
from kvoffload.report.styling import Table, number, show

# the option, whether it fits and what it costs per token come first; sources go under the table
KEY_COLUMNS = ["option", "fits", "TPOT (ms)", "TPOT change", "GPU memory"]


def comparison_table(frame: pd.DataFrame) -> Table:
    """Return ``studies.alternatives.comparison`` styled for the page, bookkeeping columns dropped."""
    formats = {
        "TPOT (ms)": number(3),
        "TPOT change": format_change,
        "TTFT (s)": number(3),
        "longest context, batch 1": "{:,.0f}",
        "largest batch": "{:,}",
    }
    table = frame.drop(columns=["key", "saved_bytes"])
    key = [c for c in KEY_COLUMNS if c in table]
    notes = [c for c in ("quality source",) if c in table]
    return show(
        table,
        "alternatives",
        formats,
        key=key,
        notes=notes,
        notes_title="Sources",
        missing={"longest context, batch 1": "the window"},  # RAG caps the context
    )


def article_table(article: pd.DataFrame) -> Table:
    """Return ``studies.alternatives.article_table`` for the page, each row's source below it."""
    notes = [c for c in ("source",) if c in article]
    return show(article, "article-table", notes=notes, notes_title="Sources")


def checkpoint_table(int4: pd.DataFrame) -> Table:
    """Return ``studies.alternatives.int4_checkpoints`` styled for the page."""
    return show(
        int4.drop(columns=["total_bytes"]), "int4-checkpoints", {"bits per parameter": number(3)}
    )
