"""llama.cpp's --fit (on by default): with no -ngl, -ts, -ot or --n-cpu-moe given and everything
too big for the GPUs, the placement common_params_fit picks (common/fit.cpp at 6d0892ba): each
GPU filled back to front with layers (a MoE model's with its experts in host memory), then a MoE
model's layers made whole front to back while each GPU fits, with part of one more."""

from __future__ import annotations

import pytest

from kvoffload.engines.each.llamacpp import engine, fit
from kvoffload.engines.scenario import parse_scenario, predict

MIB = 2**20
TWO_3090 = {"base": "rtx-3090-desktop", "gpu": {"base": "rtx-3090", "count": 2}}
MIXED = {"base": "rtx-4090-desktop", "more_gpus": ["rtx-5090"]}  # CUDA0 a 4090, CUDA1 a 5090


def _sc(model: str, weights: str = "q4_k_m", hardware: object = "rtx-4090-desktop", **options):
    raw = {
        "hardware": hardware,
        "model": model,
        "engine": "llamacpp",
        "precision": {"weights": weights, "kv": "fp16"},
        "workload": {"batch": 1, "prompt": 8192, "generate": 128},
        "options": options,
    }
    return parse_scenario(raw, name="fit")


def _each(sc) -> list[float]:
    m = engine.memory(sc)
    return list(m.gpu_each) if m.gpu_each else [float(m.gpu)]


def _targets(sc) -> list[float]:
    return [g.memory.value - 1024 * MIB for g in sc.system.devices]


def _as_given(chosen: dict, model: str, weights: str = "q4_k_m", hardware: object = None):
    """Return the scenario with --fit's choice typed in by hand (and fit off)."""
    typed = {k: v for k, v in chosen.items() if v}
    return _sc(model, weights, hardware or "rtx-4090-desktop", fit=False, **typed)


def test_a_model_that_fits_keeps_every_layer_on_the_gpu():
    on, off = predict(_sc("llama-3.1-8b")), predict(_sc("llama-3.1-8b", fit="off"))
    assert on.tpot_s == off.tpot_s and on.settings["fit"] is None
    assert on.settings["n_gpu_layers"] == off.settings["n_gpu_layers"]


def test_the_rules_are_set_ngl_tensor_split_tbo_s():
    """Positions 0 to n_layer (the last the output layer); the GPU layers are the last -ngl, each
    device's whole layers first, then its partial ones: the first with its overflow pattern and
    buffer, the rest with their routed experts to the CPU."""
    shares = [fit.Layers(5, 2, fit.UP), fit.Layers(4, 3)]
    got = fit.placement_options(shares, ["CUDA1", "CPU"], n_layers=10)
    # -ngl 9 of 11 positions: GPU layers from 2; device 0 whole 2-4, partial 5 (overflow UP to
    # CUDA1) and 6; device 1 whole 7, partial 8, 9 and 10 (the output layer: no blk.10 tensors)
    assert got == {
        "n_gpu_layers": 9,
        "tensor_split": (5.0, 4.0),
        "override_tensor": (
            r"blk\.5\.ffn_(gate|gate_up|down).*=CUDA1",
            r"blk\.(6|8|9)\.ffn_(up|down|gate_up|gate)_(ch|)exps=CPU",
        ),
    }
    one = fit.placement_options([fit.Layers(11, 3, fit.GATE)], ["CPU"], n_layers=10)
    assert one["override_tensor"] == (
        r"blk\.8\.ffn_down.*=CPU",
        r"blk\.(9)\.ffn_(up|down|gate_up|gate)_(ch|)exps=CPU",
    )


def test_a_moe_model_on_one_gpu_keeps_whole_layers_in_front_and_its_last_layers_experts_out():
    """gpt-oss-120b on 24 GiB: the dense part fits, so the first layers stay whole as long as
    the card fits, one more keeps part of its FFN, and the rest send their experts to the host."""
    sc = _sc("gpt-oss-120b", "mxfp4")
    n = sc.model.n_layers
    got = predict(sc)
    chosen = got.settings["fit"]
    assert chosen["n_gpu_layers"] == n + 1 and chosen["tensor_split"] == []
    first, rest = chosen["override_tensor"]
    whole = int(first.split("\\.")[1])  # the partial layer's index: the whole layers before it
    assert 0 < whole < n
    assert rest == (
        "blk\\.("
        + "|".join(map(str, range(whole + 1, n)))
        + ")\\.ffn_(up|down|gate_up|gate)_(ch|)exps=CPU"
    )
    target = _targets(sc)[0]
    assert _each(_as_given(chosen, "gpt-oss-120b", "mxfp4"))[0] < target
    # one more whole layer does not fit (false position stops at the last count that fits)
    more = fit.placement_options([fit.Layers(n + 1, n - whole)], ["CPU"], n)
    more.pop("tensor_split", None)
    assert _each(_as_given(more, "gpt-oss-120b", "mxfp4"))[0] > target
    assert predict(_as_given(chosen, "gpt-oss-120b", "mxfp4")).tpot_s == got.tpot_s


def test_a_dense_model_gets_the_layers_that_fit():
    """Llama 3.1 70B in Q4_K_M on 24 GiB: the most whole layers (the output layer's counted) that
    fit, and no more."""
    sc = _sc("llama-3.1-70b")
    got = predict(sc)
    ngl = got.settings["fit"]["n_gpu_layers"]
    assert got.settings["fit"]["override_tensor"] == []
    target = _targets(sc)[0]
    assert float(got.memory.gpu) <= target
    assert float(engine.memory(_sc("llama-3.1-70b", n_gpu_layers=ngl + 1)).gpu) > target
    # a larger --fit-target leaves more free: never more layers
    roomy = predict(_sc("llama-3.1-70b", fit_target=4096))
    assert roomy.settings["n_gpu_layers"] < ngl


def test_two_gpus_are_filled_back_to_front_with_a_dense_model():
    """Llama 3.1 70B Q8_0 on two 3090s: the last GPU takes the most layers it can (the output
    layer among them), the first the most of the rest, the others stay on the CPU; the counts
    are written as --tensor-split."""
    sc = _sc("llama-3.1-70b", "q8_0", TWO_3090)
    got = predict(sc)
    chosen = got.settings["fit"]
    a, b = got.settings["layers_per_gpu"]
    assert chosen["tensor_split"] == [float(a), float(b)]
    assert chosen["n_gpu_layers"] == a + b < sc.model.n_layers + 1
    targets = _targets(sc)
    assert all(u <= t for u, t in zip(got.settings["gpu_bytes_each"], targets, strict=True))
    # one more layer on either GPU (the last GPU's from its front, the first's from the CPU's)
    # takes that GPU past its target
    for gpu, more in ((1, [a, b + 1]), (0, [a + 1, b])):
        probe = _sc(
            "llama-3.1-70b", "q8_0", TWO_3090, fit=False,
            n_gpu_layers=sum(more), tensor_split=[float(x) for x in more],
        )  # fmt: skip
        assert _each(probe)[gpu] > targets[gpu]


def test_two_gpus_with_a_moe_model_overflow_the_first_gpus_partial_layer_to_the_next():
    """gpt-oss-120b on two 3090s: the dense-only layers go to the last GPU, then GPU 0 takes
    whole layers from the front and part of one more, its overflow on CUDA1; later layers send
    their experts to the CPU. Each GPU is held to its own target."""
    sc = _sc("gpt-oss-120b", "mxfp4", TWO_3090)
    got = predict(sc)
    chosen = got.settings["fit"]
    a, b = got.settings["layers_per_gpu"]
    assert chosen["tensor_split"] == [float(a), float(b)] and a + b == sc.model.n_layers + 1
    rules = chosen["override_tensor"]
    assert rules[0].startswith(f"blk\\.{a - 1}\\.") and rules[0].endswith("=CUDA1")
    assert rules[-1].endswith("_(ch|)exps=CPU")
    assert all(u < t for u, t in zip(got.settings["gpu_bytes_each"], _targets(sc), strict=True))
    typed = _as_given(chosen, "gpt-oss-120b", "mxfp4", TWO_3090)
    assert predict(typed).tpot_s == got.tpot_s


def test_mixed_gpus_are_each_held_to_their_own_memory():
    """A 4090 (24 GB) beside a 5090 (32 GB): each GPU's target is its own memory less 1 GiB, so
    the 5090 takes more."""
    sc = _sc("qwen3-235b-a22b", "q4_k_m", MIXED)
    got = predict(sc)
    each = got.settings["gpu_bytes_each"]
    targets = _targets(sc)
    assert targets[1] > targets[0]
    assert all(u < t for u, t in zip(each, targets, strict=True))
    assert each[1] > targets[0]  # the 5090 holds more than a 4090 could


def test_split_mode_none_fits_the_main_gpu_alone():
    sc = _sc("llama-3.1-70b", "q8_0", TWO_3090, split_mode="none", main_gpu=1)
    got = predict(sc)
    assert got.settings["fit"]["tensor_split"] == []
    assert got.settings["layers_per_gpu"][0] == 0
    assert got.settings["gpu_bytes_each"][1] <= _targets(sc)[1]


@pytest.mark.parametrize(
    "options",
    [
        {"n_gpu_layers": 99},
        {"n_cpu_moe": 4},
        {"override_tensor": ["blk\\.0\\.ffn_.*_exps=CPU"]},
        {"fit": False},
        {"fit": "off"},
        {"fork": "ik_llama"},
        {"tensor_split": "1,1"},
        {"split_mode": "row"},
    ],
)
def test_a_placement_the_user_set_or_fit_off_is_left_as_given(options):
    sc = _sc("gpt-oss-120b", "mxfp4", TWO_3090, **options)
    assert not fit.applies(sc)
    assert predict(sc, check=False).settings["fit"] is None


def _moved_layers(rule: str) -> list[int]:
    return [int(x) for x in rule.split("(")[1].split(")")[0].split("|")]


def test_ik_llama_fits_only_when_asked():
    """ik_llama.cpp's --fit is off by default (common.cpp: fit: false)."""
    sc = _sc("qwen3-235b-a22b", fork="ik_llama")
    assert not fit.applies(sc) and predict(sc, check=False).settings["fit"] is None


def test_ik_llama_moves_the_experts_of_the_gpus_last_layers_until_it_fits():
    """llm_load_tensors, --split-mode layer: the experts of the GPU's own layers from the last
    one down go to the CPU, one layer at a time, until the GPU fits: no fewer, no more."""
    sc = _sc("qwen3-235b-a22b", fork="ik_llama", fit=True)
    got = predict(sc, check=False)
    (rule,) = got.settings["fit"]["override_tensor"]
    moved = _moved_layers(rule)
    n = sc.model.n_layers
    assert moved == list(range(moved[0], n))  # a run up to the last layer
    target = _targets(sc)[0]
    assert float(got.memory.gpu) <= target
    fewer = rule.replace(f"({moved[0]}|", "(")  # the lowest layer's experts back on the GPU
    back = _sc("qwen3-235b-a22b", fork="ik_llama", fit=False, override_tensor=[fewer])
    assert float(engine.memory(back).gpu) > target
    same = _sc("qwen3-235b-a22b", fork="ik_llama", fit=False, override_tensor=[rule])
    assert predict(same, check=False).tpot_s == got.tpot_s


def test_ik_llama_fits_each_gpu_with_its_own_layers_experts():
    sc = _sc("qwen3-235b-a22b", hardware=TWO_3090, fork="ik_llama", fit=True)
    got = predict(sc, check=False)
    moved = set(_moved_layers(got.settings["fit"]["override_tensor"][0]))
    a, _ = got.settings["layers_per_gpu"]
    # each GPU gives up the experts of its last layers: some of GPU 0's and of GPU 1's
    assert a - 1 in moved and sc.model.n_layers - 1 in moved and 0 not in moved
    assert all(u <= t for u, t in zip(got.settings["gpu_bytes_each"], _targets(sc), strict=True))


def test_ik_llama_fills_a_dense_model_from_the_output_layer_down():
    sc = _sc("llama-3.1-70b", fork="ik_llama", fit=True, fit_margin=2048)
    got = predict(sc, check=False)
    chosen = got.settings["fit"]
    assert chosen["override_tensor"] == ["^output\\.=CUDA0"]
    target = sc.system.devices[0].memory.value - 2048 * MIB
    assert float(got.memory.gpu) <= target
    more = _sc(
        "llama-3.1-70b", fork="ik_llama", fit=False,
        n_gpu_layers=chosen["n_gpu_layers"] + 1, override_tensor=["^output\\.=CUDA0"],
    )  # fmt: skip
    assert float(engine.memory(more).gpu) > target


def test_fit_margin_is_ik_llama_s_own_option():
    from kvoffload.inputs.errors import InputError

    with pytest.raises(InputError, match="fit_margin"):
        _sc("llama-3.1-8b", fit_margin=2048)
