"""Chapter 01's table: each tier's rated and achievable rate, with kinds and source."""

from __future__ import annotations

import pandas as pd

from kvoffload.inputs.units import format_bandwidth, format_seconds
from kvoffload.report.styling import Table, show


def tier_table(rates: pd.DataFrame) -> pd.DataFrame:
    """Return the tiers' rates formatted for the page (``studies.tiers.tier_rates``)."""
    return pd.DataFrame(
        {
            "tier": rates["tier"],
            "rated": [format_bandwidth(v) for v in rates["rated_bps"]],
            "rated kind": rates["rated_kind"],
            "achievable": [format_bandwidth(v) for v in rates["achievable_bps"]],
            "achievable kind": rates["achievable_kind"],
            "per-transfer latency": [
                "—" if pd.isna(v) else format_seconds(v) for v in rates["latency_s"]
            ],
            "source (achievable)": rates["achievable_source"],
        }
    )


def show_tiers(rates: pd.DataFrame, name: str = "tiers") -> Table:
    """Return the tiers' table for the page, each achievable rate's source as a note below it."""
    return show(tier_table(rates), name, notes=["source (achievable)"], notes_title="Sources")
