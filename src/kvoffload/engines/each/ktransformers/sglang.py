"""KTransformers inside SGLang: kt-kernel's CPU experts beside SGLang's GPU model (``--kt-*``).

KTransformers' current engine is kt-kernel, loaded by the kvcache-ai fork of SGLang
(``python -m sglang.launch_server … --kt-method … --kt-num-gpu-experts …``). Read in
kvcache-ai/sglang at 04653fa88 (python/sglang/srt/layers/moe/kt_ep_wrapper.py, server_args.py) and
kvcache-ai/ktransformers at 95009ea6 (kt-kernel/python/experts_base.py, kt-kernel/operators/
moe-tp.hpp, kt-kernel/README.md):

- **Placement.** ``--kt-num-gpu-experts`` experts of every MoE layer stay on the GPU (per layer,
  "internally multiplied by the number of MoE layers"; ``--kt-gpu-experts-ratio`` gives a share
  of all of them instead); the rest live in host memory and run on the CPU in the format
  ``--kt-method`` names (``AMXINT8``/``AMXINT4``: converted from the checkpoint; ``BF16``,
  ``FP8``, ``RAWINT4``: the checkpoint's own; ``LLAMAFILE``: a GGUF's). Attention, dense layers
  and shared experts are SGLang's, on the GPU, in the checkpoint's format. With neither option
  SGLang runs without KTransformers (``_init_kt_gpu_experts_masks`` returns None).
- **Decode, one MoE layer** (``KTEPWrapperMethod.apply``, ``BaseMoEWrapper.submit_forward``): the
  CPU experts are submitted first, the GPU computes its own experts (and the shared ones) in the
  meantime, then waits for the CPU. ``--kt-max-deferred-experts-per-token d`` moves the ``d``
  lowest-scoring of each token's ``k`` experts to a second CPU task whose output the next layer
  takes (``allow_pending``), so the CPU keeps working through that layer's attention; the last
  MoE layer defers none. With the GPU's time before the submit ``A`` (attention, norms, router),
  after it ``P`` (its experts), and the CPU's ``C`` for the touched CPU experts, a layer takes
  ``A + max(P, C)`` without deferral and, in the steady state, ``max(C, A + C (k - d) / k,
  A + P)`` with it. The submit and the sync are host callbacks on the stream
  (``cudaLaunchHostFunc`` in ``CPUInfer::submit_with_cuda_stream`` / ``sync_with_cuda_stream``,
  kt-kernel/cpu_backend/cpuinfer.h), each a CPU round trip the stream waits on
  (``copy.host_func_us``, measured elsewhere): the submit's before the CPU starts, the sync's
  after it, beside the hidden state's copies each way.
- **The CPU.** ``--kt-cpuinfer`` threads in ``--kt-threadpool-count`` pools (default 2), one per
  NUMA node; every expert's intermediate dimension is split across the pools
  (``TP_MOE_Common``), so each socket streams its own slice from local DRAM and no copy is made.
  One pool on a host of several sockets runs on node 0 alone (``subpool_numa_map`` defaults to
  ``range(threadpool_count)``): one socket's cores and memory.
  The kernels' rates are the archived engine's (engines/each/ktransformers.py): llamafile's
  fitted share and per-core rate, AMX's published int8 / bf16 tile rates (BF16 on the tiles
  past 4 tokens an expert; FP8 and FP8_PERCHANNEL never on them: their kernels are AVX512-BF16
  at every batch size), the llama.cpp matvec rate for the other decode kernels, each socket
  after the first adding ``numa_socket_share`` of one for llamafile (fitted on ``USE_NUMA``'s
  copies, assumed for the split).
- **Prefill** in chunks of ``--chunked-prefill-size`` (SGLang's default by GPU memory). A chunk
  below ``--kt-gpu-prefill-token-threshold`` runs hybrid as decode does, the CPU experts at the
  kernel's prefill rate. At or above it, for the native methods (README: the threshold is
  "only applicable" to them), every MoE layer writes its CPU experts into pinned buffers and
  copies them to the GPU, then computes the whole layer there (``SharedFullContext.load``,
  synchronised before the compute): the layer's CPU-expert bytes over the link, then the GPU.

Not yet validated. Predicted at first sight on 2026-12-02 against two published kt-kernel sets on
an RTX 5090 beside two EPYC 9355 (catalog system rtx-5090-2s-epyc-9355, its bandwidth assumed):
Qwen3-Coder-Next FP8 (doc/en/kt-kernel/Qwen3-Coder-Next-Tutorial.md, its FP8 launch command) and
Qwen3-30B-A3B BF16 (issue #1914, 16 threads in one pool, AVX2 kernels), decode came out 2.0 to 4.6
times faster than measured, with a gap of about 200 µs per MoE layer on both. The host callbacks
above, read in the source afterwards and costed from another measurement, take it to 1.6 to 2.9
times. Prefill is mixed. On the tutorial's runs it is within 3% at 2,048 tokens and 16% at
32,768, but 2.2 times too fast at 8,192 and 2.85 times at 64. On issue #1914 it is within 5% at
969 tokens and 0.4 times the measured rate from 1,930 on, where the issue's unstated threshold
seems to have been crossed. What is left is not modelled, and no constant is set from these
runs. The candidates are three:
kt-kernel's FP8 and BF16 decode kernels on a CPU without AMX, costed here at llama.cpp's q8_0 and
bf16 matvec rates; the thread pool's own cost per task; and the host's assumed bandwidth. The
runs are not held as a validation table, since they fail the written rule.

Decode's growth with context is another matter. The tutorial's launch names
``--attention-backend triton``, whose decode kernel walks each layer's cache in tiles at batch 1
(engines/sglang_attention.py). With that walk, from 64 to 32,768 tokens a token gains 4.8 ms
against the 6.2 ms measured (bandwidth alone gave 0.4 ms), and 1.2 against 1.3 ms at 8,192. The
mechanism was looked for because of that slope; its constant comes from SGLang pull request
#21775's H100 table, not from these runs. Issue #1914 names no backend, so the default
(FlashInfer on its RTX 5090) applies; its measured growth, 2.8 ms from 969 to 7,678 tokens,
lies between that default's bytes (0.4 ms) and the Triton walk (3.9 ms).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from kvoffload.engines import prefix_cache, sglang_attention
from kvoffload.engines.each.ktransformers import cpu_kernels as kt
from kvoffload.engines.each.ktransformers.prediction import experts_on_cpu
from kvoffload.engines.single_gpu import refuse_several_gpus
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.precision import WeightFormat
from kvoffload.model import decode, kv, routing, tensor_groups
from kvoffload.model.prediction import Prediction, Scenario

# kt-kernel's inference methods (kt-kernel/python/experts.py INFERENCE_METHODS) and the format the
# CPU experts are held in; LLAMAFILE keeps the GGUF's own types (None)
METHOD_FORMATS: dict[str, WeightFormat | None] = {
    "AMXINT4": WeightFormat.INT4,
    "AMXINT8": WeightFormat.INT8,
    "RAWINT4": WeightFormat.INT4,
    "GPTQ_INT4": WeightFormat.INT4,
    "MOE_INT4": WeightFormat.INT4,
    "MOE_INT8": WeightFormat.INT8,
    "FP8": WeightFormat.FP8,
    "FP8_PERCHANNEL": WeightFormat.FP8,
    "BF16": WeightFormat.BF16,
    "MXFP4": WeightFormat.MXFP4,
    "LLAMAFILE": None,
}
Method = Literal[
    "AMXINT4",
    "AMXINT8",
    "RAWINT4",
    "GPTQ_INT4",
    "MOE_INT4",
    "MOE_INT8",
    "FP8",
    "FP8_PERCHANNEL",
    "BF16",
    "MXFP4",
    "LLAMAFILE",
]
AMX_METHODS = ("AMXINT4", "AMXINT8")  # on AMX tiles only
# the methods whose experts the GPU can take whole for a long chunk (kt-kernel README, the
# ``--kt-gpu-prefill-token-threshold`` guideline; kt_ep_wrapper's _prepare_weight_* helpers)
LAYERWISE_METHODS = ("BF16", "FP8", "FP8_PERCHANNEL", "RAWINT4", "MXFP4")
DEFAULT_METHOD = "AMXINT4"  # server_args.py: --kt-method default
DEFAULT_THREADPOOLS = 2  # server_args.py: --kt-threadpool-count default
# SGLang's --chunked-prefill-size by GPU memory (server_args.py, _handle_gpu_memory_settings):
# below each bound in MiB, its chunk
CHUNK_BY_GPU_MIB = ((20 * 1024, 2048), (35 * 1024, 2048), (60 * 1024, 4096), (160 * 1024, 8192))
LARGE_GPU_CHUNK = 16384
QK_K = 256  # a GGUF k-quant block: LLAMAFILE splits experts over the pools in whole blocks


SGLANG_OPTIONS = (
    "kt_method",
    "kt_cpuinfer",
    "kt_threadpool_count",
    "kt_num_gpu_experts",
    "kt_gpu_experts_ratio",
    "kt_max_deferred_experts_per_token",
    "kt_gpu_prefill_token_threshold",
    "chunked_prefill_size",
    "kt_expert_placement_strategy",
    "kt_enable_dynamic_expert_update",
    "max_total_tokens",
    "mem_fraction_static",
    "attention_backend",
    *sglang_attention.SERVING_FLAGS,
)
ARCHIVE_OPTIONS = (
    "optimize_config_path",
    "backend",
    "cpu_infer",
    "numactl_node",
    "cache_lens",
)


def active(sc: Scenario) -> bool:
    """Return True where the scenario names a ``kt_*`` option: KTransformers inside SGLang."""
    o = sc.options
    return any(getattr(o, name) is not None for name in SGLANG_OPTIONS)


def method(sc: Scenario) -> str:
    """Return ``--kt-method`` (default AMXINT4)."""
    return sc.options.kt_method or DEFAULT_METHOD


def cpu_format(sc: Scenario) -> WeightFormat:
    """Return the format of the CPU experts: the method's, or the GGUF's for LLAMAFILE."""
    return METHOD_FORMATS[method(sc)] or sc.setup.weights


def gpu_format(sc: Scenario) -> WeightFormat:
    """Return the format of SGLang's GPU model: the checkpoint's (bf16 beside a GGUF's experts,
    as the README's LLAMAFILE example downloads the original model for the GPU)."""
    return WeightFormat.BF16 if method(sc) == "LLAMAFILE" else sc.setup.weights


def threads(sc: Scenario) -> int:
    """Return ``--kt-cpuinfer`` (default the physical cores, as the README says to set it)."""
    return sc.options.kt_cpuinfer or sc.system.host.cores or 4


def pools(sc: Scenario) -> int:
    """Return ``--kt-threadpool-count``: the NUMA pools the threads and experts are split over."""
    n = sc.options.kt_threadpool_count
    return DEFAULT_THREADPOOLS if n is None else n


def numa(sc: Scenario) -> str | None:
    """Return the NUMA layout: ``distribute`` where the pools span several sockets; one pool on a
    host of several is ``isolate`` (its threads and their experts on node 0: ``subpool_numa_map``
    defaults to ``range(threadpool_count)``); None on one socket."""
    if sc.system.host.sockets == 1:
        return None
    return "distribute" if pools(sc) > 1 else "isolate"


def gpu_experts(sc: Scenario, n_experts: int, moe_layers: int) -> float:
    """Return the GPU experts per MoE layer: ``kt_num_gpu_experts``, or the ratio's share of all
    the layers' experts (``int(total x ratio)``) spread evenly (``uniform`` placement)."""
    o = sc.options
    if o.kt_gpu_experts_ratio is not None:
        return int(n_experts * moe_layers * o.kt_gpu_experts_ratio) / max(moe_layers, 1)
    return float(o.kt_num_gpu_experts)


def deferred(sc: Scenario) -> int:
    """Return ``--kt-max-deferred-experts-per-token`` (default 0: none)."""
    return sc.options.kt_max_deferred_experts_per_token or 0


def chunk_size(sc: Scenario) -> int:
    """Return ``--chunked-prefill-size``: the option, else SGLang's default for the GPU's memory."""
    if sc.options.chunked_prefill_size is not None:
        return sc.options.chunked_prefill_size
    mib = sc.system.gpu.memory.value / 2**20
    return next((c for bound, c in CHUNK_BY_GPU_MIB if mib < bound), LARGE_GPU_CHUNK)


def _kernel(sc: Scenario) -> tuple[str, str]:
    """Return the decode and prefill kernel kinds of the method (cpu_rate / ktransformers)."""
    m = method(sc)
    if m == "LLAMAFILE":
        return "llamafile", "llamafile"
    if m in AMX_METHODS:
        return "amx", "int8"  # AMXINT4 unpacks to int8 tiles (assumed: the int8 rate)
    if sc.system.host.amx and m == "BF16":
        return "native", "bf16"  # bf16-moe.hpp: amx::mat_mul on bf16 tiles past 4 tokens an expert
    # FP8 and FP8_PERCHANNEL never use the tiles: fp8-moe.hpp calls amx::vec_mul_kgroup, that is
    # float_mat_vec_kgroup<GemmKernel224FP8, false> (the AVX512-BF16 kernel), and
    # fp8-perchannel-moe.hpp float_mat_vec_perchannel (avx_kernel_4), at every batch size
    # (kt-kernel/operators/amx/la/amx_raw_kernels.hpp at 95009ea6)
    return "native", "vector"


def host_func_s() -> float:
    """Return the seconds the stream waits on one host callback (cudaLaunchHostFunc)."""
    return float(prefix_cache.constants()["host_func_us"]["value"]) * 1e-6


def stream_rate(sc: Scenario) -> float:
    """Return the rate (B/s) the CPU streams its experts in decode."""
    return kt.stream_rate(sc.system.host, _kernel(sc)[0], cpu_format(sc), threads(sc), numa(sc))


def compute_rate(sc: Scenario, tokens_per_expert: float) -> float:
    """Return the CPU's FLOP/s on its experts in prefill."""
    kind = _kernel(sc)[1]
    return kt.compute_rate(sc.system.host, kind, threads(sc), numa(sc), tokens_per_expert)


def refuse(sc: Scenario) -> None:
    """Refuse what SGLang or kt-kernel refuses, and options of the two engines mixed."""
    o = sc.options
    mixed = [name for name in ARCHIVE_OPTIONS if getattr(o, name) is not None]
    mixed += [name for name in ("use_numa",) if getattr(o, name)]
    if mixed:
        raise InputError(
            f"options.{mixed[0]} is the single-request engine's (ktransformers.local_chat), "
            "while the kt_* options are SGLang's: give one engine's options",
            field=f"options.{mixed[0]}",
        )
    refuse_several_gpus(sc, "ktransformers", "SGLang's tensor parallelism with kt-kernel is")
    sglang_attention.refuse_serving(sc)
    moe = sc.model.moe
    if moe is None or moe.n_experts <= 1:
        raise InputError(
            f"{sc.model.name} has no routed experts for kt-kernel to run on the CPU",
            field="model",
        )
    k, n = moe.experts_per_token, moe.n_experts
    if o.kt_num_gpu_experts is None and o.kt_gpu_experts_ratio is None:
        raise InputError(
            "SGLang needs options.kt_num_gpu_experts or options.kt_gpu_experts_ratio: with "
            "neither it runs without KTransformers (use engine: sglang)",
            field="options.kt_num_gpu_experts",
        )
    if o.kt_num_gpu_experts is not None and o.kt_num_gpu_experts > n:
        raise InputError(
            f"options.kt_num_gpu_experts is {o.kt_num_gpu_experts} but each MoE layer of "
            f"{sc.model.name} has {n} experts",
            field="options.kt_num_gpu_experts",
        )
    if deferred(sc) > k:
        raise InputError(
            f"options.kt_max_deferred_experts_per_token is {deferred(sc)} but a token uses "
            f"{k} experts",
            field="options.kt_max_deferred_experts_per_token",
        )
    if pools(sc) > threads(sc):
        raise InputError(
            f"options.kt_threadpool_count is {pools(sc)} but kt_cpuinfer gives {threads(sc)} "
            "threads: each pool takes kt_cpuinfer / kt_threadpool_count of them",
            field="options.kt_threadpool_count",
        )
    _refuse_split(sc, moe.expert_intermediate)
    tokens = sc.prompt + sc.generate
    if o.max_total_tokens is not None and tokens * sc.batch > o.max_total_tokens:
        raise InputError(
            f"options.max_total_tokens is {o.max_total_tokens} but the batch's prompts and "
            f"outputs need {tokens * sc.batch} tokens of KV",
            field="options.max_total_tokens",
        )
    m = method(sc)
    if m in AMX_METHODS and sc.system.host.amx is False:
        raise InputError(
            f"{m} runs on Intel AMX tiles (Xeon Sapphire Rapids or later), which "
            f"{sc.system.host.name} has not (host amx: false); use LLAMAFILE, BF16 or FP8",
            field="options.kt_method",
        )
    gguf = sc.setup.weights.is_gguf
    if m == "LLAMAFILE" and not gguf:
        raise InputError(
            f"LLAMAFILE reads the CPU experts from a GGUF file: give precision.weights a GGUF "
            f"type (q4_k_m, …) or a .gguf file, not {sc.setup.weights.value}",
            field="precision.weights",
        )
    if m != "LLAMAFILE" and gguf:
        raise InputError(
            f"{m} runs beside SGLang's GPU model, a Hugging Face checkpoint (bf16, fp8, …), "
            f"not a GGUF ({sc.setup.weights.value}); kt_method LLAMAFILE reads GGUF experts",
            field="precision.weights",
        )


def _refuse_split(sc: Scenario, intermediate: int) -> None:
    """Refuse what ``TP_MOE_Common`` throws on: each expert's intermediate dimension split over
    the pools, in whole QK_K (256-value) blocks for LLAMAFILE, evenly for the other methods."""
    n = pools(sc)
    field = "options.kt_threadpool_count"
    if method(sc) == "LLAMAFILE":
        if intermediate % QK_K or intermediate // QK_K < n:
            raise InputError(
                f"LLAMAFILE splits each expert's {intermediate} intermediate values over the "
                f"{n} pools in blocks of {QK_K} (kt-kernel's TP_MOE_Common): it needs a multiple "
                f"of {QK_K} and at least one block a pool",
                field=field,
            )
    elif intermediate % n:
        raise InputError(
            f"kt-kernel splits each expert's {intermediate} intermediate values evenly over the "
            f"pools (TP_MOE_Common): {intermediate} is not a multiple of {n}",
            field=field,
        )


def _parts(sc: Scenario) -> dict:
    """Return per-position bytes and FLOPs of SGLang's GPU model and kt-kernel's CPU experts."""
    model = sc.model
    table = tensor_groups.tensor_table(model, gpu_format(sc))
    experts = tensor_groups.tensor_table(model, cpu_format(sc))
    routed = table.routed
    k, n = model.moe.experts_per_token, model.moe.n_experts
    moe_layers = int(np.count_nonzero(table.by_position(table.nbytes, routed)))
    g = gpu_experts(sc, n, moe_layers)
    return {
        "table": table,
        "routed": routed,
        "shared": table.group == tensor_groups.GROUPS.index("shared_experts"),
        "k_n": (k, n),
        "g": g,
        "cpu_share": (n - g) / n,
        "moe_layers": moe_layers,
        # one position's routed experts: in the GPU's format and in the CPU's
        "gpu_expert_bytes": table.by_position(table.nbytes, routed),
        "cpu_expert_bytes": experts.by_position(experts.nbytes, experts.routed),
        "expert_params": table.by_position(table.params, routed),
        "lay": decode.layers(model, gpu_format(sc)),
    }


def _layerwise(sc: Scenario, tokens: int) -> bool:
    """Return True where a chunk of ``tokens`` takes every expert to the GPU layer by layer."""
    t = sc.options.kt_gpu_prefill_token_threshold
    return bool(t) and tokens >= t and method(sc) in LAYERWISE_METHODS


def predict(sc: Scenario) -> Prediction:
    """Return SGLang-with-kt-kernel's time per token, prefill and memory for the scenario."""
    refuse(sc)
    system, model = sc.system, sc.model
    p = _parts(sc)
    table, routed, shared, lay = p["table"], p["routed"], p["shared"], p["lay"]
    k, n = p["k_n"]
    g, batch = p["g"], sc.batch
    touched = float(routing.touched_share(n, k, batch, sc.setup.routing.effective_experts))
    hbm, att_bw = system.gpu.streaming_bandwidth, system.gpu.attention_rate
    w_before = table.by_position(table.nbytes, ~routed & ~shared)
    # the GPU's experts: shared ones and the touched share of its g routed experts per layer
    w_after = table.by_position(table.nbytes, shared) + p["gpu_expert_bytes"] * touched * g / n
    cpu_s = p["cpu_expert_bytes"] * touched * p["cpu_share"] / stream_rate(sc)
    f_gpu = 2 * batch * table.by_position(table.params, ~routed)
    pos_class = np.array(lay.order)
    window = lay.window[pos_class]
    kvb = lay.kv_per_token[pos_class] * float(
        kv.attention_layer_token_bytes(sc.setup.cache_model, sc.setup.kv)
    )
    attn_per_token = lay.attn_flops[pos_class]
    # the Triton kernel walks each layer's cache in tiles, one after another (None: the bytes)
    walk = sglang_attention.walk(sglang_attention.backend(sc), sc.model.mla is not None)
    moe = p["gpu_expert_bytes"] > 0
    # each MoE layer's two host callbacks (submit, sync): the stream waits a CPU round trip on
    # each; the submit's delays the CPU's start, the sync's the GPU after it
    h = host_func_s()
    # deferral: every MoE layer but the last moves d of k experts past its own sync
    d = np.zeros(moe.shape)
    d[moe] = deferred(sc)
    if moe.any():
        d[np.flatnonzero(moe)[-1]] = 0
    immediate = (k - d) / k
    start = np.where(moe, h, 0.0)
    hidden = batch * model.hidden * kt.HIDDEN_BYTES
    link = p["moe_layers"] * (
        h + kt.hidden_round_trip_s(system, hidden) + 2 * system.link.latency.value
    )

    def per_token(_point: np.ndarray, context: np.ndarray) -> np.ndarray:
        held = np.minimum(np.asarray(context, dtype=np.float64)[..., None], window)
        attend = batch * held * kvb / att_bw
        if walk is not None:  # a layer with no cache holds no tokens: no tiles
            attend = np.maximum(attend, walk.seconds(held))
        before = np.maximum(
            w_before / hbm + attend, (f_gpu + batch * held * attn_per_token) / system.compute_rate
        )
        after = w_after / hbm
        # the submit's round trip before the CPU starts on the layer's immediate experts
        layer = np.maximum(np.maximum(cpu_s, before + start + cpu_s * immediate), before + after)
        gpu = (before + after).sum(axis=-1)
        total = layer.sum(axis=-1)
        busy = np.broadcast_to(cpu_s.sum(), np.shape(total))  # the CPU's own work
        return np.stack([total + link, gpu, busy, np.broadcast_to(link, np.shape(total))])

    tpot, gpu_t, cpu_t, link_t = decode.token_mean(per_token, sc.prompt, sc.generate, lay.window)
    ttft = _prefill_s(sc, p)
    final = sc.prompt + sc.generate
    kv_total = float(kv.layer_bytes(sc.setup.cache_model, final, sc.setup.kv).sum()) * batch
    gpu_experts_bytes = float(p["gpu_expert_bytes"].sum()) * g / n
    layer_buffer = (
        float(p["gpu_expert_bytes"].max())
        if sc.options.kt_gpu_prefill_token_threshold and method(sc) in LAYERWISE_METHODS
        else 0.0
    )
    gpu_bytes = float(table.nbytes[~routed].sum()) + gpu_experts_bytes + layer_buffer
    # SGLang keeps (1 - mem_fraction_static) of the card for activations and CUDA graphs
    fraction = sc.options.mem_fraction_static
    reserved = (1 - fraction) * system.gpu_memory if fraction is not None else 0.0
    host_bytes = float(p["cpu_expert_bytes"].sum()) * p["cpu_share"]
    return experts_on_cpu(
        sc,
        (tpot, ttft, gpu_t, cpu_t, link_t),
        (gpu_bytes, kv_total + reserved, host_bytes),
        {
            "server": "sglang",
            "kt_method": method(sc),
            "experts_format": cpu_format(sc).value,
            "kt_cpuinfer": threads(sc),
            "kt_threadpool_count": pools(sc),
            "gpu_experts_per_layer": g,
            "kt_max_deferred_experts_per_token": deferred(sc),
            "chunked_prefill_size": chunk_size(sc),
            "attention_backend": sglang_attention.backend(sc),
        },
        f"SGLang with kt-kernel: {g:g} of {n} experts a layer on the GPU, the rest on the CPU "
        f"({method(sc)}, {threads(sc)} threads in {pools(sc)} pools), attention and the rest on "
        "the GPU",
    )


def _prefill_s(sc: Scenario, p: dict) -> float:
    """Return the prefill time (s): chunks of ``chunked_prefill_size``, hybrid or layer by layer."""
    system, model = sc.system, sc.model
    k, n = p["k_n"]
    share = p["cpu_share"]
    expert_params = float(p["expert_params"].sum())
    gpu_expert_bytes = float(p["gpu_expert_bytes"].sum())
    rest_bytes = float(p["table"].nbytes[~p["routed"]].sum())
    size = chunk_size(sc)
    total, done = 0.0, 0
    while done < sc.prompt:
        c = min(size, sc.prompt - done)
        tokens = c * sc.batch
        flops_all = float(decode.prefill_flops(model, done + c, sc.batch, done))
        expert_flops = 2 * tokens * expert_params * k / n
        rest = max(
            (flops_all - expert_flops) / system.compute_rate,
            rest_bytes / system.gpu.streaming_bandwidth,
        )
        touched = float(routing.touched_share(n, k, tokens, sc.setup.routing.effective_experts))
        on_gpu = max(
            expert_flops / system.compute_rate,
            gpu_expert_bytes * touched / system.gpu.streaming_bandwidth,
        )
        if _layerwise(sc, tokens):
            upload = gpu_expert_bytes * share / system.copy_rate("h2d", pinned=True)
            total += rest + upload + on_gpu
        else:
            cpu_stream = float(p["cpu_expert_bytes"].sum()) * share * touched / stream_rate(sc)
            cpu = max(share * expert_flops / compute_rate(sc, tokens * k / n), cpu_stream)
            hidden = tokens * model.hidden * kt.HIDDEN_BYTES * p["moe_layers"]
            # each MoE layer's hidden state both ways, and its submit and sync
            link = kt.hidden_round_trip_s(system, hidden) + 2 * host_func_s() * p["moe_layers"]
            total += rest + max(cpu, on_gpu * (1 - share)) + link
        done += c
    return total
