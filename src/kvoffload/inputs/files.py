"""Read input files safely: size cap, strict UTF-8, YAML without aliases or duplicate keys."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from kvoffload.inputs.errors import InputError
from kvoffload.inputs.limits import MAX_DEPTH, MAX_FILE_BYTES, MAX_NAME_BYTES, MAX_PATH_BYTES

_BINARY = getattr(os, "O_BINARY", 0)
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | os.O_CLOEXEC | _BINARY
# A plain YAML scalar this long that reads as a number is refused before it is built:
# PyYAML turns '1:2:3:...' (a base-60 integer) into an int in quadratic time.
_MAX_NUMBER_CHARS = 100
_NUMERIC_TAGS = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}

try:  # the C parser is faster when PyYAML was built with libyaml
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on the wheel
    _Loader = yaml.SafeLoader


def display_name(name: str, limit: int = 120) -> str:
    """Return ``name`` fit for one line of an error: escaped control characters, shortened."""
    if not name.isprintable():
        name = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in name)
    return name if len(name) <= limit else name[: limit - 1] + "…"


def check_path(path: str | Path) -> str:
    """Return ``path`` as text, refusing a path too long to open or holding a NUL byte."""
    name = str(path)
    shown = display_name(name)
    try:
        raw = os.fsencode(name)
    except UnicodeError:
        raise InputError("the path is not valid text", file=shown) from None
    if len(raw) > MAX_PATH_BYTES:
        raise InputError(
            f"the path is {len(raw)} bytes long; at most {MAX_PATH_BYTES} are allowed", file=shown
        )
    if b"\0" in raw:
        raise InputError("the path holds a NUL byte", file=shown)
    longest = max((len(part) for part in raw.split(b"/")), default=0)
    if longest > MAX_NAME_BYTES:
        raise InputError(
            f"a file name in the path is {longest} bytes long; at most {MAX_NAME_BYTES} are allowed",
            file=shown,
        )
    return name


def stat_mode(path: str | Path) -> int | None:
    """Return the mode of the file at ``path`` (links followed), or None; never raises."""
    try:
        return os.stat(path).st_mode
    except (OSError, ValueError):
        return None


def _os_problem(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, IsADirectoryError):
        return "is a directory, expected a file"
    return f"cannot read: {exc.strerror or exc}"


def _kind(mode: int) -> str | None:
    """Return what a file of ``mode`` is when it is not a regular file, else None."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory, expected a file"
    if stat.S_ISFIFO(mode):
        return "is a named pipe (FIFO), expected a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, expected a regular file"
    if stat.S_ISSOCK(mode):
        return "is a socket, expected a regular file"
    return "is not a regular file"


def open_regular(path: str | Path) -> tuple[int, int]:
    """Open a regular file without blocking and return its descriptor and size; refuse the rest.

    The file is checked before it is opened (devices, FIFOs, sockets and directories are
    refused, so none is ever read or waited on), opened with O_NONBLOCK, and checked again on
    the open descriptor (it may have been replaced in between). The caller closes the descriptor.
    """
    name = check_path(path)
    shown = display_name(name)
    try:
        kind = _kind(os.stat(name).st_mode)
    except OSError as exc:
        raise InputError(_os_problem(exc), file=shown) from None
    if kind:
        raise InputError(kind, file=shown)
    try:
        fd = os.open(name, _OPEN_FLAGS)
    except OSError as exc:
        raise InputError(_os_problem(exc), file=shown) from None
    try:
        info = os.fstat(fd)
        kind = _kind(info.st_mode)  # replaced between the check and the open
    except OSError as exc:
        os.close(fd)
        raise InputError(_os_problem(exc), file=shown) from None
    if kind:
        os.close(fd)
        raise InputError(kind, file=shown)
    return fd, info.st_size


def read_bytes(path: str | Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """Return the bytes of a regular file of at most ``limit`` bytes, refusing anything else.

    The file is checked before it is opened (devices, FIFOs, sockets and directories are
    refused, so none is ever read or waited on), opened without blocking, checked again on the
    open descriptor, and read to at most ``limit + 1`` bytes whatever its reported size.
    """
    fd, size = open_regular(path)
    shown = display_name(str(path))
    try:
        if size > limit:
            raise InputError(
                f"file is {size} bytes, larger than the {limit} byte limit", file=shown
            )
        chunks: list[bytes] = []
        got = 0
        while got <= limit:
            chunk = os.read(fd, min(limit + 1 - got, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError as exc:
        raise InputError(_os_problem(exc), file=shown) from None
    finally:
        os.close(fd)
    if got > limit:
        raise InputError(f"file is larger than the {limit} byte limit", file=shown)
    return b"".join(chunks)


def read_text(path: str | Path) -> str:
    """Return the file's text, refusing missing, oversized, non-regular or non-UTF-8 files."""
    data = read_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"not UTF-8 text (byte {exc.start})", file=display_name(str(path))
        ) from None


def _numeric_scalar(event: yaml.ScalarEvent) -> bool:
    """True for a long plain scalar that YAML would read as a number."""
    if len(event.value) <= _MAX_NUMBER_CHARS:
        return False
    if event.tag in _NUMERIC_TAGS or event.tag in ("!!int", "!!float"):
        return True
    if not event.implicit[0]:
        return False
    tag = yaml.resolver.Resolver().resolve(yaml.ScalarNode, event.value, (True, False))
    return tag in _NUMERIC_TAGS


def _check_events(text: str, name: str) -> None:
    """Refuse aliases (alias bombs) and absurd nesting before anything is constructed."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise InputError(
                    f"YAML anchors and aliases are not allowed (line {line})", file=name
                )
            if isinstance(event, yaml.ScalarEvent) and _numeric_scalar(event):
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise InputError(
                    f"a number of {len(event.value)} characters (line {line}); "
                    f"at most {_MAX_NUMBER_CHARS} are allowed",
                    file=name,
                )
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise InputError(f"nested deeper than {MAX_DEPTH} levels", file=name)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"malformed YAML{where}: {problem}", file=name) from None


class _UniqueKeyLoader(_Loader):  # type: ignore[misc, valid-type]
    """Safe loader that refuses duplicate mapping keys."""


def _construct_mapping(loader: Any, node: yaml.MappingNode, deep: bool = False) -> dict:
    mapping: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark
            ) from None
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, name: str) -> Any:
    """Parse YAML text safely; ``name`` is used in error messages."""
    _check_events(text, name)
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except ValueError as exc:  # e.g. an integer past Python's int max str digits
        raise InputError(f"malformed YAML: {_value_problem(exc)}", file=name) from None
    except RecursionError:
        raise InputError("malformed YAML: nested too deeply", file=name) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"malformed YAML{where}: {problem}", file=name) from None


def load_yaml(path: str | Path) -> Any:
    """Read and parse one YAML file safely."""
    return parse_yaml(read_text(path), str(path))


def load_mapping(path: str | Path) -> dict:
    """Read a YAML or JSON file whose top level must be a mapping."""
    name = str(path)
    text = read_text(path)
    data = parse_json(text, name) if name.endswith(".json") else parse_yaml(text, name)
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise InputError(f"top level must be a mapping, got {kind}", file=name)
    return data


def _refuse_constant(token: str) -> float:
    raise ValueError(f"{token} is not a number JSON allows")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def parse_json(text: str, name: str) -> Any:
    """Parse JSON strictly: no NaN/Infinity, no duplicate keys, bounded nesting."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique_pairs)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", file=name
        ) from None
    except ValueError as exc:
        raise InputError(f"malformed JSON: {_value_problem(exc)}", file=name) from None
    except RecursionError:
        raise InputError("malformed JSON: nested too deeply", file=name) from None
    if _depth(data) > MAX_DEPTH:
        raise InputError(f"nested deeper than {MAX_DEPTH} levels", file=name)
    return data


def _value_problem(exc: ValueError) -> str:
    text = str(exc)
    if "integer string conversion" in text:
        return "an integer with thousands of digits"
    return text.splitlines()[0] if text else type(exc).__name__


def _depth(data: Any) -> int:
    """Return how deeply lists and mappings nest in ``data`` (iteratively, no recursion)."""
    deepest = 0
    stack = [(data, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            items: Any = item.values()
        elif isinstance(item, list):
            items = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            break
        stack.extend((x, level + 1) for x in items)
    return deepest


def is_finite_number(x: Any) -> bool:
    """True for an int or float that is finite (bool excluded)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def check_writable(folder: Path, *, file: str, field: str) -> None:
    """Raise InputError unless a file can be created in ``folder`` (tried, then removed).

    Trying is the only sure test: root ignores permission bits, and a mount may be read-only.
    """
    import tempfile

    try:
        fd, probe = tempfile.mkstemp(prefix=".kvoffload-probe-", dir=folder)
    except OSError as exc:
        raise InputError(
            f"cannot write in {folder}: {exc.strerror or exc}", file=file, field=field
        ) from None
    os.close(fd)
    os.unlink(probe)
