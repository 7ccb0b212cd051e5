"""The sources behind a page's figures, as a table."""

from __future__ import annotations

import pandas as pd

from kvoffload.inputs import catalog
from kvoffload.report.styling import Table, show


def sources_table(ids: list[str]) -> pd.DataFrame:
    """Return the registered sources behind a page's figures: id, title, kind and address."""
    known = catalog.sources()
    rows = [
        {
            "source": i,
            "title": known[i].get("title", ""),
            "kind": known[i].get("kind", ""),
            "address": known[i].get("url", ""),
        }
        for i in dict.fromkeys(ids)
        if i in known
    ]
    return pd.DataFrame(rows, columns=["source", "title", "kind", "address"])


def show_sources(ids: list[str], name: str) -> Table:
    """Return the sources table for the page: each title a link to its address."""
    return show(sources_table(ids), name, key=["title"], links={"title": "address"})
