"""Chapter 04's table: every engine's prediction for one workload."""

from __future__ import annotations

import pandas as pd

from kvoffload.report.styling import Table, number, show
from kvoffload.spec.units import format_bytes

MEMORY_COLUMNS = {"gpu_bytes": "GPU memory", "cpu_bytes": "host memory"}
# what a reader compares first: does it fit, how fast; then the rest, notes under the table
KEY_COLUMNS = ["engine", "fits", "TPOT (ms)", "decode tokens/s"]
TIME_COLUMNS = ["TPOT (ms)", "GPU (ms/step)", "link (ms/step)", "CPU (ms/step)", "disk (ms/step)"]


def engine_table(predictions: pd.DataFrame) -> pd.DataFrame:
    """Return the engines' predictions with memory formatted for the page (``engine_predictions``).

    ``fits`` comes right after the engine, so a faster row that was not chosen says why.
    """
    out = predictions.rename(columns=MEMORY_COLUMNS)
    if "fits" in out:
        out = out[["engine", "fits", *(c for c in out.columns if c not in ("engine", "fits"))]]
    for col in MEMORY_COLUMNS.values():
        if col in out:
            out[col] = [v if pd.isna(v) else format_bytes(v) for v in out[col]]
    return out


def show_engines(predictions: pd.DataFrame) -> Table:
    """Return the engines' table for the page: fit and speed first, each engine's note below it."""
    table = engine_table(predictions)
    formats = {c: number(3) for c in [*TIME_COLUMNS, "TTFT (s)", "decode tokens/s"]}
    key = [c for c in KEY_COLUMNS if c in table]
    notes = ["note"] if "note" in table else []
    return show(table, "engines", formats, key=key, notes=notes)
