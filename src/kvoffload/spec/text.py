"""Plain text from input files: one line, bounded, no control or invisible formatting characters.

Every string a user file supplies (a profile, a scenario, a model file, a measurement) is a name
or a short note, shown on a page as text. None may span lines: a name is at most ``NAME_CHARS``
characters, free text (a description, a source, a note, a skip reason) at most ``NOTE_CHARS``, and
neither may hold a control character (newline, tab, NUL, DEL, C1), a line or paragraph separator
(U+2028, U+2029), a bidirectional override or isolate, or another invisible format character
(zero-width space, BOM, soft hyphen); the zero-width joiners (U+200C, U+200D) that scripts and
emoji need are allowed.

Validation does not make text safe to paste into Markdown or HTML: wherever it reaches a page it
is escaped, HTML with ``html.escape`` and MyST Markdown with :func:`markdown_text`, here so that
the studies that write Markdown sentences can use it too.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated, Any

from pydantic import AfterValidator

from kvoffload.spec.errors import InputError

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


def _validator(max_chars: int, *, required: bool) -> AfterValidator:
    def check(value: str) -> str:
        problem = text_problem(value, max_chars=max_chars)
        if problem is not None:
            raise ValueError(problem)  # pydantic adds the field's location
        if required and not value.strip():
            raise ValueError("must not be empty")
        return value

    return AfterValidator(check)


PlainName = Annotated[str, _validator(NAME_CHARS, required=True)]
"""A non-empty name on one line of at most ``NAME_CHARS`` characters (pydantic field type)."""

PlainText = Annotated[str, _validator(NOTE_CHARS, required=False)]
"""Free text on one line of at most ``NOTE_CHARS`` characters, possibly empty (pydantic type)."""


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
