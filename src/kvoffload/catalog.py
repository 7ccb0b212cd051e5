"""Locate and read the package's catalog data (hardware parts, systems, models, sources)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from kvoffload.errors import InputError
from kvoffload.inputs import load_mapping

PART_KINDS = ("gpu", "link", "host", "storage")
_PART_FILES = {
    "gpu": "gpus.yaml",
    "link": "links.yaml",
    "host": "hosts.yaml",
    "storage": "storage.yaml",
}


def catalog_dir() -> Path:
    """Return the folder that holds the catalog's YAML files."""
    return Path(str(resources.files("kvoffload") / "catalog"))


@cache
def parts(kind: str) -> dict[str, dict]:
    """Return the raw catalog parts of one kind ('gpu', 'link', 'host', 'storage') by id."""
    return load_mapping(catalog_dir() / "hardware" / _PART_FILES[kind])


@cache
def systems() -> dict[str, dict]:
    """Return the raw catalog system profiles by id."""
    return load_mapping(catalog_dir() / "hardware" / "systems.yaml")


@cache
def sources() -> dict[str, dict]:
    """Return the source registry: id -> {title, url, kind, ...}."""
    return load_mapping(catalog_dir() / "sources.yaml")


@cache
def model_paths() -> dict[str, Path]:
    """Return the catalog's model files by id."""
    return {p.stem: p for p in sorted((catalog_dir() / "models").glob("*.yaml"))}


def unknown_id(what: str, ident: str, known: list[str] | dict) -> InputError:
    """Build the error for an id that the catalog does not have, listing close ids."""
    names = sorted(known)
    close = [n for n in names if ident.lower() in n or n in ident.lower()][:5]
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(names)}"
    return InputError(f"unknown {what} id {ident!r}{hint}")
