"""The validation as the chapter reads it: rows by role, error statistics, where the model misses."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kvoffload.inputs.hardware import System, load_system
from kvoffload.studies import context_growth, sweeps, validation

T4_TABLE = "flexgen-t4"
A6000_TABLE = "zero-inference-a6000"
FLEXGEN_A6000_TABLE = "flexgen-a6000"
# The A6000 testbed with its CPU's peak rate for PyTorch's attention instead of the measured one.
PEAK_HOST = {"a6000-lambda": {"base": "a6000-lambda", "host": "lambda-a6000-host"}}
ZERO_FROM_HOST = ("t4-04", "t4-05")  # ZeRO-Inference, weights in host memory, on the T4
ZERO_FROM_DISK = "t4-06"  # ZeRO-Inference, weights on NVMe, on the T4
HF_OPT_30B = "t4-02"  # HF Accelerate, OPT-30B in host memory, on the T4


def results_frame(results: list[validation.Result]) -> pd.DataFrame:
    """Return one row per published measurement: ids, role, metric, measured, predicted, ratio, source.

    A refused row has no prediction (NaN) and says why in ``refused``; ``source`` is the published
    version the row was read from and where in it.
    """
    nan = float("nan")
    return pd.DataFrame(
        [{"row": r.row["id"], "role": validation.role(r.row), "table": r.row["table"],
          "engine": r.row["engine"], "model": r.row["model"], "system": r.row["system"],
          "metric": r.row["metric"], "measured": r.row["measured"],
          "predicted": nan if r.predicted is None else r.predicted,
          "ratio": nan if r.ratio is None else r.ratio,
          "refused": r.refusal or "", "source": validation.cite(r.row)} for r in results]
    )  # fmt: skip


def tables_frame() -> pd.DataFrame:
    """Return one row per published table: its role, since when, why, and any move between roles."""
    rows = []
    for ident, t in validation.tables().items():
        moved = t.get("moved")
        rows.append(
            {"table": ident, "title": t["title"], "role": t["role"], "since": t["since"],
             "why": t["why"],
             "moved": f"from {moved['from']} on {moved['when']}: {moved['why']}" if moved else ""}
        )  # fmt: skip
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class ErrorStats:
    """One group: rows, refusals, median |error| of predicted rows (%), share within 2x (%)."""

    rows: int
    refused: int
    median_pct: float  # NaN when every row is refused
    within_2x_pct: float  # of all rows: a refusal is not within 2x


def error_stats(results: list[validation.Result]) -> dict[str, ErrorStats]:
    """Return the statistics for all rows ('all'), per engine, per table and per role."""
    groups = {
        **validation.summary(results),
        **validation.table_summary(results),
        **validation.role_summary(results),
    }
    return {
        name: ErrorStats(
            s["rows"],
            s["refused"],
            np.nan if s["median_abs_rel_error"] is None else 100 * s["median_abs_rel_error"],
            100 * s["within_2x"],
        )
        for name, s in groups.items()
    }


def peak_host_stats() -> ErrorStats:
    """Return the A6000 table's statistics with its CPU's peak rate instead of the measured one."""
    return error_stats(validation.run(PEAK_HOST, table=A6000_TABLE))[A6000_TABLE]


@dataclass(frozen=True)
class Span:
    """The smallest and largest predicted/measured ratio of a group of rows."""

    lo: float
    hi: float


def _span(ratios: pd.Series) -> Span:
    return Span(float(ratios.min()), float(ratios.max()))  # pandas skips refusals (NaN)


@dataclass(frozen=True)
class Misses:
    """Where the model misses: the ratio spans of the groups the chapter discusses."""

    flexgen_plain: Span  # FlexGen on the T4 without compression
    flexgen_compressed: Span  # FlexGen on the T4 with 4-bit weights or cache
    zero_from_host: Span  # ZeRO-Inference, weights in host memory, on the T4
    zero_from_disk: float  # ZeRO-Inference, weights on NVMe, on the T4
    hf_opt_30b: float  # HF Accelerate, OPT-30B in host memory
    llamacpp: Span
    a6000: Span  # ZeRO-Inference's A6000 table (calibration since the host's CPU rate was chosen)
    a6000_llama70_kv: Span  # its LLaMA-2-70B rows with the cache in host memory
    flexgen_a6000: Span  # FlexGen's rows of the same table (checks)


def _llama70_kv_rows(results: list[validation.Result]) -> list[str]:
    """Return the ids of the A6000 table's LLaMA-2-70B rows with the cache in host memory."""
    return [
        r.row["id"]
        for r in results
        if r.row["table"] == A6000_TABLE
        and r.row["model"] == "llama-2-70b"
        and r.row["options"].get("kv_offload")
    ]


def misses(results: list[validation.Result]) -> Misses:
    """Return the ratio spans of the groups of rows the chapter explains."""
    frame = results_frame(results)
    compressed = frame["row"].isin(
        [r.row["id"] for r in results
         if r.row["options"].get("compress_weight") or r.row["options"].get("compress_cache")]
    )  # fmt: skip
    flexgen = (frame["engine"] == "flexgen") & (frame["table"] == T4_TABLE)
    a6k = frame[frame["table"] == A6000_TABLE]
    ratio = frame.set_index("row")["ratio"]
    return Misses(
        flexgen_plain=_span(frame.loc[flexgen & ~compressed, "ratio"]),
        flexgen_compressed=_span(frame.loc[flexgen & compressed, "ratio"]),
        zero_from_host=_span(ratio.loc[list(ZERO_FROM_HOST)]),
        zero_from_disk=float(ratio.loc[ZERO_FROM_DISK]),
        hf_opt_30b=float(ratio.loc[HF_OPT_30B]),
        llamacpp=_span(frame.loc[frame["engine"] == "llamacpp", "ratio"]),
        a6000=_span(a6k["ratio"]),
        a6000_llama70_kv=_span(ratio.loc[_llama70_kv_rows(results)]),
        flexgen_a6000=_span(frame.loc[frame["table"] == FLEXGEN_A6000_TABLE, "ratio"]),
    )


@dataclass(frozen=True)
class FigureKinds:
    """How many of a profile's figures are of each kind (measured, spec, assumed, ...)."""

    counts: dict[str, int]

    @property
    def total(self) -> int:
        """Return the number of figures."""
        return sum(self.counts.values())

    def of(self, kind: str) -> int:
        """Return the number of figures of one kind (0 if none)."""
        return self.counts.get(kind, 0)


def figure_kinds(system: System | str) -> FigureKinds:
    """Return the count of a profile's figures per kind."""
    s = load_system(system) if isinstance(system, str) else system
    return FigureKinds(dict(Counter(f.kind.value for f in s.figures().values())))


@dataclass(frozen=True)
class SweepFindings:
    """The published sweeps as the chapter reads them: one row each, and what they add up to."""

    frame: pd.DataFrame  # table, model, machine, configurations, both orders, tau, pick, its share
    count: int
    meeting: int  # sweeps that meet both of issue 26's targets
    pooled_tau: float | None
    tau_target: float
    pick_within_pct: float
    picks_within: int  # sweeps whose pick is within PICK_WITHIN of the fastest measured


def sweep_findings(results: list[validation.Result]) -> SweepFindings:
    """Return each published sweep's ranking by the predictions beside its measured order."""
    found = sweeps.sweeps(results)
    frame = pd.DataFrame(
        [
            {
                "table": s.table,
                "model": s.model,
                "machine": s.system,
                "configurations": len(s.results),
                "measured order": " > ".join(r.row["id"] for r in s.measured_order),
                "predicted order": " > ".join(r.row["id"] for r in s.ranked),
                "Kendall tau (-1 to 1)": s.tau,
                "pick": s.pick.row["id"] if s.pick else "",
                "pick / fastest measured": s.pick_share,
            }
            for s in found
        ]
    )
    return SweepFindings(
        frame=frame,
        count=len(found),
        meeting=sweeps.meeting(found),
        pooled_tau=sweeps.pooled_tau(found),
        tau_target=sweeps.TAU_TARGET,
        pick_within_pct=100 * sweeps.PICK_WITHIN,
        picks_within=sum(s.pick_close for s in found),
    )


@dataclass(frozen=True)
class GrowthFindings:
    """Decode's growth with context as the chapter reads it: a row each, and the tally."""

    frame: pd.DataFrame  # row, its base, table, prompts, growth measured and predicted, verdict
    count: int
    judged: int  # growths the published figures' rounding cannot move by the target
    within: int  # judged growths within the target
    target_pct: float


def growth_findings(results: list[validation.Result]) -> GrowthFindings:
    """Return each decode row's growth over its configuration's shortest prompt, with verdicts."""
    found = context_growth.growths(results)
    verdict = {None: "not judged (within the rates' rounding)", True: "within", False: "outside"}
    frame = pd.DataFrame(
        [
            {
                "row": g.row.row["id"],
                "over": g.base.row["id"],
                "table": g.row.row["table"],
                "role": validation.role(g.row.row),
                "tokens": f"{g.base.row['prompt']:,} to {g.row.row['prompt']:,}",
                "measured growth (ms)": g.measured_ms,
                "predicted growth (ms)": g.predicted_ms,
                "predicted / measured (ratio)": g.ratio,
                "verdict": verdict[g.within],
            }
            for g in found
        ]
    )
    judged = [g for g in found if g.within is not None]
    return GrowthFindings(
        frame=frame,
        count=len(found),
        judged=len(judged),
        within=sum(bool(g.within) for g in judged),
        target_pct=100 * context_growth.TARGET,
    )


def refusal_sentence(results: list[validation.Result]) -> str:
    """Return the chapter's sentence on the refused rows: which, and why a truncated run may be."""
    refused = [r for r in results if r.refusal is not None]
    if not refused:
        return "none: the model says every published configuration fits its testbed."
    ids = ", ".join(r.row["id"] for r in refused)
    # a shortened run's reason as its row gives it (validation.yaml, truncated_run)
    why = "".join(
        f" {r.row['id']} was a shortened run ({r.row['truncated_run']}): the measurement does "
        "not show that the whole configuration fits."
        for r in refused
        if r.row.get("truncated_run")
    )
    return f"{ids}, each with the tier it overflows in the table above.{why}"
