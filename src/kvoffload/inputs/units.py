"""Parse and print quantities with explicit units: bytes, bytes/s, FLOP/s, seconds, rates.

Decimal and binary prefixes are kept apart: GB = 10^9 B, GiB = 2^30 B. A value without a unit,
an unknown unit or a unit of the wrong dimension is an error, never a guess. The unit table is
closed on purpose: general unit libraries read "Gb" as a gilbert and treat bytes as
dimensionless, which would let "25 GB" pass where a bandwidth is expected.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum


class Dim(StrEnum):
    """The physical dimension of a quantity."""

    BYTES = "size in bytes"
    BANDWIDTH = "bandwidth"
    FLOP_RATE = "FLOP rate"
    TIME = "time"
    RATE = "rate"  # events per second, e.g. IOPS
    FRACTION = "fraction"  # a share of a peak, written in percent


EXAMPLES = {
    Dim.BYTES: "'80 GB' or '16 GiB'",
    Dim.BANDWIDTH: "'25 GB/s'",
    Dim.FLOP_RATE: "'312 TFLOP/s'",
    Dim.TIME: "'10 us'",
    Dim.RATE: "'1.4e6 /s' or '1400000 IOPS'",
    Dim.FRACTION: "'70 %'",
}

_BYTE_PREFIXES = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
}
_SI = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}


def _unit_table() -> dict[str, tuple[Dim, float]]:
    table: dict[str, tuple[Dim, float]] = {}
    for prefix, factor in _BYTE_PREFIXES.items():
        table[f"{prefix}B"] = (Dim.BYTES, float(factor))
        table[f"{prefix}B/s"] = (Dim.BANDWIDTH, float(factor))
    for prefix, factor in _SI.items():
        table[f"{prefix}FLOP/s"] = (Dim.FLOP_RATE, factor)
        table[f"{prefix}FLOPS"] = (Dim.FLOP_RATE, factor)
    table.update(
        {
            "ns": (Dim.TIME, -1e9),
            "us": (Dim.TIME, -1e6),
            "µs": (Dim.TIME, -1e6),
            "μs": (Dim.TIME, -1e6),
            "ms": (Dim.TIME, -1e3),
            "s": (Dim.TIME, 1.0),
            "/s": (Dim.RATE, 1.0),
            "IOPS": (Dim.RATE, 1.0),
            "kIOPS": (Dim.RATE, 1e3),
            "MIOPS": (Dim.RATE, 1e6),
            "%": (Dim.FRACTION, -100.0),
        }
    )
    return table


# A negative factor is a divisor, so that '10 us' is exactly 10 / 1e6 s.
UNITS: dict[str, tuple[Dim, float]] = _unit_table()

# Spellings people write that are ambiguous or wrong; each gets a specific hint.
_HINTS = {
    "KB": "'KB' is ambiguous: write 'kB' (1000 B) or 'KiB' (1024 B)",
    "KB/s": "'KB/s' is ambiguous: write 'kB/s' or 'KiB/s'",
    "Gb": "'Gb' is gigabits: give bytes ('GB' or 'GiB')",
    "Gb/s": "'Gb/s' is gigabits per second: give bytes per second ('GB/s')",
    "Gbps": "'Gbps' is gigabits per second: give bytes per second ('GB/s')",
    "GT/s": "'GT/s' is a transfer rate per lane: give bytes per second ('GB/s')",
    "GBps": "write 'GB/s'",
    "TFLOP": "'TFLOP' is an amount of work: give a rate ('TFLOP/s')",
}

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf|infinity)"
# Matched against the stripped text, so no part can backtrack over a run of spaces: linear time.
_QUANTITY = re.compile(rf"(?P<num>{_NUMBER})\s*(?P<unit>.*)", re.IGNORECASE | re.DOTALL)
# The longest quantity anyone writes ('1.4e6 IOPS', '312 TFLOP/s') is a few dozen characters.
MAX_QUANTITY_CHARS = 100


def _shown(text: str) -> str:
    """Return ``text`` quoted for an error message, shortened when it is long."""
    return repr(text if len(text) <= 40 else text[:39] + "…")


class UnitError(ValueError):
    """A quantity string that cannot be read as the expected dimension."""


def parse_quantity(text: object, dim: Dim) -> float:
    """Parse a string like '25 GB/s' into a float in base units (B, B/s, FLOP/s, s, 1/s)."""
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise UnitError(f"expected a quantity with a unit such as {EXAMPLES[dim]}")
    if isinstance(text, int | float):
        shown = repr(text) if abs(text) < 1e30 else "a very large number"
        raise UnitError(f"{shown} has no unit; write it with one, e.g. {EXAMPLES[dim]}")
    if len(text) > MAX_QUANTITY_CHARS:
        raise UnitError(
            f"{_shown(text)} is {len(text)} characters long; a quantity is at most "
            f"{MAX_QUANTITY_CHARS}, e.g. {EXAMPLES[dim]}"
        )
    if "," in text:
        raise UnitError(f"{_shown(text)}: write numbers without commas, e.g. {EXAMPLES[dim]}")
    m = _QUANTITY.fullmatch(text.strip())
    if not m:
        raise UnitError(f"{_shown(text)} is not a number followed by a unit, e.g. {EXAMPLES[dim]}")
    unit = m.group("unit").replace(" ", "")
    if not unit:
        raise UnitError(f"{_shown(text)} has no unit; write it with one, e.g. {EXAMPLES[dim]}")
    if unit not in UNITS:
        hint = _HINTS.get(unit)
        raise UnitError(
            f"{_shown(text)}: "
            + (hint or f"unknown unit {_shown(unit)}; expected e.g. {EXAMPLES[dim]}")
        )
    got, factor = UNITS[unit]
    if got is not dim:
        raise UnitError(
            f"{_shown(text)} is a {got.value}, expected a {dim.value} such as {EXAMPLES[dim]}"
        )
    number = float(m.group("num"))
    value = number / -factor if factor < 0 else number * factor
    if not math.isfinite(value):
        raise UnitError(f"{_shown(text)} is not a finite number")
    return value


def format_number(x: float, digits: int = 3, *, grouping: bool = True) -> str:
    """Format a number for people: ``digits`` significant figures, never an exponent.

    Whole numbers from ``10**(digits-1)`` up (1,490 rather than 1.49e+03), thousands separated
    unless ``grouping`` is false (the form ``parse_quantity`` reads back); trailing zeros dropped;
    NaN is '—' and an infinity '∞', so a sentence that can meet one must say what it means itself.
    """
    x = float(x)
    if math.isnan(x):
        return "—"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    sep = "," if grouping else ""
    if abs(x) >= 10 ** (digits - 1):
        text = f"{x:{sep}.0f}"
    else:
        rounded = float(f"{x:.{digits}g}")
        if rounded == 0:
            return "0"
        decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
        text = f"{rounded:{sep}.{decimals}f}"
        if "." in text:
            text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "0") else text


def format_change(x: float) -> str:
    """Format a relative change as a signed whole percentage, e.g. '+442%', '-16%', '0%'."""
    text = format_number(round(abs(100 * x)), 1)
    if text == "0":
        return "0%"
    return f"{'+' if x > 0 else '-'}{text}%"


def _scaled(x: float, steps: list[tuple[float, str]], digits: int) -> str:
    ax = abs(x)
    for factor, unit in steps:
        if ax >= factor * 0.9995:
            return f"{format_number(x / factor, digits, grouping=False)} {unit}"
    factor, unit = steps[-1]
    return f"{format_number(x / factor, digits, grouping=False)} {unit}"


_DEC_BYTES = [(1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B")]
_BIN_BYTES = [
    (2.0**50, "PiB"),
    (2.0**40, "TiB"),
    (2.0**30, "GiB"),
    (2.0**20, "MiB"),
    (2.0**10, "KiB"),
    (1.0, "B"),
]


def format_bytes(n: float, *, binary: bool | None = None, digits: int = 4) -> str:
    """Format a byte count; by default both decimal and binary, e.g. '80 GB (74.51 GiB)'."""
    if binary is True:
        return _scaled(n, _BIN_BYTES, digits)
    if binary is False or abs(n) < 1000:
        return _scaled(n, _DEC_BYTES, digits)
    return f"{_scaled(n, _DEC_BYTES, digits)} ({_scaled(n, _BIN_BYTES, digits)})"


def format_bandwidth(bps: float, *, digits: int = 4) -> str:
    """Format bytes per second in decimal units, e.g. '31.5 GB/s'."""
    return _scaled(bps, [(f, u + "/s") for f, u in _DEC_BYTES], digits)


def format_flops(fps: float, *, digits: int = 4) -> str:
    """Format FLOP per second, e.g. '312 TFLOP/s'."""
    steps = [(1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s")]
    return _scaled(fps, [*steps, (1.0, "FLOP/s")], digits)


def format_seconds(s: float, *, digits: int = 4) -> str:
    """Format a duration with the unit that suits it, e.g. '15.63 ms'."""
    if s == 0:
        return "0 s"
    return _scaled(s, [(1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")], digits)


def format_rate(r: float, *, digits: int = 4) -> str:
    """Format events per second (the profiles' one rate is IOPS), e.g. '1.4 MIOPS'."""
    return _scaled(r, [(1e6, "MIOPS"), (1e3, "kIOPS"), (1.0, "IOPS")], digits)


def format_fraction(f: float, *, digits: int = 4) -> str:
    """Format a fraction as a percentage, e.g. '70 %'."""
    return f"{format_number(100 * f, digits, grouping=False)} %"


FORMATTERS = {
    Dim.BYTES: format_bytes,
    Dim.BANDWIDTH: format_bandwidth,
    Dim.FLOP_RATE: format_flops,
    Dim.TIME: format_seconds,
    Dim.RATE: format_rate,
    Dim.FRACTION: format_fraction,
}

BASE_UNIT = {
    Dim.BYTES: "B",
    Dim.BANDWIDTH: "B/s",
    Dim.FLOP_RATE: "FLOP/s",
    Dim.TIME: "s",
    Dim.RATE: "1/s",
    Dim.FRACTION: "1",
}


def format_quantity(value: float, dim: Dim) -> str:
    """Format a base-unit value of the given dimension for people."""
    return FORMATTERS[dim](value)
