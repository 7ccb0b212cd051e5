"""Plain text from input files: one line, bounded, no control or invisible formatting characters.

Every string a user file supplies (a profile, a scenario, a model file, a measurement) is a name
or a short note, shown on a page as text. None may span lines: a name is at most ``NAME_CHARS``
characters, free text (a description, a source, a note, a skip reason) at most ``NOTE_CHARS``, and
neither may hold a control character (newline, tab, NUL, DEL, C1), a line or paragraph separator
(U+2028, U+2029), a bidirectional override or isolate, or another invisible format character
(zero-width space, BOM, soft hyphen); the zero-width joiners (U+200C, U+200D) that scripts and
emoji need are allowed.

Schemas read from files (:class:`Strict`, msgspec Structs) check their ``PlainName`` and
``PlainText`` fields with the same rule, and :func:`validate` turns what they refuse into one
``InputError``.

Validation does not make text safe to paste into Markdown or HTML: wherever it reaches a page it
is escaped, HTML with ``html.escape`` and MyST Markdown with :func:`markdown_text`, here so that
the studies that write Markdown sentences can use it too.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from types import UnionType
from typing import Annotated, Any, ClassVar, TypeVar, Union, get_args, get_origin

import msgspec

from kvoffload.inputs.errors import FieldError, InputError, schema_error

NAME_CHARS = 120  # a name: a part, a system, a model, a column label
NOTE_CHARS = 2000  # free text on one line: a description, a source, a note, a skip reason

_JOINERS = {"\u200c", "\u200d"}  # zero-width non-joiner and joiner: needed by scripts and emoji
_BAD_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def _describe(char: str) -> str:
    name = unicodedata.name(char, "")
    code = f"U+{ord(char):04X}"
    return f"{code} {name}" if name else code


def text_problem(value: Any, *, max_chars: int) -> str | None:
    """Return why ``value`` is not one line of plain text of at most ``max_chars``, or None."""
    if not isinstance(value, str):
        return f"must be text, got {type(value).__name__}"
    if len(value) > max_chars:
        return f"is {len(value)} characters long; at most {max_chars} are allowed"
    if value.isascii() and value.isprintable():  # U+0020..U+007E only: nothing to look up
        return None
    for char in value:
        if char in _JOINERS:
            continue
        if unicodedata.category(char) in _BAD_CATEGORIES:
            what = (
                "a line break" if char in "\n\r\x0b\x0c\x85\u2028\u2029" else "a control character"
            )
            return f"holds {what} ({_describe(char)}); it must be one line of plain text"
    return None


def plain_text(value: Any, *, field: str, max_chars: int = NAME_CHARS) -> str:
    """Return ``value`` when it is one line of plain text, else raise InputError naming ``field``."""
    problem = text_problem(value, max_chars=max_chars)
    if problem is not None:
        raise InputError(problem, field=field)
    return value


@dataclass(frozen=True)
class TextRule:
    """What a text field of a schema may hold: one line of at most ``max_chars``."""

    max_chars: int
    required: bool  # a name must not be empty (or only spaces)

    def problem(self, value: str) -> str | None:
        """Return why ``value`` breaks the rule, or None."""
        problem = text_problem(value, max_chars=self.max_chars)
        if problem is None and self.required and not value.strip():
            return "must not be empty"
        return problem


PlainName = Annotated[str, TextRule(NAME_CHARS, required=True)]
"""A non-empty name on one line of at most ``NAME_CHARS`` characters (a Strict field type)."""

PlainText = Annotated[str, TextRule(NOTE_CHARS, required=False)]
"""Free text on one line of at most ``NOTE_CHARS`` characters, possibly empty (a Strict type)."""


class Strict(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A schema a file is read into: unknown keys refused, frozen, its text fields checked.

    Types are strict (a bool is no number, a string no integer). ``PlainName`` and ``PlainText``
    fields, and lists of them, are checked after decoding; a subclass with its own
    ``__post_init__`` calls this one first. A subclass whose required fields follow optional ones
    says ``kw_only=True`` (msgspec does not inherit it). Read input with :func:`validate`.
    """

    strip_text: ClassVar[bool] = False  # strip whitespace around text fields before the check

    def __post_init__(self) -> None:
        """Check every text field (stripped first where ``strip_text``)."""
        for name, key, rule in _text_fields(type(self)):
            value = getattr(self, name)
            if isinstance(value, str):
                if self.strip_text and value != value.strip():
                    value = value.strip()
                    msgspec.structs.force_setattr(self, name, value)
                problem = rule.problem(value)
                if problem is not None:
                    raise FieldError(key, problem)
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    problem = rule.problem(item)
                    if problem is not None:
                        raise FieldError((key, i), problem)


def _text_rule(tp: Any) -> TextRule | None:
    """Return the TextRule of a field type: text, optional text or a list of text."""
    if get_origin(tp) is Annotated:
        rule = next((m for m in tp.__metadata__ if isinstance(m, TextRule)), None)
        return rule or _text_rule(get_args(tp)[0])
    if get_origin(tp) in (Union, UnionType, list):
        return next(filter(None, map(_text_rule, get_args(tp))), None)
    return None


@cache
def _text_fields(schema: type[Strict]) -> tuple[tuple[str, str, TextRule], ...]:
    """Return (attribute, key in a file, rule) for each text field of ``schema``."""
    found = ((f, _text_rule(f.type)) for f in msgspec.structs.fields(schema))
    return tuple((f.name, f.encode_name, rule) for f, rule in found if rule is not None)


S = TypeVar("S", bound=msgspec.Struct)


def validate(
    raw: Any, schema: type[S], *, unknown: Callable[[str, list[str]], str] | None = None
) -> S:
    """Return ``raw`` read into ``schema``; InputError naming the field when it does not fit.

    ``unknown(key, known fields)`` says what is wrong with a key the schema lacks (default:
    'unknown field'); see :func:`kvoffload.inputs.errors.schema_error`.
    """
    try:
        return msgspec.convert(raw, schema)
    except msgspec.ValidationError as exc:
        raise schema_error(exc, schema, unknown=unknown) from None


def unknown_field(key: str, known: list[str]) -> str:
    """Return the problem of an unknown key: the field it may misspell, and the fields known."""
    close = difflib.get_close_matches(key, known, n=1)
    said = f"unknown field; did you mean {close[0]!r}?" if close else "unknown field"
    return f"{said} (fields: {', '.join(known)})"


# Inline Markdown (MyST with dollarmath) that a backslash turns back into a character: code and
# roles, emphasis, raw HTML, links and images, tables, math, entities, substitutions, headings.
_MD_INLINE = re.compile(r"([\\`*_{}\[\]<>|#!$&~^%])")
# what starts a block at the start of a line: a list, a quote, a fence, a target, a comment
_MD_LEADING = re.compile(r"^(\d*)([!-/:-@\[-`{-~])")


def markdown_text(value: str) -> str:
    """Return ``value`` as MyST Markdown that renders as exactly that text, on one line."""
    text = " ".join(str(value).split())
    text = _MD_INLINE.sub(r"\\\1", text)
    return _MD_LEADING.sub(lambda m: m[1] + ("" if m[2] == "\\" else "\\") + m[2], text)
