"""The TPOT budget: the article's bound recomputed, and the longest context a budget allows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from kvoffload.inputs.hardware import System
from kvoffload.inputs.limits import MAX_CONTEXT_TOKENS
from kvoffload.inputs.models import Model
from kvoffload.inputs.units import Dim, parse_quantity
from kvoffload.model import decode
from kvoffload.model.search import largest_true
from kvoffload.studies.article_figures import tpot_bound_rows
from kvoffload.studies.decode_step import place
from kvoffload.studies.memory_fit import fits


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
        # one step's streams (the link time); TPOT is the mean step over the one generated token
        ref_step = decode.step(ref.setup, n, 1)
        my_step = decode.step(mine.setup, n, 1)
        rows.append(
            {
                "context": f"{row['label']} ({n:,} tokens)",
                "article (ms)": parse_quantity(row["time"], Dim.TIME) * 1e3,
                "link time, article's figures (ms)": float(ref_step.streams["h2d"]) * 1e3,
                "TPOT, article's figures (ms)": float(decode.tpot(ref.setup, n)) * 1e3,
                "link time, this profile (ms)": float(my_step.streams["h2d"]) * 1e3,
                "TPOT, this profile (ms)": float(decode.tpot(mine.setup, n)) * 1e3,
                "TPOT, this profile, perfect overlap (ms)": float(
                    decode.tpot(mine.setup, n, overlap="perfect")
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


def longest_within(
    setup: decode.Setup, budget_s: float, batches: ArrayLike = 1, generate: int = 1
) -> np.ndarray:
    """Return, per batch, the longest context (prompt, tokens) whose TPOT meets ``budget_s``.

    TPOT is ``decode.tpot`` over ``generate`` tokens; the context counts only where the last
    step also fits every tier (``memory_fit.fits``). 0: none does.
    """
    b = np.asarray(batches, dtype=np.float64)
    last = int(generate) - 1  # the last step's context is the prompt plus the tokens before it

    def ok(s: np.ndarray) -> np.ndarray:
        fit = fits(setup, s + last, b.astype(np.int64))
        return fit & (decode.tpot(setup, s, generate, b) <= budget_s)

    return largest_true(ok, b.shape, MAX_CONTEXT_TOKENS - last)


def budget_contexts(
    setup: decode.Setup, budget_s: float, batches: ArrayLike, generate: int = 1
) -> BudgetContexts:
    """Return the longest context meeting ``budget_s`` per batch, as set up and with perfect overlap.

    A context counts only where the step also fits the machine (GPU memory, host memory, disk).
    """
    b = np.asarray(batches)
    perfect = setup.with_overlap("perfect")
    return BudgetContexts(
        batches=b,
        no_overlap=longest_within(setup, budget_s, b, generate),
        perfect_overlap=longest_within(perfect, budget_s, b, generate),
        floor_ms=float(decode.step(perfect, 1, 1).total) * 1e3,
    )
