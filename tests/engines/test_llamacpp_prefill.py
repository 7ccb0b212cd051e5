"""llama.cpp's prefill: ubatches, the op-offload threshold, pinned or pageable copies, MMQ."""

from __future__ import annotations

import pytest

from kvoffload.engines.each import llamacpp
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.model import decode, routing

MOE = {
    "hardware": "rtx-4090-desktop",
    "model": "qwen3-30b-a3b",
    "engine": "llamacpp",
    "precision": {"weights": "q4_k_m", "kv": "fp16"},
}


def _sc(prompt: int, model: str = "qwen3-30b-a3b", **options):
    return parse_scenario(
        {
            **MOE,
            "model": model,
            "workload": {"batch": 1, "prompt": prompt, "generate": 1},
            "options": {"cpu_moe": True, **options},
        }
    )


def _upload_s(sc) -> float:
    """Return the seconds one copy of every host-resident weight (not the embeddings) takes."""
    table, on_gpu = llamacpp.tensor_devices(sc)
    host = ~on_gpu & (table.position >= 0)
    return float(table.nbytes[host].sum()) / sc.system.copy_rate(
        "h2d", pinned=llamacpp.weights_pinned(sc)
    )


def _ttft(sc) -> float:
    return predict(sc, check=False).ttft_s


def test_a_prompt_below_the_threshold_computes_on_the_cpu_and_copies_nothing():
    short = _sc(llamacpp.OFFLOAD_MIN_BATCH - 1)
    table, _ = llamacpp.tensor_devices(short)
    assert not llamacpp.offloaded(short, table, short.prompt).any()
    assert _ttft(short) < _upload_s(short) / 4  # far from one copy of every CPU expert
    assert _ttft(_sc(1)) < _ttft(short)


def test_at_the_threshold_every_host_weight_is_copied_once_per_ubatch():
    one = _ttft(_sc(512))
    two = _ttft(_sc(1024))
    upload = _upload_s(_sc(512))
    assert one > upload  # every expert is routed to by some of 512 tokens
    assert two - one == pytest.approx(upload, rel=0.05)  # the second ubatch copies them again
    assert _ttft(_sc(1024, n_ubatch=1024)) < two  # one ubatch of 1024: one copy


def test_mapped_weights_copy_at_the_pageable_rate_and_no_mmap_at_the_pinned():
    mapped, copied = _sc(512), _sc(512, no_mmap=True)
    assert not llamacpp.weights_pinned(mapped) and llamacpp.weights_pinned(copied)
    assert not llamacpp.weights_pinned(_sc(512, no_mmap=True, no_pinned=True))
    assert _ttft(copied) < _ttft(mapped)


def test_ik_llama_keeps_a_moe_op_on_the_cpu_until_each_expert_sees_32_tokens():
    sc = _sc(512, fork="ik_llama")
    table, _ = llamacpp.tensor_devices(sc)
    k, n = decode.layers(sc.model, sc.setup.weights).expert_use  # Qwen3-30B-A3B: 8 of 128
    below = llamacpp.offloaded(sc, table, 32 * n // k - 1)
    assert not below[table.routed].any() and below[~table.routed].all()
    assert llamacpp.offloaded(sc, table, 32 * n // k)[table.routed].all()


def test_quantised_gguf_prefill_runs_at_the_int8_tensor_core_rate():
    dense = parse_scenario(
        {
            "hardware": "rtx-4090-desktop",
            "model": "llama-3-8b",
            "engine": "llamacpp",
            "precision": {"weights": "q4_0", "kv": "fp16"},
            "workload": {"batch": 1, "prompt": 512, "generate": 1},
        }
    )
    gpu = dense.system.gpu
    assert llamacpp.prefill_rate(dense) == gpu.flops_int8.value * llamacpp.mmq_share_default()
    assert llamacpp.prefill_rate(dense) > dense.system.compute_rate  # above the bf16 rate used
    assert llamacpp.is_gguf_quant(dense.setup.weights)


def test_ik_llama_ngl_n_layer_keeps_the_output_layer_not_layer_0_on_the_cpu():
    n = _sc(1).model.n_layers
    _, mainline = llamacpp.placement(_sc(1, n_gpu_layers=n))
    _, ik = llamacpp.placement(_sc(1, n_gpu_layers=n, fork="ik_llama"))
    assert not mainline[0] and mainline[-1]  # llama.cpp: layer 0 on the CPU, output on the GPU
    assert ik[:-1].all() and not ik[-1]  # ik_llama.cpp: every layer on the GPU, output not
    _, ik_all = llamacpp.placement(_sc(1, n_gpu_layers=n + 1, fork="ik_llama"))
    assert ik_all.all()


def test_no_op_offload_computes_every_ubatch_on_the_cpu_where_the_weights_are():
    """``--no-op-offload``: no ubatch copies host-resident experts to the GPU, so the prefill
    no longer depends on the link's rates; by default a long prompt's does."""
    sc = _sc(4096, no_op_offload=True)
    table, _ = llamacpp.tensor_devices(sc)
    assert not llamacpp.offloaded(sc, table, 512).any()
    assert llamacpp.offloaded(_sc(4096), table, 512).any()
    slow_link = {"base": "rtx-4090-desktop", "id": "slow-link",
                 "link": {"base": "pcie4-x16", "h2d_bandwidth": "5 GB/s",
                          "pageable_bandwidth": "2 GB/s"}}  # fmt: skip

    def on(hardware, **options):
        return _ttft(parse_scenario({**MOE, "hardware": hardware,
                                     "workload": {"batch": 1, "prompt": 4096, "generate": 1},
                                     "options": {"cpu_moe": True, **options}}))  # fmt: skip

    assert on(slow_link, no_op_offload=True) == pytest.approx(
        on("rtx-4090-desktop", no_op_offload=True), rel=1e-12
    )
    assert on(slow_link) > on("rtx-4090-desktop")


def test_n_batch_caps_the_physical_batch_and_threads_batch_sets_the_prefills_cpu_threads():
    assert parse_scenario({**MOE, "workload": {"batch": 1, "prompt": 64},
                           "options": {"n_batch": 256, "n_ubatch": 1024}}).options.ubatch == 256  # fmt: skip
    capped = _sc(2048, n_batch=256, n_ubatch=1024)
    same = _sc(2048, n_ubatch=256)
    assert _ttft(capped) == pytest.approx(_ttft(same), rel=1e-12)
    few = _sc(2048, threads_batch=1, no_op_offload=True)
    many = _sc(2048, no_op_offload=True)
    assert llamacpp.cpu_weight_rate(few, threads=1) < llamacpp.cpu_weight_rate(few)
    assert _ttft(few) > _ttft(many)  # the prefill's CPU matmuls on one thread
    assert predict(few, check=False).tpot_s == predict(many, check=False).tpot_s  # decode: -t
    assert parse_scenario({**MOE, "workload": {"batch": 1, "prompt": 64},
                           "options": {"mlock": True}}).options.mlock  # fmt: skip


@pytest.mark.parametrize("ubatch", [16, 32, 64])
def test_every_ubatch_reads_the_gpu_s_experts_again(ubatch):
    """All on the GPU with small ubatches (PR #15631's sweep of -ub on an RTX 4090): each ubatch
    reads the experts it routes to, so the prompt's rate is at most the ubatch's tokens over
    those bytes at the card's bandwidth, and rises with the ubatch."""

    def sc(ub: int):
        raw = {**MOE, "precision": {"weights": "q4_0", "kv": "fp16"}}
        raw["workload"] = {"batch": 1, "prompt": 4096, "generate": 1}
        raw["options"] = {"n_gpu_layers": 99, "n_ubatch": ub}
        return parse_scenario(raw)

    s = sc(ubatch)
    table, _ = llamacpp.tensor_devices(s)
    k, n = decode.layers(s.model, s.setup.weights).expert_use
    touched = float(routing.touched_share(n, k, ubatch))
    experts = float(table.nbytes[table.routed].sum()) * touched
    bound = ubatch / (experts / s.system.gpu.streaming_bandwidth)
    rate = 4096 / _ttft(s)
    assert rate <= bound * (1 + 1e-9)
    assert rate < 4096 / _ttft(sc(2 * ubatch))
