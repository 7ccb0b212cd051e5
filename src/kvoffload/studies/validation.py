"""Published measurements beside the engines' predictions: ratios, refusals and error statistics."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs import catalog
from kvoffload.inputs.units import format_bytes
from kvoffload.model.prediction import shortfalls

ROLES = ("calibration", "check")


@cache
def _catalog() -> dict[str, Any]:
    return catalog.load("validation")


def rows() -> tuple[dict, ...]:
    """Return the measurements (catalog/validation.yaml)."""
    return tuple(_catalog()["rows"])


def tables() -> dict[str, dict]:
    """Return each published table's title, role (calibration or check) and why, by table id."""
    return dict(_catalog()["tables"])


def role(row: dict) -> str:
    """Return ``calibration`` or ``check``: the role of the row's table."""
    return tables()[row["table"]]["role"]


def cite(row: dict) -> str:
    """Return the published version a row was read from and where in it, in one line."""
    entry = catalog.sources().get(row["source"], {})
    v = entry.get("version", {})
    if "commit" in v:
        version = f"{v['repository']} {v['path']} @ {v['commit'][:12]}"
    elif "pull" in v:
        version = f"{v['repository']}#{v['pull']}, {v['post']}"
    elif "thread" in v:
        version = f"{v['thread']}, {v['post']}"
    elif "paper" in v:
        version = f"{v['paper']}, {v['table']}"
    else:
        version = row["source"]
    return f"{version}: {row['where']}" if row.get("where") else version


def scenario_of(row: dict, hardware: dict[str, Any] | None = None) -> dict:
    """Return the scenario mapping that reproduces a measured configuration.

    ``hardware`` may replace a testbed's catalog id by another profile (an id or a mapping).
    A row's ``gpus`` runs its catalog system with that many of the system's GPU (a multi-GPU box
    built from a catalog profile, which stays a one-GPU book profile). A row's ``reuse`` (the
    README's ``reuse:``, a prefix already cached) is passed on as written.
    """
    system = (hardware or {}).get(row["system"], row["system"])
    if "gpus" in row and system == row["system"]:
        gpu = catalog.systems()[system]["gpu"]
        system = {"base": system, "gpu": {"base": gpu, "count": row["gpus"]}}
    scenario = {
        "hardware": system,
        "model": row["model"],
        "engine": row["engine"],
        "precision": {"weights": row["precision"], "kv": "fp16"},
        "workload": {"batch": row["batch"], "prompt": row["prompt"], "generate": row["generate"]},
        "options": row["options"],
    }
    if "reuse" in row:
        scenario["reuse"] = row["reuse"]
    return scenario


@dataclass(frozen=True)
class Result:
    """One row: the measurement and the prediction, or the model's refusal (it does not fit)."""

    row: dict
    predicted: float | None
    refusal: str | None = None

    @property
    def ratio(self) -> float | None:
        """Return predicted over measured (None for a refusal)."""
        return None if self.predicted is None else self.predicted / self.row["measured"]


def run(hardware: dict[str, Any] | None = None, table: str | None = None) -> list[Result]:
    """Predict every measured configuration (of one table), optionally on other profiles.

    A configuration the model says does not fit is returned as a refusal naming the tier and
    the overshoot, never predicted.
    """
    out = []
    for row in rows():
        if table is not None and row["table"] != table:
            continue
        sc = parse_scenario(scenario_of(row, hardware), name=row["id"])
        pred = predict(sc, name=row["id"], check=False)
        over = shortfalls(sc.system, pred.memory)
        if over:
            tier, need, have = over[0]
            refusal = f"does not fit: {tier} needs {format_bytes(need)} of {format_bytes(have)}"
            out.append(Result(row, None, refusal))
        else:
            out.append(Result(row, float(pred.to_json()[row["metric"]])))
    return out


def _stats(group: list[Result]) -> dict[str, Any]:
    """Return rows, refusals, median |error| of the predicted rows, share of all rows within 2x."""
    ratios = np.array([r.ratio for r in group if r.ratio is not None], dtype=float)
    errors = np.abs(ratios - 1)
    return {
        "rows": len(group),
        "refused": sum(r.predicted is None for r in group),
        "median_abs_rel_error": float(np.median(errors)) if len(errors) else None,
        "within_2x": float(np.sum((ratios >= 0.5) & (ratios <= 2.0)) / len(group)),
    }


def _grouped(results: list[Result], key) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[Result]] = {}
    for r in results:
        groups.setdefault(key(r), []).append(r)
    return {name: _stats(group) for name, group in groups.items()}


def summary(results: list[Result]) -> dict[str, dict[str, Any]]:
    """Return per engine (and for all rows): rows, refusals, median |error|, share within 2x."""
    return {"all": _stats(results), **_grouped(results, lambda r: r.row["engine"])}


def table_summary(results: list[Result]) -> dict[str, dict[str, Any]]:
    """Return the same statistics per published table (each row's ``table``)."""
    return _grouped(results, lambda r: r.row["table"])


def role_summary(results: list[Result]) -> dict[str, dict[str, Any]]:
    """Return the same statistics for the calibration rows and for the check rows."""
    stats = _grouped(results, lambda r: role(r.row))
    return {name: stats[name] for name in ROLES if name in stats}
