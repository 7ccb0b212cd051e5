"""A request with a cached prefix: whole blocks reloaded, the new tokens prefilled over the prefix."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model
from kvoffload.model import decode, kv, reuse

H100 = load_system("h100-sxm-pcie5")
LLAMA = decode.Setup(H100, load_model("llama-3.1-8b"))
GEMMA = decode.Setup(H100, load_model("gemma-2-9b"))  # sliding-window layers
HYBRID = decode.Setup(H100, load_model("qwen3-next-80b-a3b"))  # recurrent state beside attention
RULE = reuse.Reload(16, reuse.CopyPath(3.5e-6), "serial", 1e-3)
LAYERWISE = reuse.Reload(
    1, reuse.CopyPath(0.25e-6, 0.93), "layerwise", 0.0, item_spans_layers=False
)


def test_nothing_cached_is_the_plain_prefill_bit_for_bit():
    p = np.array([1, 100, 10_000, 131_000])
    for setup in (LLAMA, GEMMA, HYBRID):
        r = reuse.ttft_with_prefix(setup, p, 0, "cpu", RULE)
        assert np.array_equal(r.ttft, decode.ttft(setup, p))
        assert np.array_equal(r.recompute, r.ttft)
        assert not r.load.any() and not r.load_bytes.any() and not r.hit_tokens.any()


def test_hits_are_whole_blocks_and_leave_the_last_token_to_compute():
    assert reuse.hit_tokens(10_000, 9_984, RULE) == 9_984
    assert reuse.hit_tokens(10_000, 10_000, RULE) == 9_984  # 9,999 rounds down to 624 blocks
    assert reuse.hit_tokens(10_000, 9_999, RULE) == 9_984
    assert reuse.hit_tokens(10_000, 15, RULE) == 0
    assert reuse.hit_tokens(10_000, 50_000, RULE) == 9_984  # never past the prompt
    whole = reuse.Reload(16, RULE.copy, recompute_last=False)
    assert reuse.hit_tokens(10_000, 10_000, whole) == 10_000


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 200_000), st.floats(0, 1), st.sampled_from([LLAMA, GEMMA, HYBRID]))
def test_bytes_are_conserved_between_the_reload_and_the_new_tokens(prompt, share, setup):
    cached = int(prompt * share)
    r = reuse.ttft_with_prefix(setup, prompt, cached, "cpu", RULE)
    hit = int(r.hit_tokens)
    tokens = reuse.cache_bytes(setup, prompt) - reuse.cache_bytes(setup, hit)
    # what the prompt's cache holds is what was reloaded plus what the new tokens add
    assert r.load_bytes + tokens == reuse.cache_bytes(setup, prompt)
    if not setup.model.windows.size or np.all(np.isinf(setup.model.windows.astype(float))):
        assert r.load_bytes == hit * kv.bytes_per_token(setup.model)


def test_a_long_prompt_from_host_memory_beats_recomputing_it():
    r = reuse.ttft_with_prefix(LLAMA, 10_000, 9_984, "cpu", RULE)
    assert 0 < r.load < r.recompute and r.ttft < r.recompute
    # the 16 new tokens' prefill reads the weights and the cached prefix once
    assert r.prefill_new >= decode.step_weight_bytes(LLAMA.model, LLAMA.weights) / (
        H100.gpu.streaming_bandwidth
    )


def test_a_gpu_hit_costs_no_copy_and_disk_is_never_faster_than_host():
    gpu = reuse.ttft_with_prefix(LLAMA, 50_000, 49_984, "gpu", RULE)
    cpu = reuse.ttft_with_prefix(LLAMA, 50_000, 49_984, "cpu", RULE)
    disk = reuse.ttft_with_prefix(LLAMA, 50_000, 49_984, "disk", RULE)
    assert gpu.load == 0 and gpu.ttft == gpu.prefill_new
    assert gpu.ttft < cpu.ttft <= disk.ttft


@settings(max_examples=60, deadline=None)
@given(st.integers(16, 200_000), st.floats(0, 1), st.sampled_from(["cpu", "disk"]))
def test_layerwise_loading_is_never_slower_than_loading_first(prompt, share, tier):
    serial = reuse.Reload(1, LAYERWISE.copy, "serial", 0.0, item_spans_layers=False)
    cached = int(prompt * share)
    a = reuse.ttft_with_prefix(LLAMA, prompt, cached, tier, LAYERWISE)
    b = reuse.ttft_with_prefix(LLAMA, prompt, cached, tier, serial)
    assert a.ttft <= b.ttft * (1 + 1e-12)
    assert a.ttft >= max(a.load, a.prefill_new)


def test_small_items_copy_below_the_link_rate():
    per_layer = reuse.Reload(16, RULE.copy, item_spans_layers=False)
    whole = reuse.ttft_with_prefix(LLAMA, 50_000, 49_984, "cpu", RULE)
    layered = reuse.ttft_with_prefix(LLAMA, 50_000, 49_984, "cpu", per_layer)
    assert layered.load_bandwidth < whole.load_bandwidth < H100.copy_rate("h2d")


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 131_000), st.integers(0, 131_000))
def test_the_prefill_of_new_tokens_reads_the_whole_prefix(prompt, cached):
    cached = min(cached, prompt)
    flops = decode.prefill_flops(LLAMA.model, prompt, 1, cached)
    whole = decode.prefill_flops(LLAMA.model, prompt)
    prefix = decode.prefill_flops(LLAMA.model, cached)
    # the new tokens' attention covers the prefix too: exactly the whole minus the prefix's own
    assert flops == pytest.approx(whole - prefix, rel=1e-9, abs=1.0)


def test_the_break_even_prompt_is_where_reloading_starts_to_pay():
    n = reuse.break_even_prompt(LLAMA, "cpu", RULE)
    assert n > 0
    at = reuse.ttft_with_prefix(LLAMA, n, n, "cpu", RULE)
    before = reuse.ttft_with_prefix(LLAMA, n - 1, n - 1, "cpu", RULE)
    assert at.ttft < at.recompute and before.ttft >= before.recompute
