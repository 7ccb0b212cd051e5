"""Quantities with provenance: a value in base units, its kind, and its source."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cache
from types import NoneType, UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import msgspec

from kvoffload.inputs.errors import InputError
from kvoffload.inputs.text import NAME_CHARS, NOTE_CHARS, text_problem
from kvoffload.inputs.units import BASE_UNIT, Dim, UnitError, format_quantity, parse_quantity


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
                f"unknown key {sorted(extra, key=str)[0]!r}; a figure has value, kind, source, note, machine"
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


@dataclass(frozen=True)
class FigureRule:
    """How a schema's Figure field is read: its dimension and plausible range."""

    dim: Dim
    lo: float
    hi: float
    allow_zero: bool = False

    def parse(self, raw: Any) -> Figure:
        """Return ``raw`` (a quantity string, a figure mapping or a Figure) as a Figure."""
        return parse_figure(raw, self.dim, lo=self.lo, hi=self.hi, allow_zero=self.allow_zero)


def FigureField(dim: Dim, lo: float, hi: float, *, allow_zero: bool = False) -> Any:
    """Return the type of a schema field holding a Figure, read by :func:`parse_figures`."""
    return Annotated[Figure, FigureRule(dim, lo, hi, allow_zero)]


@cache
def _figure_fields(schema: type[msgspec.Struct]) -> tuple[tuple[str, FigureRule, bool], ...]:
    """Return (field, rule, whether it may be null) for each Figure field of ``schema``."""
    out = []
    for f in msgspec.structs.fields(schema):
        members = get_args(f.type) if get_origin(f.type) in (Union, UnionType) else (f.type,)
        for tp in members:
            rules = [m for m in getattr(tp, "__metadata__", ()) if isinstance(m, FigureRule)]
            if rules:
                out.append((f.encode_name, rules[0], NoneType in members))
    return tuple(out)


def parse_figures(schema: type[msgspec.Struct], raw: dict) -> dict:
    """Return ``raw`` with the values of ``schema``'s Figure fields read into Figures.

    A file writes a figure as a quantity string or a mapping, which msgspec cannot read into a
    Figure; this is done before the rest of ``raw`` is validated. InputError names the field.
    """
    out = dict(raw)
    for name, rule, nullable in _figure_fields(schema):
        if name in out and not (nullable and out[name] is None):
            try:
                out[name] = rule.parse(out[name])
            except ValueError as exc:
                raise InputError(str(exc), field=name) from None
    return out
