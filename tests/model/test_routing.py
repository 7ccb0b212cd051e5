"""MoE routing: distinct experts touched per step under uniform routing."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model
from kvoffload.model import decode, routing

experts = st.integers(1, 512)


@settings(max_examples=300, deadline=None)
@given(experts, st.data(), st.integers(1, 4096), st.integers(1, 4096))
def test_touched_grows_with_batch_and_never_passes_the_experts(n, data, b1, b2):
    k = data.draw(st.integers(1, n))
    lo, hi = sorted((b1, b2))
    t_lo, t_hi = routing.experts_touched(n, k, lo), routing.experts_touched(n, k, hi)
    assert t_lo <= t_hi + 1e-9
    assert k - 1e-9 <= t_lo and t_hi <= n + 1e-9


def test_one_token_touches_its_own_experts_and_a_batch_fewer_than_k_times_b():
    assert routing.experts_touched(128, 4, 1) == pytest.approx(4)
    # 8 tokens x 4 of 128 experts: some pick the same expert, so fewer than 32 distinct
    assert 4 < routing.experts_touched(128, 4, 8) < 32
    assert routing.experts_touched(128, 4, 8) == pytest.approx(128 * (1 - (1 - 4 / 128) ** 8))
    # a huge batch touches all of them; a dense layer (k = n) always reads everything
    assert routing.experts_touched(128, 4, 100_000) == pytest.approx(128)
    assert routing.touched_share(1, 1, 7) == 1.0


def test_decode_reads_the_experts_a_batch_routes_to_and_no_more():
    system, model = load_system("h200-sxm-pcie5"), load_model("deepseek-v3")
    setup = decode.Setup(system, model)
    lay = decode.layers(model, setup.weights)
    k, n = lay.expert_use
    hbm = system.gpu.streaming_bandwidth
    for b in (1, 8, 64):
        share = float(routing.touched_share(n, k, b))
        expected = float(
            (lay.weight_bytes - lay.expert_bytes + lay.expert_bytes * share) @ lay.count
        )
        # one cached token: the step is the weight read (memory-bound), the cache is negligible
        gpu = float(decode.step(setup, 1, b).streams["gpu"])
        assert gpu == pytest.approx(expected / hbm, rel=1e-3)
    # batch 8 of 8-of-256 routing reads fewer expert bytes than 8 x 8 separate experts would
    assert routing.touched_share(n, k, 8) < 8 * k / n


def test_a_skewed_router_touches_fewer_experts_and_never_fewer_than_k():
    uniform = routing.touched_share(128, 8, 16)
    skewed = routing.touched_share(128, 8, 16, effective=32)
    assert skewed < uniform
    assert routing.touched_share(128, 8, 16, effective=128) == pytest.approx(uniform)
    # the pool can shrink no further than one token's own k experts
    assert routing.touched_share(128, 8, 16, effective=2) == pytest.approx(8 / 128)


def _moe(**routing_in):
    from kvoffload.engines.scenario import parse_scenario, predict

    raw = {
        "hardware": "rtx-4090-desktop",
        "model": "gpt-oss-20b",
        "precision": {"weights": "mxfp4", "kv": "fp16"},
        "workload": {"batch": 1, "prompt": 1024, "generate": 8},
        "placement": {"weights": {"experts": {"cpu": 1.0}}},
    }
    if routing_in:
        raw["routing"] = routing_in
    return predict(parse_scenario(raw), check=False)


def test_streaming_only_routed_experts_moves_what_the_batch_touches_minus_cache_hits():
    whole = _moe()
    routed = _moe(stream="routed")
    cached = _moe(stream="routed", gpu_hit_rate=0.5)
    assert routed.streams_s["h2d"] < whole.streams_s["h2d"] / 4  # 4 of 32 experts at batch 1
    # half the touched experts found on the GPU: the expert copies halve (latency aside)
    expert_link = routed.streams_s["h2d"] - cached.streams_s["h2d"]
    assert expert_link == pytest.approx((routed.streams_s["h2d"] - 0) / 2, rel=0.05)
    assert cached.tpot_s < routed.tpot_s < whole.tpot_s


def test_bad_routing_is_refused_naming_the_field():
    from kvoffload.engines.scenario import parse_scenario
    from kvoffload.inputs.errors import InputError

    with pytest.raises(InputError, match=r"routing\.gpu_hit_rate"):
        parse_scenario(
            {"hardware": "rtx-4090-desktop", "model": "gpt-oss-20b",
             "workload": {"batch": 1, "prompt": 8}, "routing": {"gpu_hit_rate": 1.5}}
        )  # fmt: skip
