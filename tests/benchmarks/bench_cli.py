"""Benchmark: how long the CLI takes to start, to refuse bad input and to answer a kv query, and
how long one generic configuration takes to predict in process.

Run with `make bench`. Prints `name: value` figures; asserts nothing (speed is measured here, not
tested). Issue 16's targets: cli_help_s and cli_hardware_validate_s at most 0.2 s, config_us at
most 25 us.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.samples import BAD_PROFILES, GOOD_PROFILE

SCENARIO = {
    "hardware": "a100-80gb-sxm-pcie4",
    "model": "llama-3.1-8b",
    "engine": "generic",
    "precision": {"weights": "bf16", "kv": "bf16"},
    "workload": {"batch": 1, "prompt": 128000, "generate": 32},
    "placement": {"weights": {"gpu": 1.0}, "kv": {"cpu": 1.0}},
    "attention": "gpu",
    "overlap": "none",
    "pinned": True,
}


def _median(args: list[str], repeat: int = 5) -> float:
    """Return the median wall time of `kvoffload ARGS`, a new process each time."""
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "kvoffload", *args], capture_output=True)
        runs.append(time.perf_counter() - t0)
        if r.returncode != 0:
            raise SystemExit(f"kvoffload {' '.join(args)} failed: {r.stderr.decode()}")
    return statistics.median(runs)


def _config_us(repeat: int = 2000) -> float:
    """Return the median time of one `predict` of a generic scenario in process, in µs."""
    from kvoffload.engines.scenario import parse_scenario, predict

    sc = parse_scenario(SCENARIO)
    predict(sc)  # the first call fills the per-model caches
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        predict(sc)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs) * 1e6


def _llm_analysis_us(repeat: int = 300) -> float | None:
    """Return llm-analysis's median time for one inference configuration in µs, if installed.

    The peer (pip install llm-analysis; it is not in the lock) answers the same kind of question
    for one configuration: Llama-2-7B on an A100 SXM 80GB, 16-bit, batch 1, a 2,048-token
    prompt, 32 generated tokens (its catalog has no Llama-3.1).
    """
    try:
        import logging

        from llm_analysis.analysis import LLMAnalysis
        from llm_analysis.config import (
            ParallelismConfig,
            get_dtype_config_by_name,
            get_gpu_config_by_name,
            get_model_config_by_name,
        )
    except ImportError:
        return None
    logging.disable(logging.CRITICAL)  # it logs a summary per call
    analysis = LLMAnalysis(
        get_model_config_by_name("NousResearch_Llama-2-7b-hf"),
        get_gpu_config_by_name("a100-sxm-80gb"),
        get_dtype_config_by_name("w16a16e16"),
        ParallelismConfig(),
    )
    runs = []
    for _ in range(repeat + 1):
        t0 = time.perf_counter()
        analysis.inference(batch_size_per_gpu=1, seq_len=2048, num_tokens_to_generate=32)
        runs.append(time.perf_counter() - t0)
    logging.disable(logging.NOTSET)
    return statistics.median(runs[1:]) * 1e6


def _time(args: list[str], repeat: int = 3) -> float:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kvoffload", *args], capture_output=True, check=False)
        runs.append(time.perf_counter() - t0)
    return min(runs)


def _gguf_header_s(tmp: str, repeat: int = 3) -> float:
    """Return the best time to read the header of a GGUF with 150k tokens and 280k merges."""
    import numpy as np
    from gguf import GGUFWriter

    from kvoffload.inputs.gguf import read_header

    path = Path(tmp) / "vocab.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_token_list([f"token{i}" for i in range(150_000)])
    w.add_token_merges([f"tok en{i}" for i in range(280_000)])
    w.add_token_scores([0.0] * 150_000)
    w.add_tensor("token_embd.weight", np.zeros((4, 256), np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    read_header(path)  # imports and the page cache warm
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        read_header(path)
        runs.append(time.perf_counter() - t0)
    return min(runs)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        good = Path(tmp) / "mine.yaml"
        good.write_text(GOOD_PROFILE)
        print(f"cli_help_s: {_median(['--help']):.3f}")
        print(f"cli_hardware_validate_s: {_median(['hardware', 'validate', str(good)]):.3f}")
        print(f"cli_kv_s: {_median(['kv', 'llama-3.1-8b', '--seq', '8000']):.3f}")
        times = {}
        for case, (text, _) in sorted(BAD_PROFILES.items()):
            path = Path(tmp) / f"{case}.yaml"
            path.write_text(text)
            times[case] = _time(["hardware", "validate", str(path)], repeat=1)
    worst = max(times, key=times.get)
    print(f"bad_input_cases: {len(times)}")
    print(f"bad_input_median_s: {statistics.median(times.values()):.3f}")
    print(f"bad_input_worst_s: {times[worst]:.3f} ({worst})")
    print(f"kv_query_s: {_time(['kv', 'llama-3.1-8b', '--seq', '128000', '--json']):.3f}")
    print(f"hardware_show_s: {_time(['hardware', 'show', 'a100-80gb-sxm-pcie4', '--json']):.3f}")
    # issue 26: every catalog model's best configuration on a desktop, in under 2 s
    advise_all = ["advise", "--hardware", "rtx-4090-desktop", "--model", "all"]
    print(f"advise_all_s: {_median(advise_all, repeat=3):.3f}")
    with tempfile.TemporaryDirectory() as tmp:  # issue 26: under 0.5 s
        print(f"gguf_header_150k_vocab_s: {_gguf_header_s(tmp):.3f}")
    ours = _config_us()
    print(f"config_us: {ours:.1f}")
    peer = _llm_analysis_us()
    if peer is not None:
        print(f"llm_analysis_config_us: {peer:.1f}")
        print(f"config_us_over_llm_analysis: {ours / peer:.2f}")


if __name__ == "__main__":
    main()
