"""Chapter 03's llama.cpp sweep over KV formats: q8_0 and q4_0 slopes, from the engine's constant."""

from __future__ import annotations

import numpy as np
import pytest

from kvoffload.engines.each import llamacpp
from kvoffload.studies import decode_sweeps


@pytest.fixture(scope="module")
def sweep() -> decode_sweeps.KvFormatSweep:
    return decode_sweeps.kv_format_frame("rtx-4090-desktop", "llama-3.1-8b", [1024, 8192, 16384])


def test_every_format_is_swept_at_every_context(sweep):
    f = sweep.frame
    assert set(f["kv_format"]) == set(decode_sweeps.LLAMACPP_KV_FORMATS)
    assert (f.groupby("kv_format")["context"].apply(list) == [[1024, 8192, 16384]] * 3).all()


def test_a_quantised_cache_climbs_by_the_fitted_multiple_of_f16(sweep):
    assert sweep.slope_ratio["fp16"] == 1.0
    for fmt in ("q8_0", "q4_0"):
        assert sweep.slope_ratio[fmt] == pytest.approx(llamacpp.kv_dequant_gpu_default(), rel=1e-6)
    assert "q8_0" in sweep.sentence() and "e+" not in sweep.sentence()


def test_contexts_beyond_the_model_are_left_out():
    s = decode_sweeps.kv_format_frame("rtx-4090-desktop", "llama-3-8b", [1024, 100_000])
    assert np.all(s.frame["context"] == 1024)
    assert "too few" in s.sentence()
