"""`kvoffload predict`: the scenario contract, the acceptance figures, refusals."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.refusals import assert_refused

SCENARIO = """
hardware: {hardware}
model: llama-3.1-8b
engine: generic
precision: {{weights: bf16, kv: bf16}}
workload: {{batch: 1, prompt: 128000, generate: 1}}
placement:
  weights: {{gpu: 1.0}}
  kv: {{cpu: 1.0}}
attention: gpu
overlap: none
pinned: true
"""

FIELDS = [
    "tpot_ms",
    "ttft_ms",
    "decode_tokens_per_s",
    "throughput_tokens_per_s",
    "bottleneck",
    "step",
    "memory",
    "placement",
]


def test_acceptance_article_reference_transfer(cli, write):
    path = write("s.yaml", SCENARIO.format(hardware="article-reference"))
    r = cli("predict", path, "--json")
    assert r.code == 0, r.err
    out = r.json()
    for key in FIELDS:
        assert key in out
    for key in ("compute_ms", "transfer_ms", "cpu_ms"):
        assert key in out["step"]
    for key in ("gpu_bytes", "cpu_bytes", "disk_bytes"):
        assert isinstance(out["memory"][key], int)
    assert out["step"]["transfer_ms"] == pytest.approx(524, rel=0.02)
    assert out["memory"]["cpu_bytes"] == 16_777_216_000 + 131_072  # the prompt plus the new token
    assert out["bottleneck"] == "host→GPU link"
    assert out["decode_tokens_per_s"] == pytest.approx(1000 / out["tpot_ms"])


def test_real_a100_follows_the_achievable_rate(cli, write):
    path = write("s.yaml", SCENARIO.format(hardware="a100-80gb-sxm-pcie4"))
    out = cli("predict", path, "--json").json()
    assert out["step"]["transfer_ms"] == pytest.approx(16_777_216_000 / 25.13e9 * 1e3, rel=0.01)


def test_throughput_counts_the_prefill(cli, write):
    text = SCENARIO.format(hardware="a100-80gb-sxm-pcie4").replace("generate: 1", "generate: 32")
    out = cli("predict", write("s.yaml", text), "--json").json()
    expected = 32 / (out["ttft_ms"] / 1e3 + 32 * out["tpot_ms"] / 1e3)
    assert out["throughput_tokens_per_s"] == pytest.approx(expected)


def test_human_output(cli, write):
    r = cli("predict", write("s.yaml", SCENARIO.format(hardware="article-reference")))
    assert r.code == 0 and "TPOT" in r.out and "bottleneck: host→GPU link" in r.out


def test_relative_profile_path_is_taken_from_the_scenario_folder(cli, write, tmp_path):
    write("box.yaml", "base: a100-80gb-sxm-pcie4\nlink: {h2d_bandwidth: 10 GB/s}\n")
    out = cli("predict", write("s.yaml", SCENARIO.format(hardware="box.yaml")), "--json").json()
    assert out["step"]["h2d_ms"] == pytest.approx(16_777_216_000 / 10e9 * 1e3, rel=0.01)


BAD = {
    "over-gpu": (
        SCENARIO.format(hardware="article-reference")
        .replace("batch: 1,", "batch: 64,")
        .replace("kv: {cpu: 1.0}", "kv: {gpu: 1.0}"),
        "placement: does not fit: GPU memory needs",
    ),
    "over-host": (
        SCENARIO.format(hardware="rtx-3070-ti-desktop")
        .replace(
            "llama-3.1-8b", "llama-3.1-70b"
        )  # 141 GB of bf16 weights, more than the host holds
        .replace("batch: 1, prompt: 128000", "batch: 1, prompt: 1000")
        .replace("weights: {gpu: 1.0}", "weights: {cpu: 1.0}"),
        "placement: does not fit: host memory needs",
    ),
    "shares": (
        SCENARIO.format(hardware="article-reference").replace("kv: {cpu: 1.0}", "kv: {cpu: 0.5}"),
        "placement.kv: shares add up to 0.5",
    ),
    "overlap": (
        SCENARIO.format(hardware="article-reference").replace("overlap: none", "overlap: magic"),
        "overlap: ",
    ),
    "engine": (
        SCENARIO.format(hardware="article-reference").replace(
            "engine: generic", "engine: tensorrt"
        ),
        "engine: engine 'tensorrt' is not known",
    ),
    "unknown-field": (
        SCENARIO.format(hardware="article-reference") + "batch_size: 4\n",
        "batch_size: unknown field",
    ),
    "missing-prompt": (
        SCENARIO.format(hardware="article-reference").replace("prompt: 128000, ", ""),
        "workload.prompt: required field is missing",
    ),
    "bad-hardware": (SCENARIO.format(hardware="a100"), "hardware: unknown system id 'a100'"),
    "bad-precision": (
        SCENARIO.format(hardware="article-reference").replace("kv: bf16", "kv: int3"),
        "precision.kv: unknown KV precision 'int3'",
    ),
    "negative-batch": (
        SCENARIO.format(hardware="article-reference").replace("batch: 1,", "batch: -4,"),
        "workload.batch: ",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_scenarios_exit_2_in_one_line(case, cli_process, write):
    text, fragment = BAD[case]
    path = write(f"{case}.yaml", text)
    assert_refused(cli_process("predict", path, "--json"), path, fragment)


@pytest.mark.parametrize(
    "engine", ["llamacpp", "vllm", "flexgen", "zero-inference", "hf-accelerate", "infllm"]
)
def test_a_placement_beside_an_engine_that_places_itself_exits_2_in_one_line(tmp_path, engine):
    path = tmp_path / "s.yaml"
    path.write_text(
        "hardware: rtx-4090-desktop\nmodel: llama-3-8b\n"
        f"engine: {engine}\nworkload: {{batch: 1, prompt: 512}}\n"
        "placement: {weights: {gpu: 1.0}, kv: {cpu: 1.0}}\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "kvoffload", "predict", str(path)], capture_output=True, text=True
    )
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr
    assert f"{path}: placement: engine '{engine}' sets its own placement" in lines[0]
    assert "options." in lines[0]


def test_every_engine_that_places_itself_names_its_placement_options():
    from kvoffload.engines.registry import ENGINES

    assert {e for e, spec in ENGINES.items() if spec.placement_option} == set(ENGINES) - {"generic"}
