"""What a measurement says: lines for the terminal, the nearest catalog system, the random-read table."""

from __future__ import annotations

from typing import Any

import numpy as np

from kvoffload.inputs import catalog
from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.units import format_bandwidth, format_bytes
from kvoffload.studies.measure.plan import Report


def summarise(report: Report) -> list[str]:
    """Return one line per measured figure and per skip, for the terminal."""
    lines = []
    for key, fig in report.figures.items():
        if isinstance(fig, dict) and "kind" in fig:
            lines.append(f"  {key:<32} {fig['value']}")
    lines += [f"  skipped: {s}" for s in report.skipped]
    lines += [f"  note: {n}" for n in report.notes]
    best = max(
        (r for r in report.tables.get("storage_random_reads", [])),
        key=lambda r: r["gb_s"],
        default=None,
    )
    if best:
        lines.append(
            f"  best random read: {format_bandwidth(best['gb_s'] * 1e9)} at {format_bytes(best['request_bytes'], binary=True)} x QD {best['queue_depth']}"
        )
    return lines


def nearest_system(system: Any) -> tuple[str, list[dict[str, Any]]]:
    """Return the catalog system closest to ``system`` (log distance over the tiers' rates)."""

    def rates(s: Any) -> dict[str, float]:
        return {
            "GPU memory": s.gpu.streaming_bandwidth,
            "host→GPU link": s.link.h2d_bandwidth.value,
            "host DRAM": s.host.memory_bandwidth.value,
            "storage read": s.storage.read_bandwidth.value,
        }

    mine = rates(system)
    best, best_d = "", float("inf")
    for ident in catalog.systems():
        if ident == "article-reference":  # the article's assumptions, not a machine
            continue
        other = rates(load_system(ident))
        d = sum(np.log(mine[k] / other[k]) ** 2 for k in mine)
        if d < best_d:
            best, best_d = ident, d
    other = rates(load_system(best))
    rows = [
        {
            "tier": k,
            "this machine": format_bandwidth(mine[k]),
            best: format_bandwidth(other[k]),
            "ratio": mine[k] / other[k],
        }
        for k in mine
    ]
    return best, rows


def random_read_rows(system: Any) -> list[dict[str, Any]]:
    """Return the random-read table a measured profile keeps (empty for a catalog profile)."""
    return list(system.measurements.get("tables", {}).get("storage_random_reads", []))
