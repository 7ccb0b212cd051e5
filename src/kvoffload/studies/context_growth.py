"""Decode's growth with context: does the model add as many ms per token as the cache costs?

Issue 27's target: the ms-per-token growth with context within 30% on every row that measures
it. A row measures it where its table holds the same configuration (engine, machine, model,
options, format, batch and generated tokens) at a shorter prompt: its growth is its step time
less the shortest-prompt row's, measured and predicted. A published figure is rounded to its
last written digit (13.5 tokens/s: 13.45 to 13.55); where that rounding, in the two rows
together, could move the measured growth by the target or more, no prediction could be told
within it from outside it, so the growth is printed but not judged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal

from kvoffload.studies import validation

TARGET = 0.30  # issue 27: the growth within 30%
DECODE_METRICS = ("decode_tokens_per_s", "tpot_ms")
# a row's fields that do not name its configuration
_NOT_CONFIGURATION = {"id", "prompt", "measured", "source", "where", "note", "rests_on_assumed"}


def step_ms(metric: str, value: float, batch: int) -> float:
    """Return the decode step (ms) a decode metric gives: tokens/s over the batch, or the TPOT."""
    return 1e3 * batch / value if metric == "decode_tokens_per_s" else value


def half_unit(value: float) -> float:
    """Return half a unit of the last digit a published figure is written to (13.5: 0.05)."""
    return 0.5 * 10.0 ** Decimal(repr(value)).as_tuple().exponent


def rounding_ms(row: dict) -> float:
    """Return how far the figure's rounding can move its decode step (ms), at most."""
    v, h = row["measured"], half_unit(row["measured"])
    if row["metric"] == "decode_tokens_per_s":
        return step_ms(row["metric"], v - h, row["batch"]) - step_ms(row["metric"], v, row["batch"])
    return h


@dataclass(frozen=True)
class Growth:
    """One row's growth over its configuration's shortest-prompt row, measured and predicted."""

    base: validation.Result
    row: validation.Result

    def _ms(self, r: validation.Result, value: float) -> float:
        return step_ms(r.row["metric"], value, r.row["batch"])

    @property
    def measured_ms(self) -> float:
        """Return the measured growth of the step (ms)."""
        return self._ms(self.row, self.row.row["measured"]) - self._ms(
            self.base, self.base.row["measured"]
        )

    @property
    def predicted_ms(self) -> float | None:
        """Return the predicted growth (ms); None where either row is refused."""
        if self.row.predicted is None or self.base.predicted is None:
            return None
        return self._ms(self.row, self.row.predicted) - self._ms(self.base, self.base.predicted)

    @property
    def judged(self) -> bool:
        """Return True where the two figures' rounding moves the measured growth by less than
        the target's share of it."""
        rounding = rounding_ms(self.base.row) + rounding_ms(self.row.row)
        return rounding < TARGET * abs(self.measured_ms)

    @property
    def ratio(self) -> float | None:
        """Return the predicted over the measured growth."""
        p = self.predicted_ms
        return None if p is None or self.measured_ms == 0 else p / self.measured_ms

    @property
    def within(self) -> bool | None:
        """Return True within the target, False outside it, None where not judged."""
        if not self.judged:
            return None
        return self.ratio is not None and abs(self.ratio - 1) <= TARGET


def _configuration(row: dict) -> str:
    """Return a key naming a row's configuration: every field but its prompt and measurement."""
    return json.dumps({k: v for k, v in row.items() if k not in _NOT_CONFIGURATION}, sort_keys=True)


def growths(results: list[validation.Result]) -> list[Growth]:
    """Return each decode row's growth over its configuration's shortest prompt, catalog order."""
    groups: dict[str, list[validation.Result]] = {}
    for r in results:
        if r.row["metric"] in DECODE_METRICS:
            groups.setdefault(_configuration(r.row), []).append(r)
    out = []
    for rows in groups.values():
        if len({r.row["prompt"] for r in rows}) < 2:
            continue
        base = min(rows, key=lambda r: r.row["prompt"])
        out += [Growth(base, r) for r in rows if r.row["prompt"] > base.row["prompt"]]
    return out


def to_json(found: list[Growth]) -> dict:
    """Return the growths for ``validate --json``: each row's, and the target."""
    return {
        "target_within": TARGET,
        "judged_where": "the two figures' rounding moves the measured growth by less than the target's share of it",
        "rows": [
            {
                "id": g.row.row["id"],
                "base": g.base.row["id"],
                "table": g.row.row["table"],
                "prompts": [g.base.row["prompt"], g.row.row["prompt"]],
                "measured_ms": g.measured_ms,
                "predicted_ms": g.predicted_ms,
                "ratio": g.ratio,
                "within_target": g.within,
            }
            for g in found
        ],
    }
