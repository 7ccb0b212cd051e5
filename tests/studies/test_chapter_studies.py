"""The studies chapters 04, 07 and 09 call: engines compared, validation findings, calibration,
and the reader's machine."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kvoffload.engines.each import infllm
from kvoffload.inputs import catalog
from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model
from kvoffload.model import kv
from kvoffload.studies import (
    calibration,
    engines_compared,
    machine_figures,
    validation,
    validation_findings,
)

LLAMA = load_model("llama-3.1-8b")


@pytest.fixture(scope="module")
def predictions():
    return engines_compared.engine_predictions("a100-80gb-sxm-pcie4", "llama-3.1-8b", 32_000, 128)


@pytest.fixture(scope="module")
def rtx_predictions():
    return engines_compared.engine_predictions("rtx-3070-ti-desktop", "llama-3.1-8b", 32_000, 128)


# an 8 GiB card cut to 1 GiB: no engine's setup fits it
TINY_GPU = {
    "base": "rtx-3070-ti-desktop",
    "id": "tiny-gpu",
    "gpu": {"base": "rtx-3070-ti", "memory": "1 GiB"},
}


@pytest.fixture(scope="module")
def results():
    return validation.run()


# -- chapter 04 ------------------------------------------------------------------------------------
def test_every_engine_setup_is_predicted_in_order(predictions):
    assert list(predictions["engine"]) == list(engines_compared.ENGINE_SETUPS)
    ok = predictions.dropna(subset=["TPOT (ms)"])
    assert (ok["gpu_bytes"] > 0).all() and ok["fits"].dtype == bool
    step = ok[["GPU (ms/step)", "link (ms/step)", "CPU (ms/step)", "disk (ms/step)"]].max(axis=1)
    assert (step <= ok["TPOT (ms)"] * (1 + 1e-9)).all()  # no resource is busier than the step


def test_fastest_is_the_shortest_predicted_step(predictions):
    best = engines_compared.fastest(predictions)
    # on an 80 GB card the shortest step of all fits, so it is the one named
    assert best.tpot_ms == predictions["TPOT (ms)"].min() and not best.faster_unfit
    assert predictions.loc[predictions["TPOT (ms)"].idxmin(), "engine"] == best.engine
    # at a 32,000-token prompt FlexGen's prefill holds the whole score matrix, 32 heads x 32k^2 x 2 B
    # = 65 GB per sequence, beyond 80% of an 80 GB GPU (its cost model's limit): it is refused
    assert "found no policy" in best.flexgen_policy and "GiB" in best.flexgen_policy


def test_on_an_8_gib_card_the_fastest_named_is_the_fastest_that_fits(rtx_predictions):
    best = engines_compared.fastest(rtx_predictions)
    rows = rtx_predictions.set_index("engine")
    fitting = rtx_predictions[rtx_predictions["fits"]].dropna(subset=["TPOT (ms)"])
    assert best.engine is not None and bool(rows.loc[best.engine, "fits"])
    assert best.tpot_ms == fitting["TPOT (ms)"].min()
    # the pick, every layer on the GPU at ~25 ms, is faster but needs more than 8 GiB
    assert rtx_predictions["TPOT (ms)"].min() < best.tpot_ms
    passed = dict(best.faster_unfit)
    assert "llama.cpp, all layers on the GPU" in passed
    assert set(passed) == set(rows.index[~rows["fits"] & (rows["TPOT (ms)"] < best.tpot_ms)])
    assert f"`{best.engine}`" in best.sentence() and "do not fit" in best.sentence()
    assert best.engine in best.takeaway()


def test_a_gpu_too_small_for_every_engine_names_no_fastest():
    frame = engines_compared.engine_predictions(TINY_GPU, "llama-3.1-8b", 32_000, 128)
    assert frame["TPOT (ms)"].notna().any() and not frame["fits"].any()
    best = engines_compared.fastest(frame)
    assert best.engine is None and np.isnan(best.tpot_ms)
    assert best.sentence().startswith("No engine's setup fits this machine")
    assert best.takeaway().startswith("no engine's setup fits")
    # llama.cpp's layer split: from some layer count on the settings no longer fit, and it says so
    split = engines_compared.layer_split(engines_compared.ngl_frame(TINY_GPU, "llama-3.1-8b"))
    assert not split.all_fit and split.first_unfit is not None
    assert f"From {split.first_unfit} layers" in split.fit_sentence()


def test_llamacpp_half_and_half_is_near_the_harmonic_mean_of_the_ends():
    ngl = engines_compared.ngl_frame("a100-80gb-sxm-pcie4", "llama-3.1-8b")
    assert list(ngl["n_gpu_layers"]) == list(range(LLAMA.n_layers + 2))
    split = engines_compared.layer_split(ngl)
    assert split.cpu_only < split.half < split.gpu_only
    assert split.harmonic_mean < split.arithmetic_mean
    assert abs(split.half - split.harmonic_mean) < abs(split.half - split.arithmetic_mean)
    assert split.all_fit == bool(ngl["fits"].all())
    assert split.first_unfit is None and split.fit_sentence() == "Every setting fits this machine."


def test_infllm_moves_a_bounded_number_of_bytes_while_full_offload_grows():
    contexts = [8_000, 32_000, 128_000, 512_000]
    moved = engines_compared.infllm_moved(LLAMA, contexts)
    full = moved["full offload (GB per step)"].to_numpy()
    assert full * 1e9 == pytest.approx(kv.request_bytes(LLAMA, np.array(contexts)).astype(float))
    assert moved["InfLLM (GB per step)"].iloc[-1] == moved["InfLLM (GB per step)"].iloc[-2]
    assert np.all(np.diff(moved["ratio"]) > 0)
    ratio = engines_compared.infllm_ratio(moved, 128_000)
    o = infllm.Options()
    assert ratio == pytest.approx(
        int(kv.request_bytes(LLAMA, 128_000))
        / (infllm.moved_tokens(o, 128_000) * kv.bytes_per_token(LLAMA))
    )


# -- chapter 07 ------------------------------------------------------------------------------------
def test_results_frame_and_statistics_follow_the_rows(results):
    frame = validation_findings.results_frame(results)
    assert len(frame) == len(results)
    predicted = frame.dropna(subset=["predicted"])
    assert predicted["ratio"].to_numpy() == pytest.approx(
        (predicted["predicted"] / predicted["measured"]).to_numpy()
    )
    refused = frame[frame["predicted"].isna()]
    assert (refused["refused"].str.startswith("does not fit: ")).all()
    assert (predicted["refused"] == "").all()
    stats = validation_findings.error_stats(results)
    assert stats["all"].rows == len(results) and stats["all"].refused == len(refused)
    errors = np.abs(predicted["ratio"] - 1)
    assert stats["all"].median_pct == pytest.approx(100 * float(np.median(errors)))
    within = ((frame["ratio"] >= 0.5) & (frame["ratio"] <= 2)).sum() / len(frame)  # NaN: outside
    assert stats["all"].within_2x_pct == pytest.approx(100 * within)
    for group in (
        "flexgen",
        "llamacpp",
        "flexgen-t4",
        "zero-inference-a6000",
        "calibration",
        "check",
    ):
        assert 0 < stats[group].rows < len(results)
    assert stats["calibration"].rows + stats["check"].rows == len(results)
    assert set(frame["role"]) == {"calibration", "check"}
    assert frame["source"].str.contains(" @ [0-9a-f]{12}: ", regex=True).any()


def test_a_row_that_does_not_fit_is_refused_not_predicted():
    row = next(r for r in validation.rows() if r["id"] == "t4-02")  # OPT-30B in host memory
    tiny = {
        row["system"]: {"base": row["system"], "host": {"base": "gcp-t4-host", "memory": "1 GB"}}
    }
    (result,) = [r for r in validation.run(tiny, table="flexgen-t4") if r.row["id"] == row["id"]]
    assert result.predicted is None and result.ratio is None
    assert result.refusal.startswith("does not fit: host memory needs")


def test_tables_frame_names_each_tables_role_and_moves():
    tables = validation_findings.tables_frame()
    assert set(tables["table"]) == set(validation.tables())
    moved = tables[tables["moved"] != ""]
    assert list(moved["table"]) == [
        "zero-inference-a6000",
        "vllm-offload-ttft-8b",
        "llmfit-rtx2080",
    ]
    assert all(m.startswith("from check on ") for m in moved["moved"])


def test_miss_ranges_are_the_min_and_max_of_their_rows(results):
    frame = validation_findings.results_frame(results)
    m = validation_findings.misses(results)
    llama = frame.loc[frame["engine"] == "llamacpp", "ratio"]
    assert (m.llamacpp.lo, m.llamacpp.hi) == (llama.min(), llama.max())
    a6k = frame.loc[frame["table"] == "zero-inference-a6000", "ratio"]
    assert (m.a6000.lo, m.a6000.hi) == (a6k.min(), a6k.max())
    zero = frame.set_index("row").loc[["t4-04", "t4-05"], "ratio"]
    assert (m.zero_from_host.lo, m.zero_from_host.hi) == (zero.min(), zero.max())
    flexgen = frame.loc[(frame["engine"] == "flexgen") & (frame["table"] == "flexgen-t4"), "ratio"]
    assert min(m.flexgen_plain.lo, m.flexgen_compressed.lo) == flexgen.min()
    assert max(m.flexgen_plain.hi, m.flexgen_compressed.hi) == flexgen.max()
    llama70 = frame.set_index("row").loc[["z-14", "z-15"], "ratio"]  # the cache in host memory
    assert (m.a6000_llama70_kv.lo, m.a6000_llama70_kv.hi) == (llama70.min(), llama70.max())
    fa = frame.loc[frame["table"] == "flexgen-a6000", "ratio"]
    assert (m.flexgen_a6000.lo, m.flexgen_a6000.hi) == (fa.min(), fa.max())
    for span in (m.flexgen_plain, m.flexgen_compressed, m.zero_from_host, m.llamacpp, m.a6000):
        assert span.lo <= span.hi


def test_the_peak_host_rerun_changes_only_the_a6000_table(results):
    measured = validation_findings.error_stats(results)["zero-inference-a6000"]
    peak = validation_findings.peak_host_stats()
    assert peak.rows == measured.rows
    assert peak.median_pct != pytest.approx(measured.median_pct)


def test_figure_kinds_count_every_figure():
    t4 = load_system("t4-pcie3")
    kinds = validation_findings.figure_kinds(t4)
    assert kinds.total == len(t4.figures())
    assert kinds.of("measured") > 0 and kinds.of("no such kind") == 0
    assert validation_findings.figure_kinds("a6000-lambda").of("assumed") > 0


def test_calibration_takes_engine_constants_kind_and_source_from_the_catalog():
    rows = calibration.calibration_rows("t4-pcie3")
    testbed = rows[rows["where"] == "t4-pcie3"]
    assert len(testbed) > 0 and (testbed["kind"] == "measured").any()
    fitted = testbed[testbed["kind"].str.startswith("fitted on ")]
    assert set(fitted["constant"]) >= {
        "gpu.attention_bandwidth",
        "link.h2d_bandwidth",
        "host.attention_flops",
    }
    assert set(testbed["kind"]) <= {"measured", *fitted["kind"]}
    matvec = rows[rows["where"].str.endswith("(CPU matvec)")]
    kernels = catalog.load("cpu_matvec")["constants"]
    assert len(matvec) == len(kernels) and "measured" not in set(matvec["kind"])
    assert all(s.startswith("CPU-only runs ") for s in matvec["source"])  # rows in cpu_matvec.yaml
    rows = rows.drop(matvec.index)
    engines = rows[rows["where"] != "t4-pcie3"]
    data = catalog.load("engine_constants")
    assert len(engines) == sum(len(v) for v in data.values())
    assert "measured" not in set(engines["kind"])
    share = engines[engines["constant"].str.startswith("gpu_op_us ")].iloc[0]
    c = data["llamacpp"]["gpu_op_us"]
    assert (share["kind"], share["source"]) == (f"{c['kind']} on {c['machine']}", c["source"])
    assert float(share["value"]) == pytest.approx(c["value"], rel=1e-3)
    assert set(rows["source"]) <= set(catalog.sources())


# -- chapter 09 ------------------------------------------------------------------------------------
def _reads(request_bytes: int, shares: dict[int, float]) -> list[dict]:
    return [{"request_bytes": request_bytes, "queue_depth": qd, "share_of_sequential": s, "gb_s": s}
            for qd, s in shares.items()]  # fmt: skip


def test_the_random_read_verdict_names_the_depths_below_ten_percent():
    rows = _reads(4096, {1: 0.02, 4: 0.08, 32: 0.4}) + _reads(1 << 20, {1: 0.05, 32: 0.9})
    verdict = machine_figures.random_read_verdict(rows)
    assert "holds at queue depth 1, 4 and fails at 32." in verdict
    none_below = machine_figures.random_read_verdict(_reads(4096, {1: 0.2, 8: 0.5}))
    assert "holds at queue depth none and fails at 1, 8." in none_below
    assert "no random-read measurements" in machine_figures.random_read_verdict([])


def test_a_catalog_profile_is_read_not_measured():
    t4 = machine_figures.machine_profile("t4-pcie3", base="a100-80gb-sxm-pcie4")
    assert t4.id == "t4-pcie3"
    table = machine_figures.figure_table(t4)
    assert len(table) == len(t4.figures())
    assert machine_figures.measured_count(t4) == int((table["kind"] == "measured").sum()) > 0
    assert machine_figures.measurement_notes(t4) == []
    name, comparison = machine_figures.nearest(t4)
    assert name == "t4-pcie3" and len(comparison) > 0


def test_the_refusal_sentence_names_each_refused_row_and_a_truncated_runs_reason(results):
    assert validation_findings.refusal_sentence(results).startswith("none") == all(
        r.refusal is None for r in results
    )
    rows = {r.row["id"]: r for r in results}
    truncated = dataclasses.replace(
        rows["t4-18"], predicted=None, refusal="does not fit: CPU memory needs 1 TB of 208 GB"
    )
    plain = dataclasses.replace(rows["t4-01"], predicted=None, refusal="does not fit: GPU memory")
    both = validation_findings.refusal_sentence([truncated, plain, rows["t4-02"]])
    assert both.startswith("t4-18, t4-01,") and "fewer_batch" in both
    assert "fewer_batch" not in validation_findings.refusal_sentence([plain])
