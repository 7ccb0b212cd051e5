"""vLLM's ``cpu_offload_gb`` as its UVAOffloader runs it: the kernels read offloaded weights in
place over the link, so of a MoE layer's routed experts only those the batch picks cross it;
``disable_uva`` (VLLM_WEIGHT_OFFLOADING_DISABLE_UVA=1) copies each offloaded module whole."""

from __future__ import annotations

import pytest

from kvoffload.engines import vllm_weight_offload
from kvoffload.engines.each import vllm
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError
from kvoffload.model import decode

GiB = 2**30


def _moved(sc, budget: float) -> float:
    """Return the bytes vLLM moves to host memory for ``budget`` (whole parameters, in order)."""
    return vllm_weight_offload.offload(sc, budget, pinned=True)[0]


def _scenario(model: str, batch: int = 1, **options) -> dict:
    return {
        "hardware": "rtx-4090-desktop",
        "model": model,
        "engine": "vllm",
        "precision": {"weights": "int4"},
        "workload": {"batch": batch, "prompt": 512, "generate": 8},
        "options": {"cpu_offload_gb": 8, **options},
    }


def _h2d_s(raw: dict) -> float:
    return predict(parse_scenario(raw), check=False).streams_s["h2d"]


def test_a_dense_model_reads_every_offloaded_byte_either_way():
    uva = predict(parse_scenario(_scenario("qwen2.5-7b")), check=False)
    copy = predict(parse_scenario(_scenario("qwen2.5-7b", disable_uva=True)), check=False)
    assert uva.tpot_s == copy.tpot_s


def test_uva_needs_no_gpu_buffer_for_the_offloaded_weights():
    """Read in place, the offloaded weights pass through no GPU buffer: the GPU holds what it
    holds with nothing offloaded but the offloaded weights, the prefill's working set as its
    only transient bytes; a whole-module copy stages the largest offloaded layer besides."""
    raw = _scenario("qwen2.5-7b", cpu_offload_gb=2)
    sc = parse_scenario(raw)
    uva = predict(sc, check=False).memory
    copy = predict(
        parse_scenario(_scenario("qwen2.5-7b", cpu_offload_gb=2, disable_uva=True)), check=False
    ).memory
    resident = predict(
        parse_scenario(_scenario("qwen2.5-7b", cpu_offload_gb=0)), check=False
    ).memory
    assert float(uva.staging) == pytest.approx(float(resident.staging), rel=1e-12)
    lay = decode.layers(sc.model, sc.setup.weights)
    off = _moved(sc, 2 * GiB) / decode.step_weight_bytes(sc.model, sc.setup.weights)
    assert float(copy.staging - uva.staging) == pytest.approx(
        float(lay.weight_bytes.max()) * off, rel=1e-9
    )
    assert float(uva.cpu) == pytest.approx(float(copy.cpu), rel=1e-12)


def test_uva_moves_the_touched_experts_and_a_copy_moves_them_all():
    """At batch 1 a step touches k of n experts: the link carries the offloaded share of the
    dense bytes and of k/n of the routed experts' bytes, against all of them copied whole."""
    sc = parse_scenario(_scenario("qwen3-30b-a3b"))
    lay = decode.layers(sc.model, sc.setup.weights)
    k, n = lay.expert_use
    off = _moved(sc, 8 * GiB) / decode.step_weight_bytes(sc.model, sc.setup.weights)
    rate = sc.system.copy_rate("h2d", pinned=True)
    experts = float(lay.expert_bytes @ lay.count)
    # the same copies (one a layer, the same latency) either way: the difference is the bytes
    saved = off * experts * (1 - k / n) / rate
    got = _h2d_s(_scenario("qwen3-30b-a3b", disable_uva=True)) - _h2d_s(_scenario("qwen3-30b-a3b"))
    assert got == pytest.approx(saved, rel=1e-9)
    assert saved > 0


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "gpt-oss-20b"])
def test_uva_is_never_slower_and_the_gap_closes_as_the_batch_touches_every_expert(model):
    gaps = []
    for batch in (1, 4, 64, 1024):
        uva = predict(parse_scenario(_scenario(model, batch)), check=False).tpot_s
        copy = predict(
            parse_scenario(_scenario(model, batch, disable_uva=True)), check=False
        ).tpot_s
        assert uva <= copy
        gaps.append(copy / uva)
    assert gaps == sorted(gaps, reverse=True) and gaps[0] > 1.5
    assert gaps[-1] == pytest.approx(1.0, rel=1e-3)


def test_routing_stream_is_refused_for_vllm_in_one_line():
    raw = {**_scenario("qwen3-30b-a3b"), "routing": {"stream": "all"}}
    with pytest.raises(InputError) as info:
        parse_scenario(raw)
    text = str(info.value)
    assert "routing.stream" in text and "disable_uva" in text and "\n" not in text


@pytest.mark.parametrize(
    ("hardware", "budget"),
    [("rtx-4090-desktop", 2048), ("a100-80gb-sxm-pcie4", 2048), ("h100-sxm-pcie5", 8192)],
)
def test_vllm_serves_prefill_chunks_of_its_default_budget(hardware, budget):
    """vllm serve's default: 8192 tokens a step on a GPU of 70 GiB or more but an A100."""
    sc = parse_scenario({**_scenario("qwen2.5-7b"), "hardware": hardware})
    assert vllm.batched_tokens(sc) == budget
    raw = {**_scenario("qwen2.5-7b", max_num_batched_tokens=512), "hardware": hardware}
    assert vllm.batched_tokens(parse_scenario(raw)) == 512


def test_each_later_prefill_chunk_reads_the_offloaded_weights_again():
    raw = _scenario("qwen2.5-7b")
    raw["workload"] = {"batch": 1, "prompt": 32768, "generate": 8}
    sc = parse_scenario(raw)
    one_pass = {**raw, "options": {**raw["options"], "max_num_batched_tokens": 32768}}
    gap = predict(sc, check=False).ttft_s - predict(parse_scenario(one_pass), check=False).ttft_s
    # every offloaded byte, each pass: the parameters 8 GiB takes, or every decoder layer's
    moved = _moved(sc, 8 * GiB)
    assert gap == pytest.approx((32768 // 2048 - 1) * moved / sc.system.copy_rate("h2d"), rel=1e-9)
    # nothing offloaded: the chunks read nothing over the link
    resident = {**raw, "options": {"cpu_offload_gb": 0}}
    alone = {**resident, "options": {"cpu_offload_gb": 0, "max_num_batched_tokens": 32768}}
    assert predict(parse_scenario(resident), check=False).ttft_s == pytest.approx(
        predict(parse_scenario(alone), check=False).ttft_s, rel=1e-12
    )
