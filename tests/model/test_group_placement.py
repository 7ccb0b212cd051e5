"""Placement by tensor group in the step model: bytes conserved, the whole split recovered."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError
from kvoffload.model import decode, tensor_groups

BASE = {
    "hardware": "rtx-4090-desktop",
    "model": "gpt-oss-20b",
    "precision": {"weights": "mxfp4", "kv": "fp16"},
    "workload": {"batch": 1, "prompt": 4096, "generate": 16},
}


def _pred(weights):
    return predict(parse_scenario({**BASE, "placement": {"weights": weights}}), check=False)


shares = st.tuples(st.floats(0, 1), st.floats(0, 1)).map(
    lambda x: {"gpu": x[0], "cpu": (1 - x[0]) * x[1], "disk": (1 - x[0]) * (1 - x[1])}
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(tensor_groups.GROUPS), shares, min_size=1), st.booleans())
def test_every_weight_byte_is_on_exactly_one_tier(groups, on_cpu):
    weights = {g: {**s, "compute": "cpu" if on_cpu else "gpu"} for g, s in groups.items()}
    sc = parse_scenario({**BASE, "placement": {"weights": weights}})
    w = sc.setup.placement.weights
    assert w.gpu + w.cpu + w.disk == pytest.approx(1.0)
    table = tensor_groups.tensor_table(sc.model, sc.setup.weights)
    per_group = table.by_group(table.nbytes)
    on_tier = np.zeros(3)
    for i, name in enumerate(tensor_groups.GROUPS):
        s = groups.get(name, {"gpu": 1.0, "cpu": 0.0, "disk": 0.0})
        on_tier += per_group[i] * np.array([s["gpu"], s["cpu"], s["disk"]])
    total = decode.resident_weight_bytes(sc.model, sc.setup.weights)
    assert on_tier.sum() == pytest.approx(total, rel=1e-9)
    assert on_tier == pytest.approx(total * np.array([w.gpu, w.cpu, w.disk]), rel=1e-9, abs=1.0)


def test_all_groups_on_the_gpu_is_the_plain_placement():
    plain = _pred({"gpu": 1.0})
    grouped = _pred({g: {"gpu": 1.0} for g in tensor_groups.GROUPS})
    assert grouped.tpot_s == pytest.approx(plain.tpot_s, rel=1e-12)
    assert float(grouped.memory.gpu) == pytest.approx(float(plain.memory.gpu), rel=1e-12)


def test_the_same_streamed_split_for_every_group_is_the_whole_split():
    split = {"gpu": 0.5, "cpu": 0.5}
    whole = _pred(split)
    grouped = _pred({g: split for g in tensor_groups.GROUPS})
    assert grouped.tpot_s == pytest.approx(whole.tpot_s, rel=1e-9)
    assert float(grouped.memory.cpu) == pytest.approx(float(whole.memory.cpu), rel=1e-9)


def test_experts_computed_in_host_memory_beat_experts_streamed_every_step():
    on_cpu = _pred({"experts": {"cpu": 1.0, "compute": "cpu"}})
    streamed = _pred({"experts": {"cpu": 1.0, "compute": "gpu"}})
    # the same experts off the GPU; streaming them also needs a GPU buffer for one layer's
    assert float(on_cpu.memory.gpu) < float(streamed.memory.gpu)
    assert on_cpu.tpot_s < streamed.tpot_s / 10  # a batch of one touches 4 of 32 experts
    assert on_cpu.streams_s["cpu"] > 0 and streamed.streams_s["cpu"] == 0


@pytest.mark.parametrize(
    ("weights", "problem"),
    [({"expert": {"cpu": 1.0}}, "not a tier"), ({"experts": {"cpu": 0.5}}, "add up to 0.5"),
     ({"experts": {"cpu": 1.0, "compute": "tpu"}}, "experts.compute")],
)  # fmt: skip
def test_bad_group_placements_name_the_field(weights, problem):
    with pytest.raises(InputError, match=problem) as err:
        parse_scenario({**BASE, "placement": {"weights": weights}}, name="s.yaml")
    assert "placement.weights" in str(err.value)


@pytest.mark.parametrize("compute", ["cpu", "gpu"])
def test_another_overlap_mode_keeps_the_group_placement(compute):
    # gpt-oss-20b's routed experts in host memory: with_overlap once rebuilt the placement field
    # by field and dropped its groups, so the experts came back to the GPU's memory
    placement = {"weights": {"experts": {"cpu": 1.0, "compute": compute}}}
    sc = parse_scenario({**BASE, "placement": placement})
    context, batch = sc.prompt + sc.generate, sc.batch
    none = decode.memory(sc.setup, context, batch)
    working = float(decode.prefill_reserve(sc.model, batch))  # the prompt is over one chunk
    for mode in decode.OVERLAP_MODES:
        setup = sc.setup.with_overlap(mode)
        assert setup.placement == replace(sc.setup.placement, overlap=mode)
        assert setup.placement.groups == sc.setup.placement.groups != ()
        # the same as the scenario that names the mode itself
        direct = parse_scenario({**BASE, "overlap": mode, "placement": placement}).setup
        mem = decode.memory(setup, context, batch)
        assert float(mem.gpu) == float(decode.memory(direct, context, batch).gpu)
        # weights and KV do not depend on the mode, nor does host memory
        assert float(mem.gpu - mem.staging) == float(none.gpu - none.staging)
        assert float(mem.cpu) == float(none.cpu)
        # staging: the streamed layer's weight buffers (1 with overlap none, 2 otherwise; the KV
        # stays on the GPU) beside the prefill's working set. Experts computed where they lie
        # stream nothing; streamed ones add one layer's experts per buffer
        layer = float(none.staging) - working
        assert float(mem.staging) == pytest.approx(working + (1 if mode == "none" else 2) * layer)
        assert (layer == 0) == (compute == "cpu")
    # the experts, most of gpt-oss-20b's bytes in MXFP4, stay off the GPU
    assert float(none.cpu) > 2 * float(none.gpu - none.staging)
