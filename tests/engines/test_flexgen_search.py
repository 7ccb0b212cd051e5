"""FlexGen's policy search: as good as a grid a hundred times finer, within FlexGen's own memory limit
(its LP's GPU peak, prefill working set included, within ALPHA_G of the GPU), and the memory of
FlexGen's runtime, which accepts every published T4 policy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kvoffload.engines.each import flexgen
from kvoffload.engines.scenario import parse_scenario
from kvoffload.model import capacity, working_memory
from kvoffload.studies import validation

GiB = 2**30


def scenario(model: str, prompt: int = 512, generate: int = 32, **options) -> flexgen.Scenario:
    raw = {
        "hardware": "t4-pcie3",
        "model": model,
        "engine": "flexgen",
        "precision": {"weights": "fp16", "kv": "fp16"},
        "workload": {"batch": 1, "prompt": prompt, "generate": generate},
        "options": options,
    }
    return parse_scenario(raw, name="test")


# three searches on FlexGen's T4; the uncompressed ones are best with attention on the CPU
SCENARIOS = {
    "opt-30b, 512 + 32": scenario("opt-30b"),
    "opt-175b, 512 + 32": scenario("opt-175b"),
    "opt-30b, 256 + 32, compressed cache": scenario("opt-30b", 256, compress_cache=True),
}
FINE = 0.1  # the reference grid's share step, against the search's halves


def fine_grid_best(sc, step: float = FINE, chunk: int = 500_000) -> tuple[float, np.ndarray]:
    """Return the best throughput of a grid of every lattice point by shares in ``step``s.

    Lattice points whose LP peak overflows with nothing on the GPU are left out: the LP peak
    grows with every GPU share, so none of their policies can fit.
    """
    lattice = np.array(
        list(itertools.product(flexgen.GBS, flexgen.NB, (0.0, 1.0), flexgen.ACT_GPU)), dtype=float
    )
    nothing = flexgen.policies(*lattice.T, np.zeros((len(lattice), 4)))
    lp = flexgen.lp_gpu_bytes(sc, nothing, sc.options)
    lattice = lattice[lp <= flexgen.ALPHA_G * sc.system.gpu_memory]
    g = np.round(np.arange(0.0, 1.0 + 1e-9, step), 9)
    pairs = [(a, b) for a in g for b in g if a + b <= 1 + 1e-9]
    shares = np.array([(*w, *c) for w in pairs for c in pairs])
    best, where = -np.inf, None
    per = max(1, chunk // len(shares))
    for i in range(0, len(lattice), per):
        part = lattice[i : i + per]
        lat, x = np.repeat(part, len(shares), axis=0), np.tile(shares, (len(part), 1))
        f = flexgen._score(sc, lat, x)
        j = int(np.argmax(f))
        if f[j] > best:
            best, where = float(f[j]), lat[j]
    return best, where


def coarse_size() -> int:
    lattice = len(flexgen.GBS) * len(flexgen.NB) * 2 * len(flexgen.ACT_GPU)
    return lattice * len(flexgen.HALVES) ** 2


def test_the_reference_grid_is_a_hundred_times_finer():
    per_tier = round(1 / FINE) + 1
    pairs = per_tier * (per_tier + 1) // 2
    fine = len(flexgen.GBS) * len(flexgen.NB) * 2 * len(flexgen.ACT_GPU) * pairs**2
    assert fine >= 100 * coarse_size()


@pytest.fixture(scope="module")
def searched():
    return {name: (sc, flexgen.search(sc)) for name, sc in SCENARIOS.items()}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_search_is_within_a_percent_of_a_hundred_times_finer_grid(searched, name):
    sc, (_, costs, best) = searched[name]
    assert best >= 0
    reference, _ = fine_grid_best(sc)
    assert np.isfinite(reference)
    assert costs.throughput[best] >= 0.99 * reference, (costs.throughput[best], reference)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_policy_returned_keeps_flexgens_memory_limit(searched, name):
    sc, (pol, costs, best) = searched[name]
    budget = flexgen.ALPHA_G * sc.system.gpu_memory
    assert np.all(costs.lp_gpu_bytes <= budget)  # FlexGen's LP, every policy the search reports
    assert flexgen.fits(sc, costs)[best]
    assert capacity.fits(sc.system, costs.gpu_bytes[best], costs.cpu_bytes[best])
    # the LP's peak holds the prompt's score matrix of a GPU batch; the runtime's its working set
    gbs, s = pol.gbs[best], sc.prompt
    assert costs.lp_gpu_bytes[best] > 2 * gbs * sc.model.n_heads * s * s
    assert costs.gpu_bytes[best] > working_memory.prefill_working_bytes(sc.model, s, gbs)
    assert np.all(
        (pol.hg + pol.hc) == 1
    )  # activations whole on one side, as the runtime keeps them


@pytest.mark.parametrize("name", ["opt-30b, 512 + 32", "opt-175b, 512 + 32"])
def test_cpu_attention_is_worth_it_with_an_uncompressed_cache(searched, name):
    # the best policy found that attends on the GPU is slower: CPU attention is in the answer
    sc, (pol, costs, best) = searched[name]
    assert pol.cpu_att[best] == 1
    on_gpu = np.where((pol.cpu_att == 0) & flexgen.fits(sc, costs), costs.throughput, 0)
    assert 0 < on_gpu.max() < costs.throughput[best]


def test_the_old_searchs_picks_break_flexgens_limit_now_that_the_prefill_counts():
    # what the grid search chose before it counted the prompt's working set (GPU batch 96 x 2
    # of OPT-30B, activations on the GPU): 25 GiB of LP peak against 12.8 GiB
    sc = scenario("opt-30b")
    old = flexgen.Policies(*(np.array([v]) for v in (0.2, 0.8, 0.0, 1.0, 1.0, 0.0, 96, 2, 1)))
    c = flexgen.cost(sc, old, sc.options)
    assert c.lp_gpu_bytes[0] > 1.9 * flexgen.ALPHA_G * sc.system.gpu_memory
    assert not flexgen.fits(sc, c)[0]


def test_the_lp_peak_is_flexgens_formula_for_opt_175b():
    # cost_model.py L284-323, OPT-175B, prompt 512 + 32: GPU batch 32 x 8, weights and cache off
    # the GPU, activations in host memory (wg = cg = hg = 0)
    sc = scenario("opt-175b")
    s, gbs, h1, h2, nh, layers = 512, 32, 12288, 4 * 12288, 96, 96
    wi = 8 * h1**2 + 4 * h1 * h2
    inter_p = (
        8 * gbs * s * h1 + gbs * (2 * s * h1 + 2 * nh * s**2) + gbs * 2 * s * h1
        + 4 * gbs * s * h1 + 2 * gbs * s * h2 + 2 * gbs * s * h1
    )  # fmt: skip
    prefill = 2 * wi + 2 * s * h1 * gbs + inter_p
    decode_peak = 2 * wi + 2 * h1 * gbs + 8 * gbs * h1 + 4 * gbs * h1 + 2 * gbs * h2 + 2 * gbs * h1
    pol = flexgen.Policies(*(np.array([v]) for v in (0, 0.5, 0, 0, 0, 1, gbs, 8, 1)))
    lp = float(flexgen.lp_gpu_bytes(sc, pol, sc.options)[0])
    assert lp == pytest.approx(max(prefill, decode_peak), rel=2e-4)  # biases: the LP omits them
    assert layers == sc.model.n_layers


def test_flexgen_places_each_weight_tensor_whole():
    # --percent 20 80 on OPT-30B: of a layer's q, k, v, out (h x h each) and fc1, fc2 (4h x h),
    # only out's midpoint (7/8 of the attention's bytes) lies past 80 %: a twelfth on the GPU
    sc = scenario("opt-30b", 512, 32, percent=[20, 80, 0, 100, 0, 100])
    layers, inp, out = flexgen._modules(sc.model, sc.setup.weights)
    ((att, mlp, count),) = layers
    wg, wd = np.array([0.2]), np.array([0.0])
    on_gpu = count * (att.placed(wg, wd)[0] + mlp.placed(wg, wd)[0])
    h = sc.model.hidden
    assert float(on_gpu[0]) == pytest.approx(count * 2 * h * h, rel=1e-3)
    # the token table's midpoint is below 80 %, the position table's (at the end) above
    positions = 2 * sc.model.learned_positions * h
    assert float(inp.placed(wg, wd)[0][0]) == pytest.approx(positions, rel=1e-9)
    assert float(out.placed(wg, wd)[0][0]) == 0.0


def test_every_published_t4_policy_fits_the_gpu_as_flexgen_allocates():
    for row in validation.rows():
        if row["engine"] != "flexgen":
            continue
        sc = parse_scenario(validation.scenario_of(row), name=row["id"])
        c = flexgen.cost(sc, flexgen.given_policy(sc), sc.options)
        assert c.gpu_bytes[0] <= sc.system.gpu_memory, row["id"]
        # its prompt's working set is in: one GPU batch's layer, scores and all
        working = working_memory.prefill_working_bytes(
            sc.model, sc.prompt, sc.options.gpu_batch_size
        )
        assert c.gpu_bytes[0] > working, row["id"]
