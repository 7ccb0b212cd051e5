"""The published measurements the engine models will be validated against: complete and sourced."""

from __future__ import annotations

import re

import pytest

from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs import catalog
from kvoffload.inputs.files import load_yaml
from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model
from kvoffload.inputs.precision import weight_format
from kvoffload.studies import validation

DATA = load_yaml(catalog.catalog_dir() / "validation.yaml")
ROWS = DATA["rows"]
TABLES = DATA["tables"]
# What a row may measure: keys of `predict --json` (TTFT with a prefix hit, and without one).
METRICS = {
    "throughput_tokens_per_s",
    "decode_tokens_per_s",
    "prefill_tokens_per_s",
    "ttft_ms",
    "ttft_recompute_ms",
}


def test_every_flexgen_t4_row_is_there():
    assert sum(r["system"] == "t4-pcie3" for r in ROWS) == 18
    assert len({r["id"] for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_row_refers_to_known_things(row):
    load_system(row["system"])
    load_model(row["model"])
    weight_format(row["precision"])
    assert row["source"] in catalog.sources()
    assert row["measured"] > 0
    assert row["table"] in TABLES
    assert row["metric"] in METRICS
    if "reuse" in row:  # the README's reuse: as written, on an engine with a prefix cache
        assert set(row["reuse"]) == {"cached_tokens", "tier"}, row["id"]
        assert 0 < row["reuse"]["cached_tokens"] <= row["prompt"], row["id"]
    opts = row["options"]
    if row["engine"] == "flexgen":
        assert opts["gpu_batch_size"] * opts["num_gpu_batches"] == row["batch"]
        assert len(opts["percent"]) == 6 and all(0 <= p <= 100 for p in opts["percent"])


def test_a_row_with_reuse_predicts_the_hit_and_its_recompute():
    row = {
        "id": "reuse-probe", "table": "probe", "engine": "vllm", "system": "h100-sxm-pcie5",
        "model": "llama-3.1-8b", "precision": "bf16", "batch": 1, "prompt": 4096, "generate": 1,
        "options": {"kv_offloading_size": 100, "kv_offloading_backend": "native"},
        "reuse": {"cached_tokens": 4096, "tier": "cpu"},
    }  # fmt: skip
    sc = validation.scenario_of(row)
    assert sc["reuse"] == row["reuse"] and sc["options"] == row["options"]
    without = {k: v for k, v in row.items() if k != "reuse"}
    assert "reuse" not in validation.scenario_of(without)
    out = predict(parse_scenario(sc, name="probe"), name="probe", check=False).to_json()
    assert 0 < out["ttft_ms"] < out["ttft_recompute_ms"]
    assert out["reuse"]["tier"] == "cpu" and out["reuse"]["hit_tokens"] > 0


# -- published versions ----------------------------------------------------------------------------
def _version_kind(version: dict) -> str:
    """Return which kind of published version a source names, or fail."""
    if {"repository", "path", "commit"} <= set(version):
        assert re.fullmatch(r"[0-9a-f]{40}", version["commit"]), version
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", version["repository"]), version
        return "file"
    if {"repository", "pull", "post"} <= set(version):
        assert isinstance(version["pull"], int) and version["post"].strip(), version
        return "pull"
    if {"thread", "post"} <= set(version):
        assert version["thread"].startswith("https://") and version["post"].strip(), version
        return "thread"
    assert {"paper", "table"} <= set(version), version
    return "paper"


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_every_row_cites_a_published_version_and_where_in_it(row):
    entry = catalog.sources()[row["source"]]
    assert "version" in entry, f"{row['source']} names no published version"
    _version_kind(entry["version"])
    assert isinstance(row.get("where"), str) and row["where"].strip(), row["id"]
    assert validation.cite(row).endswith(row["where"])


def test_every_table_has_a_role_and_says_why():
    assert set(TABLES) == {r["table"] for r in ROWS}
    for name, t in TABLES.items():
        assert t["role"] in validation.ROLES, name
        assert all(str(t.get(k, "")).strip() for k in ("title", "since", "why")), name
        if "moved" in t:
            assert t["moved"]["from"] in validation.ROLES and t["moved"]["from"] != t["role"]
            assert t["moved"]["when"].strip() and t["moved"]["why"].strip(), name
    # a table added as a check that a constant was then chosen from says so
    assert TABLES["zero-inference-a6000"]["role"] == "calibration"
    assert TABLES["zero-inference-a6000"]["moved"]["from"] == "check"


def test_rows_resting_on_an_assumed_figure_name_a_figure_that_is_assumed():
    for row in ROWS:
        for what in row.get("rests_on_assumed", []):
            system_id, path = what.split(":")[0].split()
            part, field = path.split(".")
            figure = getattr(getattr(load_system(system_id), part), field)
            assert system_id == row["system"] and figure.kind.value == "assumed", row["id"]


# The comparison table of DeepSpeedExamples inference/huggingface/zero_inference/README.md as
# published (commit 83757d9c937daabd1089a08051061706cb73900d; unchanged since 12f78ecd): tokens/s and
# batch size per (framework, weight quantization, KV cache offload, model). FlexGen has no
# BLOOM or LLaMA-2 results.
ZERO_README = {
    ("zero-inference", True, False): {"opt-30b": (22.74, 24), "opt-66b": (7.68, 16), "opt-175b": (1.21, 8),
                                      "bloom-176b": (0.65, 4), "llama-2-70b": (24.05, 96)},
    ("zero-inference", False, True): {"opt-30b": (12.32, 96), "opt-66b": (3.63, 40), "opt-175b": (0.47, 32),
                                      "bloom-176b": (0.47, 32), "llama-2-70b": (2.91, 96)},
    ("zero-inference", True, True): {"opt-30b": (19.34, 128), "opt-66b": (8.08, 64), "opt-175b": (2.26, 24),
                                     "bloom-176b": (1.33, 24), "llama-2-70b": (3.65, 200)},
    ("flexgen", True, False): {"opt-30b": (21.97, 48), "opt-66b": (5.78, 24), "opt-175b": (1.50, 16)},
    ("flexgen", False, True): {"opt-30b": (13.24, 200), "opt-66b": (4.15, 80), "opt-175b": (0.33, 64)},
    ("flexgen", True, True): {"opt-30b": (13.40, 280), "opt-66b": (6.24, 96), "opt-175b": (1.84, 40)},
}  # fmt: skip


def _a6000_key(row: dict) -> tuple[str, bool, bool]:
    o = row["options"]
    if row["engine"] == "flexgen":  # quantization is --compress-weight; KV offload is cache on CPU
        return ("flexgen", bool(o.get("compress_weight")), o["percent"][3] == 100)
    return ("zero-inference", o["quantize_weights"], o["kv_offload"])


def test_the_a6000_rows_equal_the_published_readme():
    rows = [r for r in ROWS if r["system"] == "a6000-lambda"]
    seen = set()
    for r in rows:
        key = _a6000_key(r)
        assert (r["measured"], r["batch"]) == ZERO_README[key][r["model"]], r["id"]
        seen.add((*key, r["model"]))
    assert seen == {(*k, m) for k, cells in ZERO_README.items() for m in cells}


# FlexLLMGen README.md, "Generation Throughput (token/s)", as published at commit
# 004ffef82b46e8dc8685c55d0cdda650bdaf1269: tokens/s and effective batch per system and model.
FLEXGEN_README = {
    "hf-accelerate": {"opt-6.7b": (25.12, 2), "opt-30b": (0.62, 8), "opt-175b": (0.01, 2)},
    "zero-inference": {"opt-6.7b": (9.28, 16), "opt-30b": (0.60, 4), "opt-175b": (0.01, 1)},
    "flexgen": {"opt-6.7b": (25.26, 2), "opt-30b": (7.32, 144), "opt-175b": (0.69, 256)},
    "flexgen-compressed": {
        "opt-6.7b": (29.12, 72),
        "opt-30b": (8.38, 512),
        "opt-175b": (1.12, 144),
    },
}


def test_the_t4_readme_rows_equal_the_published_readme():
    rows = [r for r in ROWS if r["table"] == "flexgen-t4" and r["source"] == "flexllmgen-readme"]
    assert len(rows) == 12
    for r in rows:
        o = r["options"]
        system = r["engine"]
        if system == "flexgen" and (o.get("compress_weight") or o.get("compress_cache")):
            system = "flexgen-compressed"
        assert (r["measured"], r["batch"]) == FLEXGEN_README[system][r["model"]], r["id"]
