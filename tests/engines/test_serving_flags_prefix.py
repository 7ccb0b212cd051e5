"""Serving flags that turn the GPU prefix tier off (vLLM's --no-enable-prefix-caching, SGLang's
--disable-radix-cache) or bound a request (SGLang's --context-length), and those accepted with no
term of their own."""

from __future__ import annotations

import pytest

from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError


def _raw(engine: str, reuse: dict | None = None, **options) -> dict:
    raw = {
        "hardware": "h100-sxm-pcie5",
        "model": "llama-3.1-8b",
        "engine": engine,
        "precision": {"weights": "bf16", "kv": "bf16"},
        "workload": {"batch": 1, "prompt": 8192, "generate": 16},
        "options": options,
    }
    if reuse:
        raw["reuse"] = reuse
    return raw


@pytest.mark.parametrize(
    ("engine", "off"),
    [("vllm", {"enable_prefix_caching": False}), ("sglang", {"disable_radix_cache": True})],
)
def test_without_the_gpu_prefix_tier_a_gpu_hit_is_refused_as_having_no_tier(engine, off):
    hit = {"cached_tokens": 4096, "tier": "gpu"}
    cold = predict(parse_scenario(_raw(engine)))
    warm = predict(parse_scenario(_raw(engine, hit)))
    assert warm.ttft_s < cold.ttft_s
    with pytest.raises(InputError) as err:  # no GPU tier to hold the hit: refused, naming it
        predict(parse_scenario(_raw(engine, hit, **off)))
    assert err.value.field == "reuse.tier" and "keeps no prefix" in str(err.value)


def test_accepted_flags_change_nothing():
    base = predict(parse_scenario(_raw("vllm")))
    flags = {"swap_space": 4, "enable_chunked_prefill": True}
    assert predict(parse_scenario(_raw("vllm", **flags))).tpot_s == base.tpot_s
    sg = predict(parse_scenario(_raw("sglang")))
    flags = {"enable_torch_compile": True, "cuda_graph_max_bs": 8, "context_length": 8208}
    assert predict(parse_scenario(_raw("sglang", **flags))).tpot_s == sg.tpot_s


def test_sglang_refuses_a_request_past_its_context_length():
    with pytest.raises(InputError) as err:
        predict(parse_scenario(_raw("sglang", context_length=8192)))
    assert err.value.field == "options.context_length"
