"""Prefix caches per engine: a request whose prompt starts with cached tokens, and traffic mixes."""

from __future__ import annotations

import json

import pytest
import yaml

from kvoffload.engines.scenario import parse_scenario, predict
from tests.support.refusals import assert_refused

H100 = {"hardware": "h100-sxm-pcie5", "model": "llama-3.1-8b"}
TRAFFIC = {
    "sessions": 200,
    "prefix_tokens": 8000,
    "new_tokens": 200,
    "generate": 200,
    "turn_gap_s": 30,
    "arrival_rate": 5,
}
# each engine with a prefix cache, with the options that give it a host tier
ENGINES = {
    "vllm": {"kv_offloading_size": 400},
    "vllm-lmcache": {"kv_offloading_size": 400, "kv_offloading_backend": "lmcache"},
    "vllm-lmcache-layerwise": {
        "kv_offloading_size": 400,
        "kv_offloading_backend": "lmcache",
        "use_layerwise": True,
    },
    "sglang": {"enable_hierarchical_cache": True},
    # direct: one cudaMemcpyAsync per page and layer, so pages of 64 tokens (with pages of 1 a
    # 8K-token hit is 262,144 copies, slower than recomputing it)
    "sglang-direct": {
        "enable_hierarchical_cache": True,
        "hicache_io_backend": "direct",
        "page_size": 64,
    },
    "trtllm": {"host_cache_size": 200 * 10**9},
    "llamacpp": {},
}


def _raw(engine: str, prompt: int, cached: int | None, tier: str = "cpu", **extra) -> dict:
    name = engine.split("-")[0]
    raw = {
        **H100,
        "engine": name,
        "options": ENGINES[engine],
        "workload": {"batch": 1, "prompt": prompt, "generate": 1},
    }
    if cached is not None:
        raw["reuse"] = {"cached_tokens": cached, "tier": tier}
    return {**raw, **extra}


def _json(raw: dict) -> dict:
    return predict(parse_scenario(raw, name="s.yaml"), name="s.yaml").to_json()


def test_the_acceptance_case_reloads_9984_tokens_faster_than_recomputing(cli, write):
    raw = _raw("vllm", 10_000, 9_984)
    raw["options"] = {"kv_offloading_size": 400, "kv_offloading_backend": "native"}
    r = cli("predict", "--json", write("s.yaml", yaml.safe_dump(raw)))
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["ttft_ms"] < out["ttft_recompute_ms"]
    assert out["reuse"]["load_ms"] > 0 and out["reuse"]["tier"] == "cpu"
    assert out["reuse"]["hit_tokens"] == 9_984  # 624 blocks of 16
    assert out["reuse"]["load_bytes"] == 9_984 * 128 * 1024  # 128 KiB a token
    assert 0 < out["reuse"]["load_bandwidth"] <= 56.3e9  # below the link's pinned rate
    assert out["reuse"]["hit_rate_by_tier"] is None  # no traffic given


@pytest.mark.parametrize("engine", list(ENGINES))
def test_nothing_cached_is_the_recompute_ttft(engine):
    out = _json(_raw(engine, 10_000, 0))
    assert out["ttft_ms"] == out["ttft_recompute_ms"]
    assert out["reuse"]["hit_tokens"] == 0 and out["reuse"]["load_ms"] == 0


@pytest.mark.parametrize("engine", list(ENGINES))
def test_without_a_reuse_block_nothing_changes(engine):
    plain = _raw(engine, 10_000, None)
    out = _json(plain)
    assert out["reuse"] is None and out["ttft_recompute_ms"] == out["ttft_ms"]


def test_the_deprecated_prefix_hit_rate_still_shortens_the_prefill():
    base = {**H100, "engine": "vllm", "workload": {"batch": 1, "prompt": 10_000, "generate": 1}}
    plain = _json({**base, "options": {"kv_offloading_size": 400}})
    hit = _json({**base, "options": {"kv_offloading_size": 400, "prefix_hit_rate": 0.9}})
    assert hit["ttft_ms"] < plain["ttft_ms"] and hit["reuse"] is None


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("prompt", [8_192, 32_768, 100_000])
def test_a_hit_is_never_slower_than_recomputing_a_long_prompt(engine, prompt):
    out = _json(_raw(engine, prompt, prompt))
    assert 0 < out["ttft_ms"] < out["ttft_recompute_ms"]
    assert out["reuse"]["load_ms"] > 0


def test_a_gpu_hit_loads_nothing_and_beats_a_host_hit():
    gpu = _json(_raw("vllm", 10_000, 9_984, "gpu"))
    cpu = _json(_raw("vllm", 10_000, 9_984, "cpu"))
    assert gpu["reuse"]["load_ms"] == 0 and gpu["ttft_ms"] < cpu["ttft_ms"]


def test_layerwise_loads_are_never_slower_than_serial_ones():
    serial = _json(_raw("vllm-lmcache", 32_768, 32_768))
    layerwise = _json(_raw("vllm-lmcache-layerwise", 32_768, 32_768))
    assert layerwise["ttft_ms"] <= serial["ttft_ms"]


@pytest.mark.parametrize("engine", list(ENGINES))
def test_traffic_hit_rates_are_shares_and_the_mix_lies_between_its_parts(engine):
    r = _json(_raw(engine, 10_000, 9_984, traffic=TRAFFIC))["reuse"]
    rates = r["hit_rate_by_tier"]
    assert set(rates) == {"gpu", "cpu", "disk"}
    assert all(0 <= v <= 1 for v in rates.values()) and sum(rates.values()) <= 1 + 1e-12
    assert r["ttft_mean_ms"] > 0 and r["ttft_p90_ms"] > 0
    assert 0 < r["prefill_tokens_per_s"] <= TRAFFIC["arrival_rate"] * 8_200
    assert r["host_bytes_for_90pct"] > 0
    assert all(v is None or v >= 0 for v in r["survival_s_by_tier"].values())


@pytest.mark.parametrize(
    ("engine", "option", "sizes"),
    [
        ("vllm", "kv_offloading_size", [0, 20, 60, 120, 240, 400]),
        ("trtllm", "host_cache_size", [0, 20e9, 60e9, 120e9, 240e9, 400e9]),
        ("llamacpp", "cache_ram", [0, 20_000, 60_000, 120_000, 240_000, 400_000]),
    ],
)
def test_more_host_memory_never_lowers_the_hit_rate(engine, option, sizes):
    hits = []
    for size in sizes:
        raw = _raw(engine, 10_000, None, traffic=TRAFFIC)
        raw["options"] = {**raw["options"], option: int(size)}
        rates = _json(raw)["reuse"]["hit_rate_by_tier"]
        hits.append(sum(rates.values()))
    assert hits == sorted(hits) and hits[-1] > hits[0], hits


@pytest.mark.parametrize(
    ("engine", "option", "value", "fragment"),
    [
        ("vllm", "block_size", 0, "greater than or equal to 1"),
        ("vllm", "block_size", 65_537, "less than or equal to 65536"),
        ("vllm", "chunk_size", 65_537, "less than or equal to 65536"),
        ("vllm", "kv_offloading_backend", "mooncake", "'native' or 'lmcache'"),
        ("vllm", "max_local_cpu_size", -1, "greater than or equal to 0"),
        ("vllm", "max_local_disk_size", 1e12, "less than or equal to"),
        ("vllm", "local_disk", "yes", "a valid boolean"),
        ("sglang", "hicache_ratio", 1.0, "greater than 1"),
        ("sglang", "hicache_size", -1, "greater than or equal to 0"),
        ("sglang", "hicache_write_policy", "write_around", "'write_through'"),
        ("sglang", "page_size", 0, "greater than or equal to 1"),
        ("sglang", "hicache_io_backend", "dma", "'kernel' or 'direct'"),
        ("sglang", "hicache_storage_backend", "mooncake", "'file'"),
        ("sglang", "mem_fraction_static", 0, "greater than 0"),
        ("trtllm", "host_cache_size", -1, "greater than or equal to 0"),
        ("trtllm", "host_cache_size", 1 << 53, "less than or equal to"),
        ("trtllm", "tokens_per_block", 0, "greater than or equal to 1"),
        ("trtllm", "free_gpu_memory_fraction", 1.5, "less than or equal to 1"),
        ("llamacpp", "cache_ram", -2, "greater than or equal to -1"),
        ("llamacpp", "cache_ram", (1 << 32) + 1, "less than or equal to"),
    ],
)
def test_each_new_option_is_bounded_and_refused_in_one_line(
    cli, write, engine, option, value, fragment
):
    raw = {**H100, "engine": engine, "options": {option: value}}
    raw["workload"] = {"batch": 1, "prompt": 1024, "generate": 1}
    path = write("s.yaml", yaml.safe_dump(raw))
    assert_refused(cli("predict", path), path, f"options.{option}: ")
    assert fragment in cli("predict", path).err


@pytest.mark.parametrize(
    ("engine", "options", "tier", "fragment"),
    [
        ("vllm", {"kv_offloading_size": 400}, "disk", "no disk tier with these options"),
        ("trtllm", {"host_cache_size": 10**9}, "disk", "no disk tier; its tiers: gpu, cpu"),
        ("trtllm", {}, "cpu", "options.host_cache_size"),
        ("trtllm", {"enable_block_reuse": False}, "gpu", "enable_block_reuse: false"),
        ("sglang", {}, "cpu", "enable_hierarchical_cache: true"),
        ("sglang", {"enable_hierarchical_cache": True}, "disk", "hicache_storage_backend"),
        ("sglang", {"enable_hierarchical_cache": True, "hicache_size": 600}, "cpu", "512 GB"),
        ("llamacpp", {"cache_ram": 0}, "cpu", "options.cache_ram"),
    ],
)
def test_a_tier_the_engine_has_not_got_is_refused_in_one_line(
    cli, write, engine, options, tier, fragment
):
    raw = {**H100, "engine": engine, "options": options}
    raw["workload"] = {"batch": 1, "prompt": 1024, "generate": 1}
    raw["reuse"] = {"cached_tokens": 512, "tier": tier}
    path = write("s.yaml", yaml.safe_dump(raw))
    r = cli("predict", path)
    assert_refused(r, path, fragment)


def test_the_disk_tiers_read_through_host_memory():
    lm = _raw("vllm-lmcache", 32_768, 32_768, "disk")
    lm["options"] = {**lm["options"], "local_disk": True, "max_local_disk_size": 1000}
    sg = _raw("sglang", 32_768, 32_768, "disk")
    sg["options"] = {**sg["options"], "hicache_storage_backend": "file"}
    for raw in (lm, sg):
        disk = _json(raw)
        host = _json({**raw, "reuse": {"cached_tokens": 32_768, "tier": "cpu"}})
        assert disk["reuse"]["load_ms"] >= host["reuse"]["load_ms"]


def test_the_human_summary_prints_the_hit_and_the_traffic(cli, write):
    raw = _raw("vllm", 10_000, 9_984, traffic=TRAFFIC)
    r = cli("predict", write("s.yaml", yaml.safe_dump(raw)))
    assert r.code == 0, r.err
    assert "prefix cache: 9,984 tokens from cpu" in r.out and "recompute" in r.out
    assert "traffic: hits gpu" in r.out and "p90" in r.out
