"""Locate and read the package's catalog data (hardware parts, systems, models, sources)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from kvoffload.inputs.errors import InputError
from kvoffload.inputs.files import display_name, load_mapping

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
def load(name: str) -> dict:
    """Return one catalog file as a mapping: 'sources', 'claims', 'hardware/gpus', ... (no suffix).

    Every catalog file is read here, once per process; callers must not modify what it returns.
    """
    path = catalog_dir() / f"{name}.yaml"
    if not path.is_file():
        raise InputError(f"the catalog has no file {name}.yaml")
    return load_mapping(path)


def parts(kind: str) -> dict[str, dict]:
    """Return the raw catalog parts of one kind ('gpu', 'link', 'host', 'storage') by id."""
    return load(f"hardware/{_PART_FILES[kind].removesuffix('.yaml')}")


def systems() -> dict[str, dict]:
    """Return the raw catalog system profiles by id."""
    return load("hardware/systems")


def sources() -> dict[str, dict]:
    """Return the source registry: id -> {title, url, kind, ...}."""
    return load("sources")


def source_title(source: str) -> str:
    """Return the title of a registered source id, or the text itself."""
    return sources().get(source, {}).get("title", source) or "no source given"


@cache
def model_paths() -> dict[str, Path]:
    """Return the catalog's model files by id."""
    return {p.stem: p for p in sorted((catalog_dir() / "models").glob("*.yaml"))}


def unknown_id(what: str, ident: str, known: list[str] | dict) -> InputError:
    """Build the error for an id that the catalog does not have, listing close ids."""
    names = sorted(known)
    close = [n for n in names if ident.lower() in n or n in ident.lower()][:5]
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(names)}"
    return InputError(f"unknown {what} id {display_name(ident, 80)!r}{hint}")
