"""Chapter 11's studies: a host hit against recompute, break-even per link, hit rates, sessions."""

from __future__ import annotations

import numpy as np
import pytest

from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model
from kvoffload.studies import reuse


@pytest.fixture(scope="module")
def h100() -> reuse.Cache:
    return reuse.cache(load_system("h100-sxm-pcie5"), load_model("llama-3.1-8b"))


def test_recompute_grows_faster_than_a_host_hit(h100):
    f = reuse.ttft_frame(h100.system, ("llama-3.1-8b",))
    recompute, hit = f["recompute (ms)"].to_numpy(), f["host hit (ms)"].to_numpy()
    assert np.all(np.diff(recompute) > 0) and np.all(np.diff(hit) > 0)
    # over the sweep, recompute rises by more than the hit does, and faster step after step
    assert recompute[-1] / recompute[0] > hit[-1] / hit[0]
    assert np.all(np.diff(f["speedup"].to_numpy()) > 0)
    assert np.all(hit[-10:] < recompute[-10:])


def test_break_even_shortens_as_the_link_speeds_up(h100):
    f = reuse.break_even_frame(h100.system, h100.setup.model).sort_values("copy rate")
    be = f["break-even prompt"].to_numpy()
    assert np.all(be > 0)
    assert np.all(np.diff(be) <= 0), f[["path", "copy rate", "break-even prompt"]]
    assert set(f["path"]) >= {"network store, 100 GbE"}
    remote = f[f["path"] == "network store, 100 GbE"].iloc[0]
    assert remote["rate kind"] == "assumed" and remote["source"]


def test_hit_rate_rises_with_host_memory(h100):
    t = reuse.Traffic()
    f = reuse.hit_rate_frame(h100, t)
    hits = f["hit rate"].to_numpy()
    assert np.all(np.diff(hits) >= 0)
    # a cache holding 2 of 200 sessions is all but never hit; one holding them all always is
    assert hits[0] < 1e-9 and hits[-1] == pytest.approx(1.0)
    # the LRU model's own capacity for 90% gives 90%
    need = reuse.host_answer(h100, t).bytes_for_90
    assert reuse.hit_rates(h100, t, np.array([need]))[0] == pytest.approx(0.9, abs=1e-6)


def test_sessions_that_fit_are_capacity_over_bytes_per_session(h100):
    t = reuse.Traffic()
    f = reuse.sessions_frame(h100, t)
    per = float(reuse.lru_traffic(h100, t).size)
    assert (f["per session"] == per).all()
    expected = [int(c // per) for c in f["capacity"]]
    assert f["sessions that fit"].tolist() == expected
    host = f[f["tier"] == "host memory"].iloc[0]
    assert host["capacity"] == h100.system.host_memory


def test_decoding_from_gpu_memory_beats_streaming_the_cache(h100):
    f = reuse.decode_frame(h100)
    assert (f["TPOT, cache streamed (ms)"] > f["TPOT, cache on the GPU (ms)"]).all()
    assert np.all(np.diff(f["streamed / on GPU"].to_numpy()) > 0)


def test_the_sweep_is_the_model_at_every_point(h100):
    prompts, shares = np.array([4_096, 32_768]), np.array([0.0, 0.5, 0.99])
    grid = reuse.ttft_sweep(h100, prompts, shares)
    assert grid.shape == (2, 3)
    assert np.all(np.diff(grid, axis=1) < 0)  # more cached, sooner first token
    one = reuse.reuse.ttft_with_prefix(h100.setup, 32_768, int(32_768 * 0.5), "cpu", h100.reload)
    assert grid[1, 1] == pytest.approx(float(one.ttft))


def test_a_model_that_does_not_fit_is_named():
    note = reuse.fit_note(load_system("rtx-4090-desktop"))
    assert "Llama 3.1 70B" in note and "do not fit" in note
    assert reuse.fit_note(load_system("h200-sxm-pcie5")) == ""


def test_the_answer_is_the_headline(h100):
    head = reuse.headline(h100)
    a = reuse.answer(head)
    assert a.value == head.ttft_ms and head.ttft_ms < head.recompute_ms
    assert head.cached == 32_000 - 200 - (32_000 - 200) % h100.reload.block_tokens
