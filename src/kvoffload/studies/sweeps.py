"""Published sweeps: does the model rank one machine's configurations as they were measured?

A sweep is three or more validation rows of one published table that ran one model on one machine
for one workload (prompt and generated tokens) and differ only in their configuration: engine
options, weight format, batch. ``advise`` ranks configurations by their predictions, so the
question is whether the predictions order a sweep as its measurements do (Kendall's tau-b over its
configurations) and whether the one ranked first is, measured, close to the fastest. A
configuration the model refuses (it does not fit) is one ``advise`` would drop: it is left out of
the ranking, and the pick is made among the others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvoffload.studies import validation

MIN_ROWS = 3  # fewer configurations leave a single pair: no ranking worth the name
# issue 26's targets for a published sweep: the ranking, and the pick's measured speed
TAU_TARGET = 0.8
PICK_WITHIN = 0.10


def faster_is_higher(metric: str) -> bool:
    """Return True for a rate (tokens per second), False for a time (ms)."""
    return metric.endswith("_per_s")


def pair_counts(predicted: np.ndarray, measured: np.ndarray) -> tuple[int, int, int, int]:
    """Return the pairs (concordant, discordant, tied in predicted only, tied in measured only)."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    i, j = np.triu_indices(len(p), k=1)
    dp, dm = np.sign(p[i] - p[j]), np.sign(m[i] - m[j])
    both = (dp != 0) & (dm != 0)
    concordant = int(np.sum(both & (dp == dm)))
    discordant = int(np.sum(both & (dp != dm)))
    return (
        concordant,
        discordant,
        int(np.sum((dp == 0) & (dm != 0))),
        int(np.sum((dm == 0) & (dp != 0))),
    )


def kendall_tau(predicted: np.ndarray, measured: np.ndarray) -> float | None:
    """Return Kendall's tau-b between two orderings of the same items (None: no untied pair)."""
    c, d, tied_p, tied_m = pair_counts(predicted, measured)
    denominator = math.sqrt((c + d + tied_p) * (c + d + tied_m))
    return None if denominator == 0 else (c - d) / denominator


@dataclass(frozen=True)
class Sweep:
    """One published sweep, its ranking by the predictions and the configuration they pick."""

    table: str
    engine: str
    system: str
    model: str
    metric: str
    prompt: int
    generate: int
    results: tuple[validation.Result, ...]

    @property
    def _sign(self) -> float:
        """1 where a larger figure is faster (a rate), -1 where a smaller one is (a time)."""
        return 1.0 if faster_is_higher(self.metric) else -1.0

    @property
    def ranked(self) -> tuple[validation.Result, ...]:
        """Return the predicted rows, fastest predicted first (refused rows left out)."""
        kept = [r for r in self.results if r.predicted is not None]
        return tuple(sorted(kept, key=lambda r: -self._sign * r.predicted))

    @property
    def measured_order(self) -> tuple[validation.Result, ...]:
        """Return every row, fastest measured first."""
        return tuple(sorted(self.results, key=lambda r: -self._sign * r.row["measured"]))

    def _speeds(self) -> tuple[np.ndarray, np.ndarray]:
        """Return the predicted rows' predicted and measured speeds (larger: faster)."""
        rows = self.ranked
        predicted = np.array([r.predicted for r in rows], dtype=float)
        measured = np.array([r.row["measured"] for r in rows], dtype=float)
        return self._sign * predicted, self._sign * measured

    @property
    def pairs(self) -> tuple[int, int]:
        """Return the (concordant, discordant) pairs of the predicted rows."""
        c, d, _, _ = pair_counts(*self._speeds())
        return c, d

    @property
    def tau(self) -> float | None:
        """Return Kendall's tau-b of the predicted against the measured order."""
        return kendall_tau(*self._speeds())

    @property
    def pick(self) -> validation.Result | None:
        """Return the configuration the predictions rank first."""
        return self.ranked[0] if self.ranked else None

    @property
    def fastest(self) -> validation.Result:
        """Return the configuration measured fastest (refused ones included)."""
        return self.measured_order[0]

    @property
    def pick_share(self) -> float | None:
        """Return the pick's measured speed over the fastest's (1: the pick is the fastest)."""
        if self.pick is None:
            return None
        picked, best = self.pick.row["measured"], self.fastest.row["measured"]
        return picked / best if faster_is_higher(self.metric) else best / picked

    @property
    def pick_close(self) -> bool:
        """Return True when the pick is, measured, within PICK_WITHIN of the fastest."""
        share = self.pick_share
        return share is not None and share >= 1 - PICK_WITHIN

    @property
    def meets_targets(self) -> bool:
        """Return True when the ranking and the pick meet issue 26's targets."""
        return bool(self.tau is not None and self.tau >= TAU_TARGET and self.pick_close)


def sweeps(results: list[validation.Result]) -> list[Sweep]:
    """Return the published sweeps among the validation results, in the catalog's order."""
    groups: dict[tuple, list[validation.Result]] = {}
    for r in results:
        x = r.row
        key = (
            x["table"],
            x["engine"],
            x["system"],
            x["model"],
            x["metric"],
            x["prompt"],
            x["generate"],
        )
        groups.setdefault(key, []).append(r)
    return [
        Sweep(*key, results=tuple(rows)) for key, rows in groups.items() if len(rows) >= MIN_ROWS
    ]


def pooled_tau(found: list[Sweep]) -> float | None:
    """Return tau over every pair within the sweeps, (concordant - discordant) / pairs."""
    c = sum(s.pairs[0] for s in found)
    d = sum(s.pairs[1] for s in found)
    return None if c + d == 0 else (c - d) / (c + d)


def meeting(found: list[Sweep]) -> int:
    """Return how many of the sweeps meet both targets."""
    return sum(s.meets_targets for s in found)


def to_json(found: list[Sweep]) -> dict:
    """Return the sweeps for ``validate --json``: each one's rows, tau, pick and the targets."""
    return {
        "targets": {"tau_at_least": TAU_TARGET, "pick_within": PICK_WITHIN},
        "pooled_tau": pooled_tau(found),
        "meeting_targets": meeting(found),
        "sweeps": [
            {
                "table": s.table, "engine": s.engine, "system": s.system, "model": s.model,
                "metric": s.metric, "prompt": s.prompt, "generate": s.generate,
                "rows": [r.row["id"] for r in s.results],
                "predicted_order": [r.row["id"] for r in s.ranked],
                "refused": [r.row["id"] for r in s.results if r.predicted is None],
                "tau": s.tau, "pick": s.pick.row["id"] if s.pick else None,
                "fastest": s.fastest.row["id"], "pick_share": s.pick_share,
                "meets_targets": s.meets_targets,
            }
            for s in found
        ],
    }  # fmt: skip
