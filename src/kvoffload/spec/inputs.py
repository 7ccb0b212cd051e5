"""Read input files safely: size cap, strict UTF-8, YAML without aliases or duplicate keys."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

from kvoffload.spec.errors import InputError

MAX_FILE_BYTES = 1 << 20  # a profile, scenario or config.json is a few kB
MAX_DEPTH = 32

try:  # the C parser is faster when PyYAML was built with libyaml
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on the wheel
    _Loader = yaml.SafeLoader


def read_text(path: str | Path) -> str:
    """Return the file's text, refusing missing, oversized or non-UTF-8 files."""
    p = Path(path)
    name = str(path)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise InputError("no such file", file=name) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", file=name) from None
    if p.is_dir():
        raise InputError("is a directory, expected a file", file=name)
    if size > MAX_FILE_BYTES:
        raise InputError(
            f"file is {size} bytes, larger than the {MAX_FILE_BYTES} byte limit", file=name
        )
    try:
        data = p.read_bytes()[: MAX_FILE_BYTES + 1]
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", file=name) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", file=name) from None


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
        raise InputError(f"malformed JSON: {exc}", file=name) from None
    except RecursionError:
        raise InputError("malformed JSON: nested too deeply", file=name) from None
    return data


def is_finite_number(x: Any) -> bool:
    """True for an int or float that is finite (bool excluded)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
