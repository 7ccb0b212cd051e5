"""Benchmark the decode model over a 1000 x 1000 context x batch grid, each sweep in one call.

Run with `make bench`. Prints `name: value` figures; asserts nothing. `step_sweep_points_per_second`
is one decode step per point; `tpot_sweep_points_per_second` the exact mean over all 32 generated
tokens of every point (issue 16's target: at least 1,000,000); `reuse_ttft_sweep_points_per_second`
chapter 11's TTFT with a host hit over 1000 prompt lengths x 1000 cached shares (issue 24's target:
at least 1,000,000); `points_per_second` (the last line) is the step sweep's, as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model
from kvoffload.model import decode
from kvoffload.studies import reuse

GENERATE = 32


def _best(run: Callable[[], object], repeat: int = 3) -> float:
    """Return the fastest of ``repeat`` runs, in seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return min(times)


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
    decode.tpot(setup, contexts[:10], GENERATE, batches[:, :10])  # warm the layer-class caches
    points = contexts.size * batches.size
    step_s = _best(lambda: decode.step(setup, contexts, batches))
    tpot_s = _best(lambda: decode.tpot(setup, contexts, GENERATE, batches))
    classes = len(decode.layers(model, setup.weights).count)
    print(f"grid: {contexts.size} contexts x {batches.size} batches, overlap pipeline")
    print(f"layer_classes: {classes}")
    print(f"step_sweep_s: {step_s:.3f}")
    print(f"step_sweep_points_per_second: {points / step_s:.0f}")
    print(f"tpot_sweep_tokens: {GENERATE}")
    print(f"tpot_sweep_s: {tpot_s:.3f}")
    print(f"tpot_sweep_points_per_second: {points / tpot_s:.0f}")
    prompts = np.unique(np.geomspace(1_024, 131_072, 1000).astype(np.int64))
    shares = np.linspace(0.0, 1.0, 1000)
    host_hit = reuse.cache(system, model)
    reuse_s = _best(lambda: reuse.ttft_sweep(host_hit, prompts, shares))
    print(f"reuse_ttft_sweep_points: {prompts.size * shares.size}")
    print(f"reuse_ttft_sweep_s: {reuse_s:.3f}")
    print(f"reuse_ttft_sweep_points_per_second: {prompts.size * shares.size / reuse_s:.0f}")
    print(f"points_per_second: {points / step_s:.0f}")


if __name__ == "__main__":
    main()
