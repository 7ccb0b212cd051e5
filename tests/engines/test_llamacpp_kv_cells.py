"""The KV cache llama-server allocates: -c up front, padded to 256, split over -np slots unless
unified (-kvu), sliding layers at their window plus a ubatch unless --swa-full; a request past
its slot, or more requests than slots, is refused."""

from __future__ import annotations

import numpy as np
import pytest

from kvoffload.engines.each.llamacpp import kv_cells
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError
from kvoffload.model import kv


def _sc(model: str = "llama-3.1-8b", batch: int = 1, prompt: int = 1000, **options):
    raw = {
        "hardware": "rtx-4090-desktop",
        "model": model,
        "engine": "llamacpp",
        "precision": {"weights": "q4_k_m", "kv": "fp16"},
        "workload": {"batch": batch, "prompt": prompt, "generate": 24},
        "options": options,
    }
    return parse_scenario(raw, name="server")


def test_without_ctx_size_the_cache_is_what_the_requests_hold():
    sc = _sc(batch=2)
    want = kv.layer_bytes(sc.setup.cache_model, 1024, sc.setup.kv) * 2
    assert np.array_equal(kv_cells.layer_bytes(sc), want)


def test_ctx_size_allocates_the_padded_context_whatever_the_prompt():
    sc = _sc(ctx_size=32000)  # padded to 32,000 -> 32,000 is 125 x 256, kept
    per_token = kv.bytes_per_token_per_layer(sc.setup.cache_model, sc.setup.kv)
    assert np.array_equal(kv_cells.layer_bytes(sc), 32000 * per_token)
    odd = _sc(ctx_size=32001)  # padded up to 32,256
    assert np.array_equal(kv_cells.layer_bytes(odd), 32256 * per_token)
    short, long = predict(_sc(), check=False), predict(_sc(ctx_size=32000), check=False)
    assert float(long.memory.gpu) - float(short.memory.gpu) == pytest.approx(
        float(((32000 - 1024) * per_token).sum())
    )
    assert long.tpot_s == short.tpot_s  # decode reads only the filled cells


def test_slots_split_the_context_unless_the_cache_is_unified():
    """-c 10000 -np 4: 10,240 cells, 2,560 a slot (a multiple of 256), so a 2,600-token request
    does not fit a slot; with -kvu the one stream holds it."""
    with pytest.raises(InputError) as e:
        predict(_sc(prompt=2576, ctx_size=10000, parallel=4), check=False)
    assert "options.ctx_size" in str(e.value) and "2560" in str(e.value)
    assert predict(_sc(prompt=2576, ctx_size=10000, parallel=4, kv_unified=True), check=False)
    with pytest.raises(InputError) as e:
        predict(_sc(batch=3, parallel=2), check=False)
    assert "options.parallel" in str(e.value) and "\n" not in str(e.value)


def test_sliding_layers_keep_their_window_and_a_ubatch_unless_swa_full():
    """gpt-oss-120b: every other layer slides over 128 tokens; with -c 65536 those keep
    pad(128 + 512, 256) = 768 cells, the rest 65,536; --swa-full gives them all."""
    sc = _sc("gpt-oss-120b", ctx_size=65536)
    model = sc.setup.cache_model
    per_token = kv.bytes_per_token_per_layer(model, sc.setup.kv)
    sliding = np.isfinite(model.windows) & (model.windows > 0)
    assert sliding.any() and not sliding.all()
    cells = np.where(sliding, 768, 65536)
    assert np.array_equal(kv_cells.layer_bytes(sc), cells * per_token)
    full = _sc("gpt-oss-120b", ctx_size=65536, swa_full=True)
    assert np.array_equal(kv_cells.layer_bytes(full), 65536 * per_token)
