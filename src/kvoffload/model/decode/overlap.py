"""How the streams combine into a step under each overlap mode, and the step itself."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cache

import numpy as np
from numpy.typing import ArrayLike

from kvoffload.model.decode.layer_classes import Layers, layers
from kvoffload.model.decode.placement import Setup
from kvoffload.model.decode.streams import STREAMS, _any, stream_times


@cache
def _stages(
    order: tuple[int, ...], depth: int = 5
) -> tuple[tuple[int, tuple[tuple[int, int], ...]], ...]:
    """Return the pipeline's distinct stages: how many times each runs and its (resource, class) pairs.

    Resource r works on the layer at position k - r in stage k; the stages come in the order they
    first run, each with the resources that have a layer in it.
    """
    n = len(order)
    counts = Counter(
        tuple(order[k - r] if 0 <= k - r < n else -1 for r in range(depth))
        for k in range(n + depth - 1)
    )
    return tuple(
        (times, tuple((r, li) for r, li in enumerate(layers_in_stage) if li >= 0))
        for layers_in_stage, times in counts.items()
    )


def _pipeline(
    disk_in: np.ndarray,
    link_in: np.ndarray,
    comp: np.ndarray,
    link_out: np.ndarray,
    disk_out: np.ndarray,
    order: tuple[int, ...],
    first: bool = False,
) -> np.ndarray:
    """Five stages in flight: disk reads layer i+2, the link loads i+1, i computes, i-1 and i-2 store.

    Each argument is seconds per layer class; stage k ends when its slowest resource does. With no
    disk traffic this is the three-stage pipeline: the first load and the last store are exposed.
    """
    work = (disk_in, link_in, comp, link_out, disk_out)
    # a resource with no work never ends a stage last (times are never negative): left out
    busy = tuple(_any(w) for w in work)
    total = np.zeros(comp.shape[1:] if first else comp.shape[:-1])
    for times, pairs in _stages(order):
        stage = None
        for r, li in pairs:
            if busy[r]:
                x = work[r][li] if first else work[r][..., li]
                stage = x if stage is None else np.maximum(stage, x)
        if stage is not None:
            total = total + times * stage
    return total


def _class_sum(x: np.ndarray, lay: Layers) -> np.ndarray:
    """Return per-class seconds summed over the model's layers (the class axis dropped)."""
    if lay.window.ndim > 1:  # classes first (see _classes_first)
        return np.tensordot(lay.count, x, axes=1)
    return x @ lay.count


def combine(streams: dict[str, np.ndarray], lay: Layers, overlap: str) -> np.ndarray:
    """Return the step time from per-class stream times under one overlap mode."""
    if overlap == "none":
        return _class_sum(sum(streams[k] for k in STREAMS), lay)
    if overlap == "perfect":
        return np.max(np.stack([_class_sum(streams[k], lay) for k in STREAMS]), axis=0)
    # FlexGen's cost model: the host->GPU load, then the longest of the rest
    if overlap == "flexgen":
        per = streams["h2d"] + np.maximum.reduce(
            [
                streams["d2h"],
                streams["disk_read"],
                streams["disk_write"],
                streams["gpu"] + streams["cpu"],
            ]
        )
        return _class_sum(per, lay)
    if overlap == "pipeline":
        comp = streams["gpu"] + streams["cpu"]
        return _pipeline(
            streams["disk_read"],
            streams["h2d"],
            comp,
            streams["d2h"],
            streams["disk_write"],
            lay.order,
            lay.window.ndim > 1,
        )
    raise ValueError(f"unknown overlap mode {overlap!r}")


@dataclass(frozen=True)
class Step:
    """One decode step: its time and each stream's total (seconds), arrays over the sweep."""

    total: np.ndarray
    streams: dict[str, np.ndarray]


def step(
    setup: Setup, context: ArrayLike, batch: ArrayLike = 1, overlap: str | None = None
) -> Step:
    """Return the decode step at ``context`` tokens already cached, for ``batch`` requests."""
    lay = layers(setup.model, setup.weights)
    per = stream_times(setup, context, batch)
    total = combine(per, lay, overlap or setup.placement.overlap)
    return Step(total, {k: v @ lay.count for k, v in per.items()})
