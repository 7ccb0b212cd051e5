"""Tensors by layer and group: names as llama.cpp writes them, bytes conserved, overrides matched."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.inputs.models import load_model, model_ids
from kvoffload.inputs.precision import WeightFormat
from kvoffload.model import tensor_groups as tg


@pytest.mark.parametrize("model_id", model_ids())
@pytest.mark.parametrize("fmt", [WeightFormat.BF16, WeightFormat.Q4_K_M, WeightFormat.INT4])
def test_groups_conserve_every_weight_byte(model_id, fmt):
    m = load_model(model_id)
    t = tg.tensor_table(m, fmt)
    wb = m.weight_bytes(fmt)
    assert t.by_group(t.nbytes).sum() == pytest.approx(wb.total, rel=1e-12)
    per_pos = t.by_position(t.nbytes)
    assert per_pos[:-1] == pytest.approx(wb.per_layer.astype(float), rel=1e-12)
    assert per_pos.sum() + t.nbytes[t.position < 0].sum() == pytest.approx(wb.total, rel=1e-12)
    # a dense model has no expert bytes; an MoE model's experts are what WeightBytes counts
    matrices = np.array([not n.endswith(".bias") for n in t.names])
    experts = t.by_group(t.nbytes, matrices)[tg.GROUPS.index("experts")]
    assert experts == pytest.approx(float(np.sum(wb.experts)), rel=1e-12)


def test_names_are_llamas_gguf_names():
    t = tg.tensor_table(load_model("deepseek-v3"), WeightFormat.Q4_K_M)
    names = set(t.names)
    for name in ("token_embd.weight", "blk.0.attn_q_a.weight", "blk.3.ffn_up_exps.weight",
                 "blk.3.ffn_gate_inp.weight", "blk.3.ffn_down_shexp.weight", "output.weight"):  # fmt: skip
        assert name in names
    assert "blk.0.ffn_up_exps.weight" not in names  # DeepSeek-V3's first 3 layers are dense


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 23))
def test_the_first_matching_override_wins_and_anchors_hold(i):
    t = tg.tensor_table(load_model("gpt-oss-20b"), WeightFormat.BF16)
    exps = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
    got = tg.match_overrides(t, ((rf"blk\.{i}{exps}", "cpu"), (exps, "gpu")))
    for name, dev in zip(t.names, got, strict=True):
        if name.startswith(f"blk.{i}.") and "_exps." in name:
            assert dev == "cpu"
        elif "_exps." in name:
            assert dev == "gpu"  # blk.1 does not match blk.11: the pattern asks for "\." next
        else:
            assert dev == ""
