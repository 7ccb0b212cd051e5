"""The one error type that bad input raises, printed as one line by the CLI."""

from __future__ import annotations

import re
from collections.abc import Callable
from types import UnionType
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

if TYPE_CHECKING:  # msgspec loads with the schemas, not with the command line
    import msgspec


def one_line(text: object) -> str | None:
    """Return ``text`` on one line: every unprintable character (newline, CR, ESC) escaped."""
    if text is None:
        return None
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))


class InputError(Exception):
    """Bad input: names the file, the field and the problem in one line."""

    def __init__(self, problem: str, *, file: str | None = None, field: str | None = None):
        self.problem = one_line(" ".join(str(problem).split())) or ""
        self.file = one_line(file)
        self.field = one_line(field)
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [p for p in (self.file, self.field) if p]
        return ": ".join([*parts, self.problem])

    def within(self, *, file: str | None = None, field: str | None = None) -> InputError:
        """Return a copy located in ``file`` with ``field`` prefixed to the field path."""
        path = ".".join(p for p in (field, self.field) if p) or None
        return InputError(self.problem, file=self.file or file, field=path)


# -- schema errors: a msgspec ValidationError as one InputError -----------------------------------
Loc = tuple[str | int, ...]


class FieldError(ValueError):
    """A schema's own check of one field failed: raised in ``__post_init__`` to name the field."""

    def __init__(self, loc: str | int | Loc, problem: str):
        super().__init__(problem)
        self.loc: Loc = loc if isinstance(loc, tuple) else (loc,)


# msgspec ends a message with " - at `$.a[0].b`" (or " - at `key` in `$.a`" for a mapping's key)
_AT = re.compile(r"(?P<key>key` in `)?\$(?P<path>(?:\.[A-Za-z_]\w*|\[\d+\]|\[\.\.\.\])*)`")
_STEP = re.compile(r"\.([A-Za-z_]\w*)|\[(\d+)\]|\[\.\.\.\]")
_NOUNS = {
    "int": "a valid integer",
    "float": "a valid number",
    "bool": "a valid boolean",
    "str": "a valid string",
    "array": "a valid list",
    "object": "a valid dictionary",
}
_BOUNDS = {
    ">=": "greater than or equal to",
    ">": "greater than",
    "<=": "less than or equal to",
    "<": "less than",
}
_LENGTHS = {"<=": "at most", ">=": "at least"}
_LENGTHY = {"array": "List", "str": "Text", "object": "Mapping"}
_UNITS = {"array": "items", "str": "characters", "object": "keys"}


def _located(message: str) -> tuple[str, Loc, bool]:
    """Return (problem, location, whether the location's key is what is wrong) of a message."""
    head, sep, tail = message.rpartition(" - at `")
    m = _AT.fullmatch(tail) if sep else None
    if m is None:  # at the top: msgspec names no location
        return message, (), False
    loc = tuple(
        int(s.group(2)) if s.group(2) else s.group(1)
        for s in _STEP.finditer(m["path"])
        if s.group(1) or s.group(2)
    )
    return head, loc, bool(m["key"])


def _number(text: str) -> str:
    """Return a bound as a person writes it: 10000.0 as 10000."""
    try:
        value = float(text)
    except ValueError:
        return text
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else text


def _schema_at(schema: Any, loc: Loc) -> Any:
    """Return the type at ``loc`` inside ``schema`` (a msgspec Struct), or None when unknown."""
    import msgspec

    tp = schema
    for step in (*loc, None):
        while True:  # look through Annotated, and through a union to its member that fits
            args = get_args(tp)
            if get_origin(tp) is Annotated:
                tp = args[0]
            elif get_origin(tp) in (Union, UnionType):
                fits = [
                    a
                    for a in args
                    if (isinstance(step, int) and get_origin(a) in (list, tuple))
                    or (isinstance(a, type) and issubclass(a, msgspec.Struct))
                ]
                tp = (fits or [a for a in args if a is not type(None)] or [None])[0]
            else:
                break
        if step is None:
            return tp
        if isinstance(step, int) and get_origin(tp) in (list, tuple):
            args = get_args(tp)
            fixed = get_origin(tp) is tuple and ... not in args  # tuple[X, Y], not tuple[X, ...]
            tp = (args[step] if step < len(args) else None) if fixed else args[0]
        elif isinstance(tp, type) and issubclass(tp, msgspec.Struct):
            fields = {f.encode_name: f.type for f in msgspec.structs.fields(tp)}
            tp = fields.get(step)
        else:
            return None
    return tp


def schema_fields(schema: Any, loc: Loc = ()) -> list[str]:
    """Return the field names (as a file writes them) of the Struct at ``loc`` inside ``schema``."""
    import msgspec

    tp = _schema_at(schema, loc)
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return [f.encode_name for f in msgspec.structs.fields(tp)]
    return []


def schema_error(
    exc: msgspec.ValidationError,
    schema: Any,
    *,
    unknown: Callable[[str, list[str]], str] | None = None,
) -> InputError:
    """Return the InputError for a msgspec ValidationError raised reading ``schema``.

    The field is the dotted path to the value (list items by index). The problem: 'required
    field is missing'; ``unknown(key, known fields)`` for a key the schema lacks (default
    'unknown field'); 'Input should be ...' for a wrong type or a value out of bounds; or the
    message of a schema's own check, a ValueError in ``__post_init__`` (a FieldError names the
    field below the schema it checks).
    """
    cause, message = exc.__cause__, str(exc)
    if isinstance(cause, ValueError | TypeError) and message.startswith(str(cause)):
        problem = str(cause)
        _, loc, _ = _located(message[len(problem) :])
        if isinstance(cause, FieldError):
            loc += cause.loc
        return InputError(problem, field=_dotted(loc))
    problem, loc, on_key = _located(message)
    if on_key:
        return InputError("Keys should be strings", field=_dotted(loc))
    if m := re.fullmatch(r"Object missing required field `(.*)`", problem, re.DOTALL):
        return InputError("required field is missing", field=_dotted((*loc, m[1])))
    if m := re.fullmatch(r"Object contains unknown field `(.*)`", problem, re.DOTALL):
        key, known = m[1], schema_fields(schema, loc)
        if loc and not known:  # no mapping there: the key itself ends in " - at `$...`"
            key, loc, known = message.split("`", 1)[1][:-1], (), schema_fields(schema)
        said = unknown(key, known) if unknown else "unknown field"
        return InputError(said, field=_dotted((*loc, key)))
    literal = _schema_at(schema, loc)
    if get_origin(literal) is Literal and (
        problem.startswith("Invalid enum value ") or problem.startswith("Expected `str`, got ")
    ):
        *most, last = (repr(c) for c in get_args(literal))
        problem = f"Input should be {', '.join(most) + ' or ' if most else ''}{last}"
    elif m := re.fullmatch(r"Expected `([^`]*)`, got `\w+`", problem):
        kinds = [_NOUNS.get(k, k) for k in m[1].split(" | ") if k != "null"]
        problem = f"Input should be {' or '.join(kinds)}"
    elif m := re.fullmatch(r"Expected `\w+` (>=|>|<=|<) (\S+)", problem):
        problem = f"Input should be {_BOUNDS[m[1]]} {_number(m[2])}"
    elif m := re.fullmatch(r"Expected `(\w+)` of length (<=|>=) (\d+)", problem):
        what, unit = _LENGTHY.get(m[1], "Input"), _UNITS.get(m[1], "items")
        problem = f"{what} should have {_LENGTHS[m[2]]} {m[3]} {unit}"
    elif m := re.fullmatch(r"Expected `array` of length (\d+), got (\d+)", problem):
        problem = f"List should have {m[1]} items, not {m[2]}"
    return InputError(problem, field=_dotted(loc))


def _dotted(loc: Loc) -> str | None:
    return ".".join(str(p) for p in loc) or None
