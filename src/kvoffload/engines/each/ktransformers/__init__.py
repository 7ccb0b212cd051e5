"""KTransformers: routed experts on the CPU, attention (MLA) and shared experts on the GPU.

Rules read in kvcache-ai/ktransformers at 95009ea6856c0799e517e93cb12be5e8494bc7ce (the
single-request engine, now under ``archive/ktransformers/``):

- Placement is the optimize rule (``--optimize_config_path``, e.g.
  ``optimize/optimize_rules/DeepSeek-V3-Chat.yaml``): every ``torch.nn.Linear`` of the layers
  (attention, shared experts, dense MLPs) and ``lm_head`` on ``cuda`` (``KLinearMarlin``), the
  attention ``KDeepseekV2Attention`` (MLA) on the GPU, and ``mlp.experts`` replaced by
  ``KTransformersExperts`` with ``generate_device: "cpu"``, ``generate_op: "KExpertsCPU"``:
  every routed expert lives in host memory and runs on the CPU. The rule's ``backend`` kwarg
  picks the CPU kernel: ``llamafile`` (default; the GGUF's own quantisation) or ``AMXInt8`` /
  ``AMXBF16`` (``DeepSeek-V3-Chat-amx.yaml``; the experts repacked to int8 or bf16, from a BF16
  GGUF: ``KExpertsCPU.load`` asserts it). Every ``torch.nn.Linear`` a rule sends to the GPU runs
  as ``KLinearMarlin`` / ``VLinearMarlin`` (4 bits, group 64, quantised at load), the rules
  leaving ``self_attn.kv_b_proj`` a bf16 torch Linear; every rule keeps ``model.embed_tokens``
  on the CPU (a bf16 torch Embedding).
- Prefill runs on the CPU experts too: ``KTransformersExperts.load`` defaults to
  ``InferenceState.GENERATE`` (operators/experts.py), so the ``KExpertsTorch`` prefill op on
  ``cuda`` is never loaded; the prompt goes through in chunks of ``chunk_size`` (local_chat.py,
  default 8192), each chunk reading the experts it routes to once.
- Decode: ``KDeepseekV3MoE.forward`` calls ``submit_for_one_decode`` (the hidden state copied to a
  pinned bf16 host buffer, the CPU threads started), runs the shared experts on the GPU meanwhile,
  then ``sync_for_one_decode`` (the experts' output back to the GPU): per MoE layer one hidden
  state each way over the link, and the shared experts hidden behind the CPU experts.
- ``cpu_infer`` threads run the experts (``CPUInfer(Config().cpu_infer)``); its default is the
  physical cores less 3 (server/config/config.py). With ``USE_NUMA=1`` at build the experts are
  copied onto every NUMA node (doc/en/DeepseekR1_V3_tutorial.md, "Some Explanations"): each
  socket streams its own DRAM, at the cost of one copy per socket.
- AMX or AVX-512: the kernel is chosen by arithmetic intensity, AMX when each expert sees more
  than 4 tokens on average, AVX-512 for decode and short prefill (doc/en/AMX.md).

Decode streams the touched experts: llamafile's matvecs at ``llamafile_bandwidth_share`` of the
memory rate their threads read (fitted on issue #314, a host with a measured STREAM rate), AMX's
AVX-512 kernel at the llama.cpp matvec rate for its format (model/cpu_rate.py). With
``USE_NUMA`` each socket after the first adds ``numa_socket_share`` of one socket's rate (the
tutorial's one- and two-socket runs; the source does not say why it is less than one);
``numactl_node`` keeps the threads and the experts on one socket (``numactl -N k -m k``). Prefill
computes the experts at llamafile's fitted rate per core or at the AMX kernel's published rate
(35 TOPS Int8 over the 64 cores of its benchmark's 65 threads; catalog/engine_constants.yaml,
``ktransformers``), never faster than the experts stream. The
GPU part is the step model: its weights at the GPU's streaming bandwidth, attention over the KV
cache; for MLA, each cached token costs at least the decode kernel's fitted time per layer and
request (``mla_decode``: 0.2.1's Triton kernel, ``decode_attention_fwd_grouped``, on the
tutorial's V0.2.1 runs; 0.2.0's PyTorch matmuls on issue #314), far above its bytes at batch 1.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from msgspec import Meta

from kvoffload.engines import sglang_attention
from kvoffload.engines.each.ktransformers import sglang as ktransformers_sglang
from kvoffload.engines.each.ktransformers.cpu_kernels import (
    HIDDEN_BYTES,
    compute_rate,
    constants,
    hidden_round_trip_s,
    stream_rate,
)
from kvoffload.engines.each.ktransformers.prediction import experts_on_cpu
from kvoffload.engines.single_gpu import refuse_several_gpus
from kvoffload.engines.spec import EngineSpec
from kvoffload.inputs.errors import FieldError, InputError
from kvoffload.inputs.models import Model
from kvoffload.inputs.precision import WeightFormat
from kvoffload.model import decode, kv, routing, tensor_groups
from kvoffload.model.prediction import Prediction, Scenario

# the optimize rules shipped in optimize/optimize_rules/, the expert backend each one names and the
# model types (config.json ``model_type``) whose modules it matches
RULES = {
    "DeepSeek-V3-Chat.yaml": "llamafile",
    "DeepSeek-V3-Chat-amx.yaml": "AMXInt8",
    "DeepSeek-V3-Chat-serve.yaml": "llamafile",
    "DeepSeek-V2-Chat.yaml": "llamafile",
    "DeepSeek-V2-Lite-Chat.yaml": "llamafile",
    "Qwen3Moe-serve.yaml": "llamafile",
    "Qwen3Moe-serve-amx.yaml": "AMXInt8",
    "Mixtral.yaml": "llamafile",
    "Glm4Moe-serve.yaml": "llamafile",
}
_DEEPSEEK_V3 = ("deepseek_v3", "kimi_k2")  # Kimi K2 is a DeepseekV3ForCausalLM (doc/en/Kimi-K2.md)
RULE_MODELS = {
    "DeepSeek-V3-Chat.yaml": _DEEPSEEK_V3,
    "DeepSeek-V3-Chat-amx.yaml": _DEEPSEEK_V3,
    "DeepSeek-V3-Chat-serve.yaml": _DEEPSEEK_V3,
    "DeepSeek-V2-Chat.yaml": ("deepseek_v2",),
    "DeepSeek-V2-Lite-Chat.yaml": ("deepseek_v2",),
    "Qwen3Moe-serve.yaml": ("qwen3_moe",),
    "Qwen3Moe-serve-amx.yaml": ("qwen3_moe",),
    "Mixtral.yaml": ("mixtral",),
    "Glm4Moe-serve.yaml": ("glm4_moe",),
}
# the rule used when none is named: local_chat.py's default_optimize_rules by architecture, and
# for the server-only families the rule their docs start (doc/en/AMX.md, the server's Glm4Moe)
DEFAULT_RULES = {
    "deepseek_v3": "DeepSeek-V3-Chat.yaml",
    "kimi_k2": "DeepSeek-V3-Chat.yaml",
    "deepseek_v2": "DeepSeek-V2-Chat.yaml",
    "mixtral": "Mixtral.yaml",
    "qwen3_moe": "Qwen3Moe-serve.yaml",
    "glm4_moe": "Glm4Moe-serve.yaml",
}
Backend = Literal["llamafile", "AMXInt8", "AMXBF16"]
_AMX_FORMAT = {"AMXInt8": WeightFormat.INT8, "AMXBF16": WeightFormat.BF16}
# every Linear a rule sends to the GPU runs as KLinearMarlin / VLinearMarlin (operators/linear.py:
# num_bits 4, group_size 64), quantised at load whatever the GGUF's type; a rule excludes
# self_attn.kv_b_proj, which stays a torch Linear in the model's bf16
MARLIN = WeightFormat.INT4_G64
TORCH_BYTES = 2  # bf16


def mla_decode_s(kernel: str = "triton") -> float:
    """Return the seconds KTransformers' MLA decode kernel spends per cached token, layer and
    request: ``triton`` (0.2.1 on) or ``torch`` (0.2.0's matmuls)."""
    return float(constants()[f"mla_decode_{kernel}_ns"]["value"]) * 1e-9


class Options(sglang_attention.ServingFlags, frozen=True):
    """KTransformers' own flags (local_chat.py / server), as a scenario's ``options:``."""

    optimize_config_path: str | None = None  # a rule file name; None: the model's default rule
    backend: Backend | None = None  # the rule's experts ``backend:`` kwarg; None: the rule's
    cpu_infer: Annotated[int, Meta(ge=1, le=1024)] | None = None  # None: physical cores - 3
    use_numa: bool = False  # built with USE_NUMA=1: experts copied onto every socket
    # run under ``numactl -N k -m k``: the threads and every page on socket k alone
    numactl_node: Annotated[int, Meta(ge=0, le=7)] | None = None
    # the MLA decode kernel: ``triton`` (0.2.1 on, decode_attention_fwd_grouped), ``torch``
    # (0.2.0's absorbed attention in PyTorch matmuls)
    mla_decode: Literal["triton", "torch"] = "triton"
    chunk_size: Annotated[int, Meta(ge=1, le=1_048_576)] = 8192
    max_new_tokens: Annotated[int, Meta(ge=1, le=1_048_576)] = 1000
    cache_lens: Annotated[int, Meta(ge=1, le=16_777_216)] | None = None
    # SGLang's launch_server with kt-kernel (--kt-*; any of them selects it): the method the CPU
    # experts run in, threads, NUMA pools, GPU experts per MoE layer (or a share of all), the
    # experts a token defers past its layer, the chunk from which prefill takes whole layers to
    # the GPU, and SGLang's prefill chunk (default by GPU memory)
    kt_method: ktransformers_sglang.Method | None = None
    kt_cpuinfer: Annotated[int, Meta(ge=1, le=4096)] | None = None
    kt_threadpool_count: Annotated[int, Meta(ge=1, le=64)] | None = None
    kt_num_gpu_experts: Annotated[int, Meta(ge=0, le=65536)] | None = None
    kt_gpu_experts_ratio: Annotated[float, Meta(ge=0.0, le=1.0)] | None = None
    kt_max_deferred_experts_per_token: Annotated[int, Meta(ge=0, le=64)] | None = None
    kt_gpu_prefill_token_threshold: Annotated[int, Meta(ge=0, le=16_777_216)] | None = None
    chunked_prefill_size: Annotated[int, Meta(ge=1, le=1_048_576)] | None = None
    # accepted as SGLang takes them; the model places GPU experts evenly for every strategy
    # (uniform routing, or routing.effective_experts where measured)
    kt_expert_placement_strategy: (
        Literal["uniform", "frequency", "front-loading", "random"] | None
    ) = None
    kt_enable_dynamic_expert_update: bool | None = None
    max_total_tokens: Annotated[int, Meta(ge=1, le=16_777_216)] | None = None  # SGLang's KV pool
    mem_fraction_static: Annotated[float, Meta(gt=0.0, le=1.0)] | None = None

    def __post_init__(self) -> None:
        if self.optimize_config_path is None:
            return
        name = self.optimize_config_path.rsplit("/", 1)[-1]
        if name not in RULES:
            raise FieldError(
                "optimize_config_path",
                f"{name!r} is not a known optimize rule; rules: {', '.join(RULES)}",
            )


def rule(sc: Scenario) -> str:
    """Return the optimize rule's file name: the option's, else the model type's default; refuse
    a rule written for another model type, or a model type KTransformers has no rule for."""
    mt = sc.model.model_type
    given = sc.options.optimize_config_path
    if given is None:
        if mt not in DEFAULT_RULES:
            raise InputError(
                f"KTransformers ships no optimize rule for model_type {mt!r} (rules for "
                f"{', '.join(sorted(DEFAULT_RULES))}): use engine llamacpp or generic",
                field="model",
            )
        return DEFAULT_RULES[mt]
    name = given.rsplit("/", 1)[-1]
    if mt not in RULE_MODELS[name]:
        fits = [r for r, types in RULE_MODELS.items() if mt in types]
        raise InputError(
            f"{name} matches the modules of model_type {', '.join(RULE_MODELS[name])}, not "
            f"{mt!r}; "
            + (f"rules for it: {', '.join(fits)}" if fits else "none is shipped for it"),
            field="options.optimize_config_path",
        )
    return name


def amx_rule(model_type: str) -> str | None:
    """Return the shipped rule that runs a model type's experts on AMX, None where none does."""
    found = [r for r, kind in RULES.items() if kind != "llamafile" and model_type in RULE_MODELS[r]]
    return found[0] if found else None


def launch_options(sc: Scenario, rule_name: str | None = None) -> dict:
    """Return the options a command line spells out, defaults resolved: the optimize rule
    (``rule_name``, else the scenario's) and the ``cpu_infer`` threads."""
    return {"optimize_config_path": rule_name or rule(sc), "cpu_infer": threads(sc)}


def backend(sc: Scenario) -> str:
    """Return the CPU expert backend: the option, else the one the optimize rule names."""
    return sc.options.backend or RULES[rule(sc)]


def expert_format(sc: Scenario) -> WeightFormat:
    """Return the format the experts are held in: the GGUF's, or AMX's int8 / bf16 repacking."""
    return _AMX_FORMAT.get(backend(sc), sc.setup.weights)


def threads(sc: Scenario) -> int:
    """Return the CPU threads (``cpu_infer``; default the physical cores less 3, at least 1)."""
    if sc.options.cpu_infer is not None:
        return sc.options.cpu_infer
    return max((sc.system.host.cores or 4) - 3, 1)


def _numa(sc: Scenario) -> str | None:
    """Return where the threads and experts sit: ``isolate`` (one node, ``numactl -N k -m k``),
    ``distribute`` (``USE_NUMA=1``: a copy on each socket) or None (pages on one node)."""
    if sc.options.numactl_node is not None:
        return "isolate"
    return "distribute" if sc.options.use_numa and sc.system.host.sockets > 1 else None


def _kind(sc: Scenario) -> str:
    """Return the prefill kernel kind of the rule's backend: llamafile, or AMX's int8 / bf16."""
    name = backend(sc)
    return "llamafile" if name == "llamafile" else name[3:].lower()


def expert_stream_rate(sc: Scenario) -> float:
    """Return the rate (B/s) the CPU streams expert weights in decode under the scenario."""
    kind = "llamafile" if backend(sc) == "llamafile" else "amx"
    return stream_rate(sc.system.host, kind, expert_format(sc), threads(sc), _numa(sc))


def expert_compute_rate(sc: Scenario, tokens_per_expert: float) -> float:
    """Return the CPU's FLOP/s on the experts in prefill under the scenario."""
    return compute_rate(sc.system.host, _kind(sc), threads(sc), _numa(sc), tokens_per_expert)


def _expert_types(sc: Scenario) -> set[str]:
    """Return the GGUF types of the routed experts: a .gguf file's own, else the format's name."""
    fmt = sc.setup.weights
    if fmt is not WeightFormat.GGUF:
        return {fmt.value.upper()}
    table = tensor_groups.tensor_table(sc.model, fmt)
    types = np.array(sc.model.gguf_types)
    return {str(t).upper() for t in types[table.routed]}


def _refuse_options(sc: Scenario) -> None:
    o = sc.options
    refuse_several_gpus(sc, "ktransformers", "its multi-GPU optimize rules are")
    if sc.generate > o.max_new_tokens:
        raise InputError(
            f"options.max_new_tokens is {o.max_new_tokens} but the scenario generates "
            f"{sc.generate} tokens"
        )
    if o.cache_lens is not None and sc.prompt + sc.generate > o.cache_lens:
        raise InputError(
            f"options.cache_lens is {o.cache_lens} tokens but the prompt and output need "
            f"{sc.prompt + sc.generate}"
        )
    kernel = backend(sc)
    if kernel in _AMX_FORMAT and sc.system.host.amx is False:
        where = "options.backend" if o.backend else "options.optimize_config_path"
        raise InputError(
            f"{kernel} runs on Intel AMX tiles (Xeon Sapphire Rapids or later), which "
            f"{sc.system.host.name} has not (host amx: false); use the llamafile backend",
            field=where,
        )
    if kernel in _AMX_FORMAT and _expert_types(sc) != {"BF16"}:
        raise InputError(
            f"{kernel} loads the routed experts from a BF16 GGUF (KExpertsCPU.load asserts "
            f"gate, up and down are BF16), not {', '.join(sorted(_expert_types(sc)))}",
            field="precision.weights",
        )
    sockets = sc.system.host.sockets
    if o.numactl_node is not None and o.numactl_node >= sockets:
        raise InputError(
            f"options.numactl_node is {o.numactl_node} but the host has {sockets} socket"
            f"{'s' * (sockets != 1)} (nodes 0 to {sockets - 1})"
        )
    if o.numactl_node is not None and o.use_numa:
        raise InputError(
            "options.numactl_node binds the threads and pages to one socket while use_numa "
            "copies the experts onto every socket: give one of them"
        )


def gpu_nbytes(model: Model, table: tensor_groups.TensorTable) -> np.ndarray:
    """Return each tensor's bytes as KTransformers holds it off the CPU experts: a matrix in
    Marlin's int4 (group 64), ``kv_b_proj`` in bf16, embeddings, norms and vectors as the GGUF has
    them (routed experts: the GGUF's bytes, unused on the GPU)."""
    marlin = tensor_groups.tensor_table(model, MARLIN)
    kv_b = np.array([".attn_kv_b." in name for name in table.names])
    linear = (
        table.matrix & ~table.routed & (table.group != tensor_groups.GROUPS.index("embeddings"))
    )
    out = np.where(linear, marlin.nbytes, table.nbytes)
    return np.where(kv_b, table.params * TORCH_BYTES, out).astype(np.float64)


def _parts(sc: Scenario) -> dict:
    """Return the per-position bytes and FLOPs of the GPU part and the CPU experts."""
    model, fmt = sc.model, sc.setup.weights
    table = tensor_groups.tensor_table(model, fmt)
    experts = tensor_groups.tensor_table(model, expert_format(sc))
    routed = table.routed
    shared = table.group == tensor_groups.GROUPS.index("shared_experts")
    lay = decode.layers(model, fmt)
    k, n = lay.expert_use
    return {
        "table": table,
        "gpu_nbytes": gpu_nbytes(model, table),
        # every rule keeps ``model.embed_tokens`` on the CPU (class "default": a torch Embedding,
        # bf16), its rows looked up there; a tied table is the output layer's, on the GPU
        "cpu_side": (table.group == tensor_groups.GROUPS.index("embeddings"))
        & (table.position < 0),
        "routed": routed,
        "shared": shared,
        "k_n": (k, n),
        "expert_bytes": experts.by_position(experts.nbytes, experts.routed),
        "expert_params": table.by_position(table.params, routed),
        "moe_layers": int(np.count_nonzero(table.by_position(table.nbytes, routed))),
        "lay": lay,
    }


def predict(sc: Scenario) -> Prediction:
    """Return KTransformers' time per token, prefill and memory for the scenario: SGLang's
    kt-kernel engine where a ``kt_*`` option is given, else the single-request engine."""
    if ktransformers_sglang.active(sc):
        return ktransformers_sglang.predict(sc)
    rule(sc)  # the optimize rule must serve the model
    _refuse_options(sc)
    system, model, o = sc.system, sc.model, sc.options
    p = _parts(sc)
    table, routed, shared, lay = p["table"], p["routed"], p["shared"], p["lay"]
    k, n = p["k_n"]
    batch = sc.batch
    touched = float(routing.touched_share(n, k, batch, sc.setup.routing.effective_experts))
    gpu_held = p["gpu_nbytes"]
    w_gpu = table.by_position(gpu_held, ~routed & ~shared)
    w_shared = table.by_position(gpu_held, shared)
    f_gpu = 2 * batch * table.by_position(table.params, ~routed)
    cpu_s = p["expert_bytes"] * touched / expert_stream_rate(sc)
    hbm, att_bw = system.gpu.streaming_bandwidth, system.gpu.attention_rate
    pos_class = np.array(lay.order)
    window = lay.window[pos_class]  # one class per position, the output layer's included
    kvb = lay.kv_per_token[pos_class] * float(
        kv.attention_layer_token_bytes(sc.setup.cache_model, sc.setup.kv)
    )
    attn_per_token = lay.attn_flops[pos_class]
    # MLA: the decode kernel's own time per cached token, where it is above the cache's bytes
    mla = mla_decode_s(o.mla_decode)
    mla_s = np.where(lay.kv_per_token[pos_class] > 0, mla, 0.0) if model.mla else 0.0
    hidden = batch * model.hidden * HIDDEN_BYTES
    link = p["moe_layers"] * (hidden_round_trip_s(system, hidden) + 2 * system.link.latency.value)

    def per_token(_point: np.ndarray, context: np.ndarray) -> np.ndarray:
        held = np.minimum(np.asarray(context, dtype=np.float64)[..., None], window)
        kv_bytes = batch * held * kvb
        attend = np.maximum(kv_bytes / att_bw, batch * held * mla_s)
        gpu = np.maximum(
            w_gpu / hbm + attend,
            (f_gpu + batch * held * attn_per_token) / system.compute_rate,
        )
        # the shared experts run on the GPU while the CPU computes the routed ones
        moe = np.maximum(w_shared / hbm, cpu_s)
        g = gpu.sum(axis=-1)
        c = np.broadcast_to(moe.sum(), np.shape(g))
        return np.stack([g + c + link, g, c, np.broadcast_to(link, np.shape(g))])

    tpot, gpu_t, cpu_t, link_t = decode.token_mean(per_token, sc.prompt, sc.generate, lay.window)
    ttft = _prefill_s(sc, p)
    final = sc.prompt + sc.generate
    kv_total = float(kv.layer_bytes(sc.setup.cache_model, o.cache_lens or final, sc.setup.kv).sum())
    copies = system.host.sockets if _numa(sc) == "distribute" else 1
    embed = p["cpu_side"]
    host_bytes = (
        float(p["expert_bytes"].sum()) * copies + float(table.params[embed].sum()) * TORCH_BYTES
    )
    gpu_bytes = float(gpu_held[~routed & ~embed].sum())
    return experts_on_cpu(
        sc,
        (tpot, ttft, gpu_t, cpu_t, link_t),
        (gpu_bytes, kv_total * batch, host_bytes),
        {
            "optimize_config_path": rule(sc),
            "backend": backend(sc),
            "experts_format": expert_format(sc).value,
            "cpu_infer": threads(sc),
            "use_numa": o.use_numa,
            "chunk_size": o.chunk_size,
            "expert_copies": copies,
        },
        f"{rule(sc)}: routed experts on the CPU ({backend(sc)}, {threads(sc)} threads), "
        "attention, shared experts and the rest on the GPU",
    )


def _prefill_s(sc: Scenario, p: dict) -> float:
    """Return the prefill time (s): chunks of ``chunk_size``, experts on the CPU, the rest on GPU."""
    system, model = sc.system, sc.model
    k, n = p["k_n"]
    expert_params = float(p["expert_params"].sum())
    total = 0.0
    done = 0
    while done < sc.prompt:
        c = min(sc.options.chunk_size, sc.prompt - done)
        tokens = c * sc.batch
        flops_all = float(decode.prefill_flops(model, done + c, sc.batch, done))
        expert_flops = 2 * tokens * expert_params * k / n
        touched = float(routing.touched_share(n, k, tokens, sc.setup.routing.effective_experts))
        stream = float(p["expert_bytes"].sum()) * touched / expert_stream_rate(sc)
        cpu = max(expert_flops / expert_compute_rate(sc, tokens * k / n), stream)
        gpu_bytes = float(p["gpu_nbytes"][~p["routed"] & ~p["cpu_side"]].sum())
        gpu = max(
            (flops_all - expert_flops) / system.compute_rate,
            gpu_bytes / system.gpu.streaming_bandwidth,
        )
        link = hidden_round_trip_s(system, tokens * model.hidden * HIDDEN_BYTES * p["moe_layers"])
        total += gpu + cpu + link
        done += c
    return total


ENGINE = EngineSpec(
    name="ktransformers",
    options=Options,
    predict=predict,
    placement_option="options.optimize_config_path (and options.backend)",
    pin_option=None,
    refuses={
        "attention": "KTransformers' optimize rules keep attention (MLA) and its KV cache on the "
        "GPU; name another rule with options.optimize_config_path",
        "overlap": "KTransformers overlaps the shared experts (GPU) with the routed ones (CPU) "
        "and nothing else; use engine: generic to compare overlap modes",
    },
    routing_ignored=(
        ("stream", "gpu_hit_rate"),
        "KTransformers computes every routed expert on the CPU and never streams experts to the "
        "GPU; choose the CPU kernel with options.optimize_config_path or options.backend",
    ),
    prefix_cache="KTransformers' single-request engine keeps no prefix cache across requests; "
    "use engine: sglang or vllm for reuse:",
)
