"""Loading a model: by catalog id, from a HF config.json, or from a model YAML file."""

from __future__ import annotations

import stat
from functools import cache
from pathlib import Path
from typing import Any

from kvoffload.inputs import catalog
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.files import check_path, display_name, load_mapping, stat_mode
from kvoffload.inputs.models.config import from_hf_config
from kvoffload.inputs.models.config_values import _ident, _published
from kvoffload.inputs.models.model import Model
from kvoffload.inputs.text import NOTE_CHARS, plain_text

_MODEL_SUFFIXES = {".json", ".yaml", ".yml"}


def model_ids() -> list[str]:
    """Return the catalog's model ids."""
    return list(catalog.model_paths())


@cache
def _catalog_model(ident: str) -> Model:
    path = catalog.model_paths()[ident]
    return _from_model_file(catalog.load(f"models/{ident}"), path, ident)


def _from_model_file(raw: dict, path: Path, ident: str) -> Model:
    cfg = raw.get("config")
    if not isinstance(cfg, dict):
        raise InputError(
            "a model file needs a 'config' mapping (the HF config.json)",
            field="config",
            file=display_name(str(path)),
        )
    src = raw.get("source") or {}
    url = src.get("url", "") if isinstance(src, dict) else src
    try:  # the file's own fields first, so that their errors are not placed under config
        _ident(raw.get("id", ident), field="id")
        if raw.get("name"):
            plain_text(raw["name"], field="name")
        if url:
            plain_text(url, field="source", max_chars=NOTE_CHARS)
        _ident(raw.get("hf_id") or "", field="hf_id")
        _published(raw)
    except InputError as exc:
        raise exc.within(file=display_name(str(path))) from None
    try:
        return from_hf_config(
            cfg,
            ident=raw.get("id", ident),
            name=raw.get("name"),
            source=url or str(path),
            meta=raw,
        )
    except InputError as exc:
        raise exc.within(file=display_name(str(path)), field="config") from None


def load_model(ref: str | Path) -> Model:
    """Return a Model from a catalog id, a HF config.json, a model YAML file or a .gguf file."""
    text = str(ref)
    if text in catalog.model_paths():
        return _catalog_model(text)
    try:
        path = Path(check_path(text))
    except InputError:
        if "/" in text or Path(text[-8:]).suffix.lower() in _MODEL_SUFFIXES:
            raise
        raise catalog.unknown_id("model", text, catalog.model_paths()) from None
    if path.suffix.lower() == ".gguf":
        from kvoffload.inputs.models.gguf_model import from_gguf

        return from_gguf(path)
    if _is(path, stat.S_ISDIR) and _is(path / "config.json", stat.S_ISREG):
        path = path / "config.json"
    if path.suffix.lower() in _MODEL_SUFFIXES or _is(path, None):
        raw = load_mapping(path)
        ident = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
        ident = ident.lower() or "model"
        if "config" in raw and isinstance(raw["config"], dict):
            return _from_model_file(raw, path, ident)
        try:
            return from_hf_config(raw, ident=ident, source=str(path))
        except InputError as exc:
            raise exc.within(file=display_name(str(path))) from None
    raise catalog.unknown_id("model", text, catalog.model_paths())


def _is(path: Path, kind: Any) -> bool:
    """True when ``path`` exists (and, given ``kind``, is that kind of file); never raises."""
    mode = stat_mode(path)
    return mode is not None and (kind is None or kind(mode))
