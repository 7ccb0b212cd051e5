"""Chapter 04's table: every engine's prediction for one workload."""

from __future__ import annotations

import pandas as pd

from kvoffload.spec.units import format_bytes

MEMORY_COLUMNS = {"gpu_bytes": "GPU memory", "cpu_bytes": "host memory"}


def engine_table(predictions: pd.DataFrame) -> pd.DataFrame:
    """Return the engines' predictions with memory formatted for the page (``engine_predictions``)."""
    out = predictions.rename(columns=MEMORY_COLUMNS)
    for col in MEMORY_COLUMNS.values():
        if col in out:
            out[col] = [v if pd.isna(v) else format_bytes(v) for v in out[col]]
    return out
