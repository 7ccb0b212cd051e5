"""One capacity everywhere: a machine with two GPUs holds twice one GPU's memory in every function
the chapters and the CLI use (Llama 3.1 70B's bf16 weights fit two 80 GB GPUs, not one)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from kvoffload.cli import main
from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model
from kvoffload.model import decode
from kvoffload.studies import alternatives, memory_fit

ONE = load_system("a100-80gb-sxm-pcie4")
TWO = load_system(
    {"base": "a100-80gb-sxm-pcie4", "id": "two-a100", "gpu": {"base": "a100-80gb-sxm", "count": 2}}
)
LLAMA_70B = load_model("llama-3.1-70b")
BF16 = alternatives.OPTIONS[0]


@pytest.fixture(scope="module")
def longest() -> int:
    """The longest context one request of the 70B model holds on the two GPUs."""
    return int(memory_fit.longest_fit(TWO, LLAMA_70B, [1]).tokens[0])


def test_two_gpus_hold_twice_one_and_the_weights_need_both():
    assert TWO.gpu.count == 2
    assert TWO.gpu_memory == 2 * ONE.gpu_memory == 2 * TWO.gpu.memory.value
    weights = decode.resident_weight_bytes(LLAMA_70B, BF16.weights)
    assert ONE.gpu_memory < weights < TWO.gpu_memory  # the check below cannot pass on one GPU


def test_the_chapter_02_helpers_use_every_gpu(longest):
    fit = memory_fit.longest_fit(TWO, LLAMA_70B, [1, 4, 16])
    assert fit.capacity_bytes == TWO.gpu_memory
    assert longest > 1_000  # a real context fits beside the weights
    assert int(memory_fit.longest_fit(ONE, LLAMA_70B, [1]).tokens[0]) == 0
    assert np.all(np.diff(fit.tokens) < 0)  # more requests, shorter contexts
    grid = memory_fit.memory_fit_frame(TWO, LLAMA_70B, [longest, longest + 1], [1])
    assert grid["capacity_gb"].iloc[0] * 1e9 == pytest.approx(TWO.gpu_memory)
    assert grid["fits"].tolist() == [True, False]


def test_alternatives_agree_with_the_chapter(longest):
    batches = [1, 4, 16]
    fit = memory_fit.longest_fit(TWO, LLAMA_70B, batches)
    for b, tokens in zip(batches, fit.tokens, strict=True):
        assert alternatives.longest_context(TWO, LLAMA_70B, BF16, b) == int(tokens)
    assert bool(alternatives.fits(TWO, LLAMA_70B, BF16, longest, 1))
    assert not bool(alternatives.fits(TWO, LLAMA_70B, BF16, longest + 1, 1))
    assert not bool(alternatives.fits(ONE, LLAMA_70B, BF16, 1_000, 1))


def test_the_step_models_batch_search_and_spill_use_every_gpu(longest):
    context = longest // 8
    largest = alternatives.largest_batch(TWO, LLAMA_70B, BF16, context)
    assert largest >= 8
    resident = decode.Setup(TWO, LLAMA_70B)
    assert int(decode.max_batch(resident, context, 1e9)) == largest
    fit = memory_fit.longest_fit(TWO, LLAMA_70B, [largest, largest + 1])
    assert fit.tokens[0] >= context > fit.tokens[1]  # the same limit from the chapter's helper
    # one request more than fits spills the rest of its cache, and the GPU is then full
    batch = largest + 1
    spilled = decode.spill(resident, context, batch)
    on_gpu = float(np.asarray(spilled.placement.kv.gpu))
    assert 0 < on_gpu < 1
    gpu_bytes = float(decode.memory(spilled, context, batch).gpu)
    per_layer = float(decode.memory(decode.offloaded(TWO, LLAMA_70B), context, batch).staging)
    assert TWO.gpu_memory - per_layer <= gpu_bytes <= TWO.gpu_memory
    assert (
        float(np.asarray(decode.spill(decode.Setup(ONE, LLAMA_70B), context, 1).placement.kv.gpu))
        == 0
    )


def _predict(tmp_path, capsys, prompt: int) -> tuple[int, dict | str]:
    scenario = {
        "hardware": {"base": "a100-80gb-sxm-pcie4", "id": "two-a100",
                     "gpu": {"base": "a100-80gb-sxm", "count": 2}},
        "model": "llama-3.1-70b",
        "precision": {"weights": "bf16", "kv": "bf16"},
        "workload": {"batch": 1, "prompt": prompt, "generate": 1},
    }  # fmt: skip
    path = tmp_path / f"two-a100-{prompt}.yaml"
    path.write_text(yaml.safe_dump(scenario), encoding="utf-8")
    code = main(["predict", str(path), "--json"])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code == 0 else out.err)


def test_predict_reports_every_gpu_and_the_same_verdict(tmp_path, capsys, longest):
    code, out = _predict(tmp_path, capsys, longest - 1)  # ends at the longest context that fits
    assert code == 0, out
    assert out["memory"]["gpu_capacity_bytes"] == int(TWO.gpu_memory)
    assert out["memory"]["gpu_bytes"] <= out["memory"]["gpu_capacity_bytes"]
    code, err = _predict(tmp_path, capsys, longest)  # one token more
    assert code != 0 and "GPU memory" in err


def test_host_headroom_makes_a_just_fitting_host_footprint_refuse_naming_the_tier():
    """The OS keeps 4 GiB + 1/64 of host memory: 62 GB of weights no longer fit a 64 GB host."""
    from kvoffload.model import capacity
    from kvoffload.model.prediction import shortfalls

    host = {"base": "desktop-ddr4-2ch", "memory": "64 GB"}
    system = load_system({"base": "rtx-3090-desktop", "id": "h64", "host": host})
    assert capacity.host_capacity(system) == pytest.approx(64e9 - 4 * 2**30 - 1e9)
    mem = decode.Memory(*(np.asarray(x) for x in (0.0, 62e9, 0.0, 0.0)))
    assert not capacity.fits(system, mem.gpu, mem.cpu)
    [(tier, need, _)] = shortfalls(system, mem)
    assert (tier, need) == ("host memory", 62e9)
    roomy = load_system(
        {"base": "rtx-3090-desktop", "id": "h64r", "host": {**host, "memory_reserved": "0 GB"}}
    )
    assert capacity.fits(roomy, mem.gpu, mem.cpu)
