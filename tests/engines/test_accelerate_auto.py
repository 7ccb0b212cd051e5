"""HF Accelerate's ``weights: auto``: device_map="auto" as accelerate and transformers build it.

The fill is held to a hand trace of accelerate's ``infer_auto_device_map`` (GPUs in order, then
cpu, then disk; GPU 0 and cpu keep room for the largest layer still to place), the limits to
``get_balanced_memory`` (90% of a lone GPU when the user gives no max_memory; on several GPUs all
but the last hold at most total // n + 1.25 x the first decoder layer), and the step to the step
model run with the shares the map gives.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from kvoffload.engines.each import hf_accelerate
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.model import kv

ONE = "a100-80gb-sxm-pcie4"
TWO = {"base": ONE, "gpu": {"base": "a100-80gb-sxm", "count": 2}}
GiB = 2**30


def scenario(options: dict, *, hardware: object = ONE, model: str = "llama-2-70b"):
    return parse_scenario(
        {
            "hardware": hardware,
            "model": model,
            "engine": "hf-accelerate",
            "workload": {"batch": 1, "prompt": 1024, "generate": 4},
            "options": options,
        }
    )


# -- the fill, against a hand trace -----------------------------------------------------------
def test_fill_follows_accelerates_order_and_keeps_room_for_the_largest_layer():
    # embedding 1, four layers of 2, head 1; GPU 0 holds 6, host 5, disk the rest.
    # GPU 0: room 6 - 2 = 4: embedding (1), layer 0 (3), layer 1 would make 5 -> next device;
    # cpu: room 5 - 2 = 3: layer 1 (2), layer 2 would make 4 -> disk: layers 2, 3 and the head
    sizes = (1.0, 2.0, 2.0, 2.0, 2.0, 1.0)
    got = hf_accelerate.infer_auto_device_map(sizes, {0: 6.0, "cpu": 5.0})
    assert got == [0, 0, "cpu", "disk", "disk", "disk"]


def test_fill_releases_the_reserve_once_the_largest_layers_are_placed():
    # the reserve follows the largest layer still to place: with the big one gone, the last
    # small ones fit where it did not
    sizes = (1.0, 3.0, 1.0, 1.0)
    assert hf_accelerate.infer_auto_device_map(sizes, {0: 6.0, "cpu": 0.0}) == [0, 0, 0, 0]
    # 1 + 3 fit under 6 - 3; then the reserve is 1: 4 + 1 <= 5, 5 + 1 <= 5 fails
    assert hf_accelerate.infer_auto_device_map((1.0, 3.0, 1.0, 1.0, 1.0), {0: 6.0}) == [
        0,
        0,
        0,
        "disk",
        "disk",
    ]


def test_second_gpu_keeps_no_reserve():
    # only GPU 0 and the host are main devices
    got = hf_accelerate.infer_auto_device_map((2.0, 2.0, 2.0), {0: 4.0, 1: 4.0, "cpu": 0.0})
    assert got == [0, 1, 1]


# -- the limits ---------------------------------------------------------------------------------
def test_a_lone_gpu_gives_ninety_percent_unless_max_memory_is_given():
    sc = scenario({"weights": "auto"})
    got = predict(sc, check=False).settings["max_memory_bytes"]
    assert got["gpu0"] == pytest.approx(0.9 * sc.system.gpu.memory.value)
    assert got["cpu"] == sc.system.host_memory
    given = predict(
        scenario({"weights": "auto", "max_memory": {"gpu": "20 GiB", "cpu": "60 GiB"}}),
        check=False,
    ).settings["max_memory_bytes"]
    assert given == {"gpu0": 20 * GiB, "cpu": 60 * GiB}


def test_several_gpus_are_balanced_and_the_last_keeps_all_of_its_memory():
    sc = scenario({"weights": "auto"}, hardware=TWO)
    pred = predict(sc, check=False)
    sizes, _ = hf_accelerate.units(sc.model, sc.setup.weights)
    per_gpu = sum(sizes) // 2 + int(1.25 * sizes[1])
    mm = pred.settings["max_memory_bytes"]
    assert mm["gpu0"] == per_gpu
    assert mm["gpu1"] == sc.system.gpu.memory.value
    assert pred.settings["layers_per_gpu"] == [40, 40]
    assert pred.settings["layers_on_cpu"] == 0


def test_max_memory_fills_each_tier_in_order_within_its_limit():
    sc = scenario({"weights": "auto", "max_memory": {"gpu": "20 GiB", "cpu": "60 GiB"}})
    pred = predict(sc, check=False)
    s = pred.settings
    n = sc.model.n_layers
    assert s["layers_per_gpu"][0] + s["layers_on_cpu"] + s["layers_on_disk"] == n
    assert s["layers_per_gpu"][0] > 0 and s["layers_on_cpu"] > 0 and s["layers_on_disk"] > 0
    sizes, _ = hf_accelerate.units(sc.model, sc.setup.weights)
    dm = hf_accelerate.device_map(sc)
    largest = max(sizes)
    assert dm.bytes_on("gpu") <= 20 * GiB - largest
    assert dm.bytes_on("cpu") <= 60 * GiB - largest
    order = {0: 0, "cpu": 1, "disk": 2}
    ranks = [order[d] for d in dm.devices]
    assert ranks == sorted(ranks)  # never back to an earlier device


# -- time and memory ----------------------------------------------------------------------------
def test_step_is_the_step_model_with_the_maps_shares():
    sc = scenario({"weights": "auto", "max_memory": {"gpu": "40 GiB"}})
    pred = predict(sc, check=False)
    w = pred.to_json()["placement"]["weights"]
    assert 0 < w["gpu"] < 1 and w["cpu"] == 0 and w["disk"] > 0  # no cpu: straight to disk
    generic = parse_scenario(
        {
            "hardware": ONE,
            "model": "llama-2-70b",
            "workload": {"batch": 1, "prompt": 1024, "generate": 4},
            "placement": {"weights": w, "kv": {"gpu": 1.0}},
            "pinned": False,
        }
    )
    assert pred.tpot_s == pytest.approx(predict(generic, check=False).tpot_s, rel=1e-9)


def test_memory_counts_whole_layers_and_room_for_the_largest_offloaded_one():
    sc = scenario({"weights": "auto", "max_memory": {"gpu": "20 GiB", "cpu": "60 GiB"}})
    pred = predict(sc, check=False)
    dm = hf_accelerate.device_map(sc)
    final = sc.prompt + sc.generate
    kv_all = float(kv.batch_bytes(sc.model, final, sc.batch, sc.setup.kv))
    assert float(pred.memory.gpu) == pytest.approx(
        dm.bytes_on("gpu") + kv_all + dm.largest_offloaded()
    )
    assert float(pred.memory.cpu) == dm.bytes_on("cpu")
    assert float(pred.memory.disk) == dm.bytes_on("disk")
    total = dm.bytes_on("gpu") + dm.bytes_on("cpu") + dm.bytes_on("disk")
    assert total == sum(hf_accelerate.units(sc.model, sc.setup.weights)[0])


def test_a_model_that_fits_stays_on_the_gpu():
    pred = predict(scenario({"weights": "auto"}, model="llama-3.1-8b"))
    assert pred.to_json()["placement"]["weights"]["gpu"] == 1.0
    gpu = predict(scenario({"weights": "gpu"}, model="llama-3.1-8b"))
    assert pred.tpot_s == gpu.tpot_s


def test_offloaded_layers_run_on_gpu_zero():
    # two GPUs full, the rest on the host: after GPU 1 the offloaded layers run on GPU 0 again
    sc = scenario({"weights": "auto", "max_memory": {"gpu": "30 GiB"}}, hardware=TWO)
    dm = hf_accelerate.device_map(sc)
    assert dm.execution[-1] == 0 and 1 in dm.execution
    boundaries, logits_back = dm.hand_overs()
    assert boundaries == 2 and not logits_back


# -- one-line refusals --------------------------------------------------------------------------
BAD = {
    "max_memory without auto": (
        {"weights": "cpu", "max_memory": {"gpu": "20 GiB"}},
        "options: max_memory applies only with weights: auto",
    ),
    "a bandwidth": (
        {"weights": "auto", "max_memory": {"gpu": "20 GB/s"}},
        "options.max_memory.gpu: '20 GB/s' is a bandwidth",
    ),
    "no unit": ({"weights": "auto", "max_memory": {"cpu": 60}}, "options.max_memory.cpu"),
    "unknown tier": ({"weights": "auto", "max_memory": {"nvme": "1 TB"}}, "max_memory.nvme"),
    "no gpu named": (
        {"weights": "auto", "max_memory": {"cpu": "60 GiB"}},
        "options.max_memory: the auto device map puts no layer on a GPU",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_max_memory_exits_2_in_one_line(tmp_path, case):
    options, fragment = BAD[case]
    path = tmp_path / "s.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "hardware": ONE,
                "model": "llama-2-70b",
                "engine": "hf-accelerate",
                "workload": {"batch": 1, "prompt": 1024},
                "options": options,
            }
        )
    )
    run = subprocess.run(
        [sys.executable, "-m", "kvoffload", "predict", str(path)], capture_output=True, text=True
    )
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert fragment in lines[0], lines[0]
