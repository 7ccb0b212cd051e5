"""KTransformers inside SGLang (kt-kernel): options as SGLang takes them, experts split by the GPU
count, deferral that only overlaps, pools that split the experts, prefill hybrid or by layer."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.engines.each.ktransformers import cpu_kernels
from kvoffload.engines.each.ktransformers import sglang as kts
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.precision import WeightFormat
from kvoffload.model import kv, tensor_groups

BASE = {
    "hardware": "rtx-4090-2s-xeon-6454s",
    "model": "qwen3-30b-a3b",
    "precision": {"weights": "bf16", "kv": "bf16"},
    "engine": "ktransformers",
    "workload": {"batch": 1, "prompt": 969, "generate": 64},
}
# the kt-kernel README's AMXINT8 launch on this machine (Complete Example, Option B)
README = {
    "kt_method": "AMXINT8",
    "kt_cpuinfer": 64,
    "kt_threadpool_count": 2,
    "kt_num_gpu_experts": 32,
    "kt_max_deferred_experts_per_token": 2,
}


def _sc(options: dict, hardware: str | None = None, weights: str = "bf16", **workload: int):
    raw = {
        **BASE,
        "options": options,
        "precision": {"weights": weights, "kv": "bf16"},
        "workload": {**BASE["workload"], **workload},
    }
    if hardware:
        raw["hardware"] = hardware
    return parse_scenario(raw, name="kt-sglang")


@pytest.mark.parametrize(
    ("options", "weights", "field"),
    [
        ({**README, "kt_method": "AMXINT2"}, "bf16", "kt_method"),
        ({**README, "kt_num_gpu_experts": 129}, "bf16", "kt_num_gpu_experts"),
        ({**README, "kt_max_deferred_experts_per_token": 9}, "bf16", "kt_max_deferred"),
        ({**README, "optimize_config_path": "Qwen3Moe-serve.yaml"}, "bf16", "optimize_config_path"),
        ({**README, "use_numa": True}, "bf16", "use_numa"),
        ({k: v for k, v in README.items() if k != "kt_num_gpu_experts"}, "bf16", "kt_num_gpu"),
        ({**README, "kt_method": "LLAMAFILE"}, "bf16", "precision.weights"),
        ({**README, "kt_method": "AMXINT8"}, "q4_k_m", "precision.weights"),
        ({**README, "kt_gpu_experts_ratio": 1.5}, "bf16", "kt_gpu_experts_ratio"),
        ({**README, "kt_cpuinfer": 0}, "bf16", "kt_cpuinfer"),
    ],
)
def test_bad_options_are_refused_in_one_line_naming_the_field(options, weights, field):
    with pytest.raises(InputError) as e:
        predict(_sc(options, weights=weights))
    assert field in str(e.value) and "\n" not in str(e.value)


def test_amx_methods_are_refused_on_a_host_without_amx():
    with pytest.raises(InputError) as e:
        predict(_sc(README, hardware="rtx-4090-desktop"))
    assert "kt_method" in str(e.value) and "amx: false" in str(e.value)
    # the native BF16 backend runs there
    assert predict(_sc({**README, "kt_method": "BF16"}, hardware="rtx-4090-desktop")).tpot_s > 0


def test_a_model_without_routed_experts_is_refused():
    raw = {**BASE, "model": "llama-3.1-8b", "options": README}
    with pytest.raises(InputError) as e:
        predict(parse_scenario(raw, name="dense"))
    assert "routed experts" in str(e.value)


def test_kt_options_select_sglang_and_the_rest_the_single_request_engine():
    assert predict(_sc(README)).settings["server"] == "sglang"
    archive = {**BASE, "options": {"optimize_config_path": "Qwen3Moe-serve.yaml"}}
    archive["precision"] = {"weights": "q4_k_m", "kv": "bf16"}
    assert "server" not in predict(parse_scenario(archive, name="local")).settings


def test_the_experts_split_between_gpu_and_host_and_their_bytes_add_up():
    """BF16 on both sides: the GPU holds the rest, its g experts a layer and the KV cache, the
    host the other experts, every routed byte once (fit or not: the split is what is asked)."""
    sc = _sc(README)
    table = tensor_groups.tensor_table(sc.model, sc.setup.weights)
    experts = float(table.nbytes[table.routed].sum())
    rest = float(table.nbytes[~table.routed].sum())
    cache = float(kv.layer_bytes(sc.setup.cache_model, sc.prompt + sc.generate, sc.setup.kv).sum())
    for g in (0, 32, 96, 128):
        p = predict(_sc({**README, "kt_method": "BF16", "kt_num_gpu_experts": g}), check=False)
        assert float(p.memory.cpu) == pytest.approx(experts * (128 - g) / 128, rel=1e-9, abs=1)
        assert float(p.memory.gpu) == pytest.approx(rest + experts * g / 128 + cache, rel=1e-9)


def test_more_gpu_experts_never_slow_decode_and_all_on_the_gpu_leaves_the_cpu_idle():
    """On an 80 GB H100 (a Sapphire Rapids host) the bf16 model fits whole."""
    opts = [{**README, "kt_num_gpu_experts": g} for g in (0, 32, 64, 128)]
    times = [predict(_sc(o, hardware="h100-sxm-pcie5")).tpot_s for o in opts]
    assert all(a >= b for a, b in itertools.pairwise(times)) and times[0] > times[-1]
    assert predict(_sc(opts[-1], hardware="h100-sxm-pcie5")).streams_s["cpu"] == 0


def test_the_ratio_places_its_share_of_every_layer_s_experts():
    by_count = predict(_sc({**README, "kt_num_gpu_experts": 32}))
    by_ratio = predict(_sc({**README, "kt_num_gpu_experts": None, "kt_gpu_experts_ratio": 0.25}))
    assert by_ratio.tpot_s == pytest.approx(by_count.tpot_s)
    assert by_ratio.settings["gpu_experts_per_layer"] == 32


@settings(max_examples=25, deadline=None)
@given(
    d=st.integers(0, 8),
    g=st.integers(0, 128),
    context=st.integers(16, 32768),
    batch=st.integers(1, 8),
)
def test_deferring_experts_only_overlaps_and_never_beats_the_cpu_alone(d, g, context, batch):
    """Deferral is never slower than none, and no token beats its CPU experts' own time and
    the link's (the timing holds whether or not the GPU holds it all)."""
    opts = {**README, "kt_num_gpu_experts": g}
    none = predict(
        _sc({**opts, "kt_max_deferred_experts_per_token": 0}, prompt=context, batch=batch),
        check=False,
    )
    some = predict(
        _sc({**opts, "kt_max_deferred_experts_per_token": d}, prompt=context, batch=batch),
        check=False,
    )
    assert some.tpot_s <= none.tpot_s * (1 + 1e-12)
    assert some.tpot_s >= (some.streams_s["cpu"] + some.streams_s["h2d"]) * (1 - 1e-12)


def test_the_steady_state_of_a_deferred_layer_is_the_cpu_where_the_cpu_is_slowest():
    """All experts on the CPU at batch 1: without deferral a layer is A + h + C, with all k
    deferred it is max(C, A + h) = C, so the token is faster by the GPU's part of the MoE layers
    and the submit's round trip (h), all but the last, which defers none. The 48 layers are
    alike, so each one's GPU part is the step's less the output layer's, over 48: the saving is
    that arithmetic, to rounding."""
    opts = {**README, "kt_num_gpu_experts": 0}
    none = predict(_sc({**opts, "kt_max_deferred_experts_per_token": 0}))
    every = predict(_sc({**opts, "kt_max_deferred_experts_per_token": 8}))
    assert every.tpot_s < none.tpot_s
    sc = _sc(opts)
    p = kts._parts(sc)
    head = p["table"].by_position(p["table"].nbytes, ~p["routed"])[-1]
    layers_gpu = none.streams_s["gpu"] - head / sc.system.gpu.streaming_bandwidth
    # the last MoE layer defers none: the saving is the GPU's time of the 47 others and the
    # submit's round trip before each of them
    saving = (layers_gpu / 48 + kts.host_func_s()) * 47
    assert none.tpot_s - every.tpot_s == pytest.approx(saving, rel=1e-9)


@settings(max_examples=25, deadline=None)
# the prompt up to Qwen3-30B-A3B's 40,960 positions less the 64 generated and the 4,096 more
@given(context=st.integers(1, 36800), batch=st.integers(1, 16), more=st.integers(1, 4096))
def test_decode_never_speeds_up_with_context_or_batch(context, batch, more):
    def tpot(prompt: int, b: int) -> float:
        return predict(_sc(README, prompt=prompt, batch=b), check=False).tpot_s

    base = tpot(context, batch)
    assert tpot(context + more, batch) >= base * (1 - 1e-12)
    assert tpot(context, batch + 1) >= base * (1 - 1e-12)


def test_two_pools_on_two_sockets_stream_faster_than_one_and_hold_one_copy():
    one = predict(_sc({**README, "kt_threadpool_count": 1, "kt_num_gpu_experts": 0}))
    two = predict(_sc({**README, "kt_threadpool_count": 2, "kt_num_gpu_experts": 0}))
    assert two.tpot_s < one.tpot_s
    assert float(two.memory.cpu) == pytest.approx(float(one.memory.cpu))  # split, not copied


def test_the_cpu_experts_read_in_the_method_s_format():
    sc = _sc({**README, "kt_num_gpu_experts": 0})
    int8 = predict(sc)
    bf16 = predict(_sc({**README, "kt_method": "BF16", "kt_num_gpu_experts": 0}))
    for p, fmt in ((int8, WeightFormat.INT8), (bf16, WeightFormat.BF16)):
        table = tensor_groups.tensor_table(sc.model, fmt)
        assert float(p.memory.cpu) == pytest.approx(float(table.nbytes[table.routed].sum()))
    llamafile = predict(
        _sc({**README, "kt_method": "LLAMAFILE", "kt_num_gpu_experts": 0}, weights="q4_k_m")
    )
    assert float(llamafile.memory.cpu) < float(int8.memory.cpu)
    # beside a GGUF's experts the GPU model is the original bf16 checkpoint
    assert kts.gpu_format(_sc({**README, "kt_method": "LLAMAFILE"}, weights="q4_k_m")).value == (
        "bf16"
    )


@pytest.mark.parametrize(
    ("hardware", "chunk"), [("rtx-4090-2s-xeon-6454s", 2048), ("h100-sxm-pcie5", 8192)]
)
def test_the_prefill_chunk_defaults_by_gpu_memory_as_sglang_sets_it(hardware, chunk):
    opts = {**README, "kt_method": "BF16"}
    assert kts.chunk_size(_sc(opts, hardware=hardware)) == chunk


def test_a_chunk_at_the_threshold_uploads_the_cpu_experts_layer_by_layer():
    """Native BF16, 8,192-token chunks: at a threshold of 4,096 each layer's CPU experts cross
    the link once and the GPU computes every expert, so with all experts on the CPU the prefill
    takes exactly their upload longer than with all of them on the GPU (an 80 GB H100 holds
    both); a threshold the chunk does not reach leaves the prefill hybrid, as with none."""
    opts = {**README, "kt_method": "BF16", "chunked_prefill_size": 8192}
    at = {**opts, "kt_gpu_prefill_token_threshold": 4096}
    sc = _sc({**at, "kt_num_gpu_experts": 0}, hardware="h100-sxm-pcie5", prompt=8192)
    layerwise = predict(sc)
    all_gpu = predict(
        _sc({**at, "kt_num_gpu_experts": 128}, hardware="h100-sxm-pcie5", prompt=8192)
    )
    upload = float(layerwise.memory.cpu) / sc.system.copy_rate("h2d", pinned=True)
    assert layerwise.ttft_s - all_gpu.ttft_s == pytest.approx(upload, rel=1e-9)
    opts = {**opts, "kt_num_gpu_experts": 0}
    hybrid = predict(_sc({**opts, "kt_gpu_prefill_token_threshold": 16384}, prompt=8192))
    assert hybrid.ttft_s == predict(_sc(opts, prompt=8192)).ttft_s
    assert hybrid.ttft_s != predict(_sc({**opts, **at}, prompt=8192)).ttft_s
    # a quantised AMX method has no GPU layout of its experts: the threshold does not apply
    amx = {**opts, "kt_method": "AMXINT8"}
    with_t = predict(_sc({**amx, "kt_gpu_prefill_token_threshold": 4096}, prompt=8192))
    without = predict(_sc(amx, prompt=8192))
    assert with_t.ttft_s == without.ttft_s


def test_prefill_on_the_cpu_is_bounded_by_the_amx_tile_rate():
    sc = _sc({**README, "kt_num_gpu_experts": 0}, prompt=2048)
    per_core = cpu_kernels.constant("amx_int8_per_core") * 1e9
    rate = kts.compute_rate(sc, tokens_per_expert=2048 * 8 / 128)
    assert rate <= per_core * 64 * (1 + 1e-12)
    assert kts.compute_rate(sc, tokens_per_expert=2) == sc.system.host.flops.value


@pytest.mark.parametrize("method", ["FP8", "FP8_PERCHANNEL"])
def test_fp8_experts_prefill_on_the_vector_units_even_where_the_host_has_amx(method):
    """kt-kernel's FP8 kernels call the AVX512-BF16 path at every batch size; BF16 takes the
    tiles past 4 tokens an expert."""
    options = {**README, "kt_method": method}
    sc = _sc(options, weights="fp8", prompt=8192)
    assert sc.system.host.amx
    tokens = 8192 * 8 / 128
    host = sc.system.host
    every_core = host.flops.value * 64 / (host.performance_cores or host.cores)
    assert kts.compute_rate(sc, tokens_per_expert=tokens) == pytest.approx(every_core, rel=1e-12)
    bf16 = _sc({**README, "kt_method": "BF16"}, prompt=8192)
    per_core = cpu_kernels.constant("amx_bf16_per_core") * 1e9
    tiles = kts.compute_rate(bf16, tokens_per_expert=tokens)
    assert tiles == pytest.approx(
        per_core * 64 * cpu_kernels.socket_scale(host, 64, kts.numa(bf16))[1]
    )
    assert kts.compute_rate(bf16, tokens_per_expert=4) == kts.compute_rate(sc, tokens_per_expert=4)


def test_each_moe_layer_waits_on_its_submit_and_sync_callbacks(monkeypatch):
    """Two host callbacks a MoE layer: the sync's always on the token's path, the submit's
    where the CPU's work is on it; with none the token is faster by between one and two each."""
    sc = _sc({**README, "kt_num_gpu_experts": 0})
    with_h = predict(sc).tpot_s
    monkeypatch.setattr(kts, "host_func_s", lambda: 0.0)
    without = predict(sc).tpot_s
    layers = kts._parts(sc)["moe_layers"]
    h = 26e-6  # copy.host_func_us
    assert layers * h * (1 - 1e-9) <= with_h - without <= 2 * layers * h * (1 + 1e-9)


def test_the_callback_cost_is_the_published_round_trip():
    assert kts.host_func_s() == pytest.approx(26e-6)


def test_pools_are_refused_where_kt_kernel_cannot_split_the_experts_over_them():
    """TP_MOE_Common splits each expert's intermediate dimension over the pools: Qwen3-30B-A3B's
    768 values split over 2 or 3 pools, not 5; LLAMAFILE needs whole 256-value blocks, three of
    them here, so at most 3 pools; and a pool needs at least one thread."""
    assert predict(_sc({**README, "kt_threadpool_count": 3})).tpot_s > 0
    for opts, weights in (
        ({**README, "kt_threadpool_count": 5}, "bf16"),
        ({**README, "kt_method": "LLAMAFILE", "kt_threadpool_count": 4}, "q4_k_m"),
        ({**README, "kt_cpuinfer": 2, "kt_threadpool_count": 3}, "bf16"),
    ):
        with pytest.raises(InputError) as e:
            predict(_sc(opts, weights=weights))
        assert "kt_threadpool_count" in str(e.value) and "\n" not in str(e.value)
