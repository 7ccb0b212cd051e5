"""Plausible ranges of the hardware figures a profile gives, each a validated field type."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from kvoffload.inputs.figures import FigureField
from kvoffload.inputs.units import Dim

# Plausible ranges: wide enough for any real machine, narrow enough to catch slips of unit.
Capacity = FigureField(Dim.BYTES, 1e8, 1e15)
DiskCapacity = FigureField(Dim.BYTES, 1e9, 1e16)
DeviceBandwidth = FigureField(Dim.BANDWIDTH, 1e9, 1e14)
LinkBandwidth = FigureField(Dim.BANDWIDTH, 1e7, 1e13)
FlopRate = FigureField(Dim.FLOP_RATE, 1e9, 1e18)
Latency = FigureField(Dim.TIME, 1e-9, 1.0, allow_zero=True)
Iops = FigureField(Dim.RATE, 1.0, 1e9)
Efficiency = FigureField(Dim.FRACTION, 0.01, 1.0)
Count = Annotated[int, Meta(ge=1, le=4096)]  # cores or threads
ReservedMemory = FigureField(Dim.BYTES, 1e8, 1e14, allow_zero=True)
CrossSocketBandwidth = FigureField(Dim.BANDWIDTH, 1e9, 1e12)  # UPI / xGMI: GB/s to a TB/s
