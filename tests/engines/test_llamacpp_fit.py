"""llama.cpp's --fit (on by default): with no -ngl, -ot or --n-cpu-moe given and everything too
big for the GPU, the placement llama_params_fit picks; otherwise the placement as given."""

from __future__ import annotations

import pytest

from kvoffload.engines.each.llamacpp import engine, fit
from kvoffload.engines.scenario import parse_scenario, predict

MIB = 2**20


def _sc(model: str, weights: str = "q4_k_m", hardware: str = "rtx-4090-desktop", **options):
    raw = {
        "hardware": hardware,
        "model": model,
        "engine": "llamacpp",
        "precision": {"weights": weights, "kv": "fp16"},
        "workload": {"batch": 1, "prompt": 8192, "generate": 128},
        "options": options,
    }
    return parse_scenario(raw, name="fit")


def _gpu(sc) -> float:
    return float(engine.memory(sc).gpu)


def test_a_model_that_fits_keeps_every_layer_on_the_gpu():
    on, off = predict(_sc("llama-3.1-8b")), predict(_sc("llama-3.1-8b", fit="off"))
    assert on.tpot_s == off.tpot_s and on.settings["fit"] is None
    assert on.settings["n_gpu_layers"] == off.settings["n_gpu_layers"]


def test_a_moe_model_takes_the_first_layers_experts_to_the_host_by_the_interpolation():
    """gpt-oss-120b on 24 GiB: the dense part fits, so --fit interpolates the experts' layers
    between the full and the dense placement's bytes, as llama_params_fit_impl step 3a does."""
    sc = _sc("gpt-oss-120b", "mxfp4")
    n = sc.model.n_layers
    target = sc.system.gpu_memory - 1024 * MIB
    full = _gpu(_sc("gpt-oss-120b", "mxfp4", fit=False))
    dense = _gpu(_sc("gpt-oss-120b", "mxfp4", fit=False, cpu_moe=True))
    assert dense <= target < full
    lead = fit.dense_lead(sc.model)
    per_layer = (full - dense) // (n - lead)
    part = n + 1 - (int((target - dense) // per_layer) + lead + 1)
    got = predict(sc)
    assert got.settings["fit"] == {"n_gpu_layers": None, "n_cpu_moe": part}
    assert got.settings["n_cpu_moe"] == part and 0 < part < n
    assert float(got.memory.gpu) <= target
    same = predict(_sc("gpt-oss-120b", "mxfp4", n_cpu_moe=part))
    assert got.tpot_s == same.tpot_s


def test_a_dense_model_gets_the_layers_that_fit():
    """Llama 3.1 70B in Q4_K_M on 24 GiB: -ngl from the bytes of one and of every layer."""
    sc = _sc("llama-3.1-70b")
    n = sc.model.n_layers
    target = sc.system.gpu_memory - 1024 * MIB
    one = _gpu(_sc("llama-3.1-70b", fit=False, n_gpu_layers=1))
    every = _gpu(_sc("llama-3.1-70b", fit=False, n_gpu_layers=n))
    per_layer = (every - one) / (n - 1)
    want = int((target - (one - per_layer)) // per_layer)
    got = predict(sc)
    assert got.settings["fit"] == {"n_gpu_layers": want, "n_cpu_moe": 0}
    assert float(got.memory.gpu) <= target
    # a larger --fit-target leaves more free: never more layers
    roomy = predict(_sc("llama-3.1-70b", fit_target=4096))
    assert roomy.settings["n_gpu_layers"] < want


@pytest.mark.parametrize(
    "options",
    [
        {"n_gpu_layers": 99},
        {"n_cpu_moe": 4},
        {"override_tensor": ["blk\\.0\\.ffn_.*_exps=CPU"]},
        {"fit": False},
        {"fit": "off"},
        {"fork": "ik_llama"},
    ],
)
def test_a_placement_the_user_set_or_fit_off_is_left_as_given(options):
    sc = _sc("gpt-oss-120b", "mxfp4", **options)
    assert not fit.applies(sc)
    assert predict(sc, check=False).settings["fit"] is None
