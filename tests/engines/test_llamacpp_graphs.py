"""CUDA graphs in llama.cpp and ik_llama.cpp when host-resident weights split a token's graph."""

from __future__ import annotations

import pytest

from kvoffload.engines.each import llamacpp
from kvoffload.engines.each.llamacpp import step
from kvoffload.engines.scenario import parse_scenario

BASE = {
    "hardware": "rtx-4090-desktop",
    "model": "qwen3-30b-a3b",
    "engine": "llamacpp",
    "precision": {"weights": "q4_k_m", "kv": "fp16"},
    "workload": {"batch": 1, "prompt": 512, "generate": 64},
}


def _op_s(options: dict) -> float:
    sc = parse_scenario({**BASE, "options": options}, name="graphs")
    table, gpus = llamacpp.tensor_gpus(sc)
    ups, _, _ = step._hand_overs(sc, table, gpus)
    return step._constants(sc, ups)[0]


@pytest.mark.parametrize("fork", ["llama.cpp", "ik_llama"])
def test_a_graph_all_on_the_gpu_replays_as_cuda_graphs_in_both_forks(fork):
    assert _op_s({"n_gpu_layers": 99, "fork": fork}) == llamacpp.gpu_op_s_default(True)


def test_ik_llama_drops_cuda_graphs_once_host_experts_split_the_graph():
    split = {"n_gpu_layers": 99, "n_cpu_moe": 20}
    assert _op_s(split) == llamacpp.gpu_op_s_default(True)  # llama.cpp: a graph per split
    assert _op_s({**split, "fork": "ik_llama"}) == llamacpp.gpu_op_s_default(False)
    assert llamacpp.gpu_op_s_default(False) > llamacpp.gpu_op_s_default(True)
    # an explicit per-op time still wins
    assert _op_s({**split, "fork": "ik_llama", "gpu_op_us": 5.0}) == pytest.approx(5e-6)


def test_ik_llama_partial_offload_decodes_slower_than_llamacpp_by_the_graph_loss():
    from kvoffload.engines.scenario import predict

    split = {"n_gpu_layers": 99, "n_cpu_moe": 20}
    main = predict(parse_scenario({**BASE, "options": split}), check=False)
    ik = predict(parse_scenario({**BASE, "options": {**split, "fork": "ik_llama"}}), check=False)
    sc = parse_scenario({**BASE, "options": split})
    table, gpus = llamacpp.tensor_gpus(sc)
    ops = int((step.matmul_ops(table) & (gpus >= 0)).sum())
    loss = ops * (llamacpp.gpu_op_s_default(False) - llamacpp.gpu_op_s_default(True))
    assert ik.tpot_s - main.tpot_s == pytest.approx(loss, rel=1e-6)
