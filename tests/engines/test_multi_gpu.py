"""Several GPUs: every engine either uses them as its source does or refuses in one line.

A two-GPU profile (two A100s on the catalog's PCIe 4.0 testbed) doubles the GPU capacity for every
engine that runs; each engine's step follows its documented rule: layers in sequence (generic,
llama.cpp, Accelerate) take one GPU's time plus a hand-over per GPU boundary; vLLM's tensor
parallel group does 1/N of each layer plus two all-reduces per layer; ZeRO-Inference runs one rank
per GPU with batch // N prompts each. InfLLM runs on one GPU and refuses.

Also here: ZeRO-Inference's host KV buffer as its transformers fork allocates it, so that the
published A6000 runs fit the host they ran on.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from kvoffload.engines import vllm_weight_offload
from kvoffload.engines.each import llamacpp, vllm, zero_inference
from kvoffload.engines.scenario import ENGINES, parse_scenario, predict
from kvoffload.inputs.precision import KvFormat
from kvoffload.model import decode, kv
from kvoffload.model.prediction import check_fits, predict_setup
from kvoffload.studies import validation

ONE = "a100-80gb-sxm-pcie4"
TWO = {"base": ONE, "gpu": {"base": "a100-80gb-sxm", "count": 2}}
MODEL = "llama-3.1-8b"


def raw(engine: str, hardware: object, *, batch: int = 2, options: dict | None = None) -> dict:
    out = {
        "hardware": hardware,
        "model": MODEL,
        "engine": engine,
        "workload": {"batch": batch, "prompt": 2048, "generate": 4},
    }
    if options:
        out["options"] = options
    return out


def both(engine: str, **kw):
    one = parse_scenario(raw(engine, ONE, **kw))
    two = parse_scenario(raw(engine, TWO, **kw))
    return one, predict(one), two, predict(two)


def p2p_s(system, nbytes: float) -> float:
    rate = min(system.link_rate("h2d"), system.link_rate("d2h"))
    return system.link.latency.value + nbytes / rate


# -- the 2-GPU profile, engine by engine ---------------------------------------------------------
REFUSED = {"infllm", "sglang", "trtllm", "ktransformers"}
RUNS = {"generic", "llamacpp", "vllm", "zero-inference", "hf-accelerate"}


def test_every_engine_is_covered():
    assert set(ENGINES) == REFUSED | RUNS | {"flexgen"}


@pytest.mark.parametrize("engine", sorted(RUNS))
def test_engines_that_run_on_two_gpus_see_twice_the_capacity(engine):
    _, p1, sc2, p2 = both(engine)
    assert sc2.system.gpu.count == 2
    assert (
        p2.to_json()["memory"]["gpu_capacity_bytes"]
        == 2 * p1.to_json()["memory"]["gpu_capacity_bytes"]
    )
    check_fits(sc2, p2.memory)


def test_generic_splits_layers_in_sequence_so_a_step_takes_one_gpus_time():
    _, p1, _, p2 = both("generic")
    assert p2.tpot_s == pytest.approx(p1.tpot_s, rel=1e-12)


def test_llamacpp_splits_layers_by_free_memory_and_hands_the_activations_over_once():
    _, p1, sc2, p2 = both("llamacpp")
    n = sc2.model.n_layers + 1  # the output layer counts, as in -ngl
    assert p1.settings["layers_per_gpu"] == [n]
    # equal free memory: splits [0.5, 1]; position il goes to upper_bound(splits, il / n)
    first = sum(il / n < 0.5 for il in range(n))
    assert p2.settings["layers_per_gpu"] == [first, n - first]
    activations = sc2.batch * sc2.model.hidden * 4  # f32
    assert p2.tpot_s - p1.tpot_s == pytest.approx(p2p_s(sc2.system, activations), rel=1e-9)
    assert float(p2.memory.gpu) == float(p1.memory.gpu)  # the same bytes, now on two GPUs


def test_llamacpp_split_follows_the_gpu_layers_only():
    sc = parse_scenario(raw("llamacpp", TWO, options={"n_gpu_layers": 10}))
    split = llamacpp.gpu_split(sc)
    assert (split[: sc.model.n_layers + 1 - 10] == -1).all()
    assert llamacpp.layers_per_gpu(sc) == [5, 5]


def test_vllm_tensor_parallel_does_half_of_each_layer_plus_two_all_reduces_per_layer():
    _, p1, sc2, p2 = both("vllm")
    s, m = sc2.system, sc2.model
    hidden = sc2.batch * m.hidden * 2
    # a ring over 2 GPUs: 2(N - 1) = 2 steps, each a latency and half the bytes
    all_reduce = 2 * s.link.latency.value + 2 * (2 - 1) / 2 * hidden / min(
        s.link_rate("h2d"), s.link_rate("d2h")
    )
    gather = p2p_s(s, (2 - 1) / 2 * sc2.batch * m.vocab * 2)
    expected = p1.tpot_s / 2 + m.n_layers * 2 * all_reduce + gather
    assert p2.tpot_s == pytest.approx(expected, rel=1e-9)
    assert p2.settings["tensor_parallel_size"] == 2
    assert p2.settings["kv_heads_per_gpu"] == m.n_kv_heads // 2
    # the same bytes, plus the share of the second GPU that gpu_memory_utilization leaves aside
    unused = 1 - sc2.options.gpu_memory_utilization
    extra = unused * (s.gpu_memory - s.gpu.memory.value)
    assert float(p2.memory.gpu) == pytest.approx(float(p1.memory.gpu) + extra, rel=1e-12)


def test_vllm_on_one_gpu_is_the_step_model():
    sc = parse_scenario(raw("vllm", ONE, options={"cpu_offload_gb": 4}))
    got = predict(sc)
    o = sc.options
    weights = decode.step_weight_bytes(sc.model, sc.setup.weights)
    off = vllm_weight_offload.offload(sc, o.cpu_offload_gb * 2**30, pinned=True)[0] / weights
    setup = decode.Setup(
        sc.system,
        sc.model,
        sc.setup.weights,
        sc.setup.kv,
        decode.Placement(weights=decode.Split(1 - off, off, 0), overlap="none"),
    )
    assert got.tpot_s == pytest.approx(predict_setup(sc, setup).tpot_s, rel=1e-12)


def test_vllm_cpu_offload_gb_is_per_gpu():
    one, p1, two, p2 = both("vllm", options={"cpu_offload_gb": 4})
    weights = decode.step_weight_bytes(one.model, one.setup.weights)
    # each GPU moves 4 GiB of its own half of every parameter: a share of its half, not of all
    for sc, p, n in ((one, p1, 1), (two, p2, 2)):
        moved, _ = vllm_weight_offload.offload(sc, 4 * 2**30, pinned=True)
        assert p.settings["weights_on_host_share"] == pytest.approx(moved / (weights / n))
    assert p2.settings["weights_on_host_share"] > 1.9 * p1.settings["weights_on_host_share"]


def test_vllm_replicates_kv_heads_when_gpus_outnumber_them():
    hw = {"base": ONE, "gpu": {"base": "a100-80gb-sxm", "count": 16}}
    sc = parse_scenario({**raw("vllm", hw), "model": "llama-3-8b"})
    assert vllm.kv_heads_per_gpu(sc.model, 16) == 1  # 8 KV heads, 16 GPUs: one each, twice
    final = sc.prompt + sc.generate
    one_gpu = parse_scenario({**raw("vllm", ONE), "model": "llama-3-8b"})
    kv_one = float(kv.batch_bytes(sc.model, final, sc.batch, sc.setup.kv))
    gap = float(predict(sc).memory.gpu) - float(predict(one_gpu).memory.gpu)
    unused = (1 - sc.options.gpu_memory_utilization) * (
        sc.system.gpu_memory - one_gpu.system.gpu_memory
    )
    assert gap - unused == pytest.approx(kv_one, rel=1e-9)  # the cache is held twice


def test_vllm_refuses_a_split_it_cannot_make(tmp_path):
    hw = {"base": ONE, "gpu": {"base": "a100-80gb-sxm", "count": 3}}
    _refused(tmp_path, raw("vllm", hw), "tensor_parallel_size = 3")


def test_accelerate_runs_layers_in_sequence_with_a_hand_over_per_boundary():
    sc1, p1, sc2, p2 = both("hf-accelerate", options={"weights": "gpu"})
    assert p1.settings["layers_per_gpu"] == [sc1.model.n_layers]
    per_gpu = p2.settings["layers_per_gpu"]
    assert sum(per_gpu) == sc2.model.n_layers and min(per_gpu) > 0
    assert p2.settings["embedding_on"] == "gpu0" and p2.settings["head_on"] == "gpu1"
    hidden = sc2.batch * sc2.model.hidden * 2
    logits = sc2.batch * sc2.model.vocab * 2  # io_same_device: back to the input's GPU
    expected = p1.tpot_s + p2p_s(sc2.system, hidden) + p2p_s(sc2.system, logits)
    assert p2.tpot_s == pytest.approx(expected, rel=1e-9)
    assert p2.settings["gpu_hand_overs_per_step"] == 2


def test_zero_inference_runs_one_rank_per_gpu_with_half_the_prompts():
    _, p1, sc2, p2 = both("zero-inference", batch=4)
    assert p2.settings["ranks"] == 2 and p2.settings["prompts_per_rank"] == 2
    assert p2.scenario.batch == 4  # throughput counts every rank's prompts
    # each rank copies half of every layer in and all-gathers the other half
    lay = decode.layers(sc2.model, sc2.setup.weights)
    gathers = sum(
        c * p2p_s(sc2.system, b / 2) for c, b in zip(lay.count, lay.weight_bytes, strict=True)
    )
    assert p2.streams_s["h2d"] == pytest.approx(
        p1.streams_s["h2d"] / 2 + gathers, rel=0.01
    )  # latencies counted per copy either way


def test_zero_inference_refuses_fewer_prompts_than_gpus(tmp_path):
    _refused(tmp_path, raw("zero-inference", TWO, batch=1), "workload.batch")


def test_infllm_refuses_several_gpus_in_one_line(tmp_path):
    _refused(tmp_path, raw("infllm", TWO), "hardware.gpu.count")


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_sglang_and_trtllm_refuse_several_gpus_in_one_line(tmp_path, engine):
    _refused(tmp_path, raw(engine, TWO), "hardware.gpu.count")


def test_flexgen_refuses_several_gpus_in_one_line(tmp_path):
    _refused(tmp_path, raw("flexgen", TWO), "hardware.gpu.count")


def _refused(tmp_path, scenario: dict, fragment: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario))
    run = subprocess.run(
        [sys.executable, "-m", "kvoffload", "predict", str(path), "--json"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2, run.stdout
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert fragment in lines[0], lines[0]


# -- ZeRO-Inference's host KV buffer ------------------------------------------------------------
A6000_KV_ROWS = ("z-13", "z-14", "z-15")


@pytest.mark.parametrize("row_id", A6000_KV_ROWS)
def test_published_llama_2_70b_runs_fit_the_host_they_ran_on(row_id):
    row = next(r for r in validation.rows() if r["id"] == row_id)
    sc = parse_scenario(validation.scenario_of(row), name=row_id)
    check_fits(sc, predict(sc, check=False).memory, row_id)


def test_every_published_zero_inference_row_fits():
    for row in validation.rows():
        if row["engine"] == "zero-inference":
            sc = parse_scenario(validation.scenario_of(row), name=row["id"])
            check_fits(sc, predict(sc, check=False).memory, row["id"])


def zero(model: str, kv_offload: bool, batch: int = 8):
    return parse_scenario(
        {
            "hardware": "a6000-lambda",
            "model": model,
            "engine": "zero-inference",
            "precision": {"weights": "fp16", "kv": "fp16"},
            "workload": {"batch": batch, "prompt": 512, "generate": 32},
            "options": {"weights": "cpu", "kv_offload": kv_offload},
        }
    )


@pytest.mark.parametrize(
    ("model", "heads", "value_bytes"),
    [("llama-2-70b", "kv", 4), ("opt-30b", "all", 4), ("bloom-176b", "all", 2)],
)
def test_zero_host_cache_is_the_forks_buffer(model, heads, value_bytes):
    # llama: [layers, 2, batch, num_key_value_heads, max_len, head_dim] in torch's default fp32;
    # opt: the same with num_heads; bloom: keys and values apart in the activations' dtype
    on, off = zero(model, True), zero(model, False)
    m = on.model
    h = m.n_kv_heads if heads == "kv" else m.n_heads
    max_len = 512 + 32 - 1
    buffer = m.n_layers * 2 * 8 * h * max_len * m.head_dim * value_bytes
    gap = float(predict(on, check=False).memory.cpu) - float(predict(off, check=False).memory.cpu)
    assert gap == pytest.approx(buffer, rel=1e-12)
    assert predict(on, check=False).settings["offloaded_kv_bytes"] == pytest.approx(buffer)


def _zero_cpu_setup(sc, passes: float) -> decode.Setup:
    """Return ZeRO-Inference's KV-offload setup as written out by hand, with ``passes``."""
    placement = decode.Placement(
        weights=decode.Split(0, 1, 0),
        kv=decode.Split(0, 1, 0),
        attention="cpu",
        overlap="pipeline",
        pinned=sc.options.pinned,
    )
    m = sc.model
    return decode.Setup(
        sc.system, m, sc.setup.weights, KvFormat.FP16, placement, m.n_heads, cpu_kv_passes=passes
    )


def test_zero_kv_offload_timing_still_reads_the_expanded_heads():
    # the fork's CPU attention expands grouped heads (repeat_kv, a copy) before its matmuls
    sc = zero("llama-2-70b", True)
    m = sc.model
    passes = 2 + m.n_kv_heads / m.n_heads  # read grouped, write expanded, the matmuls' read
    assert predict(sc, check=False).tpot_s == pytest.approx(
        predict_setup(sc, _zero_cpu_setup(sc, passes)).tpot_s, rel=1e-12
    )


@pytest.mark.parametrize(("model", "passes"), [("llama-2-70b", 2 + 8 / 64), ("opt-30b", 1.0)])
def test_zero_cpu_attention_pays_for_the_forks_head_expansion(model, passes):
    sc = zero(model, True)
    assert zero_inference.cpu_kv_passes(sc) == passes
    assert zero_inference.cpu_kv_passes(zero(model, False)) == passes  # the model's, asked alone
    expanded = predict_setup(sc, _zero_cpu_setup(sc, passes)).streams_s["cpu"]
    plain = predict_setup(sc, _zero_cpu_setup(sc, 1.0)).streams_s["cpu"]
    assert expanded == pytest.approx(passes * plain, rel=1e-12) and plain > 0


def test_zero_kv_offload_exists_only_for_the_forks_models(tmp_path):
    scenario = {
        "hardware": ONE,
        "model": "qwen2.5-7b",
        "engine": "zero-inference",
        "workload": {"batch": 1, "prompt": 512},
        "options": {"kv_offload": True},
    }
    _refused(tmp_path, scenario, "options.kv_offload")


def test_offloaded_kv_bytes_scales_with_the_batch():
    sc = zero("llama-2-70b", True, batch=8)
    assert zero_inference.offloaded_kv_bytes(sc, 16) == 2 * zero_inference.offloaded_kv_bytes(sc, 8)


def test_vllm_leaves_aside_what_gpu_memory_utilization_does_not_give_it():
    base = raw("vllm", ONE)
    full = predict(parse_scenario({**base, "options": {"gpu_memory_utilization": 1.0}}))
    default = predict(parse_scenario(base))
    sc = parse_scenario(base)
    assert float(default.memory.gpu) - float(full.memory.gpu) == pytest.approx(
        0.1 * sc.system.gpu_memory, rel=1e-12
    )
