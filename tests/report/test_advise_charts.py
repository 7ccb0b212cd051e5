"""Chapter 12's chart and the frames it and the table read: advise_all's answers, once."""

from __future__ import annotations

import math

from kvoffload.report import advise_charts, charting
from kvoffload.studies.advise import advice_frame, speed_frame
from kvoffload.studies.advise_search import NO_OFFLOAD

BEST = {"engine": "vllm", "weights": "int4", "kv": "auto", "offload": NO_OFFLOAD,
        "tokens_per_s": 250.0, "tpot_ms": 4.0, "ttft_ms": 90.0, "gpu_bytes": 6e9, "cpu_bytes": 0,
        "command": "vllm serve m"}  # fmt: skip
FOUND = [
    {"model": "small", "context": 32768, "best": BEST, "why": ""},
    {"model": "mid", "context": 32768,
     "best": {**BEST, "engine": "llamacpp", "offload": "-ngl 20", "tokens_per_s": 3.5}, "why": ""},
    {"model": "huge", "context": 32768, "best": None, "why": "the weights overflow host memory"},
]  # fmt: skip


def test_the_speed_frame_holds_each_model_s_rate_and_whether_it_offloads():
    f = speed_frame(FOUND)
    assert list(f["model"]) == ["small", "mid", "huge"]
    assert list(f["fits"]) == [True, True, False]
    assert list(f["offloads"]) == [False, True, False]
    assert f["tokens_per_s"][0] == 250.0 and math.isnan(f["tokens_per_s"][2])
    assert list(advice_frame(FOUND)["engine"]) == ["vllm", "llamacpp", "none fits"]


def test_the_chart_orders_fastest_first_and_names_a_model_that_does_not_fit():
    chart = advise_charts.fastest_chart(speed_frame(FOUND))
    spec = chart.to_dict()
    names = [layer for layer in spec["layer"] if layer.get("name") == "kvo_row_label"]
    assert names and names[0]["encoding"]["y"]["sort"] == ["small", "mid", "huge (nothing fits)"]
    points = spec["layer"][0]
    assert points["encoding"]["color"]["scale"]["domain"] == [
        advise_charts.WHOLE,
        advise_charts.OFFLOADED,
    ]
    assert points["encoding"]["x"]["scale"]["type"] == "log"  # 3.5 to 250 tokens/s
    assert any("nothing fits" in n for n in charting.notes(chart))
