"""llama.cpp flags a published command carries that change no modelled quantity (thread
scheduling, load time, cache reuse between requests, CPU repacking): accepted, so the command can
be written down, with their values held to llama.cpp's ranges."""

from __future__ import annotations

import pytest

from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError

FLAGS = {
    "prio": 2,
    "poll": 50,
    "cpu_strict": True,
    "cpu_mask": "0xff",
    "cpu_range": "0-7",
    "no_warmup": True,
    "direct_io": True,
    "cache_reuse": 256,
    "repack": False,
}


def _sc(**options):
    raw = {
        "hardware": "rtx-4090-desktop",
        "model": "llama-3.1-8b",
        "engine": "llamacpp",
        "precision": {"weights": "q4_k_m", "kv": "fp16"},
        "workload": {"batch": 1, "prompt": 512, "generate": 64},
        "options": {"n_gpu_layers": 20, **options},
    }
    return parse_scenario(raw, name="flags")


def test_the_flags_are_accepted_and_change_nothing_modelled():
    base, flagged = predict(_sc()), predict(_sc(**FLAGS))
    assert flagged.tpot_s == base.tpot_s and flagged.ttft_s == base.ttft_s
    assert float(flagged.memory.gpu) == float(base.memory.gpu)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("prio", 4),
        ("poll", 101),
        ("cpu_mask", "<b>ff</b>"),
        ("cpu_range", "0-x"),
        ("cache_reuse", -1),
    ],
)
def test_a_value_out_of_llama_cpps_range_exits_naming_the_field(field, value):
    with pytest.raises(InputError, match=f"options.{field}"):
        _sc(**{field: value})
