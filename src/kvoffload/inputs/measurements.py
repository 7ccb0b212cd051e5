"""The raw tables `kvoffload measure` keeps in a profile: reports read them, the model does not."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, UnsetType

from kvoffload.inputs.errors import InputError
from kvoffload.inputs.ranges import Count
from kvoffload.inputs.text import PlainName, PlainText, Strict, unknown_field, validate

# Bounded on both sides, so no row holds an infinity or a NaN.
GbPerS = Annotated[float, Meta(gt=0, le=1e4)]  # GB/s: up to 10 TB/s, a GPU's own memory
MAX_ROWS = 10_000  # rows per table: a full `measure` writes a few dozen


class HostMemoryRow(Strict):
    """One host-memory test: read or copy, on some threads."""

    test: PlainName
    threads: Count
    gb_s: GbPerS


class RandomReadRow(Strict):
    """Random reads of one request size at one queue depth, and their share of sequential."""

    request_bytes: Annotated[int, Meta(ge=512, le=2**34)]
    queue_depth: Annotated[int, Meta(ge=1, le=65_536)]
    gb_s: GbPerS
    share_of_sequential: Annotated[float, Meta(gt=0, le=100)]  # above 1 only through a cache


class GpuCopyRow(Strict):
    """Host-to-device and device-to-host copies of one size, pinned or pageable."""

    bytes: Annotated[int, Meta(ge=1, le=2**44)]
    pinned: bool
    h2d_gb_s: GbPerS
    d2h_gb_s: GbPerS


class AttentionStepRow(Strict):
    """One attention step's time with the cache placed one way."""

    placement: PlainName
    ms: Annotated[float, Meta(gt=0, le=1e7)]
    layers: Annotated[int, Meta(ge=1, le=10_000)]
    tokens: Annotated[int, Meta(ge=1, le=10**8)]


# Fields not given stay UNSET, so the block reads back holding only what the file gave.
class MeasurementTables(Strict):
    """The tables of a measured profile, each a list of rows of one shape."""

    host_memory: Annotated[list[HostMemoryRow], Meta(max_length=MAX_ROWS)] | UnsetType = UNSET
    storage_random_reads: Annotated[list[RandomReadRow], Meta(max_length=MAX_ROWS)] | UnsetType = (
        UNSET
    )
    gpu_copies: Annotated[list[GpuCopyRow], Meta(max_length=MAX_ROWS)] | UnsetType = UNSET
    gpu_attention_step: Annotated[list[AttentionStepRow], Meta(max_length=MAX_ROWS)] | UnsetType = (
        UNSET
    )


class Measurements(Strict):
    """A profile's ``measurements:`` block: raw tables, what was skipped and why, notes."""

    tables: MeasurementTables | UnsetType = UNSET
    skipped: Annotated[list[PlainText], Meta(max_length=100)] | UnsetType = UNSET
    notes: Annotated[list[PlainText], Meta(max_length=100)] | UnsetType = UNSET


def build_measurements(raw: Any) -> dict[str, Any]:
    """Validate a ``measurements:`` block; return it as plain data, holding only what it gave."""
    try:
        measurements = validate(raw, Measurements, unknown=unknown_field)
    except InputError as exc:
        raise exc.within(field="measurements") from None
    return msgspec.to_builtins(measurements)
