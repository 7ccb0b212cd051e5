"""The calculator's data export and page: complete, faithful to the package, escaped, offline."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from kvoffload.bookbuild.jupyterbook import OFFSITE
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.hardware import load_system, system_ids
from kvoffload.inputs.models import load_model, model_ids
from kvoffload.inputs.precision import KvFormat, WeightFormat
from kvoffload.model import decode, working_memory
from kvoffload.report import calculator_page
from kvoffload.studies import calculator_data as cd
from kvoffload.studies import calculator_models


@pytest.fixture(scope="module")
def data(calculator_data):
    return copy.deepcopy(calculator_data)  # the run's, which other modules read too


def test_the_export_holds_every_catalog_machine_model_and_format_as_strict_json(data):
    text = json.dumps(data, allow_nan=False)  # no NaN or infinity reaches the page
    assert json.loads(text) == data
    assert [m["id"] for m in data["machines"]] == system_ids()
    assert [m["id"] for m in data["models"]] == model_ids()
    for m in data["models"]:
        assert set(m["layers"]) == {f.value for f in cd.WEIGHT_FORMATS}
        assert set(m["kv_token_bytes"]) == {f.value for f in KvFormat}
    assert data["streams"] == list(decode.STREAMS)
    assert data["overlap_modes"] == list(decode.OVERLAP_MODES)


def test_layer_classes_are_the_step_models(data):
    model = load_model("gemma-2-9b")  # sliding and full layers alternate
    entry = next(m for m in data["models"] if m["id"] == "gemma-2-9b")
    for fmt in (WeightFormat.BF16, WeightFormat.Q4_K_M):
        lay = decode.layers(model, fmt)
        got = entry["layers"][fmt.value]
        order = [c for c, run in got["order"] for _ in range(run)]
        assert tuple(order) == lay.order
        assert [np.inf if w is None else w for w in got["window"]] == list(lay.window)
        assert got["weight_bytes"] == list(lay.weight_bytes)
        assert got["resident_bytes"] == decode.resident_weight_bytes(model, fmt)
    assert None in entry["layers"]["bf16"]["window"] and 4096 in entry["layers"]["bf16"]["window"]


@pytest.mark.parametrize("ident", ["llama-3.1-8b", "deepseek-v3", "qwen3-next-80b-a3b"])
def test_the_prefill_working_set_is_rows_times_the_row_bytes(ident):
    model = load_model(ident)
    row = calculator_models.working_row_bytes(model)
    for prompt, batch in ((1, 1), (100, 3), (5000, 1), (128000, 8)):
        rows = min(prompt * batch, working_memory.CHUNK_TOKENS)
        want = working_memory.prefill_working_bytes(
            model, prompt, batch, chunk=working_memory.CHUNK_TOKENS, scores=False
        )
        assert rows * row == pytest.approx(float(want), rel=1e-12)


@pytest.mark.parametrize("ident", system_ids())
def test_a_machines_figures_load_back_as_the_same_machine(ident):
    system = load_system(ident)
    figures = cd.machine_figures(system)
    again = load_system(cd.profile_mapping(figures))
    assert cd.machine_figures(again) == figures
    # and the step model sees no difference: offloaded KV and weights, pageable copies
    point = {"machine": ident, "figures": {}, "model": "llama-3.1-8b", "weights_format": "bf16",
             "kv_format": "fp8", "prompt": 30000, "generate": 4, "batch": 2,
             "weights": {"gpu": 0.5, "cpu": 0.3, "disk": 0.2},
             "kv": {"gpu": 0.1, "cpu": 0.6, "disk": 0.3}, "attention": "gpu",
             "overlap": "pipeline", "pinned": False}  # fmt: skip
    catalog = predict(parse_scenario(cd.scenario_for(point)), check=False)
    typed = {**point, "figures": {"gpu_memory": figures["gpu_memory"]}}
    assert isinstance(cd.scenario_for(typed)["hardware"], dict)
    mine = predict(parse_scenario(cd.scenario_for(typed)), check=False)
    assert mine.tpot_s == catalog.tpot_s and mine.ttft_s == catalog.ttft_s
    assert float(mine.memory.gpu) == float(catalog.memory.gpu)


@pytest.mark.parametrize("ident", system_ids())
def test_a_typed_machine_keeps_llamacpps_prefill_and_decode(ident):
    # the inline profile carries the GPU's int8 rate (MMQ prefill) and the host's figures
    point = {"machine": ident, "figures": {}, "model": "qwen3-30b-a3b", "engine": "llamacpp",
             "weights_format": "q4_k_m", "kv_format": "q8_0", "prompt": 3000, "generate": 4,
             "batch": 1, "llamacpp": {"n_cpu_moe": 20}}  # fmt: skip
    catalog = predict(parse_scenario(cd.scenario_for(point)), check=False)
    figures = cd.machine_figures(load_system(ident))
    typed = {**point, "figures": {"gpu_memory": figures["gpu_memory"]}}
    mine = predict(parse_scenario(cd.scenario_for(typed)), check=False)
    assert mine.tpot_s == catalog.tpot_s and mine.ttft_s == catalog.ttft_s


def _with(key: str, value: float | None) -> dict:
    """Return the A100 system's figures with ``key`` set and the figures tied to it consistent.

    A tied figure (attention and memory bandwidth; pageable and the link's rates) follows
    ``value`` within its own range, so only ``key`` can be out of range.
    """
    f = {**cd.machine_figures(load_system("a100-80gb-sxm-pcie4")), key: value}
    specs = {s.key: s for s in cd.FIGURES}
    tied = {
        "gpu_bandwidth": ["attention_bandwidth"],
        "attention_bandwidth": ["gpu_bandwidth"],
        "h2d": ["d2h"],
        "d2h": ["h2d"],
        "pageable": ["h2d", "d2h"],
    }
    if key in ("h2d", "d2h"):
        f["pageable"] = None
    if value is not None:
        for other in tied.get(key, []):
            f[other] = min(max(value, specs[other].lo), specs[other].hi)
    return f


@pytest.mark.parametrize("spec", cd.FIGURES, ids=lambda s: s.key)
def test_each_figures_range_is_the_profile_loaders(spec):
    for inside in (spec.lo, spec.hi):
        load_system(cd.profile_mapping(_with(spec.key, inside)))
    for outside in (spec.lo * 0.999, spec.hi * 1.001):
        with pytest.raises(InputError):
            load_system(cd.profile_mapping(_with(spec.key, outside)))
    if spec.zero:
        load_system(cd.profile_mapping(_with(spec.key, 0.0)))
    if spec.optional:
        load_system(cd.profile_mapping(_with(spec.key, None)))


def test_the_page_escapes_every_string_and_loads_nothing_from_another_host(data):
    hostile = json.loads(json.dumps(data))
    hostile["models"][0]["name"] = '</script><script>alert("x")</script>&'
    hostile["stream_names"]["gpu"] = "<b>GPU</b>"
    page = calculator_page.page_html(hostile)
    assert "<script>alert" not in page and "<b>GPU" not in page
    assert "&lt;b&gt;GPU&lt;/b&gt;" in page  # the stream table's static text, escaped
    files = calculator_page.site_files(data)
    assert set(files) == {calculator_page.PAGE, calculator_page.SCRIPT, calculator_page.STYLE}
    html = files[calculator_page.PAGE].decode()
    assert not OFFSITE.search(html)
    assert f'src="{calculator_page.SCRIPT}"' in html and f'href="{calculator_page.STYLE}"' in html
    assert "http://" not in files[calculator_page.SCRIPT].decode().replace(
        "http://www.w3.org/2000/svg", ""
    )
    assert "https://" not in files[calculator_page.SCRIPT].decode()


# ------------------------------------------------------------------- the reuse question ------

REUSE_POINT = {"machine": "h100-sxm-pcie5", "figures": {}, "model": "llama-3.1-8b",
               "weights_format": "bf16", "kv_format": "bf16", "prompt": 20000, "generate": 100,
               "batch": 2, "weights": {"gpu": 0.8, "cpu": 0.2, "disk": 0.0},
               "kv": {"gpu": 0.5, "cpu": 0.5, "disk": 0.0}, "attention": "gpu",
               "overlap": "none", "pinned": True,
               "reuse": {"rule": "vllm-native", "cached_tokens": 19000, "tier": "cpu",
                         "host_cache_gib": 64}}  # fmt: skip


def test_the_reuse_export_is_the_rule_vllm_builds_and_the_prompts_break_even_tries(data):
    from kvoffload.model import reuse

    (native,) = data["reuse"]["rules"]
    rule = cd.cache_rule_of(cd.rule_choice("vllm-native")).reload
    assert native["reload"]["block_tokens"] == rule.block_tokens == 16
    assert native["reload"]["per_item_s"] == rule.copy.per_item_s
    assert native["reload"]["per_hit_s"] == rule.per_hit_s
    assert native["reload"]["combine"] == "serial" and native["reload"]["item_spans_layers"]
    assert native["break_even_grid"] == list(reuse.break_even_grid(rule))
    assert native["tiers"] == ["gpu", "cpu"]  # no disk tier on the native connector
    assert data["reuse"]["tiers"] == list(reuse.TIERS)


def test_the_reuse_scenario_is_one_kvoffload_predict_reads_with_its_reuse_block():
    from kvoffload.engines.registry import ENGINES
    from kvoffload.model import reuse

    sc = parse_scenario(cd.reuse_scenario_for(REUSE_POINT))
    assert sc.engine == "vllm" and sc.reuse.cached_tokens == 19000 and sc.reuse.tier == "cpu"
    rule = ENGINES["vllm"].prefix_cache.rule(sc)
    # the page's 20% of the weights becomes cpu_offload_gb; vLLM moves whole parameters of the
    # decoder layers for it, so the share streamed is 20% up to the parameter that crosses it
    from kvoffload.engines import vllm_weight_offload
    from kvoffload.model import decode

    weights = decode.step_weight_bytes(sc.model, sc.setup.weights)
    moved, _ = vllm_weight_offload.offload(sc, 0.2 * weights, pinned=True)
    largest = vllm_weight_offload.parameter_bytes(sc).max()
    assert rule.setup.placement.weights.cpu == pytest.approx(moved / weights, rel=1e-12)
    assert 0.2 <= rule.setup.placement.weights.cpu < 0.2 + largest / weights
    p = predict(sc, check=False)
    assert p.reuse.hit_tokens == 19000 // 16 * 16 and p.ttft_s < p.ttft_recompute_s
    n = cd.sessions_that_fit(rule.setup, 64 * 2**30, 20100)
    assert n == int(64 * 2**30 // float(reuse.cache_bytes(rule.setup, 20100))) and n > 0
    on_disk = {**REUSE_POINT, "weights": {"gpu": 0.8, "cpu": 0.1, "disk": 0.1}}
    with pytest.raises(InputError, match="no weights on disk"):
        cd.reuse_scenario_for(on_disk)
