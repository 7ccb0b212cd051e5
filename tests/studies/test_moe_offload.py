"""Chapter 10's study: experts on the CPU against whole layers, a smaller format, routed bytes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model
from kvoffload.model import routing
from kvoffload.report import charting, moe_charts
from kvoffload.studies import chapter_answers
from kvoffload.studies import moe_offload as mo

DESKTOP = "rtx-4090-desktop"
CONTEXT = 4096
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 1024]


@pytest.fixture(scope="module", params=["gpt-oss-120b", "qwen3-235b-a22b"])
def desktop(request):
    """The study for one model in Q4_K_M on the RTX 4090 desktop: fits, curve, routed bytes."""
    model = request.param
    fits = mo.fit_options(DESKTOP, model, "q4_k_m", CONTEXT)
    curve = mo.ncmoe_curve(DESKTOP, model, "q4_k_m", CONTEXT)
    routed = mo.routed_bytes(DESKTOP, model, "q4_k_m", BATCHES)
    return model, fits, curve, routed


def _gpu_bytes(model: str, options: dict, fmt: str = "q4_k_m", hardware: str = DESKTOP) -> float:
    sc = parse_scenario(
        {"hardware": hardware, "model": model, "engine": "llamacpp",
         "precision": {"weights": fmt, "kv": "fp16"},
         "workload": {"batch": 1, "prompt": CONTEXT, "generate": mo.GENERATE}, "options": options}
    )  # fmt: skip
    return float(predict(sc, check=False).memory.gpu)


def test_the_chosen_options_fit_the_gpu_and_are_the_edges_of_what_fits(desktop):
    model, fits, _, _ = desktop
    capacity = load_system(DESKTOP).gpu_memory
    whole, experts, layers = (fits.row(w) for w in (mo.WHOLE, mo.EXPERTS, mo.LAYERS))
    assert not whole["fits_gpu"] and whole["gpu_bytes"] > capacity  # the premise: it does not fit
    for row in (experts, layers):
        assert row["fits_gpu"] and row["gpu_bytes"] <= capacity
    n = int(experts["option"].removeprefix("--n-cpu-moe "))
    ngl = int(layers["option"].removeprefix("-ngl "))
    assert experts["option"] == f"--n-cpu-moe {n}" and layers["option"] == f"-ngl {ngl}"
    # the smallest --n-cpu-moe that fits: one fewer does not; the largest -ngl: one more does not
    assert _gpu_bytes(model, {"n_cpu_moe": n - 1}) > capacity
    assert _gpu_bytes(model, {"n_gpu_layers": ngl + 1}) > capacity
    assert experts["gpu_bytes"] == pytest.approx(_gpu_bytes(model, {"n_cpu_moe": n}))


def test_experts_on_the_cpu_beat_whole_layers_on_the_cpu_for_no_more_gpu_memory(desktop):
    _, fits, curve, routed = desktop
    experts, layers = fits.row(mo.EXPERTS), fits.row(mo.LAYERS)
    assert experts["tokens_per_s"] > layers["tokens_per_s"]
    same = mo.best_within(curve, mo.NCMOE, layers["gpu_bytes"])
    assert same is not None and same["gpu_bytes"] <= layers["gpu_bytes"]
    assert same["tokens_per_s"] > layers["tokens_per_s"]
    h = mo.headline(fits, curve, routed)
    assert not h.whole_fits and h.speedup > 1 and h.budget_ratio > 1
    assert h.experts_option in h.answer and h.layers_option in h.answer
    # the answer says how much faster in words that follow the ratio (relative's 5% band)
    assert f"{mo.relative(h.speedup)} moving whole layers" in h.answer
    assert (
        mo.relative(1.06).endswith("times as fast as") and mo.relative(1.04) == "about as fast as"
    )


def test_a_way_that_nothing_makes_fit_says_so(desktop):
    _, fits, _, _ = desktop
    smaller = fits.row(mo.SMALLER)  # nothing under Q4_K_M holds these models in 24 GiB
    assert smaller["option"] == "" and math.isnan(smaller["tokens_per_s"])
    assert "no smaller format fits" in smaller["note"]
    table = moe_charts.fit_table(fits)
    assert table["llama.cpp options"].iloc[-1] == "(none fits)"


def test_more_experts_on_the_cpu_uses_less_gpu_memory_and_is_never_faster(desktop):
    model, _, curve, _ = desktop
    ncmoe = curve[curve["setting"] == mo.NCMOE].sort_values("value")
    assert list(ncmoe["value"]) == list(range(load_model(model).n_layers + 1))
    assert np.all(np.diff(ncmoe["gpu_bytes"]) < 0)  # every layer of these models has experts
    assert np.all(np.diff(ncmoe["tokens_per_s"]) <= 0)
    ngl = curve[curve["setting"] == mo.NGL].sort_values("value")
    assert np.all(np.diff(ngl["gpu_bytes"]) >= 0)
    assert ngl["gpu_bytes"].iloc[0] == 0  # -ngl 0: nothing on the GPU
    assert set(curve["fits"]) <= {True, False}


def test_routed_bytes_grow_with_the_batch_and_never_exceed_every_expert(desktop):
    model, _, _, routed = desktop
    moe = load_model(model).moe
    assert np.all(np.diff(routed["routed_gb"]) >= 0)
    assert np.all(np.diff(routed["routed_gb"].iloc[:6]) > 0)  # strictly, before it saturates
    assert np.all(routed["routed_gb"] <= routed["all_experts_gb"] * (1 + 1e-12))
    first = routed.iloc[0]
    assert first["routed_gb"] == pytest.approx(
        first["all_experts_gb"] * moe.experts_per_token / moe.n_experts
    )
    assert first["experts_touched"] == pytest.approx(moe.experts_per_token)
    assert routed["experts_touched"].iloc[-1] <= moe.n_experts
    assert np.all(routed["link_all_ms"] > 0)


def test_a_model_that_fits_whole_needs_no_offload():
    fits = mo.fit_options("gh200-nvlink-c2c", "gpt-oss-120b", "q4_k_m", CONTEXT)
    curve = mo.ncmoe_curve("gh200-nvlink-c2c", "gpt-oss-120b", "q4_k_m", CONTEXT)
    routed = mo.routed_bytes("gh200-nvlink-c2c", "gpt-oss-120b", "q4_k_m", BATCHES)
    assert fits.row(mo.WHOLE)["fits_gpu"]
    assert fits.row(mo.EXPERTS)["option"] == "--n-cpu-moe 0"
    assert fits.row(mo.LAYERS)["option"] == f"-ngl {fits.n_layers + 1}"
    h = mo.headline(fits, curve, routed)
    assert h.whole_fits and "fits this GPU whole" in h.answer
    assert h.budget_gb == pytest.approx(h.whole_gb / 2)


def test_when_even_every_expert_on_the_cpu_does_not_fit_only_layers_remain():
    fits = mo.fit_options("rtx-3070-ti-desktop", "deepseek-v3", "q4_k_m", CONTEXT)
    experts = fits.row(mo.EXPERTS)
    assert experts["option"] == "" and "does not fit" in experts["note"]
    assert fits.row(mo.LAYERS)["fits_gpu"]
    curve = mo.ncmoe_curve("rtx-3070-ti-desktop", "deepseek-v3", "q4_k_m", CONTEXT)
    routed = mo.routed_bytes("rtx-3070-ti-desktop", "deepseek-v3", "q4_k_m", [1, 8])
    assert "Even with every expert on the CPU" in mo.headline(fits, curve, routed).answer


def test_the_smaller_format_is_the_largest_one_that_fits_whole():
    hw, model = "article-reference", "gpt-oss-120b"
    fits = mo.fit_options(hw, model, "q4_k_m", CONTEXT)
    row = fits.row(mo.SMALLER)
    capacity = load_system(hw).gpu_memory
    assert row["fits_gpu"] and row["gpu_bytes"] <= capacity
    assert row["option"] == f"-m {model}-{row['weights'].upper()}.gguf"
    own = _gpu_bytes(model, {}, "q4_k_m", hw)
    tried = [f for f in mo.SMALLER_FORMATS if _gpu_bytes(model, {}, f, hw) < own]
    fitting = [f for f in tried if _gpu_bytes(model, {}, f, hw) <= capacity]
    assert row["weights"] == max(fitting, key=lambda f: _gpu_bytes(model, {}, f, hw))


def test_mxfp4_is_offered_only_for_models_that_ship_their_experts_in_it():
    assert mo.native_mxfp4(load_model("gpt-oss-20b"))
    assert not mo.native_mxfp4(load_model("qwen3-30b-a3b"))
    assert not mo.native_mxfp4(load_model("llama-3-8b"))


def test_a_dense_model_is_refused_naming_the_model():
    with pytest.raises(InputError, match="not a mixture of experts") as err:
        mo.fit_options(DESKTOP, "llama-3-8b", "q4_k_m", CONTEXT)
    assert err.value.field == "model"


@given(st.integers(2, 1024), st.data())
def test_half_touched_batch_is_the_first_batch_reading_half_the_experts(n, data):
    k = data.draw(st.integers(1, n))
    b = mo.half_touched_batch(n, k)
    assert routing.touched_share(n, k, b) >= 0.5 - 1e-12
    assert b == 1 or routing.touched_share(n, k, b - 1) < 0.5


def test_speed_ratios_read_as_words():
    assert mo.relative(1.5) == "1.5 times as fast as"
    assert mo.relative(1.0) == "about as fast as"
    assert mo.relative(0.5) == "2 times slower than"


def test_the_charts_draw_both_curves_and_the_rule_at_the_gpu_memory(desktop):
    _, _, curve, routed = desktop
    spec = charting.responsive_spec(moe_charts.curves_chart(curve))
    rules = [
        row
        for d in spec["datasets"].values()
        for row in d
        if str(row.get("label", "")).startswith("GPU memory") and "value" in row
    ]
    assert len(rules) == 1
    assert rules[0]["value"] == pytest.approx(load_system(DESKTOP).gpu_memory / 1e9)
    labels = {row["label"] for d in spec["datasets"].values() for row in d if "label" in row}
    assert labels - {rules[0]["label"]} == set(moe_charts.SETTING_LABELS.values())
    assert spec["width"] == "container"
    html = charting.to_html(moe_charts.routed_chart(routed))
    assert html.startswith('<div id="kvo-chart-')
    assert list(moe_charts.routed_table(routed).columns[1:]) == list(moe_charts.ROUTED_FORMATS)


def test_a_model_name_from_a_users_config_is_text_in_the_answer(desktop):
    """A --model config.json names the model: its name must not become Markdown or HTML."""
    import dataclasses

    markdown_it = pytest.importorskip("markdown_it")
    _, fits, curve, routed = desktop
    hostile = "# <img src=x onerror=alert(1)> *bold* `code` [link](http://x) $x$"
    h = dataclasses.replace(mo.headline(fits, curve, routed), model_name=hostile)
    html = markdown_it.MarkdownIt("commonmark").render(h.answer)
    assert "<img" not in html and "<em>" not in html and "<a " not in html and "<h1>" not in html
    assert "&lt;img src=x onerror=alert(1)&gt; *bold* `code` [link](http://x) $x$" in html
    assert html.startswith("<p># ")


@pytest.mark.parametrize("hardware", ["rtx-4090-2s-xeon-6454s", DESKTOP])
def test_the_verdict_picks_the_faster_of_experts_and_layers_on_the_cpu(hardware):
    """The box's figure is the chapter's fastest placement of the model as given (where the
    model does not fit whole): never a slower one the chapter itself calls slower."""
    fits = mo.fit_options(hardware, "gpt-oss-120b", "q4_k_m", 4096)
    curve = mo.ncmoe_curve(hardware, "gpt-oss-120b", "q4_k_m", 4096)
    routed = mo.routed_bytes(hardware, "gpt-oss-120b", "q4_k_m", [1, 8])
    head = mo.headline(fits, curve, routed)
    assert not head.whole_fits and head.experts_option and head.layers_option
    chosen = chapter_answers.moe_choice(head)
    assert chosen.value == max(head.experts_tps, head.layers_tps)
    option = head.experts_option if chosen.value == head.experts_tps else head.layers_option
    assert option in chosen.detail
