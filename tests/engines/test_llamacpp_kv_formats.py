"""llama.cpp's attention over a KV cache in a ggml block format: each value costs its dequantisation."""

from __future__ import annotations

import numpy as np
import pytest

from kvoffload.engines.each import llamacpp
from kvoffload.engines.scenario import parse_scenario
from kvoffload.inputs.precision import KvFormat, WeightFormat
from kvoffload.model import cpu_rate


def _scenario(kv: str, **options):
    return parse_scenario(
        {
            "hardware": "rtx-4090-desktop",
            "model": "llama-3-8b",
            "engine": "llamacpp",
            "precision": {"weights": "q4_k_m", "kv": kv},
            "workload": {"batch": 1, "prompt": 1, "generate": 16},
            "options": options,
        }
    )


def _slope(kv: str, part: str, **options) -> float:
    """Return the seconds one more cached token adds to a step's ``part``."""
    sc = _scenario(kv, **options)
    p = llamacpp.step_parts(sc, np.array([1024.0, 9216.0]), 1)[part]
    return float(p[1] - p[0]) / 8192


def test_a_q8_0_token_costs_the_fitted_multiple_of_an_f16_token_on_the_gpu():
    ratio = _slope("q8_0", "gpu") / _slope("fp16", "gpu")
    assert ratio == pytest.approx(llamacpp.kv_dequant_gpu_default(), rel=1e-9)
    assert ratio > 1  # half the bytes, yet slower: the vector kernel's dequantisation sets it


def test_q4_0_costs_what_q8_0_costs_per_value_on_the_gpu():
    assert _slope("q4_0", "gpu") == pytest.approx(_slope("q8_0", "gpu"), rel=1e-9)


def test_f16_reads_at_the_profiles_attention_rate():
    sc = _scenario("fp16")
    assert llamacpp.gpu_kv_rate(sc) == sc.system.gpu.attention_rate
    assert llamacpp.cpu_kv_rate(sc) == llamacpp.host_read_rate(sc)


def test_cpu_attention_over_q8_0_reads_at_the_q8_0_matvec_rate():
    sc = _scenario("q8_0", no_kv_offload=True)
    assert llamacpp.cpu_kv_rate(sc) == cpu_rate.weight_stream_rate(
        sc.system.host, WeightFormat.Q8_0, None, None
    )
    assert _slope("q8_0", "cpu", no_kv_offload=True) > 0


def test_every_block_format_is_a_llamacpp_cache_type():
    assert {f.value for f in llamacpp.BLOCK_FORMATS} == {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1"}
    assert all(isinstance(f, KvFormat) for f in llamacpp.BLOCK_FORMATS)
