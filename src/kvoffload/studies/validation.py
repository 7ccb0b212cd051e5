"""Published measurements beside the engines' predictions: ratios and error statistics."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.spec import catalog


@cache
def rows() -> tuple[dict, ...]:
    """Return the measurements (catalog/validation.yaml)."""
    return tuple(catalog.load("validation")["rows"])


def scenario_of(row: dict, hardware: dict[str, Any] | None = None) -> dict:
    """Return the scenario mapping that reproduces a measured configuration.

    ``hardware`` may replace a testbed's catalog id by another profile (an id or a mapping).
    """
    return {
        "hardware": (hardware or {}).get(row["system"], row["system"]),
        "model": row["model"],
        "engine": row["engine"],
        "precision": {"weights": row["precision"], "kv": "fp16"},
        "workload": {"batch": row["batch"], "prompt": row["prompt"], "generate": row["generate"]},
        "options": row["options"],
    }


@dataclass(frozen=True)
class Result:
    """One row: the measurement, the prediction and their ratio."""

    row: dict
    predicted: float

    @property
    def ratio(self) -> float:
        """Return predicted over measured."""
        return self.predicted / self.row["measured"]

    @property
    def error(self) -> float:
        """Return the absolute relative error."""
        return abs(self.ratio - 1)


def run(hardware: dict[str, Any] | None = None, table: str | None = None) -> list[Result]:
    """Predict every measured configuration (of one table), optionally on other profiles."""
    out = []
    for row in rows():
        if table is not None and row["table"] != table:
            continue
        pred = predict(
            parse_scenario(scenario_of(row, hardware), name=row["id"]), name=row["id"], check=False
        )
        out.append(Result(row, float(pred.to_json()[row["metric"]])))
    return out


def _stats(group: list[Result]) -> dict[str, Any]:
    errors = np.array([r.error for r in group])
    ratios = np.array([r.ratio for r in group])
    return {
        "rows": len(group),
        "median_abs_rel_error": float(np.median(errors)),
        "within_2x": float(np.mean((ratios >= 0.5) & (ratios <= 2.0))),
    }


def summary(results: list[Result]) -> dict[str, dict[str, Any]]:
    """Return per engine (and for all rows): median absolute relative error, share within 2x."""
    groups: dict[str, list[Result]] = {"all": results}
    for r in results:
        groups.setdefault(r.row["engine"], []).append(r)
    return {name: _stats(group) for name, group in groups.items()}


def table_summary(results: list[Result]) -> dict[str, dict[str, Any]]:
    """Return the same statistics per published table (each row's ``table``)."""
    groups: dict[str, list[Result]] = {}
    for r in results:
        groups.setdefault(r.row["table"], []).append(r)
    return {name: _stats(group) for name, group in groups.items()}
