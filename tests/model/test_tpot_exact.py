"""TPOT is the exact mean over every generated token: the fast path against a loop over tokens."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model
from kvoffload.model import decode

SYSTEMS = [load_system(s) for s in ("a100-80gb-sxm-pcie4", "t4-pcie3", "gh200-nvlink-c2c")]
MODELS = {
    m: load_model(m)
    for m in (
        "llama-3.1-8b",
        "gemma-2-9b",  # sliding window 4096 on every other layer
        "gpt-oss-20b",  # sliding window 128, MoE
        "qwen3-next-80b-a3b",  # gated DeltaNet (recurrent state) beside attention
        "nemotron-h-56b",  # Mamba-2 layers, attention layers and MLP-only blocks
        "deepseek-v3",  # MLA, MoE
    )
}
REL = 1e-12


def _brute(setup: decode.Setup, prompt, generate: int, batch, mode: str) -> np.ndarray:
    """Return the mean over every token, one step at a time."""
    p = np.asarray(prompt, dtype=np.float64)
    steps = [decode.step(setup, p + i, batch, mode).total for i in range(generate)]
    return np.mean(steps, axis=0)


def _brute_streams(setup: decode.Setup, prompt, generate: int, batch) -> dict[str, np.ndarray]:
    p = np.asarray(prompt, dtype=np.float64)
    steps = [decode.step(setup, p + i, batch).streams for i in range(generate)]
    return {k: np.mean([s[k] for s in steps], axis=0) for k in decode.STREAMS}


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    return bool(np.all(np.abs(got - want) <= REL * np.abs(want)))


shares = st.tuples(st.floats(0, 1), st.floats(0, 1)).map(
    lambda t: decode.Split(t[0] * (1 - t[1]), (1 - t[0]) * (1 - t[1]), t[1])
)
setups = st.builds(
    lambda system, model, w, c, att, mode, pinned: decode.Setup(
        system, MODELS[model], placement=decode.Placement(w, c, att, mode, pinned)
    ),
    st.sampled_from(SYSTEMS),
    st.sampled_from(sorted(MODELS)),
    shares,
    shares,
    st.sampled_from(["gpu", "cpu"]),
    st.sampled_from(decode.OVERLAP_MODES),
    st.booleans(),
)
# prompts anywhere, and near the windows (128, 4096) and 0, where the held tokens stop growing
prompts = st.lists(
    st.one_of(st.integers(1, 300_000), st.integers(1, 400), st.integers(3_700, 4_200)),
    min_size=1,
    max_size=6,
)


@pytest.mark.parametrize("brute_steps", [0, decode.BRUTE_STEPS])
@settings(max_examples=60, deadline=None)
@given(
    setup=setups,
    prompt=prompts,
    generate=st.integers(1, 300),
    batch=st.lists(st.integers(1, 512), min_size=1, max_size=3),
)
def test_tpot_is_the_mean_over_every_token(brute_steps, setup, prompt, generate, batch):
    # brute_steps 0: every sweep takes the fast path, however small
    p, b = np.array(prompt)[:, None], np.array(batch)[None, :]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decode.exact_mean, "BRUTE_STEPS", brute_steps)
        got = decode.tpot(setup, p, generate, b)
    assert got.shape == (len(prompt), len(batch))
    assert _close(got, _brute(setup, p, generate, b, setup.placement.overlap))


@settings(max_examples=25, deadline=None)
@given(setup=setups, prompt=prompts, generate=st.integers(17, 300), batch=st.integers(1, 64))
def test_every_mode_and_stream_is_the_mean_over_every_token(setup, prompt, generate, batch):
    p = np.array(prompt)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decode.exact_mean, "BRUTE_STEPS", 0)
        mean = decode.mean_step(setup, p, generate, batch)
    for mode in decode.OVERLAP_MODES:
        assert _close(mean.by_overlap[mode], _brute(setup, p, generate, batch, mode))
    want = _brute_streams(setup, p, generate, batch)
    for k in decode.STREAMS:
        assert _close(mean.streams[k], want[k])


@pytest.mark.parametrize("model", ["gemma-2-9b", "llama-3.1-8b", "qwen3-next-80b-a3b"])
def test_spilled_kv_shares_are_followed_per_point(model):
    # KV on the GPU while it fits: the shares are arrays over the sweep, fixed over the tokens
    weights = decode.Split(0.4, 0.6, 0.0)  # room on the GPU for some KV, also for qwen3-next
    setup = decode.Setup(
        SYSTEMS[0], MODELS[model], placement=decode.Placement(weights, overlap="pipeline")
    )
    prompt = np.array([1_000, 60_000, 200_000, 500_000])[:, None]
    batch = np.array([1, 8, 32])[None, :]
    spilled = decode.spill(setup, prompt, batch)
    assert np.ptp(spilled.placement.kv.gpu) > 0  # some points spill, some do not
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decode.exact_mean, "BRUTE_STEPS", 0)
        got = decode.tpot(spilled, prompt, 100, batch)
    assert _close(got, _brute(spilled, prompt, 100, batch, "pipeline"))


@pytest.mark.parametrize("mode", decode.OVERLAP_MODES)
def test_intervals_with_a_kink_are_split_and_stay_exact(mode):
    # every prompt from 1 to 6,000: the tokens of many cross gemma's 4096 window and the points
    # where one stream overtakes another, so the split path runs
    setup = decode.Setup(
        SYSTEMS[1],
        MODELS["gemma-2-9b"],
        placement=decode.Placement(kv=decode.Split(0.3, 0.7, 0.0), overlap=mode),
    )
    prompt, batch = np.arange(1, 6_000, 3), np.array([[16], [256]])
    calls = []
    split = decode._split
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decode.exact_mean, "_split", lambda *a: calls.append(a[2].size) or split(*a))
        got = decode.tpot(setup, prompt, 300, batch)
    assert calls, "no interval needed splitting: the test no longer exercises the split path"
    assert _close(got, _brute(setup, prompt, 300, batch, mode))


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.tuples(st.floats(-5, 5), st.floats(-1e3, 1e3)), min_size=1, max_size=5),
    window=st.integers(1, 400),
    jump=st.floats(0, 10),
    prompt=st.lists(st.integers(0, 500), min_size=1, max_size=5),
    generate=st.integers(1, 300),
)
def test_token_mean_of_any_convex_piecewise_linear_function(lines, window, jump, prompt, generate):
    # max of lines in min(context, window), plus a jump above 0: convex and piecewise linear
    # between the window and 0, with kinks anywhere (not on integers)
    a = np.array([x for x, _ in lines])[:, None, None]
    c = np.array([y for _, y in lines])[:, None, None]

    def f(context: np.ndarray) -> np.ndarray:
        held = np.minimum(context, window)
        return np.max(a * held + c, axis=0) + jump * (context > 0) + 1e4

    def fn(point: np.ndarray, context: np.ndarray) -> np.ndarray:
        return f(context)[None]

    p = np.array(prompt, dtype=np.float64)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decode.exact_mean, "BRUTE_STEPS", 0)
        got = decode.token_mean(fn, p, generate, [window])[0]
    want = np.mean([f(p[None] + i)[0] for i in range(generate)], axis=0)
    assert _close(got, want)


def test_a_long_sweep_evaluates_a_few_tokens_per_point():
    # the fast path looks at the two ends and the middle of each point's tokens (and a few more
    # where a kink falls inside), never at all 32
    setup = decode.Setup(
        SYSTEMS[0],
        MODELS["llama-3.1-8b"],
        placement=decode.Placement(kv=decode.Split(0.25, 0.75, 0.0), overlap="pipeline"),
    )
    contexts = np.linspace(1_000, 1_000_000, 100)[:, None]
    batches = np.arange(1, 101)[None, :]
    evaluated = []
    token_mean = decode.token_mean

    def counting(fn, *args):
        return token_mean(lambda point, ctx: evaluated.append(ctx.size) or fn(point, ctx), *args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decode.exact_mean, "token_mean", counting)
        got = decode.tpot(setup, contexts, 32, batches)
    assert sum(evaluated) <= 3.2 * contexts.size * batches.size
    assert _close(got, _brute(setup, contexts, 32, batches, "pipeline"))


def test_generate_below_one_is_refused():
    setup = decode.Setup(SYSTEMS[0], MODELS["llama-3.1-8b"])
    with pytest.raises(ValueError, match="generate must be at least 1"):
        decode.tpot(setup, 1000, 0)
