"""kvoffload advise: the search's pick fits, the ranking, the command lines, every catalog model."""

from __future__ import annotations

from functools import cache

import pytest

from kvoffload.engines.registry import validate_options
from kvoffload.engines.scenario import predict
from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model, model_ids
from kvoffload.inputs.precision import kv_format, weight_format
from kvoffload.model import decode
from kvoffload.model.prediction import Scenario, shortfalls
from kvoffload.studies.advise import advise, advise_all
from kvoffload.studies.advise_commands import parse_command
from kvoffload.studies.advise_search import NCMOE, NGL, NO_OFFLOAD, Workload, search

RTX = "rtx-4090-desktop"
WL = Workload(32768)


@cache
def _gpt_oss():
    return advise(load_system(RTX), "gpt-oss-120b", WL)


def _predict(system, model, c, wl):
    sc = Scenario(system, model, c.engine,
                  decode.Setup(system, model, weight_format(c.weights), kv_format(c.kv)),
                  wl.batch, wl.prompt, wl.generate, validate_options(c.engine, dict(c.options)))  # fmt: skip
    return predict(sc, check=False)


def test_gpt_oss_120b_on_a_4090_runs_n_cpu_moe_with_mxfp4_experts_first():
    a = _gpt_oss()
    first = a.search.choices[0]
    # ggml-org's GGUF: experts MXFP4, the other matrices q8_0 (file type MXFP4 MoE)
    assert (first.engine, first.weights, first.way) == ("llamacpp", "mxfp4_moe", NCMOE)
    ngl = [c for c in a.search.choices if c.way == NGL]
    assert ngl and all(first.tokens_per_s > c.tokens_per_s for c in ngl)
    cmd = a.rows[0]["command"]
    assert cmd.startswith("llama-server -m gpt-oss-120b-MXFP4_MOE.gguf -ngl 99 --n-cpu-moe ")
    assert "-c 32768" in cmd


def test_every_smaller_ngl_split_is_slower_than_the_pick():
    a = _gpt_oss()
    system, model = a.search.system, a.search.model
    first = a.search.choices[0]
    best_ngl = max(c.options["n_gpu_layers"] for c in a.search.choices if c.way == NGL)
    for n in (0, best_ngl // 2, best_ngl):
        c = next(c for c in a.search.choices if c.way == NGL)
        p = _predict(system, model, type(c)(**{**c.__dict__, "options": {"n_gpu_layers": n}}), WL)
        assert 1 / p.tpot_s < first.tokens_per_s


def test_the_pick_fits_and_the_next_step_does_not():
    a = _gpt_oss()
    system, model = a.search.system, a.search.model
    first = a.search.choices[0]
    p = _predict(system, model, first, WL)
    assert not shortfalls(system, p.memory)
    one_less = type(first)(
        **{**first.__dict__, "options": {"n_cpu_moe": first.options["n_cpu_moe"] - 1}}
    )
    assert shortfalls(system, _predict(system, model, one_less, WL).memory)


def test_ranked_by_tokens_per_s_then_ttft():
    keys = [(-c.tokens_per_s, c.ttft_s) for c in _gpt_oss().search.choices]
    assert keys == sorted(keys)
    assert all(c.fits for c in _gpt_oss().search.choices)


def test_commands_parse_back_to_the_options_used():
    a = _gpt_oss()
    model = a.search.model
    rows = a.rows + advise(load_system(RTX), "llama-3.1-70b", Workload(8192, 4)).rows
    for r in rows:
        m = model if r["command"].count("gpt-oss") else load_model("llama-3.1-70b")
        back = parse_command(r["command"], m)
        assert back.engine == r["engine"] and back.weights == r["weights"]
        assert dict(back.options) == r["options"]
        assert {"f16": "fp16", "auto": "bf16"}.get(r["kv"], r["kv"]) == back.kv
    assert {r["engine"] for r in rows} == {"llamacpp", "vllm"}


def test_a_model_that_fits_whole_needs_no_offload():
    a = advise(load_system("h100-sxm-pcie5"), "llama-3.1-8b", Workload(8192))
    assert all(c.way == NO_OFFLOAD for c in a.search.choices)
    first = a.rows[0]
    assert first["offload"] == "no offload needed" and first["options"] == {}
    llama = next(r for r in a.rows if r["engine"] == "llamacpp")
    assert " -ngl 99 " in llama["command"] and "--n-cpu-moe" not in llama["command"]


def test_the_pruned_search_finds_the_full_searchs_pick():
    system = load_system(RTX)
    for ident in ("gpt-oss-120b", "llama-3.1-70b", "qwen3-30b-a3b"):
        model = load_model(ident)
        full = search(system, model, WL).choices[0]
        fast = search(system, model, WL, fastest_only=True).choices[0]
        assert (fast.engine, fast.options, fast.tokens_per_s) == (
            full.engine,
            full.options,
            full.tokens_per_s,
        )


def test_all_covers_every_catalog_model():
    found = advise_all(load_system(RTX), WL)
    assert [a["model"] for a in found] == model_ids()
    assert all(a["best"] is not None or a["why"] for a in found)
    gpt = next(a for a in found if a["model"] == "gpt-oss-120b")["best"]
    assert gpt["command"] == _gpt_oss().rows[0]["command"]


def test_a_budget_leaves_out_slower_configurations():
    a = advise(load_system(RTX), "gpt-oss-120b", WL, budget_s=1 / 20)
    assert a.search.choices and all(c.tokens_per_s >= 20 for c in a.search.choices)
    assert any(why == "slower than the budget" for *_, why in a.search.left_out)


def test_a_gguf_file_is_advised_in_its_own_types(tmp_path):
    from tests.support.gguf_files import write_model

    path = tmp_path / "tiny.gguf"
    write_model(path)
    a = advise(load_system(RTX), str(path), Workload(2048))
    assert {c.weights for c in a.search.choices} == {"gguf"}
    assert a.rows[0]["command"].startswith(f"llama-server -m {path} -ngl 99")
    assert parse_command(a.rows[0]["command"], a.search.model, str(path)).weights == "gguf"
    assert any(e == "vllm" for e, *_ in a.search.left_out)


@pytest.mark.parametrize("context", [1, 2])
def test_a_tiny_context_still_has_a_prompt(context):
    assert search(load_system(RTX), load_model("llama-3.1-8b"), Workload(context)).choices


def test_on_two_gpus_each_llamacpp_placement_is_also_tried_split_by_rows_and_by_tensors():
    """Several GPUs: every llama.cpp configuration comes again with ``-sm row`` and, where
    llama.cpp takes it (an unquantised cache), ``-sm tensor``; each variant ranked by its speed
    against its layer split; the commands say so and parse back."""
    two = load_system(
        {"base": "rtx-4090-desktop", "id": "two-4090s", "gpu": {"base": "rtx-4090", "count": 2}}
    )
    a = advise(two, "llama-3.1-70b", Workload(8192))
    llama = [c for c in a.search.choices if c.engine == "llamacpp"]
    base = [c for c in llama if not c.options.get("split_mode")]
    row = [c for c in llama if c.options.get("split_mode") == "row"]
    tensor = [c for c in llama if c.options.get("split_mode") == "tensor"]
    assert row and len(row) == len(base)
    assert tensor and all(c.kv in ("fp16", "bf16", "fp32") for c in tensor)
    assert len(base) + len(row) + len(tensor) == len(llama)
    for c in row + tensor:
        layer = next(
            d for d in base
            if d.options == {k: v for k, v in c.options.items() if k != "split_mode"}
            and (d.weights, d.kv) == (c.weights, c.kv)
        )  # fmt: skip
        assert (c.tokens_per_s > layer.tokens_per_s) == (
            llama.index(c) < llama.index(layer)
        ) or c.tokens_per_s == layer.tokens_per_s
    for mode, words in (("row", " -sm row "), ("tensor", " -sm tensor -fit off ")):
        rows = [r for r in a.rows if r["options"].get("split_mode") == mode]
        assert rows and all(words in r["command"] for r in rows)
        back = parse_command(rows[0]["command"], a.search.model)
        assert dict(back.options) == rows[0]["options"]
    # one GPU: no split variants
    assert not any(c.options.get("split_mode") for c in _gpt_oss().search.choices)


def test_ktransformers_is_searched_when_asked_with_its_rule_and_numa_build():
    """--engines ktransformers: its default rule and, on two sockets, the USE_NUMA=1 build, each
    predicted by its engine; never searched unless named."""
    server = load_system("rtx-4090-2s-xeon-6454s")
    a = advise(server, "deepseek-v3", WL, engines=("ktransformers",))
    kt = a.search.choices
    assert [c.options.get("use_numa", False) for c in kt if c.weights == "q4_k_m"] == [True, False]
    for c in kt:
        amx = c.weights == "bf16"  # the BF16 file: the AMX rule (an AMX host)
        assert c.options["optimize_config_path"] == f"DeepSeek-V3-Chat{'-amx' * amx}.yaml"
        assert c.tpot_s == pytest.approx(_predict(server, a.search.model, c, WL).tpot_s)
    numa = next(r for r in a.rows if r["options"].get("use_numa"))
    assert numa["command"].startswith("USE_NUMA=1 bash ./install.sh && python -m ")
    assert numa["kv"] == "bf16" and numa["offload"] == "experts on the CPU, USE_NUMA=1"
    default = advise(server, "deepseek-v3", WL)
    assert "ktransformers" not in {c.engine for c in default.search.choices}


def test_ktransformers_leaves_out_a_model_type_it_has_no_rule_for_with_its_reason():
    a = advise(load_system(RTX), "gpt-oss-120b", WL, engines=("ktransformers",))
    assert not a.search.choices
    assert any("no optimize rule for model_type 'gpt_oss'" in why for *_, why in a.search.left_out)


def test_ktransformers_amx_runs_a_bf16_gguf_on_an_amx_host_only():
    server = load_system("rtx-4090-2s-xeon-6454s")
    a = advise(server, "qwen3-235b-a22b", Workload(8192), engines=("ktransformers",))
    amx = [c for c in a.search.choices if c.weights == "bf16"]
    assert amx and all(c.options["optimize_config_path"] == "Qwen3Moe-serve-amx.yaml" for c in amx)
    assert all(c.options["optimize_config_path"] == "Qwen3Moe-serve.yaml"
               for c in a.search.choices if c.weights != "bf16")  # fmt: skip
    best = search(server, a.search.model, Workload(8192), ("ktransformers",), fastest_only=True)
    assert best.choices[0] == a.search.choices[0]  # --model all keeps the BF16 file in view
    desk = advise(load_system(RTX), "qwen3-30b-a3b", WL, engines=("ktransformers",))
    assert desk.search.choices and all(c.weights != "bf16" for c in desk.search.choices)
    assert any(w == "bf16" and "AMX" in why for _, w, _, why in desk.search.left_out)


def test_on_two_sockets_each_llama_cpp_offload_is_tried_with_numa_distribute():
    """llama.cpp issue #11744: with every page on one node two sockets stream one socket's rate;
    --numa distribute lets each read its own DRAM. advise tries each offload both ways on a
    machine of several sockets, and the distributed one is faster where the CPU's part is."""
    server = load_system("rtx-4090-2s-xeon-6454s")
    a = advise(server, "qwen3-235b-a22b", Workload(8192))
    llama = [c for c in a.search.choices if c.engine == "llamacpp"]
    spread = [c for c in llama if c.options.get("numa") == "distribute"]

    def key(c, options):
        return (c.weights, c.kv, tuple(sorted(options.items())))

    plain = {key(c, c.options): c for c in llama if "numa" not in c.options}
    assert spread and all(c.offload for c in spread)
    for c in spread:
        twin = plain[key(c, {k: v for k, v in c.options.items() if k != "numa"})]
        assert c.tpot_s < twin.tpot_s
        assert c.tpot_s == pytest.approx(_predict(server, a.search.model, c, Workload(8192)).tpot_s)
    best = next(r for r in a.rows if r["options"].get("numa"))
    assert "--numa distribute" in best["command"] and best["offload"].endswith("--numa distribute")
    assert dict(parse_command(best["command"], a.search.model).options) == best["options"]
    # one socket: nothing to distribute
    assert not any(c.options.get("numa") for c in _gpt_oss().search.choices)


def test_a_numa_command_comes_with_llama_cpp_s_page_cache_note():
    """llama.cpp's --numa help: drop the page cache before the first run with it."""
    from kvoffload.studies.advise import NUMA_NOTE

    server = advise(load_system("rtx-4090-2s-xeon-6454s"), "qwen3-235b-a22b", Workload(8192))
    assert server.to_json()["notes"] == [NUMA_NOTE] and "drop_caches" in NUMA_NOTE
    assert _gpt_oss().to_json()["notes"] == []
