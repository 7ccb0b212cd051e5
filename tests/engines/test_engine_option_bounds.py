"""Engine options stop at the plausible maxima of inputs/limits.py: one past refused, the maximum kept.

Through the command line, as a user meets them: ``kvoffload predict FILE`` exits 2 in one line
naming the file, the option and the maximum.
"""

from __future__ import annotations

import pytest
import yaml

from kvoffload.engines.each import vllm
from kvoffload.engines.scenario import parse_scenario
from kvoffload.inputs.limits import MAX_BATCH, MAX_CONTEXT_TOKENS, MAX_LAYERS, MAX_PARAMS
from tests.support.refusals import assert_refused

LLAMA = {"hardware": "a100-80gb-sxm-pcie4", "model": "llama-3.1-8b"}
WORKLOAD = {"batch": 1, "prompt": 512, "generate": 8}
# (engine, option, maximum, the rest of the scenario)
BOUNDS = [
    ("flexgen", "gpu_batch_size", MAX_BATCH, {"hardware": "t4-pcie3", "model": "opt-6.7b"}),
    # -ngl counts the output layer: every layer of the deepest plausible model, and its head
    ("llamacpp", "n_gpu_layers", MAX_LAYERS + 1, LLAMA),
    ("llamacpp", "n_cpu_moe", MAX_LAYERS + 1, {**LLAMA, "model": "mixtral-8x7b"}),
    ("infllm", "n_local", MAX_CONTEXT_TOKENS, LLAMA),
    ("infllm", "n_init", MAX_CONTEXT_TOKENS, LLAMA),
    ("vllm", "cpu_offload_gb", vllm.MAX_HOST_GIB, LLAMA),
    ("vllm", "kv_offloading_size", vllm.MAX_HOST_GIB, LLAMA),
]
IDS = [f"{engine}.{option}" for engine, option, _, _ in BOUNDS]


def _text(engine: str, option: str, value: int, rest: dict) -> str:
    raw = {**rest, "engine": engine, "workload": WORKLOAD, "options": {option: value}}
    return yaml.safe_dump(raw)


@pytest.mark.parametrize(("engine", "option", "maximum", "rest"), BOUNDS, ids=IDS)
def test_one_past_the_maximum_is_refused_with_exit_2(cli, write, engine, option, maximum, rest):
    path = write("s.yaml", _text(engine, option, maximum + 1, rest))
    r = cli("predict", path)
    assert_refused(r, path, f"options.{option}: Input should be less than or equal to {maximum}")


@pytest.mark.parametrize(("engine", "option", "maximum", "rest"), BOUNDS, ids=IDS)
def test_the_maximum_itself_is_accepted(engine, option, maximum, rest):
    raw = yaml.safe_load(_text(engine, option, maximum, rest))
    sc = parse_scenario(raw, name="s.yaml")
    assert getattr(sc.options, option) == maximum


@pytest.mark.parametrize(
    ("engine", "option", "rest"),
    [
        ("llamacpp", "n_gpu_layers", LLAMA),
        ("llamacpp", "n_cpu_moe", {**LLAMA, "model": "mixtral-8x7b"}),
        ("vllm", "cpu_offload_gb", LLAMA),
    ],
)
def test_the_maximum_runs_through_the_command_line(cli, write, engine, option, rest):
    # beyond the model's own layers or weights these options change nothing: it predicts (exit 0)
    maximum = next(m for e, o, m, _ in BOUNDS if (e, o) == (engine, option))
    at_max = cli("predict", write("max.yaml", _text(engine, option, maximum, rest)), "--json")
    assert at_max.code == 0, at_max.err
    model_max = {"n_gpu_layers": 33, "n_cpu_moe": 32, "cpu_offload_gb": 16}[option]
    within = cli("predict", write("own.yaml", _text(engine, option, model_max, rest)), "--json")
    assert within.code == 0, within.err
    assert at_max.json()["tpot_ms"] == within.json()["tpot_ms"]


def test_the_host_gib_bound_is_the_largest_plausible_model_at_fp32():
    assert vllm.MAX_HOST_GIB == MAX_PARAMS * 4 // 2**30 == 4_194_304


def test_a_refusal_exits_2_as_a_process(cli_process, write):
    path = write("s.yaml", _text("llamacpp", "n_gpu_layers", MAX_LAYERS + 2, LLAMA))
    assert_refused(cli_process("predict", path), path, "options.n_gpu_layers")
