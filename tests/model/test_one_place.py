"""One place per quantity: the weight totals, the fit check, and light imports for the engines."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.engines import vllm_weight_offload
from kvoffload.engines.each import flexgen
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model, model_ids
from kvoffload.inputs.precision import WeightFormat
from kvoffload.model import capacity, decode
from kvoffload.model.prediction import check_fits, shortfalls

FORMATS = (WeightFormat.BF16, WeightFormat.INT4, WeightFormat.Q4_K_M)


# -- weight totals ---------------------------------------------------------------------------
@pytest.mark.parametrize("model_id", model_ids())
def test_weight_totals_agree_with_the_tensor_list(model_id):
    model = load_model(model_id)
    for fmt in FORMATS:
        wb = model.weight_bytes(fmt)
        lay = decode.layers(model, fmt)
        step = decode.step_weight_bytes(model, fmt)
        resident = decode.resident_weight_bytes(model, fmt)
        assert step == float(lay.weight_bytes @ lay.count)  # the layer classes sum to it
        assert resident == float(wb.total)  # a tier holds every tensor
        table = 0 if model.tie_embeddings else wb.embedding  # a step reads one row of it
        assert resident - step == table


def test_vllm_offloads_its_gib_out_of_the_weights_a_step_reads():
    raw = {
        "hardware": "a100-80gb-sxm-pcie4",
        "model": "llama-3-8b",
        "engine": "vllm",
        "workload": {"batch": 1, "prompt": 1000},
        "options": {"cpu_offload_gb": 3},
    }
    sc = parse_scenario(raw)
    share = predict(sc).settings["weights_on_host_share"]
    # the whole parameters 3 GiB takes (engines/vllm_weight_offload.py), out of the step's weights
    moved, _ = vllm_weight_offload.offload(sc, 3 * 2**30, pinned=True)
    assert share == moved / decode.step_weight_bytes(sc.model, sc.setup.weights)


# -- the fit check ---------------------------------------------------------------------------
T4 = load_system("t4-pcie3")  # bounds its disk
A100 = load_system("a100-80gb-sxm-pcie4")  # does not
needs = st.floats(0, 3e12, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([T4, A100]), st.lists(st.tuples(needs, needs, needs), min_size=1))
def test_fits_is_every_bounded_tier_holding_its_bytes(system, rows):
    g, c, d = (np.array(x) for x in zip(*rows, strict=True))
    got = capacity.fits(system, g, c, d)
    disk_ok = d <= system.disk_capacity if system.disk_capacity is not None else True
    host = capacity.host_capacity(system)  # host memory less what the OS keeps (ec20a16)
    assert np.array_equal(got, (g <= system.gpu_memory) & (c <= host) & disk_ok)
    for i in range(len(g)):
        mem = decode.Memory(g[i], c[i], d[i], np.asarray(0.0))
        short = shortfalls(system, mem)
        assert bool(got[i]) == (short == [])
        expected = {
            "GPU memory": g[i] > system.gpu_memory,
            "host memory": c[i] > host,
        }
        if system.disk_capacity is not None:
            expected["disk"] = d[i] > system.disk_capacity
        assert {t for t, _, _ in short} == {t for t, over in expected.items() if over}


def test_check_fits_refuses_exactly_what_fits_rejects():
    sc = parse_scenario(
        {"hardware": "t4-pcie3", "model": "opt-6.7b", "workload": {"batch": 1, "prompt": 100}}
    )
    for gpu in (T4.gpu_memory, T4.gpu_memory + 1):
        mem = decode.Memory(np.asarray(gpu), np.asarray(0.0), np.asarray(0.0), np.asarray(0.0))
        if capacity.fits(T4, gpu, 0.0):
            check_fits(sc, mem)
        else:
            with pytest.raises(InputError, match="GPU memory"):
                check_fits(sc, mem)


def test_max_batch_counts_the_disk_where_the_profile_bounds_it():
    setup = decode.Setup(
        T4,
        load_model("llama-3.1-8b"),
        WeightFormat.INT4,
        placement=decode.Placement(kv=decode.Split(0, 0, 1), attention="cpu"),
    )
    b = int(decode.max_batch(setup, 128_000, 1e5))
    assert b > 1
    here, more = decode.memory(setup, 128_000, b), decode.memory(setup, 128_000, b + 1)
    assert capacity.fits(T4, here.gpu, here.cpu, here.disk)
    assert more.disk > T4.disk_capacity >= here.disk


def test_flexgen_search_picks_the_fastest_policy_the_fit_check_accepts():
    raw = {
        "hardware": "t4-pcie3",
        "model": "opt-30b",
        "engine": "flexgen",
        "precision": {"weights": "fp16", "kv": "fp16"},
        "workload": {"batch": 1, "prompt": 512, "generate": 32},
    }
    _, costs, best = flexgen.search(parse_scenario(raw))
    ok = capacity.fits(T4, costs.gpu_bytes, costs.cpu_bytes, costs.disk_bytes)
    assert ok[best] and not ok.all()
    assert costs.throughput[best] == np.max(costs.throughput[ok])


# -- imports ---------------------------------------------------------------------------------
def test_the_engines_import_no_dataframe_or_notebook_libraries():
    code = (
        "import sys, kvoffload.engines.scenario, kvoffload.studies.validation; "
        "print(sorted(m for m in sys.modules "
        'if m.split(".")[0] in {"pandas", "altair", "nbformat", "papermill"}))'
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"
