"""ik_llama.cpp's own flags: ``-ser Kmin,t`` (a token keeps Kmin experts when t >= 1) and
``-rtr`` (run-time repack, which turns mmap off); both refused without ``fork: ik_llama``; each
fork's split modes, the tensor-parallel ones refused as not modelled."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvoffload.engines.each import llamacpp
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError
from kvoffload.model import decode


def _ik(hardware: str, model: str, prompt: int, generate: int, **options) -> dict:
    return {
        "hardware": hardware,
        "model": model,
        "engine": "llamacpp",
        "precision": {"weights": "q4_k_m", "kv": "fp16"},
        "workload": {"batch": 1, "prompt": prompt, "generate": generate},
        "options": {"fork": "ik_llama", **options},
    }


def _raw(**options) -> dict:
    return _ik("rtx-4090-desktop", "qwen3-30b-a3b", 512, 8, **{"cpu_moe": True, **options})


def test_ser_with_t_of_one_runs_the_model_as_if_it_routed_to_kmin_experts():
    sc = parse_scenario(_raw(ser="4,1"))
    k = sc.model.moe.experts_per_token
    assert k == 8 and llamacpp.ser_experts(sc.options, k) == 4
    got = predict(sc, check=False)
    # the same as the model whose config says four experts per token
    fewer = parse_scenario(_raw())
    model = replace(fewer.model, moe=replace(fewer.model.moe, experts_per_token=4))
    fewer = replace(fewer, model=model, setup=replace(fewer.setup, model=model))
    want = llamacpp.predict(fewer)
    assert got.tpot_s == pytest.approx(want.tpot_s, rel=1e-12)
    assert got.ttft_s == pytest.approx(want.ttft_s, rel=1e-12)
    assert got.settings["experts_per_token"] == 4
    # fewer experts read per token on the CPU: faster than the full top-8, same memory
    full = predict(parse_scenario(_raw()), check=False)
    assert got.tpot_s < full.tpot_s
    assert float(got.memory.cpu) == float(full.memory.cpu)
    assert got.scenario.model.moe.experts_per_token == 8  # the scenario as given
    # Kmin at or above the model's k changes nothing
    same = predict(parse_scenario(_raw(ser=[8, 1])), check=False)
    assert same.tpot_s == full.tpot_s
    assert decode.layers(sc.model, sc.setup.weights).expert_use == (8, 128)


def test_rtr_turns_mmap_off():
    assert parse_scenario(_raw(rtr=True)).options.no_mmap
    assert not parse_scenario(_raw()).options.no_mmap


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"ser": "6,0.4"}, "router's probabilities"),
        ({"ser": "6"}, "'Kmin,t'"),
        ({"ser": "0,1"}, "Kmin from 1"),
        ({"ser": "a,b"}, "'Kmin,t'"),
        ({"ser": "1e400,1"}, "'Kmin,t'"),
        ({"ser": "nan,1"}, "'Kmin,t'"),
        ({"ser": "6,inf"}, "'Kmin,t'"),
        ({"ser": [6, 1, 2]}, "'Kmin,t'"),
        ({"ser": "6,1", "fork": "llama.cpp"}, "ik_llama.cpp's option"),
        ({"rtr": True, "fork": "llama.cpp"}, "ik_llama.cpp's option"),
        ({"mla": 3, "fork": "llama.cpp"}, "ik_llama.cpp's option"),
        ({"amb": 512, "fork": "llama.cpp"}, "ik_llama.cpp's option"),
        ({"fmoe": True, "fork": "llama.cpp"}, "ik_llama.cpp's option"),
        ({"mla": 4}, "options.mla"),
        ({"split_mode": "row"}, "ik_llama has no split mode 'row'"),
        ({"split_mode": "attn"}, "only the attention over the GPUs, which is not modelled"),
        ({"split_mode": "tensor"}, "ik_llama has no split mode 'tensor'"),
        ({"split_mode": "graph", "fork": "llama.cpp"}, "llama.cpp has no split mode 'graph'"),
        ({"split_mode": "attn", "fork": "llama.cpp"}, "llama.cpp has no split mode 'attn'"),
    ],
)
def test_bad_ser_and_rtr_are_refused_in_one_line(options, fragment):
    with pytest.raises(InputError) as info:
        parse_scenario(_raw(**options))
    text = str(info.value)
    assert fragment in text and "options." in text and "\n" not in text


def _deepseek(**options) -> dict:
    return _ik("epyc-9654-h100-pcie", "deepseek-v3", 8192, 32, **{"n_cpu_moe": 61, **options})


def test_mla_sets_what_deepseek_caches_and_what_attention_costs():
    """-mla 2 and 3 (and the default) cache the latent, 576 values a token and layer; 1 adds a
    transposed copy of the 512-value latent for V; 0 caches every one of the 128 heads' keys
    (192 values) and values (128), and attends without absorbing the projections."""
    mla = parse_scenario(_deepseek()).model.mla
    rank, rope, nope, v = (
        mla.kv_lora_rank,
        mla.qk_rope_head_dim,
        mla.qk_nope_head_dim,
        mla.v_head_dim,
    )
    heads = parse_scenario(_deepseek()).model.n_heads
    values = {None: rank + rope, 3: rank + rope, 2: rank + rope, 1: 2 * rank + rope}
    values[0] = heads * (nope + rope) + heads * v
    base = predict(parse_scenario(_deepseek()), check=False)
    tokens = 8192 + 32
    for level, per_token in values.items():
        opts = {} if level is None else {"mla": level}
        got = predict(parse_scenario(_deepseek(**opts)), check=False)
        extra = (per_token - (rank + rope)) * 2 * 61 * tokens  # fp16, 61 layers, the final context
        assert float(got.memory.gpu) - float(base.memory.gpu) == pytest.approx(extra, rel=1e-9)
        model = llamacpp.engine._as_run(parse_scenario(_deepseek(**opts))).model
        attn = decode.layers(model, got.scenario.setup.weights)
        flops = 2 * heads * ((nope + rope + v) if level == 0 else (2 * rank + rope))
        assert set(attn.attn_flops[attn.kv_per_token > 0].tolist()) == {flops}
    assert predict(parse_scenario(_deepseek(mla=0)), check=False).tpot_s > base.tpot_s


def test_amb_and_fmoe_are_accepted_and_change_nothing():
    base = predict(parse_scenario(_deepseek()), check=False)
    for opts in ({"amb": 512}, {"fmoe": True}, {"fmoe": False}, {"mla": 3, "amb": 512}):
        got = predict(parse_scenario(_deepseek(**opts)), check=False)
        assert got.tpot_s == base.tpot_s and got.ttft_s == base.ttft_s
    # a model without MLA ignores -mla
    assert (
        predict(parse_scenario(_raw(mla=0)), check=False).tpot_s
        == predict(parse_scenario(_raw()), check=False).tpot_s
    )
