"""vLLM's prefetch offloader (--offload-group-size): the last layers of every group in host
memory, each copied to a GPU slot a few offloaded layers ahead of its turn, on one copy stream."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.engines import prefetch_offload as pf
from kvoffload.engines import vllm_weight_offload
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError


def _sc(
    model: str = "llama-3.1-8b",
    weights: str = "bf16",
    engine: str = "vllm",
    hw: str = "rtx-4090-desktop",
    **options,
):
    raw = {
        "hardware": hw,
        "model": model,
        "engine": engine,
        "precision": {"weights": weights, "kv": "bf16"},
        "workload": {"batch": 1, "prompt": 1024, "generate": 64},
        "options": options,
    }
    return parse_scenario(raw, name="prefetch")


def test_the_last_layers_of_every_group_are_offloaded():
    """OffloadConfig's own example: group size 8, two in each group, offloads 6, 7, 14, 15, ..."""
    got = np.flatnonzero(pf.offloaded_layers(32, 8, 2)).tolist()
    assert got == [6, 7, 14, 15, 22, 23, 30, 31]
    assert not pf.offloaded_layers(32, 0, 1).any()


def test_parameter_names_match_by_whole_segments():
    """f".{p}." in f".{name}.": "experts" and "experts.w2_weight" match mlp.experts.w2_weight;
    "expert" and "w2" do not, nor does w2_weight match w2_weight_scale."""
    name = "mlp.experts.w2_weight"
    assert pf.matches(name, ("experts",)) and pf.matches(name, ("experts.w2_weight",))
    assert not pf.matches(name, ("expert",)) and not pf.matches(name, ("w2",))
    assert not pf.matches("mlp.experts.w2_weight_scale", ("w2_weight",))
    names = [
        n
        for layer in vllm_weight_offload.layer_parameters(*_parts("qwen3-30b-a3b"))
        for n, _ in layer
    ]
    assert "mlp.experts.w13_weight" in names and "self_attn.qkv_proj.weight" in names


def _parts(model: str):
    sc = _sc(model)
    return sc.model, sc.setup.weights


def test_a_pass_with_free_copies_is_its_compute_and_one_with_slow_copies_is_the_copy_stream():
    layer = np.full(8, 1.0)
    none = np.zeros(8)
    assert pf.pass_seconds(layer, none, 1) == 8.0
    slow = np.where(np.arange(8) % 4 == 3, 100.0, 0.0)  # layers 3 and 7, 100 s each
    # one slot: copy 0 (layer 3) is queued as the last pass's layer 7 ends, so layer 3 runs
    # from 100 s; copy 1 (layer 7) only once layer 3 has freed the slot, so layer 7 runs from
    # 201 s and the pass ends at 202 s
    assert pf.pass_seconds(layer, slow, 1) == pytest.approx(202.0)
    # two slots: each layer's copy queued as its own last run ended, so the copy stream never
    # idles: the pass is its 200 s of copies
    assert pf.pass_seconds(layer, slow, 2) == pytest.approx(200.0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.0, 10.0), min_size=2, max_size=12),
    st.lists(st.floats(0.0, 10.0), min_size=12, max_size=12),
    st.integers(1, 4),
)
def test_a_pass_is_bounded_by_its_work_and_never_slower_with_more_slots(compute, copies, step):
    """Never shorter than the compute or the copy stream's work, never longer than both in turn,
    and a deeper prefetch (more slots) never slows it."""
    t = np.array(compute)
    c = np.array(copies[: len(t)])
    got = float(pf.pass_seconds(t, c, step))
    assert got >= max(t.sum(), c.sum()) - 1e-9
    assert got <= t.sum() + c.sum() + 1e-9
    if step + 1 <= np.count_nonzero(c):  # a deeper prefetch, within the offloaded layers
        assert float(pf.pass_seconds(t, c, step + 1)) <= got + 1e-9


def test_prefetch_offloading_moves_the_chosen_layers_and_hides_copies_behind_compute():
    base = predict(_sc())
    got = predict(_sc(offload_group_size=4, offload_num_in_group=1))
    sc = _sc(offload_group_size=4, offload_num_in_group=1)
    _, moved = pf.plan(sc, pf.vllm_segments(sc))
    assert got.settings["offload_backend"] == "prefetch"
    assert got.settings["prefetch_layers"] == [3, 7, 11, 15, 19, 23, 27, 31]
    # each offloaded layer's parameters leave the GPU; one slot of them comes back
    segments = pf.vllm_segments(sc)
    off, held = pf.host_bytes(sc, segments, pinned=True)
    assert off == pytest.approx(moved.sum())
    assert float(base.memory.gpu - got.memory.gpu) == pytest.approx(
        off - pf.buffer_bytes(sc, segments, 1)
    )
    assert float(got.memory.cpu - base.memory.cpu) == pytest.approx(held)
    # a step: never less than its copies over the link, never less than without offload
    copy_s = off / sc.system.copy_rate("h2d", pinned=True)
    assert got.tpot_s >= copy_s and got.tpot_s >= base.tpot_s
    assert got.ttft_s >= base.ttft_s


def test_offload_params_limit_the_copies_to_the_named_parameters():
    """A MoE model with offload_params: experts moves only the expert stacks; a segment no
    parameter holds moves nothing, so nothing changes."""
    sc = _sc("qwen3-30b-a3b", offload_group_size=2, offload_params=["experts"])
    every = _sc("qwen3-30b-a3b", offload_group_size=2)
    one, all_ = (pf.host_bytes(x, pf.vllm_segments(x), pinned=False)[0] for x in (sc, every))
    assert 0 < one < all_
    nothing = predict(_sc(offload_group_size=2, offload_params=["no_such_segment"]))
    assert nothing.settings["prefetch_layers"] == []
    assert nothing.tpot_s == pytest.approx(predict(_sc()).tpot_s)


def test_the_backend_option_chooses_between_uva_and_prefetch():
    uva = predict(_sc(cpu_offload_gb=4))
    both = predict(_sc(cpu_offload_gb=4, offload_group_size=4))  # auto: prefetch wins
    assert both.settings["offload_backend"] == "prefetch"
    assert both.settings["weights_on_host_share"] == 0.0
    ignored = predict(_sc(cpu_offload_gb=4, offload_group_size=4, offload_backend="uva"))
    assert ignored.tpot_s == uva.tpot_s and ignored.settings["prefetch_layers"] == []


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"offload_group_size": 2, "offload_num_in_group": 3}, "options.offload_num_in_group"),
        ({"offload_backend": "prefetch"}, "options.offload_num_in_group"),
        ({"offload_group_size": 2, "offload_prefetch_step": 0}, "options.offload_prefetch_step"),
    ],
)
def test_what_offload_config_refuses_exits_naming_the_field(options, field):
    with pytest.raises(InputError) as err:
        predict(_sc(**options))
    assert err.value.field == field


def test_cpu_offload_params_limit_uva_to_the_named_parameters():
    """UVA with cpu_offload_params: experts takes only expert stacks, in order, to the budget."""
    sc = _sc("qwen3-30b-a3b", cpu_offload_gb=2, cpu_offload_params=["experts"])
    sizes = vllm_weight_offload.parameter_bytes(sc, ("experts",))
    names = [
        n
        for layer in vllm_weight_offload.layer_parameters(*_parts("qwen3-30b-a3b"))
        for n, _ in layer
    ]
    assert all((b > 0) == (".experts." in f".{n}.") for n, b in zip(names, sizes, strict=True))
    moved, _ = vllm_weight_offload.offload(sc, 2 * 2**30, pinned=False, segments=("experts",))
    assert moved >= 2 * 2**30


def _sglang(model: str = "llama-3.1-8b", weights: str = "bf16", hw: str = "rtx-4090-desktop", **o):
    return _sc(model, weights, "sglang", hw, **o)


def test_sglang_cpu_offload_gb_copies_its_modules_before_each_forward_as_vllm_without_uva():
    """OffloaderV1 walks the same parameters as vLLM's UVA offloader and, like vLLM without UVA,
    copies each offloaded module's state_dict to the GPU before its forward."""
    sglang = predict(_sglang(cpu_offload_gb=6))
    vllm = predict(_sc(cpu_offload_gb=6, disable_uva=True))
    assert sglang.tpot_s == pytest.approx(vllm.tpot_s, rel=1e-9)
    assert sglang.tpot_s > predict(_sglang()).tpot_s
    # V1's budget wins where both are set (create_offloader_from_server_args)
    both = predict(_sglang(cpu_offload_gb=6, offload_group_size=2))
    assert both.tpot_s == sglang.tpot_s and both.settings["offload_layers"] == []


def test_sglang_prefetch_offloads_deepseek_experts_and_refuses_other_architectures():
    sc = _sglang(
        "deepseek-v3", "fp8", "h200-sxm-pcie5", offload_group_size=4, offload_num_in_group=1
    )
    got = predict(sc, check=False)
    layers = got.settings["offload_layers"]
    assert layers == [i for i in range(3, sc.model.n_layers, 4)]
    # of a MoE layer only the routed experts' two stacks move, not its attention or shared expert
    segments = tuple(("experts.w13_weight", "experts.w2_weight") for _ in range(sc.model.n_layers))
    moved = pf.host_bytes(sc, segments, pinned=False)[0]
    whole = pf.host_bytes(sc, ((),) * sc.model.n_layers, pinned=False)[0]
    assert 0 < moved < whole
    with pytest.raises(InputError) as err:
        predict(_sglang("qwen3-30b-a3b", offload_group_size=2))
    assert err.value.field == "options.offload_group_size"
