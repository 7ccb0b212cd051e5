"""Decode's growth with context: each row over its configuration's shortest prompt."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvoffload.studies import context_growth as cg
from kvoffload.studies import validation


def _row(id_: str, prompt: int, measured: float, **extra) -> dict:
    return {
        "id": id_, "table": "moe-offload", "engine": "llamacpp", "system": "s", "model": "m",
        "precision": "q4_0", "options": {"n_gpu_layers": 99}, "batch": 1, "prompt": prompt,
        "generate": 128, "metric": "decode_tokens_per_s", "measured": measured,
        "source": "x", "where": "y", **extra,
    }  # fmt: skip


def _res(row: dict, predicted: float | None) -> validation.Result:
    return validation.Result(row=row, predicted=predicted)


def test_a_row_grows_over_its_configuration_s_shortest_prompt_in_ms_per_token():
    base = _res(_row("a", 512, 100.0), 110.0)  # 10 ms measured, 9.09 predicted
    far = _res(_row("b", 16384, 50.0), 62.5)  # 20 ms measured, 16 predicted
    mid = _res(_row("c", 4096, 80.0), 88.0)  # 12.5 ms, 11.36
    found = cg.growths([far, base, mid])
    assert [g.row.row["id"] for g in found] == ["b", "c"]
    b = found[0]
    assert b.base is base
    assert b.measured_ms == pytest.approx(10.0)
    assert b.predicted_ms == pytest.approx(16.0 - 1e3 / 110)
    assert b.ratio == pytest.approx((16.0 - 1e3 / 110) / 10.0)
    assert b.within is False  # 0.69: outside 30%
    assert found[1].within is True  # 2.27 against 2.5 measured: 0.91


def test_other_configurations_and_other_metrics_are_not_compared():
    rows = [
        _res(_row("a", 512, 100.0), 100.0),
        _res(_row("b", 8192, 90.0, options={"n_gpu_layers": 20}), 80.0),  # another placement
        _res(_row("c", 8192, 90.0, batch=2), 80.0),  # another batch
        _res(_row("d", 8192, 900.0, metric="prefill_tokens_per_s"), 800.0),  # not decode
    ]
    assert cg.growths(rows) == []


def test_a_batch_s_rate_is_its_step_and_a_tpot_is_taken_as_it_is():
    assert cg.step_ms("decode_tokens_per_s", 80.0, 4) == pytest.approx(50.0)
    assert cg.step_ms("tpot_ms", 12.5, 4) == 12.5


def test_a_figure_is_rounded_to_its_last_written_digit():
    assert cg.half_unit(13.5) == pytest.approx(0.05)
    assert cg.half_unit(180.36) == pytest.approx(0.005)
    assert cg.half_unit(14) == 0.5
    assert cg.rounding_ms({"metric": "tpot_ms", "measured": 19.1, "batch": 1}) == pytest.approx(
        0.05
    )
    # a rate: the step at its lower bound, 13.45 tokens/s, less the step at 13.5
    rate = {"metric": "decode_tokens_per_s", "measured": 13.5, "batch": 1}
    assert cg.rounding_ms(rate) == pytest.approx(1e3 / 13.45 - 1e3 / 13.5)


def test_a_growth_within_the_rates_rounding_is_not_judged_and_a_refusal_has_no_ratio():
    # written to whole tokens/s, 100 and 98 may be 99.5 and 98.5: the 0.2 ms could be 0.1
    small = cg.growths([_res(_row("a", 1, 100), 90.0), _res(_row("b", 2048, 98), 50.0)])[0]
    assert small.measured_ms == pytest.approx(1e3 / 98 - 10) and not small.judged
    assert small.within is None
    # the same figures to a tenth are precise enough to judge
    fine = cg.growths([_res(_row("a", 1, 100.0), 90.0), _res(_row("b", 2048, 98.0), 50.0)])[0]
    assert fine.judged and fine.within is False
    refused = cg.growths([_res(_row("a", 1, 100.0), 90.0), _res(_row("b", 9000, 50.0), None)])[0]
    assert refused.predicted_ms is None and refused.ratio is None and refused.within is False


def test_validate_prints_and_writes_the_catalog_s_growths():
    """The catalog's rows that measure a growth: KTransformers' tutorial at four prompts and the
    two -sm modes of llama.cpp PR #19378 at 1 and 65,536 tokens."""
    out = subprocess.run(
        [sys.executable, "-m", "kvoffload", "validate", "--json"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    growth = json.loads(out)["context_growth"]
    ids = {(r["base"], r["id"]) for r in growth["rows"]}
    assert {("kt-06", "kt-09"), ("tp-01", "tp-03"), ("tp-02", "tp-04")} <= ids
    assert growth["target_within"] == 0.30
    for r in growth["rows"]:
        assert r["prompts"][0] < r["prompts"][1]


def test_the_chapter_s_frame_gives_each_growth_its_verdict_and_the_tally_adds_up():
    from kvoffload.studies import validation_findings

    rows = [
        _res(_row("a", 512, 100.0), 110.0),
        _res(_row("b", 16384, 50.0), 62.5),  # outside
        _res(_row("c", 4096, 80.0), 88.0),  # within
        _res(_row("d", 1024, 99), 109.0),  # to whole tokens/s: within its rounding, not judged
    ]
    f = validation_findings.growth_findings(rows)
    assert list(f.frame["row"]) == ["b", "c", "d"]
    assert list(f.frame["verdict"]) == [
        "outside", "within", "not judged (within the rates' rounding)",
    ]  # fmt: skip
    assert (f.count, f.judged, f.within) == (3, 2, 1)
    assert f.target_pct == 30
    assert set(f.frame["role"]) == {"check"}
