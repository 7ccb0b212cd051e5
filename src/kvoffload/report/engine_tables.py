"""Chapter 04's table: every engine's prediction for one workload."""

from __future__ import annotations

import pandas as pd

from kvoffload.spec.units import format_bytes

MEMORY_COLUMNS = {"gpu_bytes": "GPU memory", "cpu_bytes": "host memory"}


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
