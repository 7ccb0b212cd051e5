"""FlexGen's policy search: a coarse grid of policies, then a pattern search from the best.

Without a ``percent`` policy, the search picks the policy with the highest throughput that fits
every tier and FlexGen's own memory constraint: its LP's peak GPU memory within ``ALPHA_G`` of the
GPU.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import numpy as np

from kvoffload.engines.each.flexgen.allocation import ALPHA_G, fits, lp_gpu_bytes
from kvoffload.engines.each.flexgen.cost_model import cost
from kvoffload.engines.each.flexgen.policy import SHARE_EPS, Costs, Policies
from kvoffload.model import capacity, decode, kv
from kvoffload.model.prediction import Scenario

# FlexGen's search tries GPU batch sizes 1, 2, 3, 4 then doubling, and every number of GPU batches
# up to the largest that fits (cost_model.py L497-524); the lattice adds the sizes between, and the
# refinement below moves off it by single steps.
GBS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 384, 512)
NB = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
# the coarse shares: (GPU, CPU) for weights and for the cache, in halves
HALVES = ((0.0, 0.0), (0.0, 0.5), (0.0, 1.0), (0.5, 0.0), (0.5, 0.5), (1.0, 0.0))
# activations: FlexGen's runtime keeps them whole on one device (flex_opt.py L608-615) and its LP
# not on disk (cost_model.py L179-180): on the GPU (1) or in host memory (0)
ACT_GPU = (1.0, 0.0)
TOP = 24  # lattice points whose best coarse policy the refinement starts from
FIRST_STEP, LAST_STEP = 0.25, 1 / 1024  # the refinement's share steps, halved on every miss
MAX_ROUNDS = 120


def policies(
    gbs: np.ndarray, nb: np.ndarray, cpu_att: np.ndarray, hg: np.ndarray, x: np.ndarray
) -> Policies:
    """Return policies from their lattice point and shares ``x`` = (wG, wC, cG, cC) per row."""
    f = lambda a: np.asarray(a, dtype=np.float64)  # noqa: E731
    return Policies(
        wg=f(x[:, 0]), wc=f(x[:, 1]), cg=f(x[:, 2]), cc=f(x[:, 3]), hg=f(hg), hc=1 - f(hg),
        gbs=f(gbs), nb=f(nb), cpu_att=f(cpu_att),
    )  # fmt: skip


def _take(pol: Policies, costs: Costs, keep: np.ndarray) -> tuple[Policies, Costs]:
    sub = lambda a: np.asarray(a)[keep]  # noqa: E731
    p = Policies(**{k: sub(getattr(pol, k)) for k in Policies.__dataclass_fields__})
    c = Costs(
        sub(costs.prefill), sub(costs.step), {k: sub(v) for k, v in costs.streams.items()},
        sub(costs.gpu_bytes), sub(costs.cpu_bytes), sub(costs.disk_bytes),
        sub(costs.throughput), sub(costs.lp_gpu_bytes),
    )  # fmt: skip
    return p, c


def _join(a: tuple[Policies, Costs], b: tuple[Policies, Costs]) -> tuple[Policies, Costs]:
    cat = lambda x, y: np.concatenate([np.asarray(x), np.asarray(y)])  # noqa: E731
    (pa, ca), (pb, cb) = a, b
    p = Policies(**{k: cat(getattr(pa, k), getattr(pb, k)) for k in Policies.__dataclass_fields__})
    c = Costs(
        cat(ca.prefill, cb.prefill), cat(ca.step, cb.step),
        {k: cat(v, cb.streams[k]) for k, v in ca.streams.items()},
        cat(ca.gpu_bytes, cb.gpu_bytes), cat(ca.cpu_bytes, cb.cpu_bytes),
        cat(ca.disk_bytes, cb.disk_bytes), cat(ca.throughput, cb.throughput),
        cat(ca.lp_gpu_bytes, cb.lp_gpu_bytes),
    )  # fmt: skip
    return p, c


def _valid(x: np.ndarray) -> np.ndarray:
    """Return whether shares (..., 4) are shares: each in [0, 1], GPU + CPU at most 1."""
    return (
        np.all((x >= -SHARE_EPS) & (x <= 1 + SHARE_EPS), axis=-1)
        & (x[..., 0] + x[..., 1] <= 1 + SHARE_EPS)
        & (x[..., 2] + x[..., 3] <= 1 + SHARE_EPS)
    )


def _score(sc: Scenario, lat: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Return the throughput of each (lattice point, shares) row, -inf where it may not run."""
    ok = _valid(x) & (lat[:, 0] >= 1) & (lat[:, 1] >= 1)
    out = np.full(len(x), -np.inf)
    if ok.any():
        xs = np.clip(x[ok], 0.0, 1.0)
        la = lat[ok]
        c = cost(sc, policies(la[:, 0], la[:, 1], la[:, 2], la[:, 3], xs), sc.options)
        out[ok] = np.where(fits(sc, c), c.throughput, -np.inf)
    return out


_UNIT = np.eye(4)
_W_MOVES = (_UNIT[0], -_UNIT[0], _UNIT[1], -_UNIT[1], _UNIT[0] - _UNIT[1], _UNIT[1] - _UNIT[0])
_C_MOVES = (_UNIT[2], -_UNIT[2], _UNIT[3], -_UNIT[3], _UNIT[2] - _UNIT[3], _UNIT[3] - _UNIT[2])


def _directions(sc: Scenario, lat: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Return the poll directions at each point, (points, directions, 4), longest entry 1.

    Each share alone, GPU against CPU within weights or cache, and every pairing of a weight move
    with a cache move, the cache's at three scales: equal, the one that keeps the LP's GPU peak
    (weights against cache on the GPU) and the one that keeps host memory (weights against cache
    in host memory) where they were. Along a full tier only such pairs can still gain.
    """
    k = len(x)
    pol = policies(lat[:, 0], lat[:, 1], lat[:, 2], lat[:, 3], x)
    eps = 1e-3
    up = lambda i: replace(pol, **{i: getattr(pol, i) + eps})  # noqa: E731
    base = lp_gpu_bytes(sc, pol, sc.options)
    d_wg = (lp_gpu_bytes(sc, up("wg"), sc.options) - base) / eps
    d_cg = (lp_gpu_bytes(sc, up("cg"), sc.options) - base) / eps
    weights = decode.step_weight_bytes(sc.model, sc.setup.weights)
    cache = pol.batch * (sc.prompt + sc.generate) * float(kv.bytes_per_token(sc.model, sc.setup.kv))
    ratios = np.stack(
        [
            np.ones(k),
            np.abs(d_wg) / np.maximum(np.abs(d_cg), 1.0),
            weights / np.maximum(cache, 1.0),
        ],
        axis=1,
    )  # (k, 3)
    singles = np.array(_W_MOVES + _C_MOVES)  # (12, 4)
    w = np.array(_W_MOVES)[:, None, None, :]  # (6, 1, 1, 4)
    c = np.array(_C_MOVES)[None, :, None, :]  # (1, 6, 1, 4)
    pairs = w[None] + ratios[:, None, None, :, None] * c[None]  # (k, 6, 6, 3, 4)
    d = np.concatenate([np.broadcast_to(singles, (k, 12, 4)), pairs.reshape(k, -1, 4)], axis=1)
    return d / np.max(np.abs(d), axis=-1, keepdims=True)


def _lattice_moves(lat: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return each point's lattice neighbours, (points, 10, 4) each with its shares.

    One step in the GPU batch size (an eighth of it, at least 1) or in the number of GPU batches,
    each with the shares kept and with the cache shares scaled so the cache keeps its bytes on
    the GPU and in host memory (the rest to or from disk): a larger batch along a full tier.
    And the other side for attention, and for the activations.
    """
    g, b = lat[:, 0], lat[:, 1]
    dg = np.maximum(1.0, np.floor(g / 8))
    moved = np.repeat(lat[:, None, :], 4, axis=1).copy()
    moved[:, 0, 0], moved[:, 1, 0] = g + dg, g - dg
    moved[:, 2, 1], moved[:, 3, 1] = b + 1, b - 1
    kept = np.repeat(x[:, None, :], 4, axis=1)
    scale = (g * b)[:, None] / np.maximum(moved[..., 0] * moved[..., 1], 1.0)
    cg = np.minimum(kept[..., 2] * scale, 1.0)
    cc = np.minimum(kept[..., 3] * scale, 1.0 - cg)
    scaled = np.stack([kept[..., 0], kept[..., 1], cg, cc], axis=-1)
    flipped = np.repeat(lat[:, None, :], 2, axis=1).copy()  # attention's side, activations' side
    flipped[:, 0, 2], flipped[:, 1, 3] = 1 - lat[:, 2], 1 - lat[:, 3]
    return (
        np.concatenate([moved, moved, flipped], axis=1),
        np.concatenate([kept, scaled, kept[:, :2]], axis=1),
    )


def refine(
    sc: Scenario, lat: np.ndarray, x: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return better policies near each start: a pattern search over the shares and the lattice.

    Every round polls each point's directions at its step and its lattice neighbours, moves to
    the best poll that raises the throughput (doubling the step, up to FIRST_STEP) or else halves
    the step; it ends when every step is below LAST_STEP. All points move at once.
    """
    lat, x = lat.astype(np.float64), x.astype(np.float64)
    f = _score(sc, lat, x)
    step = np.full(len(x), FIRST_STEP)
    for _ in range(MAX_ROUNDS):
        live = np.flatnonzero((step >= LAST_STEP) & np.isfinite(f))
        if len(live) == 0:
            break
        dirs = _directions(sc, lat[live], x[live])
        moves, moved_x = _lattice_moves(lat[live], x[live])
        k, m = len(live), dirs.shape[1]
        tx = np.concatenate([x[live, None, :] + step[live, None, None] * dirs, moved_x], axis=1)
        tl = np.concatenate([np.repeat(lat[live, None, :], m, 1), moves], axis=1)
        tf = _score(sc, tl.reshape(-1, 4), tx.reshape(-1, 4)).reshape(k, -1)
        j = np.argmax(tf, axis=1)
        best = tf[np.arange(k), j]
        gain = best > f[live] * (1 + 1e-12)
        won = live[gain]
        x[won], lat[won], f[won] = tx[gain, j[gain]], tl[gain, j[gain]], best[gain]
        step[won] = np.minimum(step[won] * 2, FIRST_STEP)
        step[live[~gain]] /= 2
    return lat, np.clip(x, 0.0, 1.0), f


def _product(*axes: np.ndarray) -> np.ndarray:
    """Return every combination of the rows of ``axes``, in itertools.product's order."""
    index = np.indices([len(a) for a in axes]).reshape(len(axes), -1)
    return np.concatenate([np.asarray(a)[i] for a, i in zip(axes, index, strict=True)], axis=1)


@cache
def _coarse_grid() -> tuple[np.ndarray, np.ndarray]:
    """Return the coarse lattice (GPU batch size, GPU batches, attention side, activations
    side) and the coarse shares (wG, wC, cG, cC), one row each, read-only."""
    column = lambda v: np.asarray(v, dtype=np.float64)[:, None]  # noqa: E731
    lattice = _product(column(GBS), column(NB), column((0.0, 1.0)), column(ACT_GPU))
    halves = np.asarray(HALVES, dtype=np.float64)
    shares = _product(halves, halves)
    lattice.flags.writeable = shares.flags.writeable = False
    return lattice, shares


def search(sc: Scenario) -> tuple[Policies, Costs, int]:
    """Return the policies tried that FlexGen's LP admits, their costs, and the best one's index.

    A coarse grid (GPU batch size × number of GPU batches × attention side × activation side ×
    weight and cache shares in halves) ranks the lattice; from the TOP lattice points' best
    policies a pattern search moves the shares continuously and the lattice point by steps.
    The best is the highest throughput that fits every tier (-1: none does).
    """
    lattice, shares = _coarse_grid()
    lat = np.repeat(lattice, len(shares), axis=0)
    x = np.tile(shares, (len(lattice), 1))
    pol = policies(lat[:, 0], lat[:, 1], lat[:, 2], lat[:, 3], x)
    costs = cost(sc, pol, sc.options)
    ok = fits(sc, costs)
    found = _take(pol, costs, costs.lp_gpu_bytes <= ALPHA_G * sc.system.gpu_memory)
    score = np.where(ok, costs.throughput, -np.inf).reshape(len(lattice), len(shares))
    per_point = score.max(axis=1)
    starts = np.argsort(-per_point)[:TOP]
    starts = starts[np.isfinite(per_point[starts])]
    if len(starts):
        at = starts * len(shares) + np.argmax(score[starts], axis=1)
        r_lat, r_x, _ = refine(sc, lat[at], x[at])
        r_pol = policies(r_lat[:, 0], r_lat[:, 1], r_lat[:, 2], r_lat[:, 3], r_x)
        r_costs = cost(sc, r_pol, sc.options)
        found = _join(found, _take(r_pol, r_costs, fits(sc, r_costs)))
    pol, costs = found
    ok = capacity.fits(sc.system, costs.gpu_bytes, costs.cpu_bytes, costs.disk_bytes)
    if not ok.any():
        return pol, costs, -1
    return pol, costs, int(np.argmax(np.where(ok, costs.throughput, -np.inf)))
