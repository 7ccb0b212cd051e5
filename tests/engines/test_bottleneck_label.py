"""The bottleneck names what the CPU stream holds: attention over host KV, CPU matmuls, or both."""

from __future__ import annotations

from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.model import decode

BASE = {
    "hardware": "rtx-4090-desktop",
    "model": "qwen3-30b-a3b",
    "engine": "llamacpp",
    "precision": {"weights": "q4_k_m", "kv": "fp16"},
    "workload": {"batch": 1, "prompt": 4096, "generate": 32},
}


def _bottleneck(**options) -> str:
    p = predict(parse_scenario({**BASE, "options": options}), check=False)
    assert max(p.streams_s, key=p.streams_s.get) == "cpu"
    return p.bottleneck


def test_expert_offload_with_the_kv_on_the_gpu_names_the_cpu_matmuls():
    label = _bottleneck(cpu_moe=True)
    assert label == "CPU-side matmuls (weights in host memory)"
    assert "KV" not in label


def test_no_kv_offload_with_every_weight_on_the_gpu_names_cpu_attention():
    raw = {
        **BASE,
        "model": "llama-3.1-8b",
        "workload": {"batch": 1, "prompt": 32768, "generate": 8},
    }
    p = predict(parse_scenario({**raw, "options": {"no_kv_offload": True}}), check=False)
    assert p.cpu_work == (True, False)
    assert decode.cpu_stream_name(*p.cpu_work) == "CPU attention over host-resident KV"


def test_both_on_the_cpu_keep_the_combined_name():
    assert _bottleneck(cpu_moe=True, no_kv_offload=True) == decode.STREAM_NAMES["cpu"]


def test_the_step_model_says_what_its_cpu_stream_holds():
    raw = {"hardware": "rtx-4090-desktop", "model": "llama-3-8b", "engine": "generic",
           "workload": {"batch": 1, "prompt": 4096, "generate": 8}}  # fmt: skip
    p = predict(parse_scenario(raw), check=False)
    assert p.cpu_work == (False, False)
