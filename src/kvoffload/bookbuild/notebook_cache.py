"""The executed notebooks kept between builds: keyed by what can change their outputs, sealed
with a digest, verified on every read, and merged into a chapter whose prose alone changed.

A chapter's outputs depend on its code cells, the parameters it ran with, the package (source
and catalog), the pinned lock and any user file a parameter names, and on nothing else: its
Markdown cells are text around the outputs. So the cache key covers exactly those, a prose-only
edit re-renders the page from the stored outputs, cell by cell, and any change to a code cell
executes the chapter again. A stored notebook is trusted only when it parses as a notebook, its
key matches, its digest matches its cells, and it holds no error output; anything else is
executed again, never published.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

META = "kvoffload"
INJECTED_TAG = "injected-parameters"  # the cell that sets the parameters a job ran with
MAX_NOTEBOOK_BYTES = 64 * 1024 * 1024  # an executed chapter is a few MB; more is not ours


def _tags(cell: Any) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def code_cells(nb: Any) -> list[dict]:
    """Return the chapter's own code cells (the injected parameters cell excluded)."""
    return [c for c in nb["cells"] if c["cell_type"] == "code" and INJECTED_TAG not in _tags(c)]


def code_signature(nb: Any) -> bytes:
    """Return what of a chapter can change its outputs: each code cell's source and metadata."""
    cells = [[c["source"], c.get("metadata", {})] for c in code_cells(nb)]
    return json.dumps(cells, sort_keys=True, ensure_ascii=False).encode()


def key(nb: Any, params: dict, inputs: Iterable[bytes]) -> str:
    """Return the cache key: code cells + parameters + the other inputs (package, lock, files)."""
    h = hashlib.sha256(code_signature(nb))
    h.update(json.dumps(params, sort_keys=True, default=str).encode())
    for part in inputs:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def _digest(nb: Any, cache_key: str) -> str:
    """Return the seal: a hash of every cell (type, source, outputs, count) and the key."""
    cells = [
        [c["cell_type"], c["source"], c.get("outputs", []), c.get("execution_count")]
        for c in nb["cells"]
    ]
    body = json.dumps([cache_key, cells], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()


def seal(nb: Any, cache_key: str, **about: str) -> Any:
    """Record the key and the digest of ``nb`` in its metadata (cell ids dropped); return it."""
    for c in nb.cells:
        c.pop("id", None)  # ids are random per read; without them an unchanged page is byte-stable
    nb.nbformat_minor = 4
    nb.metadata[META] = {"key": cache_key, "digest": _digest(nb, cache_key), **about}
    return nb


def error_outputs(nb: Any) -> list[str]:
    """Return a description of every error output in an executed notebook."""
    found = []
    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found.append(f"cell {i}: {out.get('ename')}: {out.get('evalue')}")
            elif out.get(
                "output_type"
            ) == "stream" and "Traceback (most recent call last)" in "".join(out.get("text", "")):
                found.append(f"cell {i}: a traceback printed to {out.get('name')}")
    return found


def load(path: Path, cache_key: str) -> Any | None:
    """Return the stored notebook at ``path`` when it is sound and made for ``cache_key``, else None.

    Sound: a regular file of bounded size that parses as a valid notebook, whose key matches,
    whose digest matches its cells, and which holds no error output.
    """
    import nbformat

    try:
        if not path.is_file() or path.stat().st_size > MAX_NOTEBOOK_BYTES:
            return None
        nb = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
        nbformat.validate(nb)
        meta = nb.metadata.get(META, {})
        if meta.get("key") != cache_key or meta.get("digest") != _digest(nb, cache_key):
            return None
    except (OSError, ValueError, TypeError, AttributeError, KeyError, UnicodeDecodeError):
        return None
    except nbformat.ValidationError:
        return None
    return None if error_outputs(nb) else nb


SEAL_SUFFIX = ".seal"  # beside each stored run: its key, its bytes' hash, the text it carries


def _seal_path(path: Path) -> Path:
    return path.with_name("." + path.name + SEAL_SUFFIX)  # hidden beside the notebook


def note(path: Path, cache_key: str, text_hash: str) -> None:
    """Record, beside a stored run just written and verified, what it is: key, bytes, text."""
    body = json.dumps({"key": cache_key, "bytes": _file_hash(path), "text": text_hash})
    _seal_path(path).write_text(body, encoding="utf-8")


def unchanged(path: Path, cache_key: str, text_hash: str) -> bool:
    """True when the stored run is byte for byte the one noted for this key and chapter text.

    The cheap path of a no-op build: the bytes' hash stands for the full verification done when
    the run was noted; any difference (an edit, a truncation, another key or text) sends the
    caller to the full path, which parses and verifies the notebook.
    """
    try:
        seal = json.loads(_seal_path(path).read_text(encoding="utf-8"))
        return (
            isinstance(seal, dict)
            and seal.get("key") == cache_key
            and seal.get("text") == text_hash
            and path.is_file()
            and path.stat().st_size <= MAX_NOTEBOOK_BYTES
            and seal.get("bytes") == _file_hash(path)
        )
    except (OSError, ValueError):
        return False


def _file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def merge(text: Any, executed: Any) -> Any | None:
    """Return the chapter's current cells carrying the outputs of ``executed``, cell by cell.

    ``text`` is the chapter as it reads now; ``executed`` a run of the same code. Markdown comes
    from ``text``, outputs and counts from ``executed``, and the injected parameters cell goes
    after the parameters cell as in the run. None when the code cells differ.
    """
    done = code_cells(executed)
    fresh = [c for c in text.cells if c.cell_type == "code"]
    if len(done) != len(fresh) or any(
        a.source != b.source for a, b in zip(done, fresh, strict=True)
    ):
        return None
    injected = [c for c in executed.cells if INJECTED_TAG in _tags(c)]
    outputs = iter(done)
    cells = []
    for cell in text.cells:
        cell = copy.deepcopy(cell)
        if cell.cell_type == "code":
            ran = next(outputs)
            cell.outputs = copy.deepcopy(ran.outputs)
            cell.execution_count = ran.execution_count
            cells.append(cell)
            if "parameters" in _tags(cell):
                cells.extend(copy.deepcopy(injected))
        else:
            cells.append(cell)
    merged = copy.deepcopy(executed)
    merged.cells = cells
    for name, value in text.metadata.items():  # the chapter's front matter as it reads now
        if name not in ("kernelspec", "language_info", META):
            merged.metadata[name] = copy.deepcopy(value)
    return merged


def write_if_changed(path: Path, nb: Any) -> bool:
    """Write ``nb`` to ``path`` atomically unless it already holds the same bytes; True if written."""
    import nbformat

    body = nbformat.writes(nb) + "\n"
    try:
        if path.is_file() and path.read_text(encoding="utf-8") == body:
            return False
    except (OSError, UnicodeDecodeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".ipynb", dir=path.parent, prefix=".writing-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(body)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True
