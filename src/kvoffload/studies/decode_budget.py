"""The TPOT budget: the article's bound recomputed, and the longest context a budget allows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from kvoffload.model import decode
from kvoffload.spec.hardware import System
from kvoffload.spec.models import Model
from kvoffload.spec.units import Dim, parse_quantity
from kvoffload.studies.article_figures import tpot_bound_rows


def budget_table(reference: System, system: System, model: Model) -> pd.DataFrame:
    """Return the article's TPOT-bound rows beside the package's, article's figures and this profile's."""
    ref = decode.offloaded(reference, model)
    mine = decode.offloaded(system, model)
    rows = []
    for row in tpot_bound_rows():
        n = int(row["tokens"])
        ref_step = decode.step(ref, n, 1)
        my_step = decode.step(mine, n, 1)
        rows.append(
            {
                "context": f"{row['label']} ({n:,} tokens)",
                "article (ms)": parse_quantity(row["time"], Dim.TIME) * 1e3,
                "link time, article's figures (ms)": float(ref_step.streams["h2d"]) * 1e3,
                "TPOT, article's figures (ms)": float(ref_step.total) * 1e3,
                "link time, this profile (ms)": float(my_step.streams["h2d"]) * 1e3,
                "TPOT, this profile (ms)": float(my_step.total) * 1e3,
                "TPOT, this profile, perfect overlap (ms)": float(
                    decode.step(mine, n, 1, "perfect").total
                )
                * 1e3,
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class BudgetContexts:
    """The longest context (tokens) whose step meets a TPOT budget, per batch."""

    batches: np.ndarray
    no_overlap: np.ndarray
    perfect_overlap: np.ndarray

    def frame(self) -> pd.DataFrame:
        """Return the batches and their longest contexts as a table."""
        return pd.DataFrame(
            {
                "batch": self.batches,
                "longest context, no overlap": self.no_overlap,
                "longest context, perfect overlap": self.perfect_overlap,
            }
        )


def budget_contexts(setup: decode.Setup, budget_s: float, batches: ArrayLike) -> BudgetContexts:
    """Return the longest context meeting ``budget_s`` per batch, as set up and with perfect overlap."""
    b = np.asarray(batches)
    return BudgetContexts(
        batches=b,
        no_overlap=decode.max_context(setup, budget_s, b),
        perfect_overlap=decode.max_context(setup.with_overlap("perfect"), budget_s, b),
    )
