"""What to measure (the quick and full plans), what was measured, and how a figure says so."""

from __future__ import annotations

import datetime as dt
import platform
import socket
from dataclasses import dataclass, field
from typing import Any

from kvoffload import __version__
from kvoffload.inputs.errors import one_line
from kvoffload.inputs.hardware import PART_MODELS, Part
from kvoffload.inputs.text import NOTE_CHARS

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@dataclass(frozen=True)
class Plan:
    """How much to measure: the quick plan fits in about 30 s, the full one in about 5 minutes."""

    host_bytes: int
    file_bytes: int
    seconds_per_point: float
    request_sizes: tuple[int, ...]
    queue_depths: tuple[int, ...]
    gpu_sizes: tuple[int, ...]

    @staticmethod
    def quick() -> Plan:
        """Return the quick plan."""
        return Plan(
            256 * MiB,
            512 * MiB,
            0.25,
            (4 * KiB, 64 * KiB, 1 * MiB),
            (1, 8, 32),
            (64 * KiB, 4 * MiB, 256 * MiB),
        )

    @staticmethod
    def full() -> Plan:
        """Return the full plan."""
        return Plan(
            1 * GiB,
            4 * GiB,
            1.0,
            (4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, 1 * MiB),
            (1, 2, 4, 8, 16, 32),
            (4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB, 1 * GiB),
        )


@dataclass
class Report:
    """What was measured, what was skipped and why."""

    figures: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # 'part.field' -> figure mapping
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def figure_key(part: type[Part], name: str) -> str:
    """Return 'part.field' for a field of a hardware part's schema; refuse a field it lacks."""
    kind = next(k for k, model in PART_MODELS.items() if model is part)
    if name not in part.__struct_fields__:
        raise ValueError(f"the {kind} schema has no field {name!r}")
    return f"{kind}.{name}"


def plain_note(text: object, limit: int = NOTE_CHARS) -> str:
    """Return ``text`` (an error's message, a path) as one line of plain text of ``limit`` chars.

    A skip reason or note built from an exception may span lines or hold control characters,
    which the profile's own schema (inputs/text.py) refuses: whitespace is collapsed, anything
    unprintable escaped, and the text shortened.
    """
    line = one_line(" ".join(str(text).split())) or ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _provenance(what: str) -> str:
    """Return the source of a measured figure: what was run, on which machine, when."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"kvoffload {__version__} measure ({what}) on {socket.gethostname()}, {platform.platform()}, {stamp}"


def measured_figure(value: str, what: str, note: str = "") -> dict[str, Any]:
    """Return a measured figure's mapping: its value, kind, source (``what`` was run) and note."""
    out = {"value": value, "kind": "measured", "source": _provenance(what)}
    if note:
        out["note"] = note
    return out


def gbps(x: float) -> str:
    """Return a rate in bytes/s as the figure text, in GB/s."""
    return f"{x / 1e9:.4g} GB/s"
