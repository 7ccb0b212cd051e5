"""Engine constants (catalog/engine_constants.yaml): each re-derived from its published figures."""

from __future__ import annotations

import numpy as np
import pytest

from kvoffload.engines import prefix_cache
from kvoffload.engines.each import flexgen, llamacpp, vllm
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs import catalog
from kvoffload.inputs.units import Dim, parse_quantity
from kvoffload.model import decode

CONSTANTS = catalog.load("engine_constants")
KINDS = {"fitted", "derived", "measured", "assumed"}


def every_constant() -> list[tuple[str, str, dict]]:
    return [(e, name, c) for e, table in CONSTANTS.items() for name, c in table.items()]


@pytest.mark.parametrize(("engine", "name", "entry"), every_constant())
def test_each_constant_has_a_kind_a_registered_source_and_a_value(engine, name, entry):
    assert entry["kind"] in KINDS, (engine, name)
    assert entry["source"] in catalog.sources(), (engine, name)
    assert isinstance(entry["value"], int | float) and np.isfinite(entry["value"])
    assert entry.get("how"), (engine, name)


def reference(src: dict, options: dict) -> dict:
    """Return the scenario of a published llama.cpp run as its `from:` block gives it."""
    return {
        "hardware": src["hardware"],
        "model": src["model"],
        "engine": "llamacpp",
        "precision": {"weights": src["weights"], "kv": src["kv"]},
        "workload": {"batch": 1, "prompt": src["prompt"], "generate": src["generate"]},
        "options": options,
    }


def test_llamacpp_gpu_op_time_with_graphs_is_re_derived_from_pr_24216():
    """llama-bench pp512 at microbatch 1: one-token graphs over a cache of 0 to 511 tokens, the
    output layer skipped (only the last token's logits are asked for)."""
    entry = CONSTANTS["llamacpp"]["gpu_op_us"]
    src = entry["from"]
    assert src["cuda_graphs"] and src["prompt"] == 512 and src["tokens_per_s"] == 371.74
    sc = parse_scenario(reference(src, {"gpu_op_us": 0.0}), name="llama.cpp PR #24216 reference")
    parts = llamacpp.step_parts(sc, np.arange(float(src["prompt"])), 1)  # each ubatch's cache
    free = float(np.mean(parts["gpu"] + parts["cpu"] + parts["link"]))
    table, _ = llamacpp.tensor_gpus(sc)
    output = table.position == sc.model.n_layers  # the tied embedding read as the output layer
    skipped = float(table.nbytes[output].sum()) / sc.system.gpu.streaming_bandwidth
    skipped += sc.model.vocab * 4 / sc.system.copy_rate("d2h", pinned=True)  # no logits back
    matmuls = 7 * sc.model.n_layers  # q, k, v, o, gate, up, down in each of the 16 layers
    op_us = (1 / src["tokens_per_s"] - (free - skipped)) / matmuls * 1e6
    assert entry["value"] == pytest.approx(op_us, rel=1e-5)
    assert 0 < op_us < 100
    assert llamacpp.gpu_op_s_default(True) == pytest.approx(entry["value"] * 1e-6, rel=1e-15)


def test_llamacpp_gpu_op_time_without_graphs_is_re_derived_from_pr_6766():
    key = "gpu_op_us_no_graphs"
    entry = CONSTANTS["llamacpp"][key]
    src = entry["from"]
    graphs = src["cuda_graphs"]
    options = {"gpu_op_us": 0.0, "cuda_graphs": graphs}
    sc = parse_scenario(reference(src, options), name="llama.cpp PR #6766 reference")
    parts = llamacpp.step_parts(sc, sc.prompt + np.arange(sc.generate), 1)  # every token
    free = float(np.mean(parts["gpu"] + parts["cpu"] + parts["link"]))
    matmuls = 7 * sc.model.n_layers + 1  # -ngl 99: q, k, v, o, gate, up, down and the output's
    op_us = (1 / src["tokens_per_s"] - free) / matmuls * 1e6
    assert entry["value"] == pytest.approx(op_us, rel=1e-5)
    assert 0 < op_us < 100
    assert llamacpp.gpu_op_s_default(graphs) == pytest.approx(entry["value"] * 1e-6, rel=1e-15)
    # with the stored time, the reference run comes back at the measured rate
    back = predict(
        parse_scenario(reference(src, {"cuda_graphs": graphs}), name="back"), check=False
    )
    assert back.to_json()["decode_tokens_per_s"] == pytest.approx(src["tokens_per_s"], rel=1e-5)


def test_cuda_graphs_take_less_per_op_and_matter_more_on_a_small_model():
    src = CONSTANTS["llamacpp"]["gpu_op_us_no_graphs"]["from"]  # LLaMA 2 7B on an RTX 4090
    on, off = (
        predict(parse_scenario(reference(src, {"cuda_graphs": g}), name="x"), check=False).tpot_s
        for g in (True, False)
    )
    assert on < off
    small = {**src, "model": "llama-3.2-1b"}
    on_s, off_s = (
        predict(parse_scenario(reference(small, {"cuda_graphs": g}), name="x"), check=False).tpot_s
        for g in (True, False)
    )
    assert off_s / on_s > off / on  # a fixed cost per op weighs most where the bytes are few


def test_llamacpp_split_sync_is_re_derived_from_pr_7526():
    entry = CONSTANTS["llamacpp"]["split_sync_us"]
    src = entry["from"]
    hand_overs = 2 * src["layers"]  # --no-kv-offload: to the CPU and back, per layer
    assert src["layers"] == 32 and src["tokens_per_s_no_kv_offload"] == 45.91
    assert src["tokens_per_s_kv_on_gpu"] == 66.24
    seconds = (
        1 / src["tokens_per_s_no_kv_offload"] - 1 / src["tokens_per_s_kv_on_gpu"]
    ) / hand_overs
    assert entry["value"] == pytest.approx(seconds * 1e6, rel=1e-5)
    assert llamacpp.split_sync_s_default() == pytest.approx(entry["value"] * 1e-6, rel=1e-15)


def test_flexgen_dequant_traffic_is_the_catalogs_op_count():
    entry = CONSTANTS["flexgen"]["dequant_traffic"]
    # decompress of N values: shifts and masks 2N bytes, interleaved writes 3N, scale and min 8N
    assert entry["value"] == (2 + 3 + 8) / 2
    assert entry["value"] == flexgen.DEQUANT_TRAFFIC


def test_the_defaults_are_what_a_scenario_without_options_uses():
    raw = {
        "hardware": "rtx-3070-ti-desktop",
        "model": "llama-3-8b",
        "engine": "llamacpp",
        "precision": {"weights": "q4_k_m", "kv": "fp16"},
        "workload": {"batch": 1, "prompt": 4096, "generate": 16},
    }
    c = CONSTANTS["llamacpp"]
    for extra in ({"n_gpu_layers": 20}, {"n_gpu_layers": 33, "no_kv_offload": True}):
        implicit = predict(parse_scenario({**raw, "options": extra}), check=False)
        explicit = predict(
            parse_scenario(
                {
                    **raw,
                    "options": extra
                    | {
                        "gpu_op_us": c["gpu_op_us"]["value"],
                        "split_sync_us": c["split_sync_us"]["value"],
                    },
                }
            ),
            check=False,
        )
        assert implicit.tpot_s == explicit.tpot_s


def _copy_fit(entry: dict, column: str) -> tuple[float, float]:
    """Return (s per block, B/s) of t = a + bytes / R fitted to a column of the blog's Fig. 3/4."""
    src = entry["from"]
    nbytes = np.array(src["block_kib"], dtype=float) * 1024
    t = nbytes / (np.array(src[column]) * 1e9)
    # least squares on each point's relative error: (a + bytes / R) / t = 1
    (a, inverse), *_ = np.linalg.lstsq(
        np.stack([1 / t, nbytes / t], 1), np.ones(len(t)), rcond=None
    )
    return a, 1 / inverse


def test_the_copy_paths_are_re_derived_from_the_vllm_blogs_copy_benchmark():
    c = CONSTANTS["copy"]
    a, dma_rate = _copy_fit(c["dma_per_block_us"], "h2d_dma_gb_per_s")
    ak, kernel_rate = _copy_fit(c["kernel_per_item_us"], "h2d_kernel_gb_per_s")
    assert c["dma_per_block_us"]["value"] == pytest.approx(a * 1e6, rel=1e-6)
    assert c["kernel_per_item_us"]["value"] == pytest.approx(ak * 1e6, rel=1e-6)
    assert c["kernel_rate_share"]["value"] == pytest.approx(kernel_rate / dma_rate, rel=1e-6)
    assert c["kernel_rate_share"]["from"]["dma_gb_per_s"] == pytest.approx(dma_rate / 1e9, 1e-6)
    assert c["kernel_rate_share"]["from"]["kernel_gb_per_s"] == pytest.approx(
        kernel_rate / 1e9, rel=1e-6
    )
    dma, kernel = prefix_cache.dma_copy(), prefix_cache.kernel_copy()
    assert dma.per_item_s == pytest.approx(a, rel=1e-6) and dma.rate_share == 1.0
    assert kernel.per_item_s == pytest.approx(ak, rel=1e-6)
    assert kernel.rate_share == c["kernel_rate_share"]["value"]


def test_vllms_per_hit_cost_is_one_assumed_scheduler_step():
    entry = CONSTANTS["vllm"]["per_hit_ms"]
    assert entry["kind"] == "assumed" and entry["value"] == 1.0
    raw = {
        "hardware": "h100-sxm-pcie5",
        "model": "llama-3.1-8b",
        "engine": "vllm",
        "options": {"kv_offloading_size": 100},
        "workload": {"batch": 1, "prompt": 10_000, "generate": 1},
    }
    rule = vllm.cache_rule(parse_scenario(raw))
    assert rule.reload.per_hit_s == entry["value"] * 1e-3


def test_llamacpp_kv_dequant_is_re_derived_from_the_turboquant_depth_table():
    entry = CONSTANTS["llamacpp"]["kv_dequant_gpu"]
    src = entry["from"]
    depth = np.array(src["depth"], dtype=float)
    # ms per token against depth: the slope is what each cached token costs
    f16 = np.polyfit(depth, 1e3 / np.array(src["tokens_per_s_f16"]), 1)[0]
    q8 = np.polyfit(depth, 1e3 / np.array(src["tokens_per_s_q8_0"]), 1)[0]
    assert entry["value"] == pytest.approx(q8 / f16, rel=1e-6)
    assert entry["kind"] == "fitted" and entry["machine"]
    assert llamacpp.kv_dequant_gpu_default() == entry["value"]


def test_llamacpp_mmq_int8_share_is_re_derived_from_pr_7676():
    entry = CONSTANTS["llamacpp"]["mmq_int8_share"]
    src = entry["from"]
    raw = reference({**src, "kv": "fp16", "generate": 1}, {"n_ubatch": src["n_ubatch"]})
    sc = parse_scenario(raw, name="llama.cpp PR #7676 reference")
    flops = float(decode.prefill_flops(sc.model, src["prompt"]))
    seconds = src["prompt"] / src["tokens_per_s"]
    share = flops / seconds / sc.system.gpu.flops_int8.value
    assert entry["value"] == pytest.approx(share, rel=1e-6)
    assert llamacpp.mmq_share_default() == entry["value"]
    # compute-bound: with the stored share the reference prefill comes back at the measured rate
    assert predict(sc, check=False).ttft_s == pytest.approx(seconds, rel=1e-6)


def test_ktransformers_torch_mla_decode_time_is_re_derived_from_issue_314():
    entry = CONSTANTS["ktransformers"]["mla_decode_torch_ns"]
    src = entry["from"]
    (c1, c2), (r1, r2) = src["context"], src["tokens_per_s"]
    ns = (1 / r2 - 1 / r1) / ((c2 - c1) * src["attention_layers"]) * 1e9
    assert entry["value"] == pytest.approx(ns, rel=1e-6)
    model = parse_scenario(_kt(1000)).model
    assert model.mla and src["attention_layers"] == model.n_layers == 61
    # on the issue's box, the predicted token time grows by the measured 28.6 ms over those 9K
    grow = _tpot(_kt(c2)) - _tpot(_kt(c1))
    assert grow == pytest.approx(1 / r2 - 1 / r1, rel=1e-6)


def test_ktransformers_llamafile_share_reproduces_issue_314_at_1k():
    entry = CONSTANTS["ktransformers"]["llamafile_bandwidth_share"]
    src = entry["from"]
    assert entry["kind"] == "fitted" and 0.3 < entry["value"] < 1
    scenario = _kt(src["context"])
    assert scenario["options"]["cpu_infer"] == src["cpu_infer"]
    assert 1 / _tpot(scenario) == pytest.approx(src["tokens_per_s"], rel=1e-6)


def test_ktransformers_triton_mla_decode_time_is_re_derived_from_the_tutorial():
    entry = CONSTANTS["ktransformers"]["mla_decode_triton_ns"]
    src = entry["from"]
    (p1, p2), (r1, r2) = src["prompt"], src["tokens_per_s"]
    ns = (1 / r2 - 1 / r1) / ((p2 - p1) * src["attention_layers"]) * 1e9
    assert entry["value"] == pytest.approx(ns, rel=1e-6)
    two = {"cpu_infer": 65, "use_numa": True}  # the V0.2.1 runs: both sockets
    grow = _tpot(_tutorial(p2, 300, two)) - _tpot(_tutorial(p1, 300, two))
    assert grow == pytest.approx(1 / r2 - 1 / r1, rel=1e-6)
    assert entry["value"] < CONSTANTS["ktransformers"]["mla_decode_torch_ns"]["value"]


def test_ktransformers_numa_share_is_the_tutorial_s_two_socket_scaling():
    """The experts' time on one socket over their time on two, less one: each the token time
    less the model's GPU part and link, so the host's assumed bandwidth drops out."""
    entry = CONSTANTS["ktransformers"]["numa_socket_share"]
    src = entry["from"]
    rate, threads = src["tokens_per_s"], src["cpu_infer"]
    one = {"cpu_infer": threads["one_socket"], "numactl_node": 1, "mla_decode": "torch"}
    two = {"cpu_infer": threads["two_sockets"], "use_numa": True, "mla_decode": "torch"}
    experts = []
    for options, measured in ((one, rate["one_socket"]), (two, rate["two_sockets"])):
        p = predict(parse_scenario(_tutorial(src["prompt"], 300, options)), check=False)
        experts.append((1 / measured - (p.tpot_s - p.streams_s["cpu"]), p.streams_s["cpu"]))
    (m1, c1), (m2, c2) = experts
    assert c1 / c2 == pytest.approx(m1 / m2, rel=1e-6)  # the model's scaling is the measured one
    assert entry["value"] == pytest.approx(m1 / m2 - 1, rel=1e-6)
    assert 0 < entry["value"] < 1


def test_ktransformers_llamafile_gemm_rate_reproduces_the_tutorial_s_one_socket_prefill():
    entry = CONSTANTS["ktransformers"]["llamafile_gemm_per_core"]
    src = entry["from"]
    options = {"cpu_infer": src["cpu_infer"], "numactl_node": 1, "mla_decode": "torch"}
    p = predict(parse_scenario(_tutorial(src["prompt"], 300, options)), check=False)
    assert src["prompt"] / p.ttft_s == pytest.approx(src["tokens_per_s"], rel=1e-6)
    host = parse_scenario(_tutorial(1, 1, {})).system.host
    assert entry["value"] * 1e9 < host.flops.value / host.cores  # below the FP32 vector peak


def _tpot(scenario: dict) -> float:
    return predict(parse_scenario(scenario), check=False).tpot_s


def _tutorial(prompt: int, generate: int, options: dict) -> dict:
    """Return a run of the KTransformers tutorial: DeepSeek-V3 Q4_K_M, RTX 4090, 2x Gold 6454S."""
    return {
        "hardware": "rtx-4090-2s-xeon-6454s",
        "model": "deepseek-v3",
        "engine": "ktransformers",
        "precision": {"weights": "q4_k_m", "kv": "fp16"},
        "workload": {"batch": 1, "prompt": prompt, "generate": generate},
        "options": options,
    }


def _kt(context: int) -> dict:
    """Return issue #314's run: DeepSeek-R1 in 4 bits on an RTX 4090 with an EPYC 9654, one token
    (0.2.0's MLA kernel)."""
    return {
        "hardware": {"gpu": "rtx-4090", "link": "pcie4-x16", "host": "server-ddr5-12ch",
                     "storage": "nvme-gen4"},
        "model": "deepseek-v3",
        "engine": "ktransformers",
        "precision": {"weights": "q4_k_m", "kv": "fp16"},
        "workload": {"batch": 1, "prompt": context, "generate": 1},
        "options": {"cpu_infer": 84, "mla_decode": "torch"},
    }  # fmt: skip


def test_sglang_triton_tile_time_is_re_derived_from_pr_21775():
    """The least-squares slope of ms per token against the tiles each program walks (8 splits
    of the cache in 32-token tiles) times the layers; the walk, not the bytes, sets it: the same
    cache bytes cost the Triton column more than the FlashInfer one, which reads them within the
    H100's memory bandwidth (the catalog's h100-sxm)."""
    from kvoffload.engines import sglang_attention

    entry = CONSTANTS["sglang"]["triton_decode_tile_us"]
    src = entry["from"]
    tokens = np.array(src["input_tokens"], dtype=float)
    tiles = sglang_attention.walk("triton", mla=False).seconds(tokens) / sglang_attention.tile_s(
        False
    )
    slope = np.polyfit(tiles * src["layers"], 1e3 / np.array(src["tokens_per_s_old_triton"]), 1)[0]
    assert entry["value"] == pytest.approx(slope * 1e3, rel=1e-6)
    assert entry["kind"] == "fitted" and entry["machine"]
    model = catalog.load(f"models/{src['model']}")["config"]
    kv_bytes = src["layers"] * model["num_key_value_heads"] * model["head_dim"] * 2 * 2
    flash = np.polyfit(tokens, 1 / np.array(src["tokens_per_s_flashinfer"]), 1)[0]
    old = np.polyfit(tokens, 1 / np.array(src["tokens_per_s_old_triton"]), 1)[0]
    spec = parse_quantity(
        catalog.load("hardware/gpus")["h100-sxm"]["memory_bandwidth"]["value"], Dim.BANDWIDTH
    )
    assert kv_bytes / old < kv_bytes / flash <= spec
