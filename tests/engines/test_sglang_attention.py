"""SGLang's decode attention: the backend it picks by GPU and attention kind, and the Triton
kernel's tile-by-tile walk over the cache that sets decode's slope at small batches."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.engines import sglang_attention as sa
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs import catalog
from kvoffload.inputs.errors import InputError
from kvoffload.model import kv

GPUS = catalog.load("hardware/gpus")


@pytest.mark.parametrize(
    ("gpu", "mha", "mla"),
    [
        ("h100-sxm", "fa3", "fa3"),
        ("h200", "fa3", "fa3"),
        ("gh200", "fa3", "fa3"),
        ("b200", "trtllm_mha", "flashinfer"),
        ("rtx-5090", "flashinfer", "triton"),
        ("rtx-4090", "flashinfer", "triton"),
        ("a100-80gb-sxm", "flashinfer", "triton"),
        ("mi300x", "aiter", "aiter"),
    ],
)
def test_the_default_backend_is_server_args_choice_for_the_gpu(gpu, mha, mla):
    name = GPUS[gpu]["name"]
    assert sa.default_backend(name, mla=False) == mha
    assert sa.default_backend(name, mla=True) == mla


def test_the_walk_is_cdiv_of_the_split_in_32_token_tiles_at_the_tile_time():
    held = np.array([0, 1, 256, 257, 8192, 32768])
    tiles = np.array([0, 1, 1, 2, 32, 128])
    assert sa.walk("triton", mla=False).seconds(held) == pytest.approx(
        tiles * 3.1107274e-6, rel=1e-9
    )
    # MLA's tile: KTransformers' fitted ns per token over its 4 splits of 32-token tiles
    ns = catalog.load("engine_constants")["ktransformers"]["mla_decode_triton_ns"]["value"]
    assert sa.tile_s(mla=True) == pytest.approx(ns * 1e-9 * 32 * 4, rel=1e-12)


@settings(max_examples=50, deadline=None)
@given(a=st.integers(0, 10**7), b=st.integers(0, 10**7), mla=st.booleans())
def test_the_walk_never_shortens_as_the_cache_grows(a, b, mla):
    lo, hi = sorted((a, b))
    assert sa.walk("triton", mla).seconds(np.array(hi)) >= sa.walk("triton", mla).seconds(
        np.array(lo)
    )


# the Qwen3-Coder-Next tutorial's FP8 launch on its RTX 5090 and two EPYC 9355
TUTORIAL = {
    "kt_method": "FP8",
    "kt_cpuinfer": 96,
    "kt_threadpool_count": 2,
    "kt_num_gpu_experts": 100,
    "kt_gpu_prefill_token_threshold": 2048,
    "chunked_prefill_size": 16384,
    "mem_fraction_static": 0.8,
    "max_total_tokens": 256000,
}


def _coder_next(prompt: int, **options) -> dict:
    raw = {
        "hardware": "rtx-5090-2s-epyc-9355",
        "model": "qwen3-next-80b-a3b",
        "engine": "ktransformers",
        "precision": {"weights": "fp8", "kv": "bf16"},
        "workload": {"batch": 1, "prompt": prompt, "generate": 1},
        "options": {**TUTORIAL, **options},
    }
    return parse_scenario(raw, name="coder-next")


def test_with_triton_each_cached_layer_adds_its_walk_to_the_token():
    """At batch 1 the walk is far slower than the cache's bytes: between two contexts the token
    gains the walk's extra tiles in each of the 12 full-attention layers (the other 36 are linear
    attention, with no cache to walk), and FlashInfer's token only the bytes."""
    short, long = 64, 32768
    tri = [predict(_coder_next(p, attention_backend="triton")) for p in (short, long)]
    fi = [predict(_coder_next(p, attention_backend="flashinfer")) for p in (short, long)]
    tiles = (np.ceil(np.ceil(long / 8) / 32) - np.ceil(np.ceil(short / 8) / 32)) * 12
    assert tri[1].tpot_s - tri[0].tpot_s == pytest.approx(tiles * sa.tile_s(False), rel=1e-6)
    # FlashInfer: the 12 layers' added cache bytes at the GPU's attention rate, exactly
    sc = _coder_next(short)
    per_token = kv.attention_layer_token_bytes(sc.setup.cache_model, sc.setup.kv)
    bytes_s = 12 * (long - short) * per_token / sc.system.gpu.attention_rate
    assert fi[1].tpot_s - fi[0].tpot_s == pytest.approx(bytes_s, rel=1e-9)
    assert tri[0].settings["attention_backend"] == "triton"


def test_the_default_on_a_geforce_card_is_flashinfer_for_mha_and_triton_for_mla():
    assert predict(_coder_next(969)).settings["attention_backend"] == "flashinfer"
    raw = {
        "hardware": "rtx-5090-2s-epyc-9355",
        "model": "deepseek-v3",
        "engine": "ktransformers",
        "precision": {"weights": "fp8", "kv": "bf16"},
        "workload": {"batch": 1, "prompt": 8192, "generate": 1},
        "options": {"kt_method": "FP8", "kt_num_gpu_experts": 0},
    }
    sc = parse_scenario(raw, name="dsv3")
    assert sa.backend(sc) == "triton"
    assert predict(sc).settings["attention_backend"] == "triton"


def test_an_unknown_backend_is_refused_naming_the_field():
    with pytest.raises(InputError) as e:
        predict(_coder_next(969, attention_backend="flash"))
    assert "attention_backend" in str(e.value) and "\n" not in str(e.value)


def _plain_raw(prompt: int, gpu_system: str = "rtx-4090-desktop", batch: int = 1, **options):
    return {
        "hardware": gpu_system,
        "model": "llama-3.1-8b",
        "engine": "sglang",
        "precision": {"weights": "bf16", "kv": "bf16"},
        "workload": {"batch": batch, "prompt": prompt, "generate": 1},
        "options": options,
    }


def _plain(prompt: int, gpu_system: str = "rtx-4090-desktop", batch: int = 1, **options):
    return parse_scenario(_plain_raw(prompt, gpu_system, batch, **options), name="sglang")


def test_plain_sglang_walks_the_cache_with_triton_and_reads_its_bytes_otherwise():
    """The step model's GPU stream: with Triton each of the 32 layers adds its walk between two
    contexts (the walk is far above the bytes at batch 1); the default on a 4090, FlashInfer,
    is the step model as before, bit for bit."""
    short, long = 1024, 32768
    tri = [predict(_plain(p, attention_backend="triton")).tpot_s for p in (short, long)]
    tiles = (np.ceil(np.ceil(long / 8) / 32) - np.ceil(np.ceil(short / 8) / 32)) * 32
    assert tri[1] - tri[0] == pytest.approx(tiles * sa.tile_s(False), rel=1e-6)
    default = predict(_plain(long))
    assert default.settings["attention_backend"] == "flashinfer"
    assert default.tpot_s == predict(_plain(long, attention_backend="flashinfer")).tpot_s
    assert default.tpot_s < tri[1]
    assert predict(_plain(long, "h100-sxm-pcie5")).settings["attention_backend"] == "fa3"


@settings(max_examples=20, deadline=None)
@given(context=st.integers(1, 100_000), more=st.integers(1, 20_000), batch=st.integers(1, 64))
def test_with_triton_decode_never_speeds_up_with_context_or_batch(context, more, batch):
    def tpot(prompt: int, b: int) -> float:
        sc = _plain(prompt, batch=b, attention_backend="triton")
        return predict(sc, check=False).tpot_s

    base = tpot(context, batch)
    assert tpot(context + more, batch) >= base
    assert tpot(context, batch + 1) >= base


def test_the_tutorial_s_serving_flags_are_accepted_and_its_limits_enforced():
    """The Coder-Next tutorial's launch flags beside the kt-* ones change nothing modelled; a
    batch past --max-running-requests and a --tensor-parallel-size above one are refused."""
    flags = {
        "max_running_requests": 4,
        "tensor_parallel_size": 1,
        "enable_mixed_chunk": True,
        "disable_shared_experts_fusion": True,
        "enable_p2p_check": True,
        "fp8_gemm_backend": "cutlass",
        "disable_cuda_graph": False,
    }
    base = predict(_coder_next(2048, attention_backend="triton"))
    got = predict(_coder_next(2048, attention_backend="triton", **flags))
    assert got.tpot_s == base.tpot_s and got.ttft_s == base.ttft_s
    for opts, field in (
        ({"tensor_parallel_size": 2}, "options.tensor_parallel_size"),
        ({"max_running_requests": 1}, None),  # batch 1: allowed
    ):
        if field is None:
            assert predict(_coder_next(2048, **opts)).tpot_s > 0
            continue
        with pytest.raises(InputError) as e:
            predict(_coder_next(2048, **opts))
        assert field in str(e.value) and "\n" not in str(e.value)
    raw = _plain_raw(2048, batch=8, max_running_requests=4)
    with pytest.raises(InputError) as e:
        predict(parse_scenario(raw, name="sglang"))
    assert "options.max_running_requests" in str(e.value)
    assert predict(_plain(2048, **flags)).tpot_s == predict(_plain(2048)).tpot_s
