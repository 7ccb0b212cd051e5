"""llama.cpp on several GPUs as load_tensors places them: ``tensor_split`` proportions, split mode
``layer``, ``row`` (each matrix split by rows over the GPUs), ``tensor`` (every layer split over
all GPUs, all-reduces between them) or ``none`` with ``main_gpu``, ``-ot …=CUDAn`` naming a GPU;
each GPU's bytes checked against its own memory, and a hand-over wherever the graph passes from
one GPU to another."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.engines.each import llamacpp
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError
from kvoffload.model import transfer
from kvoffload.model.prediction import shortfalls

TWO = {"base": "a100-80gb-sxm-pcie4", "gpu": {"base": "a100-80gb-sxm", "count": 2}}


def _raw(model: str = "llama-3.1-8b", **options) -> dict:
    return {
        "hardware": TWO,
        "model": model,
        "engine": "llamacpp",
        "precision": {"weights": "q4_k_m", "kv": "fp16"},
        "workload": {"batch": 1, "prompt": 1024, "generate": 8},
        "options": options,
    }


def test_tensor_split_gives_each_gpu_its_proportion_of_the_layers():
    sc = parse_scenario(_raw(tensor_split="3,1"))
    n = sc.model.n_layers + 1  # the output layer counts
    # GPU 0 takes the positions p with p / n below 3/4: upper_bound over the split points
    first = math.ceil(0.75 * n)
    assert llamacpp.layers_per_gpu(sc) == [first, n - first]
    assert parse_scenario(_raw(tensor_split=[3, 1])).options.tensor_split == (3.0, 1.0)


def test_without_a_split_alike_gpus_take_equal_runs():
    sc = parse_scenario(_raw())
    a, b = llamacpp.layers_per_gpu(sc)
    assert abs(a - b) <= 1 and a + b == sc.model.n_layers + 1


@settings(max_examples=60, deadline=None)
@given(
    split=st.lists(st.integers(0, 9), min_size=0, max_size=2),
    ngl=st.one_of(st.none(), st.integers(0, 33)),
    mode=st.sampled_from(["layer", "none", "row", "tensor"]),
    main=st.integers(0, 1),
    moe=st.booleans(),
)
def test_each_gpus_bytes_add_up_to_the_gpu_total(split, ngl, mode, main, moe):
    """Bytes are conserved: what the GPUs hold one by one is what the GPU tier holds."""
    options = {"tensor_split": split, "split_mode": mode, "main_gpu": main}
    if ngl is not None:
        options["n_gpu_layers"] = ngl
    model = "qwen3-30b-a3b" if moe else "llama-3.1-8b"
    if moe:
        options["override_tensor"] = ["blk\\.1[0-9]\\.ffn_.*_exps=CUDA1"]
    sc = parse_scenario(_raw(model, **options))
    mem = llamacpp.ENGINE.memory(sc)
    assert len(mem.gpu_each) == 2 and min(mem.gpu_each) >= 0
    assert sum(mem.gpu_each) == pytest.approx(float(mem.gpu), rel=1e-12)
    if mode == "none" and not moe:
        assert mem.gpu_each[1 - main] == 0


def test_one_gpu_can_overflow_while_the_sum_fits():
    # a 70B in bf16 (~141 GB) fits two 80 GB GPUs split evenly, not almost all on one
    raw = _raw("llama-3.1-70b", tensor_split="20,1")
    raw["precision"] = {"weights": "bf16", "kv": "fp16"}
    sc = parse_scenario(raw)
    p = predict(sc, check=False)
    short = shortfalls(sc.system, p.memory)
    assert [t for t, _, _ in short] == ["GPU memory (GPU 0)"]
    assert float(p.memory.gpu) <= sc.system.gpu_memory
    even = predict(parse_scenario({**raw, "options": {}}), check=False)
    assert float(even.memory.gpu) == pytest.approx(float(p.memory.gpu), rel=1e-12)
    assert not shortfalls(sc.system, even.memory)


def test_split_mode_none_drops_the_boundary_hand_over():
    layer = parse_scenario(_raw())
    none = parse_scenario(_raw(split_mode="none", main_gpu=1))
    act = layer.model.hidden * 4.0
    gap = predict(layer, check=False).tpot_s - predict(none, check=False).tpot_s
    assert gap == pytest.approx(float(transfer.peer_time(layer.system, act)), rel=1e-9)
    assert llamacpp.layers_per_gpu(none) == [0, none.model.n_layers + 1]


def test_experts_on_another_gpu_cost_two_hand_overs_a_layer():
    sc = parse_scenario(_raw("qwen3-30b-a3b", split_mode="none", override_tensor="exps=CUDA1"))
    table, gpus = llamacpp.tensor_gpus(sc)
    ups, downs, peers = llamacpp._hand_overs(sc, table, gpus)
    assert (ups, downs, peers) == (1, 1, 2 * sc.model.n_layers)
    each = llamacpp.ENGINE.memory(sc).gpu_each
    assert each[1] == pytest.approx(float(table.nbytes[table.routed].sum()), rel=1e-12)


@pytest.mark.parametrize(
    ("options", "field", "fragment"),
    [
        ({"override_tensor": "exps=CUDA2"}, "options.override_tensor", "names CUDA2"),
        ({"main_gpu": 2}, "options.main_gpu", "main_gpu 2"),
        ({"tensor_split": "1,1,1"}, "options.tensor_split", "3 proportions for 2 GPU(s)"),
        ({"tensor_split": "1,x"}, "tensor_split", "proportions such as"),
    ],
)
def test_gpus_the_profile_does_not_have_are_refused_in_one_line(options, field, fragment):
    with pytest.raises(InputError) as info:
        predict(parse_scenario(_raw("qwen3-30b-a3b", **options)), check=False)
    text = str(info.value)
    assert field in text and fragment in text and "\n" not in text


# ------------------------------------------------------------------ --split-mode row ------


def test_row_split_gives_each_gpu_its_share_of_every_matrix_and_keeps_the_rest_with_the_layer():
    row = parse_scenario(_raw(split_mode="row", tensor_split="3,1"))
    layer = parse_scenario(_raw(tensor_split="3,1"))
    table, gpus = llamacpp.tensor_gpus(row)
    split = llamacpp.split_rows(row, table, gpus)
    # every decoder and output matrix, no norm, bias or looked-up embedding
    assert split.any() and not split[~table.matrix].any()
    assert split[table.matrix & (gpus >= 0)].all()
    assert llamacpp.layers_per_gpu(row) == llamacpp.layers_per_gpu(layer)  # layers split alike
    kv_layers = np.zeros(row.model.n_layers)
    each = llamacpp.gpu_bytes_each(row, table, gpus, kv_layers)
    matrices = float(table.nbytes[split].sum())
    rest = table.nbytes * (~split & (gpus >= 0))
    want = [0.75 * matrices + rest[gpus == 0].sum(), 0.25 * matrices + rest[gpus == 1].sum()]
    assert each.tolist() == pytest.approx(want, rel=1e-12)


def test_row_split_leaves_stacked_experts_and_overridden_tensors_whole():
    sc = parse_scenario(_raw("qwen3-30b-a3b", split_mode="row", override_tensor="attn_q=CUDA1"))
    table, gpus = llamacpp.tensor_gpus(sc)
    split = llamacpp.split_rows(sc, table, gpus)
    named = np.array(["attn_q.weight" in n for n in table.names])
    assert not split[table.routed].any() and not split[named].any()
    assert split[table.matrix & ~named & (gpus >= 0)].all()
    # a GPU given no rows (tensor_split 1,0) splits nothing: every matrix stays with its layer
    one = parse_scenario(_raw(split_mode="row", tensor_split="1,0"))
    table, gpus = llamacpp.tensor_gpus(one)
    assert not llamacpp.split_rows(one, table, gpus).any()
    assert predict(one, check=False).tpot_s == pytest.approx(
        predict(parse_scenario(_raw(tensor_split="1,0")), check=False).tpot_s, rel=1e-12
    )


def test_row_split_reads_each_matrix_on_both_gpus_at_once_and_pays_two_copies_per_matrix():
    """Against layer split, row split's step changes by exactly what the mechanism says: the
    matrices' reads and FLOPs shrink to the larger share, and each matrix adds its input's copy
    to the other GPU and its output rows' copy back."""
    for weights, per_value in (("q4_k_m", 36 / 32), ("bf16", 4.0)):
        kw = {"tensor_split": "3,1"}
        raw_row, raw_layer = _raw(split_mode="row", **kw), _raw(**kw)
        for raw in (raw_row, raw_layer):
            raw["precision"] = {"weights": weights, "kv": "fp16"}
        row, layer = parse_scenario(raw_row), parse_scenario(raw_layer)
        table, gpus = llamacpp.tensor_gpus(row)
        split = llamacpp.split_rows(row, table, gpus)
        link = llamacpp.step_parts(row, np.array([1024.0]), 1.0)["link"][0]
        link_layer = llamacpp.step_parts(layer, np.array([1024.0]), 1.0)["link"][0]
        src1 = table.cols[split] * per_value
        dst = table.rows[split] * 0.75 * 4.0
        copies = transfer.peer_time(row.system, src1).sum()
        copies += transfer.peer_time(row.system, dst).sum()
        assert link - link_layer == pytest.approx(float(copies), rel=1e-9)
        assert np.count_nonzero(split) * 2 * row.system.link.latency.value <= copies
        gpu = llamacpp.step_parts(row, np.array([0.0]), 1.0)["gpu"][0]
        gpu_layer = llamacpp.step_parts(layer, np.array([0.0]), 1.0)["gpu"][0]
        assert gpu < gpu_layer  # three quarters of every matrix on one GPU, not all of it


def test_row_split_prefill_copies_every_ubatch_in_chunks_of_128_tokens():
    sc = parse_scenario(_raw(split_mode="row"))
    table, gpus = llamacpp.tensor_gpus(sc)
    split = llamacpp.split_rows(sc, table, gpus)
    chunk = llamacpp.row_split.exchange_s(sc, table, split, 128)
    # 1,024 prompt tokens: two ubatches of 512, four chunks each
    assert llamacpp.row_split.prefill_s(sc, table, split) == pytest.approx(8 * chunk, rel=1e-12)
    odd = parse_scenario({**_raw(split_mode="row"), "workload": {"batch": 1, "prompt": 600}})
    want = 4 * chunk + llamacpp.row_split.exchange_s(odd, table, split, 600 - 512)
    assert llamacpp.row_split.prefill_s(odd, table, split) == pytest.approx(want, rel=1e-12)


# ------------------------------------------------------------------ --split-mode tensor ---


def test_tensor_mode_splits_every_gpu_weight_and_the_kv_and_keeps_norms_on_every_gpu():
    sc = parse_scenario(_raw("qwen3-30b-a3b", split_mode="tensor", tensor_split="3,1"))
    table, gpus = llamacpp.tensor_gpus(sc)
    split = llamacpp.split_tensors(sc, table, gpus)
    stacks = table.routed & (table.rows > 1)
    # every matrix and stack of experts on the GPUs, the output layer too; no norm, no bias
    assert split[(table.matrix | stacks) & (gpus >= 0)].all()
    assert not split[~(table.matrix | stacks)].any()
    kv_layers = np.full(sc.model.n_layers, 1e6)
    each = llamacpp.gpu_bytes_each(sc, table, gpus, kv_layers)
    mirrored = float(table.nbytes[(gpus >= 0) & ~split].sum())
    parts = float(table.nbytes[split].sum()) + float(kv_layers.sum())
    assert each.tolist() == pytest.approx([mirrored + 0.75 * parts, mirrored + 0.25 * parts])
    # without tensor_split the meta device splits evenly, whatever the GPUs' memory
    even = parse_scenario(_raw(split_mode="tensor"))
    assert llamacpp.row_shares(even).tolist() == [0.5, 0.5]


def test_tensor_mode_step_is_the_larger_share_plus_two_all_reduces_a_layer():
    """Against one GPU's step (-sm none), the tensor-parallel step reads half of every weight and
    of the cache on each of two GPUs, runs every op on both, and adds one ring all-reduce of the
    f32 activations after each attention and each FFN block, and the logits' gather."""
    tensor = parse_scenario(_raw(split_mode="tensor"))
    none = parse_scenario(_raw(split_mode="none"))
    table, gpus = llamacpp.tensor_gpus(tensor)
    split = llamacpp.split_tensors(tensor, table, gpus)
    n_layers = tensor.model.n_layers
    assert llamacpp.tensor_parallel.collectives(table, split) == 2 * n_layers
    ctx = np.array([4096.0])
    a = llamacpp.step_parts(tensor, ctx, 1.0)
    b = llamacpp.step_parts(none, ctx, 1.0)
    reduce_s = transfer.all_reduce_time(tensor.system, tensor.model.hidden * 4.0, 2)
    gather_s = transfer.gather_time(tensor.system, tensor.model.vocab * 4.0, 2)
    assert a["link"][0] - b["link"][0] == pytest.approx(2 * n_layers * reduce_s + gather_s)
    ops = int(np.count_nonzero(llamacpp.matmul_ops(table) & (gpus >= 0)))
    per_op = llamacpp.gpu_op_s_default()
    # the GPU time: half of everything but the ops' fixed cost, which every GPU pays in full,
    # and the norms and biases, which every GPU reads whole
    whole = float(table.nbytes[(gpus >= 0) & ~split].sum()) / tensor.system.gpu.streaming_bandwidth
    want = (b["gpu"][0] - ops * per_op) / 2 + whole / 2
    assert a["gpu"][0] - ops * per_op == pytest.approx(want, rel=1e-9)


def test_tensor_mode_all_reduces_only_after_blocks_on_the_gpus():
    # routed experts on the CPU: the FFN's partial sums stay there, one all-reduce a layer
    sc = parse_scenario(_raw("qwen3-30b-a3b", split_mode="tensor", cpu_moe=True))
    table, gpus = llamacpp.tensor_gpus(sc)
    split = llamacpp.split_tensors(sc, table, gpus)
    assert llamacpp.tensor_parallel.collectives(table, split) == sc.model.n_layers
    # one GPU: nothing to split, the same step as -sm layer
    one = {"base": "a100-80gb-sxm-pcie4"}
    solo = parse_scenario({**_raw(split_mode="tensor"), "hardware": one})
    plain = parse_scenario({**_raw(), "hardware": one})
    assert predict(solo, check=False).tpot_s == predict(plain, check=False).tpot_s


@pytest.mark.parametrize(
    ("model", "options", "kv", "field", "fragment"),
    [
        ("llama-3.1-8b", {"flash_attn": "off"}, "fp16", "options.flash_attn", "requires flash"),
        ("llama-3.1-8b", {}, "q8_0", "precision.kv", "KV cache quantization not implemented"),
        ("deepseek-v3", {}, "fp16", "options.split_mode", "not implemented for architecture"),
        ("nemotron-h-56b", {}, "fp16", "options.split_mode", "not implemented for architecture"),
        ("llama-3.1-8b", {"no_kv_offload": True}, "fp16", "options.no_kv_offload", "host"),
    ],
)
def test_tensor_mode_refuses_what_llama_cpp_refuses(model, options, kv, field, fragment):
    raw = _raw(model, split_mode="tensor", **options)
    raw["precision"] = {"weights": "q4_k_m", "kv": kv}
    with pytest.raises(InputError) as info:
        predict(parse_scenario(raw), check=False)
    text = str(info.value)
    assert field in text and fragment in text and "\n" not in text


def test_ik_graph_mode_is_tensor_parallel_with_its_own_limits():
    # a quantised cache is fine under -sm graph (ik_llama.cpp #1177 runs -ctk q6_0)
    raw = _raw(split_mode="graph", fork="ik_llama")
    raw["precision"] = {"weights": "q4_k_m", "kv": "q8_0"}
    graph = predict(parse_scenario(raw), check=False)
    assert graph.to_json()["engine_settings"]["all_reduces_per_token"] > 0
    # a MoE model with shared experts needs every layer on the GPUs (ik_llama.cpp #1835)
    moe = _raw("glm-4.5-air", split_mode="graph", fork="ik_llama", n_gpu_layers=20)
    with pytest.raises(InputError, match="shared experts"):
        predict(parse_scenario(moe), check=False)
    with pytest.raises(InputError, match="'attn'"):
        parse_scenario(_raw(split_mode="attn", fork="ik_llama"))
