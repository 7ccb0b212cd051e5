"""vllm serve's own limits as options: a request past --max-model-len, a batch past
--max-num-seqs and a --tensor-parallel-size other than the profile's GPUs are refused as vLLM
refuses them; --enforce-eager is accepted and changes nothing modelled."""

from __future__ import annotations

import pytest

from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError


def _sc(batch: int = 1, prompt: int = 4096, gpus: str = "rtx-4090-desktop", **options):
    raw = {
        "hardware": gpus,
        "model": "llama-3.1-8b",
        "engine": "vllm",
        "precision": {"weights": "bf16", "kv": "bf16"},
        "workload": {"batch": batch, "prompt": prompt, "generate": 128},
        "options": {"cpu_offload_gb": 4, **options},
    }
    return parse_scenario(raw, name="vllm")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_model_len": 4096}, "options.max_model_len"),  # 4,096 + 128 tokens
        ({"batch": 8, "max_num_seqs": 4}, "options.max_num_seqs"),
        ({"tensor_parallel_size": 2}, "options.tensor_parallel_size"),
    ],
)
def test_what_vllm_refuses_exits_in_one_line_naming_the_option(kwargs, field):
    with pytest.raises(InputError) as e:
        predict(_sc(**kwargs), check=False)
    assert field in str(e.value) and "\n" not in str(e.value)


def test_limits_that_hold_and_eager_mode_change_nothing():
    base = predict(_sc(batch=4), check=False)
    for opts in (
        {"max_model_len": 4224},
        {"max_num_seqs": 4},
        {"tensor_parallel_size": 1},
        {"enforce_eager": True},
    ):
        got = predict(_sc(batch=4, **opts), check=False)
        assert got.tpot_s == base.tpot_s and got.ttft_s == base.ttft_s
