"""The published measurements the engine models will be validated against: complete and sourced."""

from __future__ import annotations

import pytest

from kvoffload.spec import catalog
from kvoffload.spec.hardware import load_system
from kvoffload.spec.inputs import load_yaml
from kvoffload.spec.models import load_model
from kvoffload.spec.precision import weight_format

ROWS = load_yaml(catalog.catalog_dir() / "validation.yaml")["rows"]


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
    assert row["table"] in {
        "flexgen-t4",
        "llama-cpp-pr-4812",
        "zero-inference-a6000",
        "moe-offload",
        "vllm-cpu-offload",
    }
    assert row["metric"] in {"throughput_tokens_per_s", "decode_tokens_per_s"}
    opts = row["options"]
    if row["engine"] == "flexgen":
        assert opts["gpu_batch_size"] * opts["num_gpu_batches"] == row["batch"]
        assert len(opts["percent"]) == 6 and all(0 <= p <= 100 for p in opts["percent"])
