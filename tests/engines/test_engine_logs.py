"""KV bytes checked against allocations that real engines printed (llama.cpp, vLLM).

The logs, with their sources, are in the package's catalog/engine_kv_logs.yaml.
"""

from __future__ import annotations

import pytest

from kvoffload.inputs import catalog
from kvoffload.inputs.files import load_yaml
from kvoffload.inputs.models import load_model
from kvoffload.inputs.precision import KvFormat
from kvoffload.model import kv

LOGS = load_yaml(catalog.catalog_dir() / "engine_kv_logs.yaml")
BYTE_LOGS = [e for e in LOGS if e.get("total_bytes")]


def _fmt(entry: dict) -> KvFormat:
    text = str(entry["kv_dtype"]).split()[0]
    return {"f16": KvFormat.FP16, "f32": KvFormat.FP32, "auto": KvFormat.BF16}[text]


def test_at_least_three_logs_from_real_engines():
    assert len(BYTE_LOGS) >= 3
    assert all(e["source"]["url"].startswith("https://github.com/") for e in LOGS)


@pytest.mark.parametrize("entry", BYTE_LOGS, ids=lambda e: f"{e['model']}@{e['n_ctx']}")
def test_llama_cpp_kv_self_size(entry):
    model = load_model(entry["model"])
    assert int(kv.request_bytes(model, entry["n_ctx"], _fmt(entry))) == entry["total_bytes"]


@pytest.mark.parametrize(
    "entry", [e for e in LOGS if e.get("cpu_blocks")], ids=lambda e: e["model"]
)
def test_vllm_block_count(entry):
    # vLLM sizes its CPU swap area as floor(swap_space / (block_size x bytes per token)).
    model = load_model(entry["model"])
    per_block = entry["block_size"] * kv.bytes_per_token(model, _fmt(entry))
    assert entry["swap_space_bytes"] // per_block == entry["cpu_blocks"]
