"""Benchmark the decode model: a TPOT sweep over a 1000 x 1000 context x batch grid in one call.

Run with `make bench`. Prints figures; the last line is `points_per_second: N`.
"""

from __future__ import annotations

import time

import numpy as np

from kvoffload.model import decode
from kvoffload.spec.hardware import load_system
from kvoffload.spec.models import load_model


def main() -> None:
    system = load_system("a100-80gb-sxm-pcie4")
    model = load_model("llama-3.1-8b")
    setup = decode.Setup(
        system,
        model,
        placement=decode.Placement(kv=decode.Split(0.25, 0.75, 0.0), overlap="pipeline"),
    )
    contexts = np.linspace(1_000, 1_000_000, 1000)[:, None]
    batches = np.arange(1, 1001)[None, :]
    decode.step(setup, contexts[:10], batches[:, :10])  # warm the layer-class cache
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        grid = decode.step(setup, contexts, batches).total
        best = min(best, time.perf_counter() - t0)
    points = grid.size
    t0 = time.perf_counter()
    decode.tpot(setup, contexts, 32, batches)
    t_tpot = time.perf_counter() - t0
    print(
        f"grid: {contexts.size} contexts x {batches.size} batches, overlap pipeline, {len(decode.layers(model, setup.weights).count)} layer classes"
    )
    print(f"step_sweep_s: {best:.3f}")
    print(
        f"tpot_sweep_32_tokens_s: {t_tpot:.3f} ({points / t_tpot:,.0f} points/s, 16 sampled steps each)"
    )
    print(f"points_per_second: {points / best:.0f}")


if __name__ == "__main__":
    main()
