"""Prefill's causal attention at the GPU's measured attention rate (FlashAttention-3 on Hopper),
its matmuls at theirs; a GPU without the figure runs both at the matmuls' rate, as before."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.inputs.hardware import build_part, load_system
from kvoffload.inputs.models import load_model
from kvoffload.model import decode
from kvoffload.model.decode.layer_classes import layers

H100 = load_system("h100-sxm-pcie5")  # its GPU carries FlashAttention-3's measured rate
A100 = load_system("a100-80gb-sxm-pcie4")
LLAMA = load_model("llama-3.1-8b")
GEMMA = load_model("gemma-2-9b")  # sliding-window layers: attention capped by the window


def _with_attention(system, flops: float | None):
    """Return ``system`` whose GPU's prefill attention rate is ``flops`` (None: no figure)."""
    figure = None
    if flops is not None:
        figure = build_part(
            "gpu",
            {
                "base": "h100-sxm",
                "attention_flops": {
                    "value": f"{flops!r} FLOP/s",
                    "kind": "assumed",
                    "source": "kvoffload-assumption",
                },
            },
        ).attention_flops
    return msgspec.structs.replace(
        system, gpu=msgspec.structs.replace(system.gpu, attention_flops=figure)
    )


def test_the_h100_figure_is_flashattention_3s_measured_causal_rate():
    figure = H100.gpu.attention_flops
    assert figure is not None and figure.value == 616e12
    assert figure.kind.value == "measured" and figure.source == "flash-attention-3-paper"
    assert A100.gpu.attention_flops is None  # no measured rate: the matmuls' rate


@pytest.mark.parametrize("model", [LLAMA, GEMMA], ids=["llama", "gemma-windows"])
def test_attention_and_matmul_flops_add_up_to_the_prefill(model):
    prompts = np.array([1, 511, 4096, 100_000])
    attention = decode.prefill_attention_flops(model, prompts, 2)
    total = decode.prefill_flops(model, prompts, 2)
    lay = layers(model, decode.Setup(H100, model).weights)
    dense = 2 * prompts * float(lay.dense_flops @ lay.count)
    np.testing.assert_allclose(total - attention, dense, rtol=1e-12)
    # with a cached prefix: the new tokens' attention is the whole prompt's less the prefix's
    cached = np.array([0, 256, 2048, 99_000])
    np.testing.assert_allclose(
        decode.prefill_attention_flops(model, prompts, 2, cached),
        attention - decode.prefill_attention_flops(model, cached, 2),
        rtol=1e-12,
    )


def test_the_attention_runs_at_the_measured_rate_and_the_matmuls_at_theirs():
    setup = decode.Setup(H100, LLAMA)
    prompt = 100_000  # compute-bound: far past the weights' one read
    attention = float(decode.prefill_attention_flops(LLAMA, prompt))
    dense = float(decode.prefill_flops(LLAMA, prompt)) - attention
    want = dense / H100.compute_rate + attention / 616e12
    assert float(decode.ttft(setup, prompt)) == pytest.approx(want, rel=1e-12)
    # an engine's own matmul rate (llama.cpp's integer path) leaves the attention's alone
    fast = 2 * H100.compute_rate
    want = dense / fast + attention / 616e12
    assert float(decode.ttft(setup, prompt, rate=fast)) == pytest.approx(want, rel=1e-12)


def test_without_the_figure_everything_runs_at_the_matmuls_rate_bit_for_bit():
    prompts = np.array([1, 1000, 32_768, 131_072])
    plain = decode.Setup(_with_attention(H100, None), LLAMA)
    flops = decode.prefill_flops(LLAMA, prompts)
    reads = decode.step_weight_bytes(LLAMA, plain.weights) / H100.gpu.streaming_bandwidth
    want = np.maximum(flops / H100.compute_rate, reads)
    assert np.array_equal(decode.ttft(plain, prompts), want)
    # a measured rate equal to the matmuls' gives the same time
    same = decode.Setup(_with_attention(H100, H100.compute_rate), LLAMA)
    np.testing.assert_allclose(decode.ttft(same, prompts), want, rtol=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 200_000),
    st.floats(0.05, 1.0),
    st.floats(0.05, 1.0),
    st.sampled_from([LLAMA, GEMMA]),
)
def test_a_slower_attention_kernel_never_gives_a_faster_prefill(prompt, a, b, model):
    slow, fast = sorted((a, b))
    peak = H100.gpu.flops_bf16.value
    t_slow = decode.ttft(decode.Setup(_with_attention(H100, slow * peak), model), prompt)
    t_fast = decode.ttft(decode.Setup(_with_attention(H100, fast * peak), model), prompt)
    assert t_slow >= t_fast
    # and a longer prompt never prefills faster
    longer = decode.ttft(decode.Setup(_with_attention(H100, slow * peak), model), prompt + 1)
    assert longer >= t_slow


def test_an_attention_rate_past_the_plausible_range_is_refused_naming_the_field():
    absurd = {"value": "1e19 FLOP/s", "kind": "assumed", "source": "kvoffload-assumption"}
    with pytest.raises(Exception, match="attention_flops"):
        build_part("gpu", {"base": "h100-sxm", "attention_flops": absurd})
