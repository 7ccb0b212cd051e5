"""Benchmark FlexGen's policy search: its time and its throughput against a grid 121 times finer.

Run with `.venv/bin/python tests/benchmarks/bench_flexgen.py`. Prints figures; the last line is
`search_s_max: N`. Set FLEXLLMGEN to a FlexLLMGen checkout to time FlexGen's own search
(experimental/cost_model.py, an LP per GPU batch size and count) here too: `pulp` must import, and
so must the checkout's flexllmgen package (torch, transformers). Otherwise the figures measured
on the development machine are printed beside ours.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time

from kvoffload.engines.each import flexgen
from kvoffload.engines.scenario import parse_scenario

# FlexLLMGen @ 004ffef8, experimental/cost_model.py's solve() for the T4 (--gpu-mem 16 --cpu-mem
# 200 --nvme-mem 1500, prompt 512, generate 32), pulp 3.3.2 with its bundled CBC, on the machine
# this project develops on: (LPs solved, seconds)
FLEXGEN_MEASURED = {"opt-30b": (543, 4.26), "opt-175b": (1071, 8.61)}
CASES = (("opt-30b", 512, {}), ("opt-175b", 512, {}), ("opt-30b", 256, {"compress_cache": True}))


def scenario(model: str, prompt: int, options: dict) -> flexgen.Scenario:
    raw = {
        "hardware": "t4-pcie3",
        "model": model,
        "engine": "flexgen",
        "precision": {"weights": "fp16", "kv": "fp16"},
        "workload": {"batch": 1, "prompt": prompt, "generate": 32},
        "options": options,
    }
    return parse_scenario(raw, name=model)


def flexgens_own(model: str) -> tuple[int, float] | None:
    """Time FlexGen's own search where FLEXLLMGEN points at a checkout (None: not available)."""
    root = os.environ.get("FLEXLLMGEN")
    if not root:
        return None
    sys.path[:0] = [root, os.path.join(root, "experimental")]
    import cost_model as cm
    from flexllmgen.opt_config import get_opt_config

    cfg, oc = cm.CostModelConfig(), get_opt_config(f"facebook/{model}")
    cfg.l, cfg.h1, cfg.h2, cfg.nh = (
        oc.num_hidden_layers,
        oc.hidden_size,
        oc.ffn_embed_dim,
        oc.n_head,
    )
    cfg.s, cfg.n = 512, 32
    cfg.gmem, cfg.cmem, cfg.nmem = 16 * cm.GB, 200 * cm.GB, 1500 * cm.GB
    count = [0]

    def counted(*a, **k):
        count[0] += 1
        return cm.solve_lp(*a, **k)

    keys = ("wg", "wc", "cg", "cc", "hg", "hc", "percent", "gbs", "num_gb")
    args = {k: None for k in keys} | {"compress_w": False}
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        cm.solve(cfg, counted, args)
    return count[0], time.perf_counter() - t0


def main() -> None:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "engines"))
    from test_flexgen_search import coarse_size, fine_grid_best

    print(
        f"coarse grid: {coarse_size()} policies, then a pattern search from the best {flexgen.TOP}"
    )
    worst = 0.0
    for model, prompt, options in CASES:
        sc = scenario(model, prompt, options)
        flexgen.search(sc)  # warm the caches
        best_s = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            pol, costs, i = flexgen.search(sc)
            best_s = min(best_s, time.perf_counter() - t0)
        worst = max(worst, best_s)
        t0 = time.perf_counter()
        ref, _ = fine_grid_best(sc)
        ref_s = time.perf_counter() - t0
        name = f"{model}, {prompt} + 32" + (", compressed cache" if options else "")
        print(
            f"{name}: search {best_s:.3f} s, {costs.throughput[i]:.4g} tokens/s "
            f"(GPU batch {pol.gbs[i]:.0f} x {pol.nb[i]:.0f}); "
            f"fine grid {ref_s:.1f} s, {ref:.4g} tokens/s: ratio {costs.throughput[i] / ref:.4f}"
        )
        if options:
            continue
        own = flexgens_own(model)
        lps, secs = own if own else FLEXGEN_MEASURED[model]
        where = "here" if own else "measured on the development machine"
        print(
            f"  FlexGen's own search ({where}): {lps} LPs, {secs:.2f} s: {secs / best_s:.0f}x ours"
        )
    print(f"search_s_max: {worst:.3f}")


if __name__ == "__main__":
    main()
