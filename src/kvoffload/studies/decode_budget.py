"""The TPOT budget: the article's bound recomputed, and the longest context a budget allows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from kvoffload.model import capacity, decode
from kvoffload.model.search import largest_true
from kvoffload.spec.hardware import System
from kvoffload.spec.models import Model
from kvoffload.spec.units import Dim, parse_quantity
from kvoffload.studies.article_figures import tpot_bound_rows
from kvoffload.studies.decode_step import place


def budget_table(reference: System, system: System, model: Model) -> pd.DataFrame:
    """Return the article's TPOT-bound rows beside the package's, article's figures and this profile's.

    Every KV byte is in host memory; the weights stay on the GPU where they fit and are otherwise
    placed as ``decode_step.place`` places them (the rest streamed from host memory), per row.
    """
    rows = []
    for row in tpot_bound_rows():
        n = int(row["tokens"])
        ref = place(decode.offloaded(reference, model), n, 1)
        mine = place(decode.offloaded(system, model), n, 1)
        ref_step = decode.step(ref.setup, n, 1)
        my_step = decode.step(mine.setup, n, 1)
        rows.append(
            {
                "context": f"{row['label']} ({n:,} tokens)",
                "article (ms)": parse_quantity(row["time"], Dim.TIME) * 1e3,
                "link time, article's figures (ms)": float(ref_step.streams["h2d"]) * 1e3,
                "TPOT, article's figures (ms)": float(ref_step.total) * 1e3,
                "link time, this profile (ms)": float(my_step.streams["h2d"]) * 1e3,
                "TPOT, this profile (ms)": float(my_step.total) * 1e3,
                "TPOT, this profile, perfect overlap (ms)": float(
                    decode.step(mine.setup, n, 1, "perfect").total
                )
                * 1e3,
                "weights on the GPU, this profile (%)": 100 * mine.gpu_share,
                "fits, article's figures": ref.fits,
                "fits, this profile": mine.fits,
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class BudgetContexts:
    """The longest context (tokens) whose step meets a TPOT budget and fits the machine, per batch."""

    batches: np.ndarray
    no_overlap: np.ndarray  # 0: no context does
    perfect_overlap: np.ndarray
    floor_ms: float = 0.0  # one request's step at a one-token context, perfect overlap

    def frame(self) -> pd.DataFrame:
        """Return the batches and their longest contexts as a table."""
        return pd.DataFrame(
            {
                "batch": self.batches,
                "longest context, no overlap": self.no_overlap,
                "longest context, perfect overlap": self.perfect_overlap,
            }
        )

    def first(self) -> str:
        """Return, in words, the longest context for the first batch ("4,541 tokens ..." or none)."""
        n, who = int(self.no_overlap[0]), _requests(int(self.batches[0]))
        return f"{n:,} tokens of context for {who}" if n else f"no context at all, even for {who}"

    def sentence(self, budget_ms: float) -> str:
        """Return, in words, what a ``budget_ms`` TPOT allows on this profile, batch by batch."""
        who = _requests(int(self.batches[0]))
        if not np.any(self.perfect_overlap):
            return (
                f"On this profile no context meets a {budget_ms:g} ms TPOT with all KV in host "
                f"memory, not even for {who} with perfect overlap: with the weights placed as "
                f"above, a step takes {self.floor_ms:.1f} ms before it reads any cache."
            )
        say = lambda n: f"{int(n):,}" if n else "none"  # noqa: E731
        n0 = int(self.no_overlap[0])
        parts = [
            f"{f'{n0:,} tokens of context' if n0 else 'no context'} for {who} "
            f"({say(self.perfect_overlap[0])} with perfect overlap)",
            *(
                f"{say(n)} at batch {int(b)}"
                for b, n in zip(self.batches[1:], self.no_overlap[1:], strict=True)
            ),
        ]
        listed = " and ".join([", ".join(parts[:-1]), parts[-1]]) if len(parts) > 1 else parts[0]
        return (
            f"On this profile a {budget_ms:g} ms TPOT with all KV in host memory allows {listed}."
        )


def _requests(batch: int) -> str:
    return "one request" if batch == 1 else f"a batch of {batch}"


def _longest(setup: decode.Setup, budget_s: float, batches: np.ndarray) -> np.ndarray:
    """Return the longest context meeting ``budget_s`` that also fits every tier, per batch."""
    b = np.asarray(batches, dtype=np.float64)

    def ok(s: np.ndarray) -> np.ndarray:
        mem = decode.memory(setup, s, b.astype(np.int64))
        fits = capacity.fits(setup.system, mem.gpu, mem.cpu, mem.disk)
        return fits & (decode.step(setup, s, b).total <= budget_s)

    return largest_true(ok, b.shape, 10_000_000)


def budget_contexts(setup: decode.Setup, budget_s: float, batches: ArrayLike) -> BudgetContexts:
    """Return the longest context meeting ``budget_s`` per batch, as set up and with perfect overlap.

    A context counts only where the step also fits the machine (GPU memory, host memory, disk).
    """
    b = np.asarray(batches)
    perfect = setup.with_overlap("perfect")
    return BudgetContexts(
        batches=b,
        no_overlap=_longest(setup, budget_s, b),
        perfect_overlap=_longest(perfect, budget_s, b),
        floor_ms=float(decode.step(perfect, 1, 1).total) * 1e3,
    )
