"""Quantities with provenance: a value in base units, its kind, and its source."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Annotated, Any

from pydantic import PlainValidator

from kvoffload.spec.text import NAME_CHARS, NOTE_CHARS, text_problem
from kvoffload.spec.units import BASE_UNIT, Dim, UnitError, format_quantity, parse_quantity


class Kind(StrEnum):
    """How a figure is known."""

    SPEC = "spec"  # a vendor rating or a standard (derivations from them too)
    MEASURED = "measured"  # someone ran a test and published the number
    FITTED = "fitted"  # a constant fitted to runs on a named machine (the fit's source and machine)
    ASSUMED = "assumed"  # our assumption, the article's figure, or a bare value in a file


@dataclass(frozen=True)
class Figure:
    """One quantity in base units (B, B/s, FLOP/s, s, 1/s) with its kind and source."""

    value: float
    dim: Dim
    kind: Kind
    source: str = ""
    note: str = ""
    text: str = ""
    machine: str = ""  # for a fitted figure: the machine the fit was made on

    def __str__(self) -> str:
        return format_quantity(self.value, self.dim)

    def to_json(self, sources: dict[str, dict] | None = None) -> dict[str, Any]:
        """Return a JSON-ready dict: value in base units, unit, text, kind, source."""
        out: dict[str, Any] = {
            "value": self.value,
            "unit": BASE_UNIT[self.dim],
            "text": self.text or str(self),
            "formatted": str(self),
            "kind": self.kind.value,
            "source": self.source or None,
        }
        entry = (sources or {}).get(self.source)
        if entry:
            out["source_title"] = entry.get("title")
            out["source_url"] = entry.get("url")
        if self.machine:
            out["machine"] = self.machine
        if self.note:
            out["note"] = self.note
        return out


_FIGURE_KEYS = {"value", "kind", "source", "note", "machine"}


def parse_figure(raw: Any, dim: Dim, *, lo: float, hi: float, allow_zero: bool = False) -> Figure:
    """Read a bare quantity string or a {value, kind, source, note} mapping into a Figure."""
    if isinstance(raw, Figure):
        figure = raw
    elif isinstance(raw, dict):
        extra = set(raw) - _FIGURE_KEYS
        if extra:
            raise ValueError(
                f"unknown key {sorted(extra)[0]!r}; a figure has value, kind, source, note, machine"
            )
        if "value" not in raw:
            raise ValueError("a figure mapping needs 'value'")
        kind_raw = raw.get("kind", "assumed")
        try:
            kind = Kind(kind_raw)
        except ValueError:
            raise ValueError(
                f"kind {kind_raw!r} is not one of spec, measured, fitted, assumed"
            ) from None
        source = raw.get("source", "")
        note = raw.get("note", "")
        machine = raw.get("machine", "")
        for key, text, most in (
            ("source", source, NOTE_CHARS),
            ("note", note, NOTE_CHARS),
            ("machine", machine, NAME_CHARS),
        ):
            problem = text_problem(text, max_chars=most)
            if problem is not None:
                raise ValueError(f"{key} {problem}")
        if kind is not Kind.ASSUMED and not source.strip():
            raise ValueError(f"a {kind.value} figure needs a source")
        if (kind is Kind.FITTED) != bool(machine.strip()):
            raise ValueError(
                "a fitted figure, and only a fitted one, names the machine it was fitted on"
            )
        figure = _from_text(raw["value"], dim, kind, source.strip(), note.strip())
        figure = replace(figure, machine=machine.strip())
    else:
        figure = _from_text(raw, dim, Kind.ASSUMED, "", "")
    v = figure.value
    if math.isnan(v):
        raise ValueError("is not a number")
    if v < 0:
        raise ValueError(f"{figure.text or v} is negative")
    if v == 0 and not allow_zero:
        raise ValueError(f"{figure.text or v} is zero; it must be positive")
    if v != 0 and not (lo <= v <= hi):
        raise ValueError(
            f"{figure.text} is outside the plausible range "
            f"{format_quantity(lo, dim)} to {format_quantity(hi, dim)}"
        )
    return figure


def _from_text(text: Any, dim: Dim, kind: Kind, source: str, note: str) -> Figure:
    try:
        value = parse_quantity(text, dim)
    except UnitError as exc:
        raise ValueError(str(exc)) from None
    return Figure(value=value, dim=dim, kind=kind, source=source, note=note, text=str(text).strip())


def FigureField(dim: Dim, lo: float, hi: float, *, allow_zero: bool = False) -> Any:
    """Return an annotated Figure type that pydantic validates with ``parse_figure``."""
    check: Callable[[Any], Figure] = lambda raw: parse_figure(  # noqa: E731
        raw, dim, lo=lo, hi=hi, allow_zero=allow_zero
    )
    return Annotated[Figure, PlainValidator(check)]
