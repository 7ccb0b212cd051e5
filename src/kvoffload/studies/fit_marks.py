"""How a table says a row does not fit: one wording for the fits column and the numbers' mark.

Every table that compares setups (engines, placements, machines) marks a row that overflows a
tier the same way: its fits cell reads "does not fit: needs X of Y GPU memory" (the first tier
that overflows, from ``prediction.shortfalls``) and each time it prints carries ``UNFIT_MARK``.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvoffload.inputs.hardware import System
from kvoffload.inputs.units import format_bytes
from kvoffload.model import decode, prediction

FITS = "yes"
UNFIT_MARK = " (does not fit)"  # beside a time or a rate that this machine cannot run


def shortfall_text(tier: str, need_bytes: float, have_bytes: float) -> str:
    """Return "does not fit: needs 25.3 GB of 16 GB GPU memory" for one overflowing tier."""
    need = format_bytes(need_bytes, binary=False, digits=3)
    have = format_bytes(have_bytes, binary=False, digits=3)
    return f"does not fit: needs {need} of {have} {tier}"


def fits_cell(shortfalls: Sequence[tuple[str, float, float]]) -> str:
    """Return a fits column's cell: "yes", or the first overflowing tier's ``shortfall_text``."""
    return shortfall_text(*shortfalls[0]) if shortfalls else FITS


def memory_fits_cell(system: System, memory: decode.Memory) -> str:
    """Return the fits cell of a predicted memory on ``system`` (``prediction.shortfalls``)."""
    return fits_cell(prediction.shortfalls(system, memory))


def marked(text: str, fits: bool) -> str:
    """Return a number's text, with ``UNFIT_MARK`` after it when its setup does not fit."""
    return text if fits else text + UNFIT_MARK
