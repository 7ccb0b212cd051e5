"""Tables on the page: key columns first, numbers right-aligned with units and separators,
booleans as words, addresses as links, long notes as numbered footnotes under the table.

Every cell is escaped here, once; a formatter returns plain text. A format string with a ``g``
spec ("{:.3g}") prints that many significant figures without an exponent
(``inputs.units.format_number``), so no cell reads 1.5e+03.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any
from urllib.parse import urlparse

import pandas as pd

from kvoffload.inputs.units import format_number

MISSING = "—"
LONG_TEXT = 40  # characters: a text column with longer cells gets a column wide enough to read
KEY_TEXT = 16  # characters: a key column of longer names gets a width that keeps them legible
INFINITE = "∞"
Formatter = Callable[[Any], str]
Formats = Mapping[str, str | Formatter] | str | Formatter | None

_G_SPEC = re.compile(r"\{:(?P<sign>\+?),?\.(?P<digits>\d+)g\}")
_URL = re.compile(r"https?://[^\s<>\"']+[^\s<>\"'.,;:)\]]")
# a command-line flag: --cpu-offload-gb, -ngl (not a negative number, not a hyphenated word)
_FLAG = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*[\w]")
_UNIT_SPACE = re.compile(r"(?<=[\d%]) (?=[^\s(<])")
# a cell that reads as a number, a quantity or a share: "1,490", "16.27 GB (15.15 GiB)", "+42%"
_NUMERIC_TEXT = re.compile(r"^[-+−]?(\d[\d,]*(\.\d+)?|\.\d+|∞)(\s?[^\s\d(\-][^\s(]*)?(\s\(.*\))?$")


def yes_no(value: object) -> str:
    """Return 'yes' or 'no' for a boolean cell."""
    return "yes" if bool(value) else "no"


def number(digits: int = 3, *, sign: bool = False, unit: str = "") -> Formatter:
    """Return a formatter: ``digits`` significant figures, separators, no exponent, optional unit."""

    def fmt(value: Any) -> str:
        text = format_number(value, digits)
        if sign and value > 0:
            text = "+" + text
        return f"{text} {unit}" if unit else text

    return fmt


def _is_missing(value: Any) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, float) and math.isnan(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


def _formatter(spec: str | Formatter | None, precision: int) -> Formatter:
    """Return a callable for a column's format: a callable as is, a format string, or the default."""
    if callable(spec):
        return spec
    if isinstance(spec, str):
        g = _G_SPEC.search(spec)
        if g:
            fmt = number(int(g["digits"]), sign=bool(g["sign"]))
            before, after = spec[: g.start()], spec[g.end() :]
            return lambda v: before + fmt(v) + after
        return spec.format
    return lambda v: f"{v:,}" if isinstance(v, numbers.Integral) else f"{v:,.{precision}f}"


def _link(url: str, text: str | None = None) -> str:
    """Return an escaped link; without ``text``, the address shortened to host and path."""
    if text is None:
        parts = urlparse(url)
        text = parts.netloc + parts.path.rstrip("/")
        if len(text) > 48:
            text = text[:45] + "…"
    return f'<a href="{escape(url, quote=True)}">{escape(text)}</a>'


def _flags(text: str) -> str:
    """Return escaped ``text`` with each command-line flag as code, so it reads and copies whole."""
    out, last = [], 0
    for m in _FLAG.finditer(text):
        out += [escape(text[last : m.start()]), f"<code>{escape(m.group())}</code>"]
        last = m.end()
    return "".join(out) + escape(text[last:])


def _text_with_links(text: str) -> str:
    """Return ``text`` escaped, every web address in it a link and every flag code."""
    out, last = [], 0
    for m in _URL.finditer(text):
        out += [_flags(text[last : m.start()]), _link(m.group())]
        last = m.end()
    return "".join(out) + _flags(text[last:])


def cell_html(
    value: Any,
    fmt: Formatter,
    *,
    custom: bool = False,
    missing: str = MISSING,
    infinite: str = INFINITE,
) -> str:
    """Return one cell as escaped HTML: words for booleans, ``missing``/``infinite``, links.

    ``fmt`` formats numbers; a ``custom`` one (a caller's callable) formats text cells too.
    """
    if _is_missing(value):
        return escape(missing)
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return yes_no(value)
    if _is_number(value):
        if math.isinf(float(value)):
            return escape(infinite if value > 0 else "−" + infinite)
        return _text_with_links(str(fmt(value)))
    text = str(value)
    if custom:
        with contextlib.suppress(TypeError, ValueError):  # a number format meeting a word
            text = str(fmt(value))
    if _URL.fullmatch(text):
        return _link(text)
    return _text_with_links(text)


def _numeric(column: pd.Series) -> bool:
    """Return whether a column reads as numbers (and so is right-aligned)."""
    if pd.api.types.is_bool_dtype(column):
        return False
    if pd.api.types.is_numeric_dtype(column):
        return True
    cells = [v for v in column if not _is_missing(v) and str(v) not in ("", MISSING)]
    return bool(cells) and all(
        _is_number(v) or (isinstance(v, str) and _NUMERIC_TEXT.match(v)) for v in cells
    )


@dataclass(frozen=True)
class Table:
    """A styled table and its footnotes: one block of HTML on the page."""

    styler: Any
    name: str
    plain: str
    notes: tuple[str, ...] = field(default=())
    notes_title: str = "Notes"
    fold: bool = False

    def notes_html(self) -> str:
        """Return the footnotes as a numbered list, folded into a dropdown when asked."""
        if not self.notes:
            return ""
        items = "".join(
            f'<li id="T_{escape(self.name, quote=True)}-note-{i}">{text}</li>'
            for i, text in enumerate(self.notes, 1)
        )
        title = escape(self.notes_title)
        if self.fold:
            return (
                f'<details class="kvoffload-notes"><summary>{title} ({len(self.notes)})</summary>'
                f"<ol>{items}</ol></details>"
            )
        return (
            f'<div class="kvoffload-notes"><p class="kvoffload-notes-title">{title}</p>'
            f"<ol>{items}</ol></div>"
        )

    def to_html(self) -> str:
        """Return the table in its scrolling wrapper, then its notes."""
        return (
            f'<div class="kvoffload-table-wrap" role="region" tabindex="0" '
            f'aria-label="table {escape(self.name, quote=True)}">{self.styler.to_html()}</div>'
            + self.notes_html()
        )

    def _repr_html_(self) -> str:
        return self.to_html()

    def __repr__(self) -> str:
        return self.plain


def show(
    df: pd.DataFrame,
    name: str,
    formats: Formats = None,
    precision: int = 3,
    *,
    key: Sequence[str] = (),
    notes: Sequence[str] = (),
    notes_title: str = "Notes",
    fold: bool = False,
    links: Mapping[str, str] | None = None,
    infinite: str = INFINITE,
    missing: str | Mapping[str, str] = MISSING,
) -> Table:
    """Return a table for the page: no index column, key columns first, every cell escaped.

    ``formats`` maps a column to a format string or a callable (or gives one for every number);
    numbers default to separators and ``precision`` decimals. ``key`` columns come first and the
    first of them stays in view while the table scrolls sideways. ``notes`` columns (long text:
    notes, sources) leave the table for numbered footnotes under it, marked in the row's first
    cell; ``fold`` puts them in a dropdown. ``links`` maps a text column to the column of its
    addresses, which is then dropped; a bare address in any cell becomes a link. Booleans read
    yes/no, infinity ``infinite`` and a missing value ``missing`` (one text, or one per column).
    """
    links = dict(links or {})
    order = [*key, *(c for c in df.columns if c not in key)]
    missing_cols = [c for c in [*key, *notes, *links, *links.values()] if c not in df.columns]
    if missing_cols:
        raise KeyError(f"table {name!r} has no column {missing_cols[0]!r}")
    shown = [c for c in order if c not in notes and c not in links.values()]
    per_column = formats if isinstance(formats, Mapping) else {}
    every = None if isinstance(formats, Mapping) else formats

    cells: dict[str, list[str]] = {}
    for col in shown:
        spec = per_column.get(col, every)
        custom = callable(spec) and col in per_column
        fmt = _formatter(spec, precision)
        gap = missing.get(col, MISSING) if isinstance(missing, Mapping) else missing
        column = [cell_html(v, fmt, custom=custom, missing=gap, infinite=infinite) for v in df[col]]
        if _numeric(df[col]):  # "16.27 GB" stays whole; "(15.15 GiB)" may wrap below it
            column = [_UNIT_SPACE.sub("\u00a0", c) for c in column]
        if col in links:
            column = [
                _link(str(url), str(text)) if isinstance(url, str) and _URL.fullmatch(url) else c
                for c, text, url in zip(column, df[col], df[links[col]], strict=True)
            ]
        cells[col] = column

    footnotes: dict[str, int] = {}  # one note per row (all its note columns), shared when equal
    if notes and shown:
        first = shown[0]
        for i, row in enumerate(df[list(notes)].itertuples(index=False)):
            parts = [
                (f"<strong>{escape(col)}:</strong> " if len(notes) > 1 else "")
                + _text_with_links(str(value))
                for col, value in zip(notes, row, strict=True)
                if not _is_missing(value) and str(value).strip() not in ("", MISSING)
            ]
            if parts:
                n = footnotes.setdefault(" ".join(parts), len(footnotes) + 1)
                cells[first][i] += (
                    f' <sup class="kvoffload-mark"><a href="#T_{escape(name, quote=True)}-note-{n}"'
                    f' aria-label="note {n}">{n}</a></sup>'
                )

    view = pd.DataFrame(cells, columns=shown)
    styler = view.style.hide(axis="index").format_index(escape="html", axis=1)
    styler.set_uuid(name)
    styler.set_table_attributes('class="kvoffload-table dataframe"')
    styles: dict[str, list[dict]] = {}
    if shown and df[shown[0]].map(lambda v: len(str(v))).max() > KEY_TEXT:  # names, not ids
        styles[shown[0]] = [{"selector": "td", "props": [("min-width", "min(10rem, 35vw)")]}]
    for c in shown[1:]:
        if _numeric(df[c]):
            align = [("text-align", "right")]
            styles[c] = [{"selector": "th", "props": align}, {"selector": "td", "props": align}]
        elif df[c].map(lambda v: len(str(v))).max() > LONG_TEXT:  # a readable measure, not a sliver
            styles[c] = [{"selector": "td", "props": [("min-width", "14rem")]}]
    styler.set_table_styles(styles, overwrite=False)
    plain = df[shown].to_string(index=False)
    return Table(styler, name, plain, tuple(footnotes), notes_title, fold)
