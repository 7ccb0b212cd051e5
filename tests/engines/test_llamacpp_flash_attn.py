"""llama.cpp without flash attention (``flash_attn: off``): the scores' f32 passes per cached
position in decode and per ubatch in the prefill; a quantised V cache refused without it."""

from __future__ import annotations

import numpy as np
import pytest

from kvoffload.engines.each import llamacpp
from kvoffload.engines.each.llamacpp import attention
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError


def _raw(kv: str = "fp16", prompt: int = 4096, **options) -> dict:
    return {
        "hardware": "rtx-4090-desktop",
        "model": "llama-3.1-8b",
        "engine": "llamacpp",
        "precision": {"weights": "q4_k_m", "kv": kv},
        "workload": {"batch": 2, "prompt": prompt, "generate": 8},
        "options": options,
    }


def test_without_flash_attention_each_cached_position_adds_four_f32_passes_of_the_heads():
    off, on = parse_scenario(_raw(flash_attn="off")), parse_scenario(_raw(flash_attn="auto"))
    ctx = np.array([8192.0])
    gap = llamacpp.step_parts(off, ctx, 2.0)["gpu"] - llamacpp.step_parts(on, ctx, 2.0)["gpu"]
    m = off.model
    want = 2 * 8192 * m.n_heads * 4 * 4 * m.n_layers / off.system.gpu.attention_rate
    assert gap[0] == pytest.approx(want, rel=1e-9)
    assert attention.score_bytes(on) == 0.0 and attention.SCORE_PASSES == 4
    assert parse_scenario(_raw(flash_attn=False)).options.flash_attn == "off"
    assert parse_scenario(_raw(flash_attn=True)).options.flash_attn == "on"


def test_the_prefill_scores_every_position_so_far_in_each_ubatch():
    sc = parse_scenario(_raw(prompt=1200, flash_attn="off", n_ubatch=512))
    m = sc.model
    # ubatches of 512, 512 and 176 tokens see 512, 1024 and 1200 positions
    per_layer = 2 * (512 * 512 + 512 * 1024 + 176 * 1200) * m.n_heads * 16
    want = per_layer * m.n_layers / sc.system.gpu.attention_rate
    assert attention.prefill_score_s(sc) == pytest.approx(want, rel=1e-12)
    on = parse_scenario(_raw(prompt=1200, n_ubatch=512))
    gap = predict(sc, check=False).ttft_s - predict(on, check=False).ttft_s
    assert gap == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("kv", ["q8_0", "q4_0"])
def test_a_quantised_v_cache_without_flash_attention_is_refused(kv):
    sc = parse_scenario(_raw(kv=kv, flash_attn="off"))
    for call in (lambda: predict(sc, check=False), lambda: llamacpp.ENGINE.memory(sc)):
        with pytest.raises(InputError) as info:
            call()
        assert "options.flash_attn" in str(info.value) and "\n" not in str(info.value)
