"""An event simulation of one decode step's streams, for Gantt charts and to check the closed forms."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvoffload.model.decode import STREAMS, Setup, layers, stream_times

# A layer's work as chains of segments on resources: a load is a disk read then a host→GPU copy,
# a compute is CPU attention then the GPU's work, a store is a GPU→host copy then a disk write.
LOAD = ("disk_read", "h2d")
COMPUTE = ("cpu", "gpu")
STORE = ("d2h", "disk_write")


@dataclass(frozen=True)
class Event:
    """One segment of work on one resource."""

    resource: str
    layer: int
    task: str  # 'load', 'compute' or 'store'
    start: float
    end: float


def per_layer(setup: Setup, context: float, batch: float) -> dict[str, np.ndarray]:
    """Return each stream's seconds for every layer in order (the output head last)."""
    lay = layers(setup.model, setup.weights)
    per = stream_times(setup, context, batch)
    idx = np.array(lay.order)
    return {k: np.asarray(v)[idx] for k, v in per.items()}


def _chain(
    events: list[Event], t: float, layer: int, task: str, resources: tuple[str, ...], d: dict
) -> float:
    for r in resources:
        dur = float(d[r][layer])
        if dur > 0:
            events.append(Event(r, layer, task, t, t + dur))
            t += dur
    return t


def simulate(
    setup: Setup, context: float, batch: float = 1, overlap: str | None = None
) -> list[Event]:
    """Return the events of one decode step under an overlap mode."""
    mode = overlap or setup.placement.overlap
    d = per_layer(setup, context, batch)
    n = len(d["gpu"])
    events: list[Event] = []
    if mode == "none":
        t = 0.0
        for i in range(n):
            t = _chain(events, t, i, "load", LOAD, d)
            t = _chain(events, t, i, "compute", COMPUTE, d)
            t = _chain(events, t, i, "store", STORE, d)
    elif mode == "perfect":  # every resource works back to back, ignoring dependencies
        for r in STREAMS:
            t = 0.0
            for i in range(n):
                task = "load" if r in LOAD else "store" if r in STORE else "compute"
                t = _chain(events, t, i, task, (r,), d)
    elif mode == "pipeline":  # stage k: disk reads k, link loads k-1, k-2 computes, k-3, k-4 store
        stages = (
            ("load", ("disk_read",)),
            ("load", ("h2d",)),
            ("compute", COMPUTE),
            ("store", ("d2h",)),
            ("store", ("disk_write",)),
        )
        t = 0.0
        for k in range(n + len(stages) - 1):
            ends = [t]
            for r, (task, resources) in enumerate(stages):
                if 0 <= k - r < n:
                    ends.append(_chain(events, t, k - r, task, resources, d))
            t = max(ends)
    elif mode == "flexgen":  # per layer: the host->GPU load, then every other stream at once
        t = 0.0
        for i in range(n):
            t = _chain(events, t, i, "load", ("h2d",), d)
            ends = [t, _chain(events, t, i, "compute", COMPUTE, d)]
            for r in ("disk_read", "d2h", "disk_write"):
                ends.append(_chain(events, t, i, "load" if r in LOAD else "store", (r,), d))
            t = max(ends)
    else:
        raise ValueError(f"unknown overlap mode {mode!r}")
    return events


def makespan(events: list[Event]) -> float:
    """Return when the last event ends."""
    return max((e.end for e in events), default=0.0)
