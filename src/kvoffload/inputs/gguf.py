"""Read a GGUF file's header, bounded and lazily: metadata, tensor infos, split parts.

The format's constants are the project's own (below, cited), so the core install needs no
gguf-py. Its ``GGUFReader`` is not used either: it decodes every array eagerly and trusts the
counts (gguf-py is a dev dependency: the tests write files with it and check these constants
against it). Here every count, length, dimension and offset is checked against the file's size
and inputs/limits before it is used; arrays the model does not need are skipped (numeric ones by
seeking past count x element size, string ones by their lengths); only the header is read (at
most ``MAX_GGUF_HEADER_BYTES``), never the weights.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any

from kvoffload.inputs import limits
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.files import display_name, open_regular
from kvoffload.inputs.ggml_types import GgmlType, ggml_type_by_id

# The format's constants, as gguf-py gguf/constants.py gives them (GGUF_MAGIC,
# GGUF_DEFAULT_ALIGNMENT, GGUFValueType; ggml-org/llama.cpp @ef035f77, the `gguf` 0.19.0 the tests
# pin) and the GGUF spec docs/gguf.md states them (ggml-org/ggml @9d325133: gguf_header_t.magic,
# general.alignment "assume it is 32", enum gguf_metadata_value_type);
# tests/inputs/test_gguf.py checks them against gguf-py.
GGUF_MAGIC = 0x46554747  # b"GGUF" read as a little-endian uint32
GGUF_DEFAULT_ALIGNMENT = 32  # when the file gives no general.alignment


class GgufValueType(IntEnum):
    """A metadata value's type id (gguf_metadata_value_type)."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


V = GgufValueType
_SCALARS = {
    V.UINT8: "<B", V.INT8: "<b", V.UINT16: "<H", V.INT16: "<h", V.UINT32: "<I", V.INT32: "<i",
    V.FLOAT32: "<f", V.BOOL: "<?", V.UINT64: "<Q", V.INT64: "<q", V.FLOAT64: "<d",
}  # fmt: skip
_SIZES = {t: struct.calcsize(f) for t, f in _SCALARS.items()}
_KEEP_ARRAY = 4096  # numeric arrays up to this long are kept (per-layer values); others skipped
_CHUNK = 1 << 20
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_NAME = 256  # tensor names are at most 63 bytes in ggml (GGML_MAX_NAME)
_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file: name, dims (ne[0] first: the row length), type, bytes."""

    name: str
    dims: tuple[int, ...]
    type: GgmlType
    offset: int  # from the start of the data section
    nbytes: int


@dataclass(frozen=True)
class GgufHeader:
    """What a GGUF file's header says: metadata (arrays skipped, their lengths kept), tensors."""

    name: str
    version: int
    metadata: dict[str, Any]
    array_lengths: dict[str, int]
    tensors: tuple[TensorInfo, ...]
    alignment: int
    data_start: int
    file_size: int


class _Cursor:
    """Reads forward through an open file with pread, in chunks, never past its size."""

    def __init__(self, fd: int, size: int, shown: str) -> None:
        self.fd, self.size, self.shown = fd, size, shown
        self.buf, self.base, self.pos = b"", 0, 0

    def fail(self, problem: str) -> InputError:
        return InputError(f"{problem} (byte {self.pos:,})", file=self.shown)

    def _have(self, n: int) -> int:
        """Make ``n`` bytes at pos readable; return their offset in buf."""
        if self.pos + n > self.size:
            raise self.fail("the header is cut short: the file ends")
        if self.pos + n > limits.MAX_GGUF_HEADER_BYTES:
            raise self.fail(f"the header is longer than {limits.MAX_GGUF_HEADER_BYTES:,} bytes")
        off = self.pos - self.base
        if off < 0 or off + n > len(self.buf):
            try:
                self.buf = os.pread(self.fd, max(n, _CHUNK), self.pos)
            except OSError as exc:
                raise self.fail(f"cannot read: {exc.strerror or exc}") from None
            self.base, off = self.pos, 0
            if len(self.buf) < n:
                raise self.fail("the header is cut short: the file ends")
        return off

    def scalar(self, kind: V) -> Any:
        off = self._have(_SIZES[kind])
        self.pos += _SIZES[kind]
        return struct.unpack_from(_SCALARS[kind], self.buf, off)[0]

    def skip(self, n: int) -> None:
        if n > self.size - self.pos:
            raise self.fail(f"{n:,} bytes are said to follow; the file ends before")
        self.pos += n
        if self.pos > limits.MAX_GGUF_HEADER_BYTES:
            raise self.fail(f"the header is longer than {limits.MAX_GGUF_HEADER_BYTES:,} bytes")

    def text(self, what: str, max_bytes: int = limits.MAX_GGUF_STRING_BYTES) -> str:
        n = self.scalar(V.UINT64)
        if n > max_bytes:
            raise self.fail(f"a {what} of {n:,} bytes; at most {max_bytes:,} are allowed")
        off = self._have(n)
        self.pos += n
        try:
            return self.buf[off : off + n].decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"a {what} is not UTF-8") from None

    def skip_strings(self, count: int) -> None:
        """Skip ``count`` strings (each an 8-byte length and its bytes)."""
        if count > (self.size - self.pos) // 8:
            raise self.fail(f"an array of {count:,} strings cannot fit in the file")
        unpack, cap = struct.unpack_from, limits.MAX_GGUF_STRING_BYTES
        for _ in range(count):
            off = self._have(8)
            n = unpack("<Q", self.buf, off)[0]
            if n > cap:
                raise self.fail(f"a string of {n:,} bytes; at most {cap:,} are allowed")
            self.skip(8 + n)


def _name(cur: _Cursor, what: str) -> str:
    name = cur.text(what, _MAX_NAME if what == "tensor name" else limits.MAX_GGUF_STRING_BYTES)
    if not name or not name.isprintable():
        raise cur.fail(f"a {what} {display_name(name, 60)!r} is empty or holds control characters")
    return name


def _kind(cur: _Cursor, raw: int) -> V:
    try:
        return V(raw)
    except ValueError:
        raise cur.fail(f"unknown metadata value type {raw}") from None


def _value(cur: _Cursor, key: str, kind: V, lengths: dict[str, int], depth: int = 0) -> Any:
    if kind in _SCALARS:
        return cur.scalar(kind)
    if kind is V.STRING:
        return cur.text(f"string value of {display_name(key, 60)}")
    if depth > 1:
        raise cur.fail(f"{display_name(key, 60)}: arrays nested more than two deep")
    item = _kind(cur, cur.scalar(V.UINT32))
    count = cur.scalar(V.UINT64)
    if depth == 0:
        lengths[key] = count
    if item in _SCALARS:
        if count > (cur.size - cur.pos) // _SIZES[item]:
            raise cur.fail(f"{display_name(key, 60)}: an array of {count:,} cannot fit in the file")
        if count <= _KEEP_ARRAY and depth == 0:
            return [cur.scalar(item) for _ in range(count)]
        cur.skip(count * _SIZES[item])
        return None
    if item is V.STRING:
        cur.skip_strings(count)
        return None
    if count > (cur.size - cur.pos) // 12:  # an inner array's type and count
        raise cur.fail(f"{display_name(key, 60)}: an array of {count:,} cannot fit in the file")
    for _ in range(count):
        _value(cur, key, V.ARRAY, lengths, depth + 1)
    return None


def _tensor(cur: _Cursor) -> tuple[str, tuple[int, ...], GgmlType, int]:
    name = _name(cur, "tensor name")
    shown = display_name(name, 60)
    n_dims = cur.scalar(V.UINT32)
    if not 1 <= n_dims <= _MAX_DIMS:
        raise cur.fail(f"tensor {shown} has {n_dims:,} dimensions; 1 to {_MAX_DIMS} are allowed")
    dims = tuple(cur.scalar(V.UINT64) for _ in range(n_dims))
    count = 1
    for d in dims:
        count *= d
    if min(dims) < 1 or count > limits.MAX_PARAMS:
        raise cur.fail(f"tensor {shown} has dimensions {list(dims)}: empty or too large")
    raw = cur.scalar(V.UINT32)
    kind = ggml_type_by_id().get(raw)
    if kind is None:
        raise cur.fail(f"tensor {shown} has unknown ggml type {raw}")
    if dims[0] % kind.block:
        raise cur.fail(f"tensor {shown}: {dims[0]:,} values a row is not whole {kind.name} blocks")
    return name, dims, kind, cur.scalar(V.UINT64)


def _read(fd: int, size: int, shown: str) -> GgufHeader:
    cur = _Cursor(fd, size, shown)
    if cur.scalar(V.UINT32) != GGUF_MAGIC:
        raise InputError("not a GGUF file (no GGUF magic)", file=shown)
    version = cur.scalar(V.UINT32)
    if version not in (2, 3):
        raise cur.fail(f"GGUF version {version:,} is not read; versions 2 and 3 are")
    n_tensors, n_kv = cur.scalar(V.UINT64), cur.scalar(V.UINT64)
    if n_tensors > limits.MAX_GGUF_TENSORS or n_tensors > size // 32:
        raise cur.fail(f"{n_tensors:,} tensors is more than the file can hold")
    if n_kv > size // 13:
        raise cur.fail(f"{n_kv:,} metadata entries is more than the file can hold")
    metadata: dict[str, Any] = {}
    lengths: dict[str, int] = {}
    for _ in range(n_kv):
        key = _name(cur, "metadata key")
        if key in metadata:
            raise cur.fail(f"metadata key {display_name(key, 60)!r} is given twice")
        metadata[key] = _value(cur, key, _kind(cur, cur.scalar(V.UINT32)), lengths)
    alignment = metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
    if (
        type(alignment) is not int
        or alignment < 1
        or alignment & (alignment - 1)
        or alignment > 1 << 20
    ):
        raise InputError(f"general.alignment {alignment!r} is not a power of two", file=shown)
    raw = [_tensor(cur) for _ in range(n_tensors)]
    data_start = -(-cur.pos // alignment) * alignment
    tensors, seen = [], set()
    for name, dims, kind, offset in raw:
        shown_name = display_name(name, 60)
        if name in seen:
            raise InputError(f"tensor {shown_name} is given twice", file=shown)
        seen.add(name)
        rows = 1
        for d in dims[1:]:
            rows *= d
        nbytes = rows * (dims[0] // kind.block) * kind.bytes
        if offset % alignment or offset > size or nbytes > size - data_start - offset:
            raise InputError(
                f"tensor {shown_name}'s data (offset {offset:,}, {nbytes:,} bytes) lies outside "
                f"the file's {size:,} bytes or off its {alignment}-byte alignment",
                file=shown,
            )
        tensors.append(TensorInfo(name, dims, kind, offset, nbytes))
    return GgufHeader(
        shown, version, metadata, lengths, tuple(tensors), alignment, data_start, size
    )


def read_header(path: str | Path) -> GgufHeader:
    """Return the header of one GGUF file (a regular file; FIFOs, devices, folders refused)."""
    fd, size = open_regular(path)
    try:
        return _read(fd, size, display_name(str(path)))
    finally:
        os.close(fd)


def read_model_headers(path: str | Path) -> tuple[GgufHeader, ...]:
    """Return the headers of a GGUF model: one file, or every part of a split set, checked."""
    p = Path(path)
    match = _SPLIT.match(p.name)
    if not match:
        return (read_header(p),)
    count = int(match["count"])
    if not 1 <= int(match["no"]) <= count <= limits.MAX_GGUF_SPLITS:
        raise InputError(
            f"part {match['no']} of {count} is not a split set",
            file=display_name(str(p)),
        )
    parts = []
    for i in range(1, count + 1):
        part = p.with_name(f"{match['stem']}-{i:05d}-of-{count:05d}.gguf")
        header = read_header(part)
        no, of = header.metadata.get("split.no"), header.metadata.get("split.count")
        if no != i - 1 or of != count:
            raise InputError(
                f"says it is part {no!r} of {of!r}; its name says {i - 1} of {count}",
                file=header.name,
            )
        parts.append(header)
    total = parts[0].metadata.get("split.tensors.count")
    names = [t.name for h in parts for t in h.tensors]
    if any(h.metadata.get("split.tensors.count") != total for h in parts) or total != len(names):
        raise InputError(
            f"the {count} parts disagree: split.tensors.count {total!r}, {len(names):,} tensors",
            file=parts[0].name,
        )
    if len(set(names)) != len(names):
        raise InputError("a tensor is given in two parts", file=parts[0].name)
    return tuple(parts)
