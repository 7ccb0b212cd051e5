"""GPUs of different models in one profile (``more_gpus``: a 4090 and a 5090): llama.cpp splits
layers by each GPU's memory, checks each against its own, runs each tensor at its GPU's rates;
the engines that run alike GPUs only refuse such a profile in one line."""

from __future__ import annotations

import math

import pytest

from kvoffload.engines.each import llamacpp
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.hardware import load_system
from kvoffload.model.prediction import shortfalls

MIXED = {"base": "rtx-4090-desktop", "id": "mixed", "more_gpus": ["rtx-5090"]}
ONE_5090 = {"base": "rtx-4090-desktop", "id": "one-5090", "gpu": "rtx-5090"}


def _raw(hardware, engine: str = "llamacpp", **options) -> dict:
    return {
        "hardware": hardware,
        "model": "llama-3.1-8b",
        "engine": engine,
        "precision": {"weights": "q8_0" if engine == "llamacpp" else "bf16", "kv": "fp16"},
        "workload": {"batch": 1, "prompt": 2048, "generate": 8},
        "options": options,
    }


def test_the_profile_holds_both_gpus_in_device_order():
    system = load_system(MIXED)
    assert [g.name for g in system.devices] == [system.gpu.name, system.more_gpus[0].name]
    assert system.n_gpus == 2
    assert system.gpu_memory == sum(g.memory.value for g in system.devices)
    assert system.to_json()["more_gpus"][0]["memory"]["value"] == system.more_gpus[0].memory.value


def test_layers_split_by_each_gpus_memory():
    sc = parse_scenario(_raw(MIXED))
    a, b = (g.memory.value for g in sc.system.devices)
    n = sc.model.n_layers + 1
    first = math.ceil(n * a / (a + b))  # positions p with p / n below GPU 0's share
    assert llamacpp.layers_per_gpu(sc) == [first, n - first]


def test_a_gpu_alone_runs_at_its_own_rates():
    """All layers on the 5090 of the mixed rig: the step's GPU time is a lone 5090's."""
    on_5090 = predict(parse_scenario(_raw(MIXED, split_mode="none", main_gpu=1)), check=False)
    alone = predict(parse_scenario(_raw(ONE_5090)), check=False)
    assert on_5090.streams_s["gpu"] == pytest.approx(alone.streams_s["gpu"], rel=1e-12)
    on_4090 = predict(parse_scenario(_raw(MIXED, split_mode="none")), check=False)
    split = predict(parse_scenario(_raw(MIXED)), check=False)
    assert on_5090.streams_s["gpu"] < split.streams_s["gpu"] < on_4090.streams_s["gpu"]


def test_each_gpu_is_held_to_its_own_memory():
    # 24 GB on the 4090: a 70B at q4_k_m (~42 GB) all on it overflows it, not the 5090's 32 GB
    raw = {**_raw(MIXED, split_mode="none", fit=False), "model": "llama-3.1-70b"}
    raw["precision"] = {"weights": "q4_k_m", "kv": "fp16"}
    sc = parse_scenario(raw)
    short = shortfalls(sc.system, predict(sc, check=False).memory)
    assert [t for t, _, _ in short] == ["GPU memory (GPU 0)"]
    assert short[0][2] == sc.system.gpu.memory.value


@pytest.mark.parametrize("engine", ["generic", "vllm", "flexgen"])
def test_engines_that_run_alike_gpus_refuse_in_one_line(engine):
    with pytest.raises(InputError) as info:
        predict(parse_scenario(_raw(MIXED, engine)), check=False)
    text = str(info.value)
    assert "hardware.more_gpus" in text and "llamacpp" in text and "\n" not in text


@pytest.mark.parametrize(
    ("more", "field"),
    [
        ("rtx-5090", "more_gpus"),
        (["no-such-gpu"], "more_gpus[0]"),
        ([{"memory": "-1 GB"}], "more_gpus[0]"),
    ],
)
def test_a_bad_more_gpus_names_its_entry(more, field):
    with pytest.raises(InputError) as info:
        load_system({**MIXED, "more_gpus": more})
    assert str(info.value).startswith(field) or f" {field}" in str(info.value)


def test_prefill_runs_each_gpus_layers_at_its_own_rate():
    on_5090 = parse_scenario(_raw(MIXED, split_mode="none", main_gpu=1))
    alone = parse_scenario(_raw(ONE_5090))
    assert llamacpp.prefill_rate(on_5090) == pytest.approx(llamacpp.prefill_rate(alone), rel=1e-12)
    on_4090 = parse_scenario(_raw(MIXED, split_mode="none"))
    split = parse_scenario(_raw(MIXED))
    rates = [llamacpp.prefill_rate(sc) for sc in (on_4090, split, on_5090)]
    assert rates == sorted(rates) and rates[0] < rates[2]
    a, b = llamacpp.layers_per_gpu(split)
    harmonic = (a + b) / (a / rates[0] + b / rates[2])
    assert rates[1] == pytest.approx(harmonic, rel=1e-12)


def test_row_split_on_mixed_gpus_waits_for_the_slower_share():
    """A row-split matrix is read on both GPUs at once: it takes as long as the GPU whose share
    of the rows over its own bandwidth is largest."""
    sc = parse_scenario(_raw(MIXED, split_mode="row"))
    table, gpus = llamacpp.tensor_gpus(sc)
    split = llamacpp.split_rows(sc, table, gpus)
    shares = llamacpp.row_shares(sc)
    assert split.any() and shares.sum() == pytest.approx(1.0)
    bandwidth = [g.streaming_bandwidth for g in sc.system.devices]
    w_s, _, _, _ = llamacpp.step._mixed_rates(sc, table, gpus, table.nbytes, table.params, split)
    whole = table.by_position(table.nbytes / bandwidth[0], (gpus == 0) & ~split)
    whole += table.by_position(table.nbytes / bandwidth[1], (gpus == 1) & ~split)
    slowest = max(s / b for s, b in zip(shares, bandwidth, strict=True))
    want = whole + table.by_position(table.nbytes * slowest, split)
    assert w_s == pytest.approx(want, rel=1e-12)
    mem = llamacpp.ENGINE.memory(sc)
    assert sum(mem.gpu_each) == pytest.approx(float(mem.gpu), rel=1e-12)
