"""Chapter 04's table: every engine's prediction for one workload."""

from __future__ import annotations

import pandas as pd

from kvoffload.inputs.units import format_bytes
from kvoffload.report.styling import Table, number, show
from kvoffload.studies.fit_marks import marked

MEMORY_COLUMNS = {"gpu_bytes": "GPU memory", "cpu_bytes": "host memory"}
FORMAT_COLUMNS = {"weights": "weights", "kv": "KV cache"}
# what a reader compares first: does it fit, how fast, in which formats; the rest after, notes under
KEY_COLUMNS = ["engine", "fits", "TPOT (ms)", "decode tokens/s", "weights", "KV cache"]
TIME_COLUMNS = ["TPOT (ms)", "GPU (ms/step)", "link (ms/step)", "CPU (ms/step)", "disk (ms/step)"]
MARKED_COLUMNS = ["TPOT (ms)", "TTFT (s)", "decode tokens/s"]  # what a setup that does not fit gets


def engine_table(predictions: pd.DataFrame) -> pd.DataFrame:
    """Return the engines' predictions with memory and formats written for the page.

    ``fits`` comes right after the engine and says what a setup that does not fit needs; its
    TPOT, TTFT and tokens/s carry ``fit_marks.UNFIT_MARK``, so a faster row that was not chosen
    says why where the number is read.
    """
    out = predictions.rename(columns=MEMORY_COLUMNS)
    for col in MEMORY_COLUMNS.values():
        if col in out:
            out[col] = [v if pd.isna(v) else format_bytes(v) for v in out[col]]
    for col in FORMAT_COLUMNS:
        if col in out:
            out[col] = out[col].str.upper()
    out = out.rename(columns=FORMAT_COLUMNS)
    fmt, fits = number(3), out["fits"] if "fits" in out else [True] * len(out)
    for col in MARKED_COLUMNS:
        if col in out:
            out[col] = [
                v if pd.isna(v) else marked(fmt(v), bool(ok))
                for v, ok in zip(out[col], fits, strict=True)
            ]
    if "fits_text" in out:
        out = out.drop(columns="fits").rename(columns={"fits_text": "fits"})
    if "fits" in out:
        out = out[["engine", "fits", *(c for c in out.columns if c not in ("engine", "fits"))]]
    return out


def show_engines(predictions: pd.DataFrame) -> Table:
    """Return the engines' table for the page: fit and speed first, each engine's note below it."""
    table = engine_table(predictions)
    formats = {c: number(3) for c in TIME_COLUMNS if c not in MARKED_COLUMNS}
    key = [c for c in KEY_COLUMNS if c in table]
    notes = ["note"] if "note" in table else []
    return show(table, "engines", formats, key=key, notes=notes)
