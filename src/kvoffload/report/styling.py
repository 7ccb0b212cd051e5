"""Tables on the page: no index column, fixed number formats, stable ids."""

from __future__ import annotations

from typing import Any

import pandas as pd


def show(df: pd.DataFrame, name: str, formats: dict | str | None = None, precision: int = 3) -> Any:
    """Return a table styled for the page: no index column, fixed number formats, stable ids."""
    styler = df.style.hide(axis="index").format(formats, precision=precision)
    styler.set_uuid(name)
    styler.set_table_attributes('class="kvoffload-table"')
    return styler
