"""ggml's tensor types: id, values per block and bytes per block (catalog/ggml_types.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from kvoffload.inputs import catalog


@dataclass(frozen=True)
class GgmlType:
    """One ggml tensor type: its name (lower case, as llama.cpp prints it), id and block."""

    name: str
    id: int
    block: int  # values per block
    bytes: int  # bytes per block

    def row_bytes(self, n: int) -> int | None:
        """Return the bytes of a row of ``n`` values, or None when ``n`` is not whole blocks."""
        return None if n % self.block else n // self.block * self.bytes


@cache
def ggml_types() -> dict[str, GgmlType]:
    """Return every ggml tensor type by lower-case name ('q4_k', 'iq4_xs', 'mxfp4', ...)."""
    rows = catalog.load("ggml_types")["types"]
    return {
        k.lower(): GgmlType(k.lower(), int(v["id"]), int(v["block"]), int(v["bytes"]))
        for k, v in rows.items()
    }


@cache
def ggml_type_by_id() -> dict[int, GgmlType]:
    """Return every ggml tensor type by its id in a GGUF tensor info."""
    return {t.id: t for t in ggml_types().values()}
