"""Every engine's prediction JSON has one key set; what only an engine has is in engine_settings."""

from __future__ import annotations

import json

import pytest
import yaml

from kvoffload.engines.scenario import ENGINES, parse_scenario, predict
from kvoffload.model import decode

BASE = {
    "hardware": "t4-pcie3",
    "model": "opt-6.7b",
    "precision": {"weights": "fp16", "kv": "fp16"},
    "workload": {"batch": 2, "prompt": 512, "generate": 8},
}
# per engine: its default options, and options that move things off the GPU
VARIANTS = {
    "generic": [
        {"placement": {"weights": {"gpu": 1.0}, "kv": {"cpu": 1.0}}},
        {
            "placement": {"weights": {"gpu": 0.5, "cpu": 0.5}, "kv": {"gpu": 0.25, "cpu": 0.75}},
            "attention": "cpu",
            "overlap": "pipeline",
        },
    ],
    "llamacpp": [{}, {"options": {"n_gpu_layers": 10, "no_kv_offload": True}}],
    "vllm": [
        {},
        {"options": {"cpu_offload_gb": 4, "kv_offloading_size": 2, "prefix_hit_rate": 0.5}},
    ],
    "flexgen": [
        {},
        {
            "options": {
                "percent": [50, 50, 0, 100, 100, 0],
                "gpu_batch_size": 2,
                "num_gpu_batches": 1,
                "cpu_attention": True,
            }
        },
    ],
    "zero-inference": [{}, {"options": {"weights": "disk", "kv_offload": True}}],
    "hf-accelerate": [{}, {"options": {"weights": "gpu"}}],
    "infllm": [{}, {"options": {"n_local": 128, "topk": 2}}],
    # weights and KV stay on the GPU; the variant adds a host prefix cache and a cached prefix
    "sglang": [{}, {"options": {"enable_hierarchical_cache": True}}],
    "trtllm": [{}, {"options": {"host_cache_size": 10**9}}],
    # KTransformers runs only the MoE families it has rules for: Mixtral's experts on the CPU in
    # both, the variant with fewer threads and smaller prefill chunks
    "ktransformers": [
        {"model": "mixtral-8x7b"},
        {"model": "mixtral-8x7b", "options": {"cpu_infer": 8, "chunk_size": 128}},
    ],
}
# engines whose variants do not move anything (KTransformers: the experts are on the CPU in both)
ALL_ON_GPU = {"sglang", "trtllm", "ktransformers"}
# mappings whose keys are data, not schema: the engine's own settings, and the overlap modes an
# engine can compare itself under (every mode for the step model, none for the other engines)
KEYED_BY_DATA = ("engine_settings",)


def keys(obj: object, path: str = "") -> set[str]:
    """Return every nested dict key as a dotted path, not looking inside KEYED_BY_DATA."""
    if not isinstance(obj, dict):
        return set()
    out = set()
    for k, v in obj.items():
        p = f"{path}.{k}" if path else k
        out.add(p)
        if p not in KEYED_BY_DATA:
            out |= keys(v, p)
    return out


def raw_of(engine: str, variant: dict) -> dict:
    return {**BASE, "engine": engine, **variant}


CASES = [(e, i) for e in ENGINES for i in range(len(VARIANTS[e]))]


@pytest.fixture(scope="module")
def outputs() -> dict[tuple[str, int], dict]:
    return {
        (e, i): predict(parse_scenario(raw_of(e, VARIANTS[e][i]), name=e)).to_json()
        for e, i in CASES
    }


def test_every_engine_has_variants():
    assert set(VARIANTS) == set(ENGINES)


def test_every_engine_answers_with_the_same_keys(outputs):
    ref = keys(outputs[("generic", 0)])
    assert {"placement.weights.gpu", "placement.kv.disk", "memory.gpu_capacity_bytes"} <= ref
    for case, out in outputs.items():
        assert keys(out) == ref, (case, keys(out) ^ ref)


def test_overlap_modes_compared_are_modes_of_the_step_model(outputs):
    for (engine, _), out in outputs.items():
        assert list(out["tpot_ms_by_overlap"]) == list(decode.OVERLAP_MODES)
        known = {k for k, v in out["tpot_ms_by_overlap"].items() if v is not None}
        if engine == "generic":
            assert known == set(decode.OVERLAP_MODES)
            assert out["tpot_ms_by_overlap"][out["overlap"]] == pytest.approx(out["tpot_ms"])


def test_placement_shares_add_up_and_the_overlap_is_the_placements(outputs):
    for case, out in outputs.items():
        pl = out["placement"]
        for what in ("weights", "kv"):
            shares = pl[what]
            assert set(shares) == {"gpu", "cpu", "disk"}
            assert all(0 <= x <= 1 for x in shares.values()), case
            assert sum(shares.values()) == pytest.approx(1.0, abs=1e-9), (case, what)
        assert out["overlap"] == pl["overlap"], case
        assert pl["overlap"] in decode.OVERLAP_MODES
        assert pl["attention"] in ("gpu", "cpu")
        assert out["engine"] == case[0]


def test_the_variants_move_something_off_the_gpu(outputs):
    for engine in set(ENGINES) - ALL_ON_GPU:
        moved = outputs[(engine, 1)]["placement"]
        base = outputs[(engine, 0)]["placement"]
        assert moved != base, engine


@pytest.mark.parametrize("engine", ["llamacpp", "flexgen"])
def test_predict_json_on_the_command_line_has_the_same_keys(engine, outputs, cli, write):
    path = write("s.yaml", yaml.safe_dump(raw_of(engine, VARIANTS[engine][1])))
    r = cli("predict", path, "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert keys(out) == keys(outputs[("generic", 0)])
    assert out["placement"] == outputs[(engine, 1)]["placement"]
