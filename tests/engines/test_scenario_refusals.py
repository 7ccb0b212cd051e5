"""Scenarios the model would misread are refused in one line: fields an engine would drop, and
numbers beyond the plausible maxima of inputs/limits.py, checked before anything is computed."""

from __future__ import annotations

import dataclasses

import pytest

from kvoffload.engines import registry, scenario
from kvoffload.engines.each import vllm
from kvoffload.engines.scenario import ENGINES, parse_scenario, predict
from kvoffload.engines.spec import SET_BY_ENGINE, EngineSpec, EngineSpecError, PrefixCache
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.limits import MAX_BATCH, MAX_CONTEXT_TOKENS, MAX_EXPERTS, MAX_GENERATE_TOKENS
from tests.support.refusals import assert_refused

OTHERS = [e for e in ENGINES if e != "generic"]
BASE = {
    "hardware": "a100-80gb-sxm-pcie4",
    "model": "mixtral-8x7b",
    "workload": {"batch": 1, "prompt": 1024, "generate": 4},
}
# what each engine's refusal must point to: its option, or (no option) the generic engine
POINTS_TO = {
    ("attention", "llamacpp"): "options.no_kv_offload",
    ("attention", "vllm"): "engine: generic",
    ("attention", "flexgen"): "options.cpu_attention",
    ("attention", "zero-inference"): "options.kv_offload",
    ("attention", "hf-accelerate"): "engine: generic",
    ("attention", "infllm"): "options.topk",
    ("overlap", "llamacpp"): "engine: generic",
    ("overlap", "vllm"): "engine: generic",
    ("overlap", "flexgen"): "options.overlap",
    ("overlap", "zero-inference"): "engine: generic",
    ("overlap", "hf-accelerate"): "engine: generic",
    ("overlap", "infllm"): "engine: generic",
    ("attention", "sglang"): "engine: generic",
    ("overlap", "sglang"): "engine: generic",
    ("attention", "trtllm"): "engine: generic",
    ("overlap", "trtllm"): "engine: generic",
    ("attention", "ktransformers"): "options.optimize_config_path",
    ("overlap", "ktransformers"): "engine: generic",
}
VALUES = {"attention": ["gpu", "cpu"], "overlap": ["none", "pipeline", "perfect", "flexgen"]}


def _refusal(raw: dict) -> InputError:
    with pytest.raises(InputError) as err:
        parse_scenario(raw, name="s.yaml")
    return err.value


# -- fields an engine does not read -------------------------------------------------------------
@pytest.mark.parametrize("engine", OTHERS)
@pytest.mark.parametrize("field", ["attention", "overlap"])
def test_a_field_the_engine_sets_itself_is_refused_naming_what_to_use(field, engine):
    for value in VALUES[field]:  # even the value the engine would pick: it is not read
        err = _refusal({**BASE, "engine": engine, field: value})
        assert err.file == "s.yaml" and err.field == field
        assert f"engine '{engine}' sets {field} itself" in err.problem
        assert POINTS_TO[field, engine] in err.problem, err.problem


def test_every_engine_says_what_expresses_each_field_it_sets_itself():
    for field in SET_BY_ENGINE:
        assert {e for e in OTHERS if field in ENGINES[e].refuses} == set(OTHERS), field


# -- the registry: one declaration per engine, checked when it is built ---------------------------
def _declaration_error(spec: EngineSpec) -> str:
    with pytest.raises(EngineSpecError) as err:
        registry.engine_table(ENGINES["generic"], spec)
    return str(err.value)


def test_a_declaration_missing_a_field_is_refused_naming_the_engine_and_the_field():
    spec = EngineSpec(  # pin_option left out
        name="newengine",
        options=None,
        predict=vllm.predict,
        placement_option="options.x",
        refuses=vllm.ENGINE.refuses,
        routing_ignored=((), ""),
    )
    message = _declaration_error(spec)
    assert message.startswith("engine 'newengine': EngineSpec.pin_option is missing"), message


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"refuses": {"attention": "say options.x"}}, "refuses"),  # no word for overlap:
        ({"predict": None}, "predict"),
        ({"memory": 3}, "memory"),
        ({"options": dict}, "options"),
        ({"pin_option": "pinned"}, "pin_option"),  # vLLM has no such option
        ({"placement_option": ""}, "placement_option"),
        ({"routing_ignored": (("experts",), "no routing")}, "routing_ignored"),
        ({"routing_ignored": (("stream",), "")}, "routing_ignored"),
        ({"prefix_cache": ""}, "prefix_cache"),
        ({"prefix_cache": 3}, "prefix_cache"),
        ({"prefix_cache": PrefixCache(tiers=("cpu",), rule=vllm.cache_rule)}, "prefix_cache"),
        ({"prefix_cache": PrefixCache(tiers=("gpu", "ssd"), rule=vllm.cache_rule)}, "prefix_cache"),
        ({"prefix_cache": PrefixCache(tiers=("gpu", "cpu"), rule=None)}, "prefix_cache"),
    ],
)
def test_a_declaration_of_the_wrong_shape_is_refused_naming_the_field(change, field):
    message = _declaration_error(dataclasses.replace(vllm.ENGINE, **change))
    assert message.startswith(f"engine 'vllm': EngineSpec.{field} "), message


def test_an_engine_declared_twice_is_refused():
    with pytest.raises(EngineSpecError, match="'vllm' is declared twice"):
        registry.engine_table(vllm.ENGINE, vllm.ENGINE)


# the engines the registry names first, in this order (error messages list them so); any engine
# added later follows them, sorted, so that adding one changes no test
KNOWN = ["generic", "llamacpp", "vllm", "flexgen", "zero-inference", "hf-accelerate", "infllm",
         "sglang", "trtllm"]  # fmt: skip


def test_the_registry_lists_every_engine_once_in_the_order_errors_name_them():
    names = list(ENGINES)
    assert names[: len(KNOWN)] == KNOWN and names[len(KNOWN) :] == sorted(names[len(KNOWN) :])
    assert "ktransformers" in names and len(set(names)) == len(names)
    assert all(name == spec.name for name, spec in ENGINES.items())


def test_an_unknown_engine_is_refused_in_one_line_listing_the_engines():
    err = _refusal({**BASE, "engine": "nope"})
    assert err.field == "engine" and err.problem == (
        f"engine 'nope' is not known; engines: {', '.join(ENGINES)}"
    )
    assert err.problem.startswith(
        "engine 'nope' is not known; engines: generic, llamacpp, vllm, flexgen, "
        "zero-inference, hf-accelerate, infllm, sglang, trtllm"
    )


@pytest.mark.parametrize("field", ["attention", "overlap"])
def test_the_generic_engine_reads_those_fields(field):
    tpot = {
        v: predict(
            parse_scenario({**BASE, field: v, "placement": {"kv": {"cpu": 1.0}}}), check=False
        ).tpot_s
        for v in VALUES[field]
    }
    assert len(set(tpot.values())) > 1, tpot  # it reads them: they change the answer


@pytest.mark.parametrize(
    ("engine", "routing", "points_to"),
    [
        ("flexgen", {"effective_experts": 8}, "no routing"),
        ("flexgen", {"stream": "routed"}, "no routing"),
        ("llamacpp", {"stream": "routed"}, "options.n_cpu_moe"),
        ("llamacpp", {"gpu_hit_rate": 0.5}, "options.n_cpu_moe"),
        ("infllm", {"stream": "all"}, "leave routing.stream"),
    ],
)
def test_routing_an_engine_does_not_read_is_refused(engine, routing, points_to):
    err = _refusal({**BASE, "engine": engine, "routing": routing})
    (key,) = routing
    assert err.field == f"routing.{key}" and f"does not read routing.{key}" in err.problem
    assert points_to in err.problem, err.problem


@pytest.mark.parametrize("engine", ["llamacpp", "vllm", "zero-inference", "hf-accelerate"])
def test_routing_an_engine_reads_is_accepted(engine):
    sc = parse_scenario({**BASE, "engine": engine, "routing": {"effective_experts": 4}})
    assert sc.setup.routing.effective_experts == 4


@pytest.mark.parametrize("engine", ENGINES)
def test_pinned_applies_to_every_engine(engine):
    """The README's contract: `pinned:` is honoured by every engine, so never refused."""
    for pinned in (True, False):
        sc = parse_scenario({**BASE, "engine": engine, "pinned": pinned})
        assert sc.pinned is pinned


def test_a_refused_field_exits_2_in_one_line_naming_the_file(cli_process, write):
    path = write("s.yaml", "hardware: t4-pcie3\nmodel: opt-6.7b\nengine: flexgen\n"
                 "workload: {batch: 1, prompt: 512}\nattention: cpu\n")  # fmt: skip
    assert_refused(cli_process("predict", path), path, "attention: engine 'flexgen' sets")


# -- an engine's own refusals name the file -----------------------------------------------------
def test_flexgen_finding_no_policy_names_the_file(cli_process, write):
    path = write("s.yaml", "hardware: rtx-3070-ti-desktop\nmodel: bloom-176b\nengine: flexgen\n"
                 "workload: {batch: 1, prompt: 2000, generate: 8}\n")  # fmt: skip
    assert_refused(cli_process("predict", path), path, "options: FlexGen's policy search found no")


def test_an_engine_refusing_the_machine_names_the_file():
    sc = parse_scenario(
        {**BASE, "model": "llama-3.1-8b", "engine": "infllm",
         "hardware": {"base": "a100-80gb-sxm-pcie4", "gpu": {"base": "a100-80gb-sxm", "count": 2}}},
        name="two.yaml",
    )  # fmt: skip
    with pytest.raises(InputError) as err:
        predict(sc, name="two.yaml")
    assert err.value.file == "two.yaml" and err.value.field == "hardware.gpu.count"


# -- bounds -------------------------------------------------------------------------------------
def _workload(**w: int) -> dict:
    return {**BASE, "model": "llama-3.1-8b", "workload": {"batch": 1, "prompt": 16, **w}}


@pytest.mark.parametrize(
    ("workload", "field", "bound"),
    [
        ({"batch": MAX_BATCH + 1}, "workload.batch", MAX_BATCH),
        ({"prompt": MAX_CONTEXT_TOKENS + 1}, "workload.prompt", MAX_CONTEXT_TOKENS),
        ({"generate": MAX_GENERATE_TOKENS + 1}, "workload.generate", MAX_GENERATE_TOKENS),
        ({"prompt": MAX_CONTEXT_TOKENS, "generate": 1}, "workload", MAX_CONTEXT_TOKENS),
        ({"batch": 10**40}, "workload.batch", MAX_BATCH),
    ],
)
def test_a_workload_beyond_its_plausible_maximum_is_refused(workload, field, bound):
    err = _refusal(_workload(**workload))
    assert err.field == field and f"is more than {bound:,}" in err.problem, str(err)


def test_a_huge_number_is_described_not_printed():
    err = _refusal(_workload(batch=10**40))
    assert err.problem.startswith("a 41-digit number is more than"), err.problem


def test_the_bounds_come_before_the_machine_and_the_model_are_read(monkeypatch):
    def never(*_args, **_kwargs):
        raise AssertionError("read before the workload was checked")

    monkeypatch.setattr(scenario, "load_system", never)
    monkeypatch.setattr(scenario, "load_model", never)
    err = _refusal(_workload(batch=MAX_BATCH + 1))
    assert err.field == "workload.batch"


def test_the_maxima_themselves_are_accepted():
    sc = parse_scenario(
        {
            **_workload(batch=MAX_BATCH),
            "model": "llama-4-scout",
            "routing": {"effective_experts": 16},
        }
    )
    assert sc.batch == MAX_BATCH


def test_effective_experts_beyond_its_maximum_is_refused():
    err = _refusal({**BASE, "routing": {"effective_experts": MAX_EXPERTS + 1}})
    assert err.field == "routing.effective_experts" and f"{MAX_EXPERTS:,}" in err.problem


def test_a_bound_refusal_exits_2_in_one_line(cli_process, write):
    path = write("s.yaml", "hardware: t4-pcie3\nmodel: opt-6.7b\n"
                 f"workload: {{batch: {MAX_BATCH + 1}, prompt: 512}}\n")  # fmt: skip
    assert_refused(cli_process("predict", path), path, f"workload.batch: {MAX_BATCH + 1:,}")


# -- reuse: and traffic: on an engine's prefix cache ---------------------------------------------
LLAMA_H100 = {
    "hardware": "h100-sxm-pcie5",
    "model": "llama-3.1-8b",
    "workload": {"batch": 1, "prompt": 10_000, "generate": 1},
}
TRAFFIC = {"sessions": 200, "prefix_tokens": 8000, "new_tokens": 200, "turn_gap_s": 30}


@pytest.mark.parametrize("engine", ["generic", "flexgen", "zero-inference", "hf-accelerate"])
@pytest.mark.parametrize(
    "block", [{"reuse": {"cached_tokens": 512}}, {"traffic": {**TRAFFIC, "arrival_rate": 1}}]
)
def test_an_engine_without_a_prefix_cache_refuses_reuse_naming_the_ones_that_have(engine, block):
    err = _refusal({**LLAMA_H100, "engine": engine, **block})
    assert err.file == "s.yaml" and err.field == next(iter(block))
    assert f"engine '{engine}' has no prefix cache" in err.problem
    assert "engine: vllm" in err.problem and "sglang" in err.problem


@pytest.mark.parametrize(
    ("extra", "field", "fragment"),
    [
        ({"reuse": {"cached_tokens": 10_001}}, "reuse.cached_tokens", "more than the prompt"),
        ({"reuse": {"cached_tokens": MAX_CONTEXT_TOKENS + 1}}, "reuse.cached_tokens", "maximum"),
        ({"reuse": {"cached_tokens": -1}}, "reuse.cached_tokens", "greater than or equal"),
        ({"reuse": {"cached_tokens": 8, "tier": "ssd"}}, "reuse.tier", "'gpu', 'cpu' or 'disk'"),
        ({"reuse": {"cached_tokens": 8, "tier": "disk"}}, "reuse.tier", "no disk tier"),
        (
            {"reuse": {"cached_tokens": 8}, "options": {"kv_offloading_size": 500}},
            "options.kv_offloading_size",
            "more than the 512 GB",
        ),
        ({"reuse": {"cached_tokens": 8}, "options": {}}, "reuse.tier", "kv_offloading_size"),
        (
            {"reuse": {"cached_tokens": 8}, "options": {"prefix_hit_rate": 0.5}},
            "options.prefix_hit_rate",
            "deprecated",
        ),
        ({"traffic": {**TRAFFIC, "arrival_rate": 7}}, "traffic.arrival_rate", "sooner than"),
        ({"traffic": {**TRAFFIC, "arrival_rate": 0}}, "traffic.arrival_rate", "greater than"),
        ({"traffic": {**TRAFFIC, "arrival_rate": 2e6}}, "traffic.arrival_rate", "less than"),
        ({"traffic": {**TRAFFIC, "arrival_rate": 1, "turn_gap_s": -1}}, "traffic.turn_gap_s", ""),
        ({"traffic": {**TRAFFIC, "arrival_rate": 1, "sessions": 0}}, "traffic.sessions", ""),
        (
            {"traffic": {**TRAFFIC, "arrival_rate": 1, "sessions": (1 << 24) + 1}},
            "traffic.sessions",
            "maximum",
        ),
        (
            {"traffic": {**TRAFFIC, "arrival_rate": 1, "prefix_tokens": 200_000}},
            "traffic.prefix_tokens",
            "",
        ),
        ({"traffic": {**TRAFFIC, "arrival_rate": 1, "speed": 2}}, "traffic.speed", ""),
    ],
)
def test_a_bad_reuse_or_traffic_block_is_refused_in_one_line(extra, field, fragment):
    raw = {**LLAMA_H100, "engine": "vllm", "options": {"kv_offloading_size": 100}, **extra}
    err = _refusal(raw)
    assert err.file == "s.yaml" and err.field == field, (err.field, err.problem)
    assert fragment in err.problem and "\n" not in str(err)
