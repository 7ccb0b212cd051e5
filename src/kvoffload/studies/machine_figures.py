"""A profile as the chapter on the reader's machine shows it: its figures, notes, random reads."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd

from kvoffload.inputs import catalog
from kvoffload.inputs.hardware import System, load_system
from kvoffload.studies import measure

SMALL_READ_SHARE = 0.1  # the article: small random NVMe reads fall below 10% of sequential


def machine_profile(hardware: str, base: str) -> System:
    """Return the profile at ``hardware``, or, when it is empty, measure this machine now (quick).

    Parts that cannot be measured here come from the catalog system ``base``.
    """
    if hardware:
        return load_system(hardware)
    report = measure.run(quick=True, directory=Path(tempfile.gettempdir()))
    raw = measure.profile(
        report, base=base, ident="this-machine", name="the machine that built this page"
    )
    return load_system(raw)


def nearest(system: System) -> tuple[str, pd.DataFrame]:
    """Return the nearest catalog system and each tier's rate beside it."""
    name, rows = measure.nearest_system(system)
    return name, pd.DataFrame(rows)


def figure_table(system: System) -> pd.DataFrame:
    """Return every figure of a profile with its value, kind and source title."""
    rows = [
        {"figure": key, "value": str(fig), "kind": fig.kind.value, "source": catalog.source_title(fig.source)}
        for key, fig in system.figures().items()
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["figure", "value", "kind", "source"])


def measured_count(system: System) -> int:
    """Return how many of a profile's figures were measured."""
    return sum(fig.kind.value == "measured" for fig in system.figures().values())


def measurement_notes(system: System) -> list[str]:
    """Return what the measurement skipped and noted, in that order (empty for catalog profiles)."""
    return [*system.measurements.get("skipped", []), *system.measurements.get("notes", [])]


def random_read_verdict(rows: list[dict]) -> str:
    """Return whether small random reads fall below 10% of sequential, per queue depth, as a sentence.

    ``rows`` are the profile's random-read measurements (request_bytes, queue_depth,
    share_of_sequential); the verdict is read at the smallest request size.
    """
    if not rows:
        return "This profile carries no random-read measurements (it was not written by `kvoffload measure`)."
    small = min(r["request_bytes"] for r in rows)
    at_small = [r for r in rows if r["request_bytes"] == small]
    below = [r["queue_depth"] for r in at_small if r["share_of_sequential"] < SMALL_READ_SHARE]
    above = [r["queue_depth"] for r in at_small if r["share_of_sequential"] >= SMALL_READ_SHARE]
    return (
        f"At the smallest request size the claim holds at queue depth {', '.join(map(str, below)) or 'none'}"
        f" and fails at {', '.join(map(str, above)) or 'none'}."
    )
