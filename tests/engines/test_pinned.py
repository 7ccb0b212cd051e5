"""The scenario's `pinned:` reaches every engine's copies, and may not contradict an engine option."""

import pytest

from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError

BASE = {
    "hardware": "t4-pcie3",  # a profile with a measured pageable rate below the pinned one
    "model": "opt-6.7b",
    "precision": {"weights": "fp16", "kv": "fp16"},
    "workload": {"batch": 1, "prompt": 512, "generate": 8},
}
CASES = {
    "vllm": {"cpu_offload_gb": 4.0},
    "zero-inference": {"weights": "cpu"},
    "hf-accelerate": {"weights": "cpu"},
    "flexgen": {"percent": [50, 50, 100, 0, 100, 0], "gpu_batch_size": 1, "num_gpu_batches": 1},
    "llamacpp": {"n_gpu_layers": 20},
    "infllm": {"n_local": 256, "topk": 2, "cached_blocks": 0},
}


def _run(engine: str, **extra):
    raw = {**BASE, "engine": engine, "options": CASES[engine], **extra}
    if engine == "infllm":
        raw["workload"] = {**BASE["workload"], "prompt": 1900}
    return predict(parse_scenario(raw), check=False)


@pytest.mark.parametrize("engine", list(CASES))
def test_pageable_copies_are_never_faster_and_the_placement_says_which(engine):
    pinned, pageable = _run(engine, pinned=True), _run(engine, pinned=False)
    assert pinned.resolved.pinned is True and pageable.resolved.pinned is False
    assert pageable.tpot_s + pageable.ttft_s > pinned.tpot_s + pinned.ttft_s
    assert pageable.tpot_s >= pinned.tpot_s


@pytest.mark.parametrize(
    ("engine", "default"),
    [("vllm", True), ("zero-inference", False), ("hf-accelerate", False), ("flexgen", True),
     ("llamacpp", True), ("infllm", True)],
)  # fmt: skip
def test_without_pinned_each_engine_keeps_its_own_default(engine, default):
    assert _run(engine).resolved.pinned is default


@pytest.mark.parametrize(
    ("engine", "option"), [("zero-inference", "pinned"), ("flexgen", "pin_weight")]
)
def test_pinned_contradicting_the_engines_own_option_is_refused(engine, option):
    raw = {**BASE, "engine": engine, "options": {**CASES[engine], option: True}, "pinned": False}
    with pytest.raises(InputError, match=f"contradicts options.{option}"):
        parse_scenario(raw, name="s.yaml")
    # saying the same thing twice is fine
    parse_scenario({**raw, "pinned": True}, name="s.yaml")
