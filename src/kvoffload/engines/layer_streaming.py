"""What ZeRO-Inference and HF Accelerate share: weights streamed layer by layer from host memory or
disk, the tier each ``weights`` option names, and whether the copies are page-locked (both use
pageable host memory unless told otherwise)."""

from __future__ import annotations

import msgspec
from msgspec import UNSET

from kvoffload.model import decode
from kvoffload.model.prediction import Scenario

# `pinned` as the file gives it (UNSET: not given), so the scenario's `pinned:` can stand in
PINNED = msgspec.field(default=UNSET, name="pinned")

TIER = {"gpu": decode.Split(), "cpu": decode.Split(0, 1, 0), "disk": decode.Split(0, 0, 1)}


def copies_pinned(sc: Scenario, pinned_buffers: bool = False) -> bool:
    """Return whether weight copies are page-locked: the ``pinned`` option where given, else the
    scenario's ``pinned:`` (default false); always when the engine copies through its own pinned
    buffers (``pinned_buffers``)."""
    o = sc.options
    given = sc.pinned_or(False) if o.pinned_given is UNSET else o.pinned_given
    return given or pinned_buffers
