"""The offline calculator page in a real browser, held to the Python package at random points.

The page is generated into a temporary directory by the function the book build uses, served
from 127.0.0.1 with every other host blocked, and driven through its form: for each point the
test sets the inputs as a reader would and reads every figure the page shows (TPOT, TTFT, rates,
TPOT per overlap mode, each stream, memory per tier and its capacity, the fit, the bottleneck,
a refusal), then predicts the same scenario with ``kvoffload.engines.scenario``. Chapter 03's
try-it widget, which runs the same model.js, is driven through its sliders the same way and held
to ``decode.tpot``. The reuse question (cached tokens, their tier, vLLM's native connector) is held
to the vLLM scenario the page prints: its TTFT with the hit and recomputed, as ``kvoffload
predict`` gives them, the break-even prompt and the sessions the host tier holds.
"""

from __future__ import annotations

import dataclasses
import math
import random

import msgspec
import pytest
import yaml

from kvoffload.engines.registry import ENGINES
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.hardware import load_system, system_ids
from kvoffload.inputs.models import load_model, model_ids
from kvoffload.inputs.precision import KvFormat
from kvoffload.model import decode, kv, reuse
from kvoffload.model.prediction import shortfalls
from kvoffload.report import calculator_page, tpot_widget
from kvoffload.studies import calculator_llamacpp, decode_step
from kvoffload.studies.advise import fastest, row
from kvoffload.studies.advise_search import LLAMACPP_KV, NO_OFFLOAD, Workload
from kvoffload.studies.calculator_data import (
    FIGURES,
    WEIGHT_FORMATS,
    machine_figures,
    reuse_scenario_for,
    scenario_for,
)
from kvoffload.studies.calculator_llamacpp import gpu_entry, host_entry
from tests.support.browser import ARGS, block_offhost, require_chromium, serve

pytestmark = pytest.mark.slow

POINTS = 1000
REUSE_POINTS = 400
TOLERANCE = 1e-3  # the 0.1%


@pytest.fixture(scope="module")
def page(tmp_path_factory, calculator_data):
    """The calculator page open in Chromium, with off-host requests aborted and recorded."""
    chromium = require_chromium()
    from playwright.sync_api import sync_playwright

    root = tmp_path_factory.mktemp("calculator")
    calculator_page.write_files(root, calculator_page.site_files(calculator_data))
    errors: list[str] = []
    with serve(root) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS)
        pg = browser.new_page(viewport={"width": 1440, "height": 900})
        pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        pg.on("pageerror", lambda e: errors.append(str(e)))
        offhost = block_offhost(pg)
        pg.goto(f"{base}/{calculator_page.PAGE}")
        pg.wait_for_function("window.kvoCalc !== undefined")
        yield pg, errors, offhost
        browser.close()


# ------------------------------------------------------------------------ random points ------


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _figures(rng: random.Random, machine: str) -> dict:
    """Return some of a machine's figures changed (base units), within the loader's ranges."""
    base = machine_figures(load_system(machine))
    specs = {f.key: f for f in FIGURES}
    out: dict = {}
    for key in rng.sample(sorted(specs), rng.randint(1, 6)):
        f = specs[key]
        if f.optional and rng.random() < 0.3:
            out[key] = None
            continue
        start = base[key] if base[key] else (f.lo * f.hi) ** 0.5
        if f.zero and rng.random() < 0.15:
            out[key] = 0.0
            continue
        value = start * _log_uniform(rng, 0.2, 5.0)
        out[key] = min(max(value, f.lo * 1.01), f.hi * 0.99)
    merged = {**base, **out}
    # inputs/hardware.py: attention at most the GPU memory's rate, pageable at most host->GPU
    if merged["attention_bandwidth"] > merged["gpu_bandwidth"]:
        out["attention_bandwidth"] = merged["gpu_bandwidth"] * rng.uniform(0.3, 0.99)
    if merged["pageable"] is not None and merged["pageable"] > merged["h2d"]:
        out["pageable"] = merged["h2d"] * rng.uniform(0.3, 0.99)
    return out


def _share(rng: random.Random, offload: float) -> dict:
    if rng.random() > offload:
        return {"gpu": 1.0, "cpu": 0.0, "disk": 0.0}
    cpu = rng.choice([100, rng.randint(0, 100), round(rng.uniform(0, 100), 1)])
    disk = rng.choice([0, 0, rng.randint(0, 100 - math.ceil(cpu))])
    c, d = cpu / 100, disk / 100
    return {"gpu": max(0.0, 1 - c - d), "cpu": c, "disk": d}


def _point(rng: random.Random, models: dict) -> dict:
    machine = rng.choice(system_ids())
    model = rng.choice(sorted(models))
    limit = models[model].max_positions or 2_000_000
    generate = rng.choice([1, rng.randint(1, 16), rng.randint(17, 2000)])
    prompt = int(_log_uniform(rng, 1, max(2, limit - generate)))
    point = {
        "machine": machine,
        "figures": _figures(rng, machine) if rng.random() < 0.35 else {},
        "model": model,
        "weights_format": rng.choice(WEIGHT_FORMATS).value,
        "kv_format": rng.choice(list(KvFormat)).value,
        "prompt": prompt,
        "generate": generate,
        "batch": int(_log_uniform(rng, 1, 300)),
        "weights": _share(rng, 0.4),
        "kv": _share(rng, 0.7),
        "attention": rng.choice(["gpu", "gpu", "cpu"]),
        "overlap": rng.choice(list(decode.OVERLAP_MODES)),
        "pinned": rng.random() < 0.8,
    }
    # a few the package refuses: beyond the model's context, pageable copies with no pageable
    # rate, a figure out of its plausible range
    bad = rng.random()
    if bad < 0.03 and models[model].max_positions:
        point["prompt"] = models[model].max_positions - generate + rng.randint(1, 1000)
    elif bad < 0.05:
        point["figures"] = {**point["figures"], "pageable": None}
        point["pinned"] = False
    elif bad < 0.06:
        point["figures"] = {**point["figures"], "h2d": 1e14}
    return point


def _expected(point: dict) -> dict | None:
    """Return the package's figures for a point (None: the package refuses it)."""
    try:
        sc = parse_scenario(scenario_for(point))
    except InputError:
        return None
    p = predict(sc, check=False)
    setup, system = sc.setup, sc.system
    tpot = p.tpot_s
    total = p.ttft_s + sc.generate * tpot
    kv_total = float(kv.batch_bytes(sc.model, sc.prompt + sc.generate, sc.batch, setup.kv))
    out = {
        "tpot_ms": tpot * 1e3,
        "ttft_ms": p.ttft_s * 1e3,
        "decode_tokens_per_s": sc.batch / tpot,
        "throughput_tokens_per_s": sc.batch * sc.generate / total,
        "memory_gpu_bytes": float(p.memory.gpu),
        "memory_cpu_bytes": float(p.memory.cpu),
        "memory_disk_bytes": float(p.memory.disk),
        "memory_staging_bytes": float(p.memory.staging),
        "memory_weights_gpu_bytes": decode.resident_weight_bytes(sc.model, setup.weights)
        * setup.placement.weights.gpu,
        "memory_kv_gpu_bytes": kv_total * setup.placement.kv.gpu,
        "gpu_capacity_bytes": system.gpu_memory,
        "cpu_capacity_bytes": system.host_memory,
    }
    out.update({f"tpot_{m}_ms": v * 1e3 for m, v in p.by_overlap_s.items()})
    out.update({f"stream_{k}_ms": v * 1e3 for k, v in p.streams_s.items()})
    ranked = sorted(p.streams_s.values(), reverse=True)
    return {
        "numbers": out,
        "disk_capacity": system.disk_capacity,
        "fits": not shortfalls(system, p.memory),
        "near_capacity": any(
            abs(float(need) - have) <= 1e-9 * have
            for need, have in (
                (p.memory.gpu, system.gpu_memory),
                (p.memory.cpu, system.host_memory),
                (p.memory.disk, system.disk_capacity or math.inf),
            )
        ),
        "bottleneck": p.bottleneck,
        "tied": ranked[0] - ranked[1] <= 1e-9 * ranked[0],
        "tpot_ms": tpot * 1e3,
    }


def _close(shown: float, want: float) -> bool:
    return abs(shown - want) <= TOLERANCE * abs(want) + 1e-12


# ------------------------------------------------------------------------------ the tests ----


def test_the_page_matches_the_package_at_a_thousand_random_points(page):
    pg, errors, offhost = page
    rng = random.Random(15)
    models = {m: load_model(m) for m in model_ids()}
    points = [_point(rng, models) for _ in range(POINTS)]
    shown = pg.evaluate("points => points.map(p => window.kvoCalc.set(p))", points)
    assert not errors, errors
    assert not offhost, offhost
    seen = {"refused": 0, "fits": set(), "bottleneck": set(), "overlap": set(), "custom": 0}
    scenario_checks = 0
    for i, (point, got) in enumerate(zip(points, shown, strict=True)):
        want = _expected(point)
        where = f"point {i}: {point}"
        if want is None:
            assert got["error"], f"{where}: the package refuses it, the page does not"
            seen["refused"] += 1
            continue
        assert not got["error"], f"{where}: the page refuses it: {got['error']}"
        for key, value in want["numbers"].items():
            assert _close(float(got[key]), value), f"{where}: {key} {got[key]} != {value}"
        cap = want["disk_capacity"]
        assert (
            (got["disk_capacity_bytes"] == "")
            if cap is None
            else _close(float(got["disk_capacity_bytes"]), cap)
        ), where
        if not want["near_capacity"]:
            assert got["fits"] == ("yes" if want["fits"] else "no"), where
        if not want["tied"]:
            assert got["bottleneck"] == want["bottleneck"], where
        seen["fits"].add(got["fits"])
        seen["bottleneck"].add(got["bottleneck"])
        seen["overlap"].add(point["overlap"])
        seen["custom"] += bool(point["figures"])
        # the scenario file the page prints gives the same TPOT in the package
        if i % 10 == 0:
            sc = parse_scenario(yaml.safe_load(got["scenario"]))
            assert _close(predict(sc, check=False).tpot_s * 1e3, want["tpot_ms"]), where
            scenario_checks += 1
    # the draws cover what the page can express
    assert seen["refused"] >= 10
    assert seen["fits"] == {"yes", "no"}
    assert len(seen["bottleneck"]) >= 4, seen["bottleneck"]
    assert seen["overlap"] == set(decode.OVERLAP_MODES)
    assert seen["custom"] >= 200
    assert scenario_checks >= 50


def _reuse_point(rng: random.Random, models: dict) -> dict:
    """Return a page point with a reuse question: a share of the prompt cached in a tier."""
    point = _point(rng, models)
    share = rng.choice([0.0, 1.0, rng.uniform(0, 1), rng.uniform(0.9, 1)])
    host = load_system(point["machine"]).host_memory
    figures = point["figures"]
    if figures.get("host_memory"):
        host = figures["host_memory"]
    fits = _log_uniform(rng, 1, host / 2**30 * 0.95)
    gib = rng.choice([0, fits, fits, fits, fits, fits, host / 2**30 * 1.5])
    point["reuse"] = {
        "rule": "vllm-native",
        "cached_tokens": int(point["prompt"] * share) + (rng.random() < 0.03),
        "tier": rng.choice(["gpu", "gpu"] + ["cpu"] * 7 + ["disk"]),
        "host_cache_gib": round(gib, 3),
    }
    if rng.random() < 0.9:  # vLLM keeps no weights on disk: the rest are refused
        point["weights"] = {**point["weights"], "disk": 0.0}
        point["weights"]["gpu"] = 1 - point["weights"]["cpu"]
    return point


def _expected_reuse(point: dict) -> dict | None:
    """Return the package's reuse answer for a point (None: it refuses the reuse scenario)."""
    try:
        sc = parse_scenario(reuse_scenario_for(point))
    except InputError:
        return None
    p = predict(sc, check=False)  # what `kvoffload predict` prints, in process
    rule = ENGINES[sc.engine].prefix_cache.rule(sc)
    tier = sc.reuse.tier
    one = float(reuse.cache_bytes(rule.setup, sc.prompt + sc.generate))
    return {
        "reuse_ttft_ms": p.ttft_s * 1e3,
        "reuse_recompute_ms": p.ttft_recompute_s * 1e3,
        "reuse_hit_tokens": p.reuse.hit_tokens,
        "reuse_load_ms": p.reuse.load_s * 1e3,
        "reuse_break_even_tokens": reuse.break_even_prompt(rule.setup, tier, rule.reload, sc.batch),
        "reuse_sessions": int(point["reuse"]["host_cache_gib"] * 2**30 // one),
    }


def test_the_reuse_answer_matches_the_package_at_random_points(page):
    pg, errors, offhost = page
    rng = random.Random(24)
    models = {m: load_model(m) for m in model_ids()}
    points = [_reuse_point(rng, models) for _ in range(REUSE_POINTS)]
    shown = pg.evaluate("points => points.map(p => window.kvoCalc.set(p))", points)
    assert not errors, errors
    assert not offhost, offhost
    seen = {"checked": 0, "refused": 0, "tiers": set(), "hit": 0, "never": 0, "scenarios": 0}
    for i, (point, got) in enumerate(zip(points, shown, strict=True)):
        where = f"point {i}: {point}"
        if _expected(point) is None:  # the page's own inputs are refused: nothing to ask
            assert got["error"], where
            continue
        want = _expected_reuse(point)
        if want is None:
            assert got["reuse_error"], f"{where}: the package refuses it, the page does not"
            seen["refused"] += 1
            continue
        assert not got["reuse_error"], f"{where}: the page refuses it: {got['reuse_error']}"
        for key, value in want.items():
            assert _close(float(got[key]), value), f"{where}: {key} {got[key]} != {value}"
        seen["checked"] += 1
        seen["tiers"].add(point["reuse"]["tier"])
        seen["hit"] += want["reuse_hit_tokens"] > 0
        seen["never"] += want["reuse_break_even_tokens"] == 0
        # the reuse scenario the page prints is the one the package answered
        if i % 8 == 0:
            sc = parse_scenario(yaml.safe_load(got["reuse_scenario"]))
            p = predict(sc, check=False)
            assert _close(p.ttft_s * 1e3, want["reuse_ttft_ms"]), where
            seen["scenarios"] += 1
    assert seen["checked"] >= 200 and seen["refused"] >= 20, seen
    assert seen["tiers"] == {"gpu", "cpu"} and seen["hit"] >= 60, seen
    assert seen["scenarios"] >= 20, seen


def test_the_page_fits_a_phone_and_draws_its_chart(page):
    pg, errors, offhost = page
    pg.set_viewport_size({"width": 390, "height": 844})
    try:
        got = pg.evaluate(
            "async () => { const out = window.kvoCalc.set({machine: 't4-pcie3', figures: {},"
            " model: 'llama-3.1-8b', weights_format: 'bf16', kv_format: 'bf16', prompt: 32000,"
            " generate: 32, batch: 1, weights: {gpu: 1, cpu: 0, disk: 0},"
            " kv: {gpu: 0, cpu: 1, disk: 0}, attention: 'gpu', overlap: 'none', pinned: true});"
            " await new Promise(done => requestAnimationFrame(done));"  # the chart draws next frame
            " const svg = document.querySelector('#kvo-chart svg');"
            " return {out: out, right: svg.getBoundingClientRect().right,"
            " paths: svg.querySelectorAll('path').length, text: svg.textContent,"
            " scroll: document.documentElement.scrollWidth}; }"
        )
        assert not got["out"]["error"]
        assert got["scroll"] <= 390 and got["right"] <= 390
        assert got["paths"] >= 2 and "ms budget" in got["text"]
    finally:
        pg.set_viewport_size({"width": 1440, "height": 900})
    assert not errors and not offhost


def test_a_typed_figure_changes_the_answer_and_a_bad_one_is_refused(page):
    pg, errors, _ = page
    base = {"machine": "article-reference", "figures": {}, "model": "llama-3.1-8b",
            "weights_format": "bf16", "kv_format": "bf16", "prompt": 128000, "generate": 1,
            "batch": 1, "weights": {"gpu": 1, "cpu": 0, "disk": 0},
            "kv": {"gpu": 0, "cpu": 1, "disk": 0}, "attention": "gpu", "overlap": "none",
            "pinned": True}  # fmt: skip
    slow = pg.evaluate("p => window.kvoCalc.set(p)", base)
    # type a link twice as fast into the field, as a reader would
    pg.fill("#kvo-fig-h2d", "64")
    fast = pg.evaluate("() => window.kvoCalc.read()")
    assert float(fast["tpot_ms"]) < float(slow["tpot_ms"])
    assert "hardware:\n  id: calculator" in fast["scenario"]
    pg.fill("#kvo-fig-h2d", "-3")
    bad = pg.evaluate("() => window.kvoCalc.read()")
    assert "Link, host→GPU" in bad["error"] and bad["tpot_ms"] == ""
    pg.click("#kvo-reset")
    again = pg.evaluate("() => window.kvoCalc.read()")
    assert again["tpot_ms"] == slow["tpot_ms"]
    assert not errors


# ------------------------------------------------------------------ chapter 03's widget ------


def _chapter_setup(hardware: str, context: int, batch: int) -> decode.Setup:
    """Chapter 03's setup: every KV byte in host memory, the weights placed to fit (its Setup cell)."""
    system, llm = load_system(hardware), load_model("llama-3.1-8b")
    return decode_step.place(decode.offloaded(system, llm), context, batch).setup


def _with_link(setup: decode.Setup, gbps: float) -> decode.Setup:
    """Return ``setup`` on its machine with a link of ``gbps`` GB/s each way (System's figures)."""
    link, rate = setup.system.link, gbps * 1e9

    def figure(f, value):
        return dataclasses.replace(f, value=value)

    pageable = link.pageable_bandwidth
    faster = msgspec.structs.replace(
        link,
        h2d_bandwidth=figure(link.h2d_bandwidth, rate),
        d2h_bandwidth=figure(link.d2h_bandwidth, rate),
        raw_bandwidth=figure(link.raw_bandwidth, max(rate, link.raw_bandwidth.value)),
        pageable_bandwidth=None
        if pageable is None
        else figure(pageable, min(pageable.value, rate)),
    )
    system = msgspec.structs.replace(setup.system, link=faster)
    return decode.Setup(system, setup.model, setup.weights, setup.kv, setup.placement)


# (hardware, the chapter's context and batch, tokens generated): the article's machine as the
# chapter runs it, and a card whose weights do not fit, so part of them crosses the link
WIDGETS = [
    ("article-reference", 32_000, 1, 1),
    ("article-reference", 32_000, 4, 64),
    ("rtx-3070-ti-desktop", 32_000, 1, 16),
]
# slider positions (link, batch, context; None: where it starts); link and context run 0..200
MOVES = [(None, None, None), (0, 1, 0), (120, 8, 100), (200, 64, 200), (60, 3, 170), (None, 16, 40)]


@pytest.fixture(scope="module")
def widget_page(page, tmp_path_factory):
    """A page holding chapter 03's widget for each of WIDGETS, open in the calculator's Chromium."""
    browser = page[0].context.browser
    root = tmp_path_factory.mktemp("widget")
    setups, bodies = [], []
    for hardware, context, batch, generate in WIDGETS:
        setup = _chapter_setup(hardware, context, batch)
        setups.append(setup)
        bodies.append(tpot_widget.widget_html(setup, context, batch, 50.0, generate))
    page = "<!DOCTYPE html><html><head><meta charset='utf-8'><meta name='viewport' "
    page += "content='width=device-width, initial-scale=1'></head><body style='margin: 8px'>"
    (root / "widget.html").write_text(page + "\n".join(bodies) + "</body></html>")
    errors: list[str] = []
    with serve(root) as base:
        pg = browser.new_page(viewport={"width": 360, "height": 800})
        pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        pg.on("pageerror", lambda e: errors.append(str(e)))
        offhost = block_offhost(pg)
        pg.goto(f"{base}/widget.html")
        pg.wait_for_function("document.querySelectorAll('.kvo-tpot svg').length === 3")
        yield pg, setups, errors, offhost
        pg.close()


_READ = """root => Object.fromEntries([...document.getElementById(root).querySelectorAll(
  '[data-kvo]')].filter(el => el.dataset.value !== undefined).map(el => [el.dataset.kvo,
  el.dataset.value]))"""


def test_the_chapter_widget_shows_the_packages_tpot_as_its_sliders_move(widget_page):
    pg, setups, errors, offhost = widget_page
    idents = pg.evaluate("() => [...document.querySelectorAll('.kvo-tpot')].map(el => el.id)")
    assert len(idents) == len(WIDGETS) == len(set(idents))
    assert setups[-1].placement.weights.cpu > 0  # the last streams part of its weights
    for ident, setup, (_, context, batch, generate) in zip(idents, setups, WIDGETS, strict=True):
        start = pg.evaluate(_READ, ident)
        # where the sliders start: the chapter's own machine, context and batch
        assert float(start["link"]) == setup.system.link.h2d_bandwidth.value / 1e9
        assert int(start["context"]) == context and int(start["batch"]) == batch
        seen = set()
        for move in MOVES:
            for key, pos in zip(("link", "batch", "context"), move, strict=True):
                if pos is not None:
                    pg.fill(f"#{ident}-{key}", str(pos))
            got = pg.evaluate(_READ, ident)
            gbps, s, b = float(got["link"]), int(got["context"]), int(got["batch"])
            seen.add((gbps, s, b))
            faster = _with_link(setup, gbps)
            for mode in ("none", "perfect"):
                want = float(decode.tpot(faster, s, generate, b, mode)) * 1e3
                shown = float(got[f"tpot_{mode}_ms"])
                where = f"{ident} {mode}: link {gbps} GB/s, context {s}, batch {b}"
                assert _close(shown, want), f"{where}: shown {shown} ms, package {want} ms"
        assert len(seen) == len(MOVES)  # every move changed what the widget computes
    assert not errors, errors
    assert not offhost, offhost


def test_the_chapter_widget_fits_a_360_px_column(widget_page):
    pg, _, errors, _ = widget_page
    got = pg.evaluate(
        "() => ({scroll: document.documentElement.scrollWidth, right: Math.max(...[...document"
        ".querySelectorAll('.kvo-tpot svg, .kvo-tpot input')].map(e => e.getBoundingClientRect()"
        ".right)), paths: document.querySelector('.kvo-tpot svg').querySelectorAll('path').length,"
        " text: document.querySelector('.kvo-tpot svg').textContent})"
    )
    assert got["scroll"] <= 360 and got["right"] <= 360, got
    assert got["paths"] >= 2 and "ms budget" in got["text"]
    assert not errors


# ------------------------------------------------------------- llama.cpp and advise ---------

LLAMACPP_POINTS = 200
ADVISE_TRIPLES = 200


def _llamacpp_point(rng: random.Random, models: dict) -> dict:
    """Return a page point on the llama.cpp engine: a GGUF format, -ngl and expert placement."""
    model = rng.choice(sorted(models))
    m = models[model]
    machine = rng.choice(system_ids())
    limit = m.max_positions or 2_000_000
    generate = rng.choice([1, rng.randint(1, 16), rng.randint(17, 512)])
    n = m.n_layers
    point = {
        "machine": machine,
        "figures": {},
        "model": model,
        "engine": "llamacpp",
        "weights_format": rng.choice(calculator_llamacpp.llamacpp_formats(m)),
        "kv_format": rng.choice(LLAMACPP_KV),
        "prompt": int(_log_uniform(rng, 1, max(2, limit - generate))),
        "generate": generate,
        "batch": rng.choice([1, 1, 1, rng.randint(2, 64)]),
        "llamacpp": {
            "n_gpu_layers": rng.choice([None, rng.randint(0, n + 1)]),
            "n_cpu_moe": rng.choice([0, rng.randint(0, n)]) if m.moe else 0,
            "cpu_moe": bool(m.moe) and rng.random() < 0.2,
            "no_kv_offload": rng.random() < 0.15,
            "threads": rng.choice([None, None, rng.randint(1, 96)]),
            "numa": rng.choice([None, None, "distribute", "isolate", "numactl"]),
        },
    }
    if rng.random() < 0.3:  # a machine of the reader's: mmap pages what host memory cannot hold
        point["figures"] = {
            "host_memory": rng.choice([16e9, 64e9, 256e9]),
            "gpu_memory": rng.choice([8e9, 24e9, 96e9]),
        }
    return point


def test_the_llamacpp_engine_matches_kvoffload_predict_at_random_points(page):
    pg, errors, offhost = page
    rng = random.Random(2604)
    models = {m: load_model(m) for m in model_ids()}
    compared = 0
    points = [_llamacpp_point(rng, models) for _ in range(LLAMACPP_POINTS)]
    # one call sets each point in turn, as a reader would, and reads what the page shows
    every = pg.evaluate("points => points.map(p => window.kvoCalc.set(p))", points)
    for point, shown in zip(points, every, strict=True):
        scenario = scenario_for(point)
        typed = yaml.safe_load(shown["scenario"])  # the page's YAML: the same scenario
        mine, theirs = load_system(typed.pop("hardware")), load_system(scenario["hardware"])
        assert machine_figures(mine) == machine_figures(theirs), point
        assert host_entry(mine) == host_entry(theirs), point
        assert gpu_entry(mine) == gpu_entry(theirs), point
        assert typed == {k: v for k, v in scenario.items() if k != "hardware"}, point
        p = predict(parse_scenario(scenario), check=False)
        assert shown["error"] == "", (point, shown["error"])
        for key, want in (
            ("tpot_ms", p.tpot_s * 1e3),
            ("ttft_ms", p.ttft_s * 1e3),
            ("memory_gpu_bytes", float(p.memory.gpu)),
            ("memory_cpu_bytes", float(p.memory.cpu)),
            ("memory_disk_bytes", float(p.memory.disk)),
        ):
            assert _close(float(shown[key]), want), (point, key, shown[key], want)
        sc = parse_scenario(scenario)
        assert (shown["fits"] == "yes") == (not shortfalls(sc.system, p.memory)), point
        compared += 1
    assert compared == LLAMACPP_POINTS
    assert not errors and not offhost


def _advise_best(machine: str, model: str, context: int, batch: int) -> dict | None:
    """Return ``kvoffload advise --model all``'s answer for one model: its fastest row."""
    s = fastest(load_system(machine), load_model(model), Workload(context, batch))
    return row(s.choices[0], s.model, s.workload) if s.choices else None


# contexts where the answers change often: a few tokens, the usual windows, past 128K
NAMED_CONTEXTS = (2, 3, 4096, 32768, 131072, 1048576)


def test_the_best_placement_is_advises_for_random_machines_models_and_contexts(page):
    """The page runs advise's search for any context and batch: the same engine, formats,
    options and command line as ``kvoffload advise``, the same tokens/s (to 0.1%)."""
    pg, errors, offhost = page
    rng = random.Random(426)
    checked_tpot, engines, offloaded = 0, set(), 0
    cases = []
    for _ in range(ADVISE_TRIPLES):
        machine, model = rng.choice(system_ids()), rng.choice(model_ids())
        context = (
            rng.choice(NAMED_CONTEXTS)
            if rng.random() < 0.3
            else int(_log_uniform(rng, 2, 1_100_000))
        )
        batch = rng.choice([1, 1, 1, rng.randint(2, 16)])
        limit = load_model(model).max_positions
        shown_context = min(context, limit) if limit else context
        wl = Workload(shown_context, batch)
        inputs = {"machine": machine, "figures": {}, "model": model, "engine": "generic",
                  "weights_format": "bf16", "kv_format": "bf16", "context": shown_context,
                  "generate": wl.generate, "batch": batch}  # fmt: skip
        cases.append(((machine, model, context, batch), wl, inputs))
    # one call puts each case in the form, presses the best-placement button and reads the page
    answers = pg.evaluate(
        "cases => cases.map(p => { window.kvoCalc.set(p);"
        " const got = window.kvoCalc.best(); return [got, window.kvoCalc.read()]; })",
        [inputs for _, _, inputs in cases],
    )
    for (where, wl, _), (got, shown) in zip(cases, answers, strict=True):
        want = _advise_best(*where)
        if want is None:
            assert got is None, where
            continue
        assert got is not None, where
        for key in ("engine", "weights", "kv", "offload", "options", "command"):
            assert got[key] == want[key], (where, key, got[key], want[key])
        assert _close(got["tokens_per_s"], want["tokens_per_s"]), where
        assert got["context"] == wl.context and got["batch"] == where[3], where
        engines.add(want["engine"])
        offloaded += want["offload"] != NO_OFFLOAD
        assert shown["best"].startswith("kvoffload advise at"), shown["best"]
        if want["engine"] == "llamacpp":
            # put in the form at advise's own workload, the page's TPOT is advise's
            assert _close(float(shown["tpot_ms"]), want["tpot_ms"]), where
            checked_tpot += 1
    # the draw reaches both engines, offloading configurations and the form
    assert engines == {"llamacpp", "vllm"} and offloaded > 0 and checked_tpot > 0
    assert not errors and not offhost


def test_a_numa_answer_on_two_sockets_carries_the_page_cache_note(page):
    """On two sockets advise's answer can be a --numa distribute command; the page says, as
    advise does, to drop the page cache before its first run (llama.cpp's --numa help)."""
    pg, errors, _ = page
    machine, model, context = "rtx-4090-2s-xeon-6454s", "qwen3-235b-a22b", 8192
    want = _advise_best(machine, model, context, 1)
    assert want is not None and want["options"].get("numa") == "distribute"
    wl = Workload(context, 1)
    inputs = {"machine": machine, "figures": {}, "model": model, "engine": "generic",
              "weights_format": "bf16", "kv_format": "bf16", "context": context,
              "generate": wl.generate, "batch": 1}  # fmt: skip
    got, shown = pg.evaluate(
        "p => { window.kvoCalc.set(p); const got = window.kvoCalc.best();"
        " return [got, window.kvoCalc.read()]; }",
        inputs,
    )
    assert got["command"] == want["command"] and "--numa distribute" in got["command"]
    assert "drop the page cache" in shown["best"] and "drop_caches" in shown["best"]
    assert not errors


def test_the_context_takes_128k_and_1m_and_131072_gives_numbers(page):
    pg, errors, _ = page
    base = {"machine": "h200-sxm-pcie5", "figures": {}, "engine": "generic", "generate": 32,
            "batch": 1, "weights_format": "bf16", "kv_format": "bf16",
            "weights": {"gpu": 1, "cpu": 0, "disk": 0}, "kv": {"gpu": 0, "cpu": 1, "disk": 0},
            "attention": "gpu", "overlap": "none", "pinned": True}  # fmt: skip
    long = next(m for m in model_ids() if (load_model(m).max_positions or 2**21) >= 2**20)
    for text, tokens, model in (("128K", 131072, "llama-3.1-8b"), ("1M", 1048576, long),
                                ("131,072", 131072, "llama-3.1-8b")):  # fmt: skip
        shown = pg.evaluate(
            "(p) => window.kvoCalc.set(p)", {**base, "model": model, "context": text}
        )
        assert shown["error"] == "", (text, shown["error"])
        assert yaml.safe_load(shown["scenario"])["workload"]["prompt"] == tokens - 32
    shown = pg.evaluate("(p) => window.kvoCalc.set(p)", {**base, "model": "llama-3.1-8b",
                                                         "context": 131072})  # fmt: skip
    assert shown["error"] == "" and float(shown["tpot_ms"]) > 0
    for key in ("tpot_ms", "ttft_ms", "memory_gpu_bytes", "fits", "verdict", "no_offload"):
        assert shown[key] not in ("", "—"), key
    assert not errors


def test_one_overlap_list_and_a_line_when_nothing_needs_offloading(page):
    pg, _, _ = page
    options = pg.evaluate(
        "() => [...document.querySelectorAll('#kvo-overlap option')].map(o => o.value)"
    )
    assert options == list(decode.OVERLAP_MODES)
    small = {"machine": "h200-sxm-pcie5", "figures": {}, "model": "llama-3.1-8b",
             "engine": "llamacpp", "weights_format": "q4_k_m", "kv_format": "fp16",
             "context": 8192, "generate": 32, "batch": 1,
             "llamacpp": {"n_gpu_layers": None, "n_cpu_moe": 0}}  # fmt: skip
    shown = pg.evaluate("(p) => window.kvoCalc.set(p)", small)
    assert shown["no_offload"] == "yes"
    assert shown["command"].startswith("llama-server -m llama-3.1-8b-Q4_K_M.gguf -ngl 99")
    big = {**small, "machine": "rtx-4090-desktop", "model": "qwen3-235b-a22b"}
    assert pg.evaluate("(p) => window.kvoCalc.set(p)", big)["no_offload"] == "no"
