"""Every engine's TPOT is the exact mean over all generated tokens, not a sample of them.

The reference is brute force: the engine's own step at each context the generation passes through
(its prediction for that context with one token generated), averaged. The engines compute the
mean with ``decode.token_mean``, which is exact for quantities convex and piecewise linear in the
context between the windows; its fast path (chords and kinks) is forced here too, so each engine's
step is checked to have that shape, windows crossed included (gemma-2-9b: 4096, gpt-oss-20b: 128).
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.model import decode
from kvoffload.model.prediction import Prediction

REL = 1e-9
GENERATE = (1, 7, 17, 40, 300)
ONE = "a100-80gb-sxm-pcie4"
TWO = {"base": ONE, "gpu": {"base": "a100-80gb-sxm", "count": 2}}
FOUR = {"base": ONE, "gpu": {"base": "a100-80gb-sxm", "count": 4}}

# name: (hardware, model, weights, engine, options, batch, prompt)
SCENARIOS = {
    # llama.cpp: partial offload, the KV in host memory, MoE experts on the CPU, two GPUs
    "llamacpp-partial": ("rtx-3070-ti-desktop", "llama-3.1-8b", "q4_k_m", "llamacpp",
                         {"n_gpu_layers": 20}, 1, 512),
    "llamacpp-window-no-kv-offload": ("rtx-3070-ti-desktop", "gemma-2-9b", "q4_k_m", "llamacpp",
                                      {"n_gpu_layers": 30, "no_kv_offload": True}, 2, 4080),
    "llamacpp-moe-window": (ONE, "gpt-oss-20b", "mxfp4", "llamacpp", {"n_cpu_moe": 10}, 4, 100),
    "llamacpp-two-gpus": (TWO, "llama-3.1-8b", "q4_k_m", "llamacpp", {}, 8, 2048),
    # vLLM: tensor parallel (its own step), and one GPU (the step model)
    "vllm-tp2-offload": (TWO, "llama-3.1-8b", "bf16", "vllm", {"cpu_offload_gb": 4}, 2, 2048),
    "vllm-tp2-window": (TWO, "gemma-2-9b", "bf16", "vllm", {"cpu_offload_gb": 2}, 8, 4080),
    "vllm-tp4-moe-window": (FOUR, "gpt-oss-20b", "bf16", "vllm", {}, 16, 100),
    "vllm-one-gpu": (ONE, "llama-3.1-8b", "bf16", "vllm", {"cpu_offload_gb": 4}, 4, 2048),
    # ZeRO-Inference: one rank per GPU (its own step), and one GPU (the step model)
    "zero-ranks-kv-offload": (TWO, "llama-3.1-8b", "bf16", "zero-inference",
                              {"weights": "gpu", "kv_offload": True}, 64, 32000),
    "zero-ranks-disk-window": (TWO, "gemma-2-9b", "bf16", "zero-inference",
                               {"weights": "disk"}, 2, 4080),
    "zero-ranks-4-moe-window": (FOUR, "gpt-oss-20b", "bf16", "zero-inference",
                                {"weights": "cpu"}, 8, 100),
    "zero-one-gpu": (ONE, "llama-3.1-8b", "bf16", "zero-inference",
                     {"weights": "gpu", "kv_offload": True}, 16, 32000),
    # the generic engine (predict_setup's mean step), a window crossed
    "generic-window": (ONE, "gemma-2-9b", "bf16", "generic", {}, 4, 4080),
}  # fmt: skip


def _raw(name: str, prompt: int, generate: int) -> dict:
    hardware, model, weights, engine, options, batch, _ = SCENARIOS[name]
    raw = {
        "hardware": hardware,
        "model": model,
        "engine": engine,
        "precision": {"weights": weights, "kv": "fp16"},
        "workload": {"batch": batch, "prompt": prompt, "generate": generate},
        "options": options,
    }
    if engine == "generic":
        del raw["options"]
        raw |= {"placement": {"kv": {"gpu": 0.3, "cpu": 0.7}}, "overlap": "pipeline"}
    return raw


def _predict(name: str, prompt: int, generate: int) -> Prediction:
    return predict(parse_scenario(_raw(name, prompt, generate), name=name), check=False)


@cache
def _steps(name: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Return the engine's step and streams at every context from the prompt on, one at a time."""
    prompt = SCENARIOS[name][-1]
    each = [_predict(name, prompt + i, 1) for i in range(max(GENERATE))]
    steps = np.array([p.tpot_s for p in each])
    streams = {k: np.array([p.streams_s[k] for p in each]) for k in decode.STREAMS}
    return steps, streams


def _close(got: float, want: float) -> bool:
    return abs(got - want) <= REL * abs(want)


@pytest.mark.parametrize("brute_steps", [0, decode.BRUTE_STEPS])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_tpot_and_streams_are_the_mean_over_every_generated_token(name, brute_steps):
    # brute_steps 0: token_mean takes its fast path (chords, kinks split) however few the tokens
    steps, streams = _steps(name)
    prompt = SCENARIOS[name][-1]
    for generate in GENERATE:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(decode.exact_mean, "BRUTE_STEPS", brute_steps)
            got = _predict(name, prompt, generate)
        want = float(np.mean(steps[:generate]))
        assert _close(got.tpot_s, want), (generate, got.tpot_s, want)
        for k in decode.STREAMS:
            mean = float(np.mean(streams[k][:generate]))
            assert _close(got.streams_s[k], mean), (generate, k, got.streams_s[k], mean)


# ZeRO streaming weights: the copies of each layer outlast its compute, so the step is flat
FLAT_STEP = {"zero-ranks-disk-window", "zero-ranks-4-moe-window"}


def test_the_steps_vary_and_a_long_generation_is_not_its_first_step():
    # the check above is not vacuous: each engine's step (or, where the weight copies hide the
    # compute, its GPU stream) grows with the context, and where a window is crossed the step
    # stops growing with it on those layers
    for name in SCENARIOS:
        steps, streams = _steps(name)
        assert streams["gpu"][-1] > streams["gpu"][0] or streams["cpu"][-1] > streams["cpu"][0]
        if name not in FLAT_STEP:
            assert steps[-1] > steps[0], name
            assert _predict(name, SCENARIOS[name][-1], 300).tpot_s > steps[0], name
    steps, _ = _steps("llamacpp-window-no-kv-offload")  # gemma-2-9b: half its layers hold 4096
    before, after = np.diff(steps[:16]), np.diff(steps[17:40])
    assert np.all(after < before.min())


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_generation_longer_than_the_brute_force_limit_is_exact(name):
    # beyond decode.BRUTE_STEPS tokens token_mean takes its fast path on its own; the reference
    # evaluates the engine's step at every one of the 5,000 tokens (in one call) and averages.
    # From at most 1,000 tokens, within gemma-2-9b's 8,192 and across its 4,096 window
    prompt, generate = min(SCENARIOS[name][-1], 1_000), decode.BRUTE_STEPS + 904
    got = _predict(name, prompt, generate)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decode.exact_mean, "BRUTE_STEPS", 10**9)
        want = _predict(name, prompt, generate)
    assert _close(got.tpot_s, want.tpot_s), (got.tpot_s, want.tpot_s)
    for k in decode.STREAMS:
        assert _close(got.streams_s[k], want.streams_s[k]), k
