"""The mean decode step over the generated tokens, per overlap mode and per stream, and TPOT."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike

from kvoffload.model.decode import exact_mean
from kvoffload.model.decode.layer_classes import Layers, _classes_first, layers
from kvoffload.model.decode.overlap import _class_sum, combine
from kvoffload.model.decode.placement import OVERLAP_MODES, Setup, Split
from kvoffload.model.decode.streams import STREAMS, _stream_times


@dataclass(frozen=True)
class MeanStep:
    """The mean decode step over the generated tokens: each overlap mode's and each stream's (s)."""

    by_overlap: dict[str, np.ndarray]
    streams: dict[str, np.ndarray]


def mean_step(
    setup: Setup,
    prompt: ArrayLike,
    generate: int = 1,
    batch: ArrayLike = 1,
    overlaps: tuple[str, ...] = OVERLAP_MODES,
    *,
    streams: bool = True,
) -> MeanStep:
    """Return the exact mean step over ``generate`` tokens after ``prompt``, per overlap mode.

    Every step from context ``prompt`` to ``prompt + generate - 1`` counts; arrays broadcast over
    prompt, batch and the KV shares (see spill). ``streams``: each stream's mean total too.
    """
    lay = layers(setup.model, setup.weights)
    p = setup.placement
    shares = (p.kv.gpu, p.kv.cpu, p.kv.disk)
    inputs = (prompt, batch, *shares)
    g = int(generate)
    if 1 <= g <= exact_mean.BRUTE_STEPS and all(isinstance(x, (int, float)) for x in inputs):
        # one point, token by token: the general path's arrays and calls, without its sweep
        context = (float(prompt) + np.arange(g, dtype=np.float64))[None]
        summed = not streams and set(overlaps) == {"none"}  # the streams' sum is all it reads
        per = _stream_times(setup, context, batch, dense=None if summed else True, lay=lay)
        mean = np.stack(_quantities(per, lay, overlaps, streams)).mean(axis=-1)[:, 0]
        return _mean_step(mean, overlaps, streams)
    shape = np.broadcast_shapes(*(np.shape(x) for x in inputs))
    swept = [np.ndim(x) > 0 for x in inputs[1:]]
    # the prompt over the whole sweep, the rest only where they vary over it
    flat = [
        np.broadcast_to(np.asarray(x, dtype=np.float64), shape).ravel() if on else None
        for x, on in zip(inputs, (True, *swept), strict=True)
    ]
    # token by token (a small sweep): the step's own layouts, so the means are the steps' means
    # bit for bit; else the classes on a leading axis and each call's tokens before its points
    dense = flat[0].size * int(generate) <= exact_mean.BRUTE_STEPS
    lay_fn = lay if dense else _classes_first(setup.model, setup.weights, 3)

    def fn(point: np.ndarray, context: np.ndarray) -> np.ndarray:
        # per point: (m, 1) beside an (m, j) context, else (1, 1, m) beside a (1, j, m) one
        at_point = (lambda f: f[point, None]) if dense else (lambda f: f[point][None, None])
        b, *kv_split = (
            at_point(f) if on else x
            for f, on, x in zip(flat[1:], swept, (batch, *shares), strict=True)
        )
        at = (
            setup
            if not any(swept[1:])
            else replace(setup, placement=replace(p, kv=Split(*kv_split)))
        )
        ctx = context if dense else context.T[None]
        per = _stream_times(at, ctx, b, dense=dense, lay=lay_fn)
        out = _quantities(per, lay_fn, overlaps, streams)
        if dense:
            return np.stack(out)
        return np.stack(out)[..., 0].transpose(0, 2, 1)

    mean = exact_mean.token_mean(fn, flat[0].reshape(shape), generate, lay.window)
    return _mean_step(mean, overlaps, streams)


def _quantities(
    per: dict[str, np.ndarray], lay: Layers, overlaps: tuple[str, ...], streams: bool
) -> list[np.ndarray]:
    """Return each overlap mode's step, then (with ``streams``) each stream's sum over layers."""
    out = [combine(per, lay, m) for m in overlaps]
    if streams:
        out += [_class_sum(per[k], lay) for k in STREAMS]
    return out


def _mean_step(mean: np.ndarray, overlaps: tuple[str, ...], streams: bool) -> MeanStep:
    """Return the means (the overlap modes', then the streams') as a MeanStep."""
    return MeanStep(
        by_overlap=dict(zip(overlaps, mean, strict=False)),
        streams=dict(zip(STREAMS, mean[len(overlaps) :], strict=True)) if streams else {},
    )


def tpot(
    setup: Setup,
    prompt: ArrayLike,
    generate: int = 1,
    batch: ArrayLike = 1,
    overlap: str | None = None,
) -> np.ndarray:
    """Return the mean decode step (s) over ``generate`` tokens after ``prompt`` (context grows).

    Exact: the mean over every step, from context ``prompt`` to ``prompt + generate - 1``.
    """
    mode = overlap or setup.placement.overlap
    return mean_step(setup, prompt, generate, batch, (mode,), streams=False).by_overlap[mode]
