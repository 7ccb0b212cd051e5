"""The engines: each one's invariants and the policy search (the validation rule: test_validation_rule.py)."""

from __future__ import annotations

import itertools

import msgspec
import pytest

from kvoffload.engines.each import flexgen, infllm
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.precision import WeightFormat
from kvoffload.model import decode
from kvoffload.studies import validation


def scenario(engine, options=None, **kw):
    raw = {
        "hardware": kw.get("hardware", "rtx-3070-ti-desktop"),
        "model": kw.get("model", "llama-3.1-8b"),
        "engine": engine,
        "precision": {"weights": kw.get("weights", "q4_k_m"), "kv": "fp16"},
        "workload": {
            "batch": kw.get("batch", 1),
            "prompt": kw.get("prompt", 512),
            "generate": kw.get("generate", 32),
        },
        "options": options or {},
    }
    return parse_scenario(raw, name="test")


def test_llamacpp_tokens_per_second_rise_with_layers_on_the_gpu():
    rates = []
    for ngl in range(0, 34):
        sc = scenario("llamacpp", {"n_gpu_layers": ngl})
        rates.append(predict(sc, check=False).to_json()["decode_tokens_per_s"])
    assert all(b >= a for a, b in itertools.pairwise(rates))
    assert rates[-1] > 3 * rates[0]


def test_llamacpp_midpoint_is_the_harmonic_mean_of_the_endpoints():
    # per-token times add over the layers, so half the layers on each side sits near the
    # harmonic mean of the two speeds, well below their average
    cpu = predict(scenario("llamacpp", {"n_gpu_layers": 0}), check=False).tpot_s
    gpu = predict(scenario("llamacpp", {"n_gpu_layers": 33}), check=False).tpot_s
    half = predict(scenario("llamacpp", {"n_gpu_layers": 17}), check=False).tpot_s
    assert half == pytest.approx((cpu + gpu) / 2, rel=0.1)
    assert 1 / half < (1 / cpu + 1 / gpu) / 2


def test_llamacpp_memory_runs_out_on_a_small_gpu():
    sc = scenario("llamacpp", {"n_gpu_layers": 33}, weights="bf16")
    with pytest.raises(InputError, match="GPU memory"):
        predict(sc)


def test_no_kv_offload_is_slower_and_keeps_the_cache_on_the_host():
    on = predict(scenario("llamacpp", {"n_gpu_layers": 33}, prompt=8000), check=False)
    off = predict(
        scenario("llamacpp", {"n_gpu_layers": 33, "no_kv_offload": True}, prompt=8000), check=False
    )
    assert off.tpot_s > on.tpot_s
    assert float(off.memory.cpu) > 0 and float(off.memory.gpu) < float(on.memory.gpu)


def test_vllm_time_grows_with_cpu_offload_gb():
    times = [
        predict(
            scenario(
                "vllm", {"cpu_offload_gb": gb}, hardware="a100-80gb-sxm-pcie4", weights="bf16"
            ),
            check=False,
        ).tpot_s
        for gb in (0, 2, 4, 8, 14)
    ]
    assert all(b > a for a, b in itertools.pairwise(times))


def test_vllm_prefix_cache_shortens_the_prefill_only():
    base = predict(
        scenario("vllm", {}, hardware="a100-80gb-sxm-pcie4", weights="bf16", prompt=32000),
        check=False,
    )
    hit = predict(
        scenario(
            "vllm",
            {"kv_offloading_size": 64, "prefix_hit_rate": 0.9},
            hardware="a100-80gb-sxm-pcie4",
            weights="bf16",
            prompt=32000,
        ),
        check=False,
    )
    assert hit.ttft_s < base.ttft_s
    assert hit.tpot_s == pytest.approx(base.tpot_s)


def test_infllm_moves_far_less_than_full_offload_at_long_context():
    o = infllm.Options()
    assert infllm.moved_tokens(o, 1000) == 0
    assert infllm.moved_tokens(o, 128_000) == round(0.5 * 16 * 128)
    inf = predict(
        scenario("infllm", {}, hardware="a100-80gb-sxm-pcie4", weights="bf16", prompt=128_000),
        check=False,
    )
    full = predict(parse_scenario({
        "hardware": "a100-80gb-sxm-pcie4", "model": "llama-3.1-8b", "workload": {"batch": 1, "prompt": 128_000, "generate": 32},
        "placement": {"kv": {"cpu": 1.0}}}, name="full"), check=False)  # fmt: skip
    assert inf.streams_s["h2d"] < full.streams_s["h2d"] / 20


def test_streaming_engines_pay_for_pageable_copies():
    pinned = predict(
        scenario(
            "zero-inference",
            {"pinned": True},
            hardware="t4-pcie3",
            model="opt-6.7b",
            weights="fp16",
        ),
        check=False,
    )
    pageable = predict(
        scenario("zero-inference", {}, hardware="t4-pcie3", model="opt-6.7b", weights="fp16"),
        check=False,
    )
    assert pageable.tpot_s > pinned.tpot_s


def test_zero_from_nvme_copies_through_pinned_swap_buffers():
    def tpot(pinned):
        opts = {"weights": "disk", "pinned": pinned}
        sc = scenario("zero-inference", opts, hardware="t4-pcie3", model="opt-30b", weights="fp16")
        return predict(sc, check=False).tpot_s

    assert tpot(False) == tpot(True)


def test_zero_streams_its_group_wise_int4_bytes_each_step():
    # --quant_bits 4: the link carries what DeepSpeed stores (int4_g64), not the fp16 weights
    def pred(quant):
        opts = {"weights": "cpu", "pinned": True, "quantize_weights": quant}
        sc = scenario(
            "zero-inference", opts, hardware="a6000-lambda", model="opt-66b", weights="fp16"
        )
        return sc, predict(sc, check=False)

    sc, q = pred(True)
    _, full = pred(False)
    int4 = decode.step_weight_bytes(sc.model, WeightFormat.INT4_G64)
    fp16 = decode.step_weight_bytes(sc.model, WeightFormat.FP16)
    assert q.streams_s["h2d"] / full.streams_s["h2d"] == pytest.approx(int4 / fp16, rel=0.01)
    assert 0.28 < int4 / fp16 < 0.29  # 4.5 bits of 16


def test_flexgen_search_prints_a_feasible_policy_for_opt_175b_on_the_t4():
    sc = scenario("flexgen", {}, hardware="t4-pcie3", model="opt-175b", weights="fp16")
    out = predict(sc).to_json()
    assert out["policy"].startswith("searched: --percent")
    assert out["throughput_tokens_per_s"] > 0
    mem = out["memory"]
    assert (
        mem["gpu_bytes"] <= mem["gpu_capacity_bytes"]
        and mem["cpu_bytes"] <= mem["cpu_capacity_bytes"]
    )


def test_flexgen_search_never_loses_to_a_feasible_policy_from_the_table():
    for row in validation.rows():
        if row["engine"] != "flexgen":
            continue
        given = parse_scenario(validation.scenario_of(row), name=row["id"])
        pol = flexgen.given_policy(given)
        c = flexgen.cost(given, pol, given.options)
        feasible = bool(flexgen.fits(given, c)[0])  # every tier, and FlexGen's own LP limit
        searched = parse_scenario(
            {
                **validation.scenario_of(row),
                "options": {k: v for k, v in row["options"].items() if k.startswith("compress")},
            },
            name="s",
        )
        _, costs, best = flexgen.search(searched)
        if feasible:
            assert costs.throughput[best] >= c.throughput[0] * (1 - 1e-9), row["id"]
        assert costs.gpu_bytes[best] <= given.system.gpu_memory


def test_flexgen_option_errors_name_the_field():
    with pytest.raises(InputError, match="more than 100%"):
        scenario("flexgen", {"percent": [60, 60, 0, 100, 0, 100]})
    with pytest.raises(InputError, match="unknown option for flexgen"):
        scenario("flexgen", {"gpu_batch": 4})


def _flexgen_tps(options, batch):
    sc = scenario(
        "flexgen", options, hardware="t4-pcie3", model="opt-6.7b", weights="fp16", batch=batch
    )
    return predict(sc, check=False).to_json()["throughput_tokens_per_s"]


def test_flexgen_dequantisation_traffic_is_counted_op_by_op():
    # compression.py's decompress: two shift/mask passes, two strided fp16 stores, div_ and add_
    # bytes per output value: packed nibbles 0.5, a uint8 temporary per pair 0.5, each strided
    # store fills half the fp16 output (1.0), the in-place passes read and write all of it (2 + 2)
    shift_and_mask = 2 * (0.5 + 0.5)
    strided_stores = 2 * (0.5 + 1.0)
    div_and_add = 2 * (2.0 + 2.0)
    per_fp16_byte = (shift_and_mask + strided_stores + div_and_add) / 2.0
    assert per_fp16_byte == pytest.approx(flexgen.DEQUANT_TRAFFIC)


def _flexgen_step(options, batch):
    sc = scenario(
        "flexgen", options, hardware="t4-pcie3", model="opt-6.7b", weights="fp16", batch=batch
    )
    return float(flexgen.cost(sc, flexgen.given_policy(sc), sc.options).step[0]), sc


def test_flexgen_decompresses_weights_once_per_gpu_batch():
    base = {"percent": [100, 0, 100, 0, 100, 0], "compress_weight": True}
    one = _flexgen_tps(base | {"gpu_batch_size": 32, "num_gpu_batches": 1}, 32)
    four = _flexgen_tps(base | {"gpu_batch_size": 8, "num_gpu_batches": 4}, 32)
    assert four < one  # same requests, four times the weight decompression


def test_flexgen_each_gpu_batch_reads_the_layer_weights_again():
    plain = {"percent": [100, 0, 100, 0, 100, 0]}
    one, sc = _flexgen_step(plain | {"gpu_batch_size": 32, "num_gpu_batches": 1}, 32)
    four, _ = _flexgen_step(plain | {"gpu_batch_size": 8, "num_gpu_batches": 4}, 32)
    weights = decode.step_weight_bytes(sc.model, sc.setup.weights)
    # memory-bound at these batches: three more passes over the fp16 weights, nothing else
    assert four - one == pytest.approx(3 * weights / sc.system.gpu.streaming_bandwidth, rel=1e-9)


def test_flexgen_attention_reads_the_cache_at_the_profiles_attention_rate():
    opts = {"percent": [100, 0, 100, 0, 100, 0], "gpu_batch_size": 64, "num_gpu_batches": 1}
    slow, sc = _flexgen_step(opts, 64)
    gpu = sc.system.gpu
    assert gpu.attention_rate < gpu.streaming_bandwidth  # the T4 testbed carries FlexGen's fit
    fast_gpu = msgspec.structs.replace(gpu, attention_bandwidth=None)
    from dataclasses import replace

    fast_sc = replace(sc, system=msgspec.structs.replace(sc.system, gpu=fast_gpu))
    fast = float(flexgen.cost(fast_sc, flexgen.given_policy(fast_sc), sc.options).step[0])
    assert slow > fast


def test_flexgen_overlap_serialises_the_host_to_gpu_load():
    # FlexGen's cost model: T_gen = ctog + max(gtoc, dtoc, ctod, comp), per layer
    opts = {"percent": [0, 100, 100, 0, 100, 0], "gpu_batch_size": 8, "num_gpu_batches": 1}
    sc = scenario("flexgen", opts, hardware="t4-pcie3", model="opt-6.7b", weights="fp16", batch=8)
    c = flexgen.cost(sc, flexgen.given_policy(sc), sc.options)
    h2d, gpu = float(c.streams["h2d"][0]), float(c.streams["gpu"][0])
    assert float(c.step[0]) == pytest.approx(h2d + gpu, rel=1e-9)
    serial = flexgen.cost(
        sc, flexgen.given_policy(sc), msgspec.structs.replace(sc.options, overlap=False)
    )
    assert float(c.step[0]) <= float(serial.step[0])


def test_flexgen_compressed_cache_in_host_memory_moves_at_the_pageable_rate():
    from dataclasses import replace

    opts = {"percent": [100, 0, 0, 100, 100, 0], "compress_cache": True, "overlap": False}
    sc = scenario("flexgen", opts, hardware="t4-pcie3", model="opt-6.7b", weights="fp16", batch=8)
    link = sc.system.link
    assert link.pageable_bandwidth.value < link.h2d_bandwidth.value
    fast_link = msgspec.structs.replace(link, pageable_bandwidth=link.h2d_bandwidth)
    fast = replace(sc, system=msgspec.structs.replace(sc.system, link=fast_link))
    slow_tps = predict(sc, check=False).to_json()["throughput_tokens_per_s"]
    fast_tps = predict(fast, check=False).to_json()["throughput_tokens_per_s"]
    assert fast_tps > slow_tps * 1.05  # the cache copy is what the pageable rate slows
