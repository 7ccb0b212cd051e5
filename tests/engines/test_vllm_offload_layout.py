"""Which parameters vLLM's ``cpu_offload_gb`` moves (decoder layers in order, each parameter whole,
fused as vLLM fuses them) and the host memory they take (pinned: each rounded up to a power of
two, as PyTorch's CachingHostAllocator allocates)."""

from __future__ import annotations

import pytest

from kvoffload.engines import vllm_weight_offload as offload
from kvoffload.engines.each import vllm
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.model import decode, tensor_groups

GiB = 2**30


def _sc(model: str, gb: float, **extra):
    return parse_scenario({
        "hardware": "h100-sxm-pcie5", "model": model, "engine": "vllm",
        "precision": {"weights": "bf16", "kv": "bf16"},
        "workload": {"batch": 1, "prompt": 512, "generate": 8},
        "options": {"cpu_offload_gb": gb, **extra},
    })  # fmt: skip


def test_a_dense_layer_is_qkv_o_gate_up_down_and_its_norms():
    sc = _sc("llama-3.1-8b", 1)
    m = sc.model
    sizes = offload.parameter_bytes(sc)
    per_layer = len(sizes) // m.n_layers
    first = sizes[:per_layer].tolist()
    h, kvd, ff = m.hidden, m.n_kv_heads * m.head_dim, m.intermediate
    assert first[:4] == [2 * h * (h + 2 * kvd), 2 * h * h, 2 * h * 2 * ff, 2 * ff * h]
    table = tensor_groups.tensor_table(m, sc.setup.weights)
    layers = table.nbytes[(table.position >= 0) & (table.position < m.n_layers)].sum()
    assert sizes.sum() == pytest.approx(layers, rel=1e-12)  # every decoder byte, nothing else


def test_the_budget_takes_whole_parameters_and_the_one_that_crosses_it():
    sc = _sc("llama-3.1-8b", 1)
    sizes = offload.parameter_bytes(sc)
    qkv, o = sizes[0], sizes[1]
    moved, _ = offload.offload(sc, qkv + 1, pinned=False)  # just past qkv: o goes too
    assert moved == qkv + o
    assert offload.offload(sc, qkv, pinned=False)[0] == qkv
    assert offload.offload(sc, 0, pinned=True) == (0.0, 0.0)
    everything = offload.offload(sc, 1e15, pinned=False)[0]
    assert everything == pytest.approx(sizes.sum())


def test_pinned_parameters_take_the_next_power_of_two_of_host_memory():
    sc = _sc("qwen3-30b-a3b", 2)
    sizes = offload.parameter_bytes(sc)
    moved, held = offload.offload(sc, 2 * GiB, pinned=True)
    assert held >= moved
    n = 0
    total = want = 0.0
    while total < 2 * GiB:
        total += sizes[n]
        size = sizes[n]
        power = 1.0
        while power < size:
            power *= 2
        want += power
        n += 1
    assert (moved, held) == pytest.approx((total, want))
    # Qwen3-30B-A3B's w13 (128 experts x gate and up) is 768 MiB: it takes 1 GiB pinned
    w13 = 2 * sc.model.moe.n_experts * sc.model.moe.expert_intermediate * sc.model.hidden * 2
    assert w13 in sizes.tolist()


def test_host_memory_counts_the_rounding_and_the_share_streamed_is_what_moved():
    sc = _sc("qwen3-30b-a3b", 10)
    p = predict(sc, check=False)
    moved, held = offload.offload(sc, 10 * GiB, pinned=True)
    setup, off, _ = vllm._setup(sc)
    weights = decode.step_weight_bytes(sc.model, sc.setup.weights)
    assert off == pytest.approx(moved / weights)
    base = decode.memory(setup, sc.prompt + sc.generate, sc.batch)
    assert held > moved
    assert float(p.memory.cpu) == pytest.approx(float(base.cpu) + held - moved)


def test_unpinned_offload_takes_its_own_bytes():
    raw = {
        "hardware": "h100-sxm-pcie5", "model": "qwen3-30b-a3b", "engine": "vllm",
        "precision": {"weights": "bf16", "kv": "bf16"},
        "workload": {"batch": 1, "prompt": 512, "generate": 8},
        "options": {"cpu_offload_gb": 10}, "pinned": False,
    }  # fmt: skip
    sc = parse_scenario(raw)
    setup, _, _ = vllm._setup(sc)
    base = decode.memory(setup, sc.prompt + sc.generate, sc.batch)
    assert float(predict(sc, check=False).memory.cpu) == pytest.approx(float(base.cpu))
