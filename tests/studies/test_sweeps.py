"""Published sweeps: Kendall's tau of the predicted against the measured order, and the pick."""

from __future__ import annotations

import itertools
import json

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kvoffload.studies import sweeps, validation

values = st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=2, max_size=12)


def _tau_by_definition(x: list[float], y: list[float]) -> float | None:
    """Kendall's tau-b from its definition, pair by pair (Kendall 1945)."""
    c = d = tx = ty = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        a, b = x[i] - x[j], y[i] - y[j]
        if a == 0 and b == 0:
            continue
        if a == 0:
            tx += 1
        elif b == 0:
            ty += 1
        elif (a > 0) == (b > 0):
            c += 1
        else:
            d += 1
    n = ((c + d + tx) * (c + d + ty)) ** 0.5
    return None if n == 0 else (c - d) / n


@given(values, st.data())
def test_tau_is_kendalls_tau_b_pair_by_pair(x, data):
    y = data.draw(st.lists(st.sampled_from([*x, 0.0, 1.0]), min_size=len(x), max_size=len(x)))
    got, want = sweeps.kendall_tau(np.array(x), np.array(y)), _tau_by_definition(x, y)
    assert (got is None) == (want is None)
    if want is not None:
        assert abs(got - want) <= 1e-12 and -1 - 1e-12 <= got <= 1 + 1e-12


@given(st.lists(st.integers(-1000, 1000), min_size=2, max_size=12, unique=True))
def test_the_same_order_gives_one_and_the_reversed_order_minus_one(x):
    x = np.array(x, dtype=float)
    assert sweeps.kendall_tau(x, 3 * x + 7) == 1.0
    assert sweeps.kendall_tau(x, x**3) == 1.0  # any increasing map
    assert sweeps.kendall_tau(x, -x) == -1.0


def _result(rid, measured, predicted, metric="throughput_tokens_per_s", prompt=512, model="m"):
    row = {"id": rid, "table": "t", "engine": "e", "system": "s", "model": model,
           "metric": metric, "prompt": prompt, "generate": 32, "measured": measured}  # fmt: skip
    return validation.Result(row, predicted, None if predicted is not None else "does not fit")


def test_a_sweep_is_three_rows_of_one_table_machine_model_and_workload():
    rows = [_result("a", 1, 1), _result("b", 2, 2), _result("c", 3, 3),
            _result("d", 1, 1, prompt=256), _result("e", 2, 2, prompt=256),
            _result("f", 1, 1, model="other")]  # fmt: skip
    found = sweeps.sweeps(rows)
    assert [[r.row["id"] for r in s.results] for s in found] == [["a", "b", "c"]]


def test_the_pick_is_the_fastest_predicted_and_a_refused_configuration_is_dropped():
    rows = [_result("a", 10.0, 5.0), _result("b", 8.0, 9.0), _result("c", 20.0, None)]
    (s,) = sweeps.sweeps(rows)
    assert [r.row["id"] for r in s.ranked] == ["b", "a"]
    assert s.pick.row["id"] == "b" and s.fastest.row["id"] == "c"
    assert s.pick_share == 8.0 / 20.0 and s.tau == -1.0 and not s.meets_targets


def test_for_a_time_the_fastest_is_the_shortest():
    rows = [
        _result(i, m, p, metric="ttft_ms") for i, m, p in (("a", 30, 3), ("b", 10, 1), ("c", 20, 2))
    ]
    (s,) = sweeps.sweeps(rows)
    assert s.pick.row["id"] == "b" == s.fastest.row["id"]
    assert s.tau == 1.0 and s.pick_share == 1.0 and s.meets_targets


def test_the_pooled_tau_counts_every_pair_of_every_sweep():
    one = sweeps.sweeps([_result("a", 1, 1), _result("b", 2, 2), _result("c", 3, 3)])
    two = sweeps.sweeps([_result("d", 1, 1, model="x"), _result("e", 2, 3, model="x"),
                         _result("f", 3, 2, model="x")])  # fmt: skip
    assert sweeps.pooled_tau(one + two) == (5 - 1) / 6


def test_validate_reports_each_published_sweep(cli):
    data = json.loads(cli("validate", "--json").out)["sweeps"]
    assert data["targets"] == {"tau_at_least": 0.8, "pick_within": 0.1}
    ids = {r["id"]: r for r in validation.rows()}
    # the definition, not today's count: every group of 3+ catalog rows of one table, engine,
    # machine, model, metric and workload is reported, and nothing else
    groups: dict[tuple, list[str]] = {}
    for r in validation.rows():
        key = tuple(
            r[k] for k in ("table", "engine", "system", "model", "metric", "prompt", "generate")
        )
        groups.setdefault(key, []).append(r["id"])
    want = sorted(g for g in groups.values() if len(g) >= 3)
    assert want and sorted(s["rows"] for s in data["sweeps"]) == want
    for s in data["sweeps"]:
        rows = [ids[i] for i in s["rows"]]
        assert len(rows) >= 3 and len({(r["system"], r["model"], r["prompt"]) for r in rows}) == 1
        assert s["pick"] == s["predicted_order"][0] and s["fastest"] in s["rows"]
    text = cli("validate").out
    assert "== sweeps:" in text and f"{len(data['sweeps'])} sweeps, " in text
