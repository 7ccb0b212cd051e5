"""llama.cpp: weights live where their buffers are, and each op runs where its weights live.

``--n-gpu-layers N`` puts the last N layers (counting the output layer) on the GPU
(``i_gpu_start = n_layer + 1 - N`` in llama.cpp's layer placement); the token embeddings stay in
host memory. Per-tensor overrides then move single tensors: ``-ot REGEX=CPU`` (``override_tensor``,
each pattern tried in order with ``std::regex_search`` on the GGUF tensor name, the first match
wins), ``--cpu-moe`` (all routed experts, ``LLM_FFN_EXPS_REGEX`` =
``\\.ffn_(up|down|gate|gate_up)_(ch|)exps``) and ``--n-cpu-moe N`` (the experts of layers 0..N-1,
``blk\\.i`` + that regex) — ggml-org/llama.cpp common/common.h at
001d906a6d86e2490e394361e7cc6f478b100088 (``llm_ffn_exps_cpu_override``,
``llm_add_n_cpu_ffn_overrides``). In decode, a matmul whose weights are in host memory runs on the
CPU; each change of device along the graph is a hand-over (the activations cross the link, the
backends synchronise). A routed-expert tensor is read only for the experts the batch routes to. A
layer's KV cache lives with its layer unless ``no_kv_offload`` keeps all of it in host memory,
where attention then runs on the CPU.

Two engine constants, each derived from a published llama.cpp measurement on another machine than
the ones the validation checks, apply to every scenario (both can be overridden in ``options``):

- ``gpu_share``: the share of the GPU's streaming bandwidth that llama.cpp's decode kernels reach
  at batch 1, launch gaps included. From PR #6766: LLaMA 2 7B Q4_0 text generation on an RTX 4090
  at 138.31 tokens/s on master (before CUDA graphs), against that card's measured bandwidth.
- ``split_sync_us``: what each hand-over between the CPU and CUDA backends costs (synchronise,
  copy, wake the CPU threads). From PR #7526: LLaMA 7B Q4_0 on an RTX 3060 Laptop GPU, 66.24
  tokens/s with the cache on the GPU and 45.91 with ``--no-kv-offload`` (threadpool build), whose
  difference is 64 hand-overs per token, two per layer.

CPU-side matmuls stream their weights at ``cpu_weight_rate``, and CPU attention reads host memory,
at the rate ``numa`` (``--numa``) gives the host's sockets (model/cpu_rate.py
``host_stream_rate``); the logits come back to the host for sampling. llama.cpp maps the GGUF file
(``llama_mmap``, on unless ``--no-mmap``), so host-resident weights past what host memory holds
(``capacity.host_capacity``, the OS's reserve kept) are file pages the kernel evicts and reads back:
each step reads its share of that excess from disk at the storage's read rate, in the step's disk
stream, instead of refusing; with ``no_mmap`` the weights are copied into anonymous buffers and
must fit. (Under strict LRU a cyclic scan larger than memory would miss on every page; Linux's
active/inactive lists keep part resident, so the excess alone is the optimistic, lower bound.) The host prompt cache (``cache_ram``, a scenario's ``reuse:``) is llamacpp_prompt_cache.py.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from functools import cache
from typing import Annotated, Any, Literal

import msgspec
import numpy as np
from msgspec import Meta

from kvoffload.engines.llamacpp_prompt_cache import cache_rule
from kvoffload.engines.spec import EngineSpec, PrefixCache
from kvoffload.model import capacity, cpu_rate, decode, kv, routing, tensor_groups, transfer
from kvoffload.model.prediction import Prediction, Resolved, Scenario
from kvoffload.model.tensor_groups import TensorTable
from kvoffload.spec import catalog
from kvoffload.spec.errors import FieldError
from kvoffload.spec.limits import MAX_LAYERS
from kvoffload.spec.text import Strict
from kvoffload.spec.units import format_bytes


@cache
def constants() -> dict:
    """Return llama.cpp's engine constants with their sources (catalog/engine_constants.yaml)."""
    return catalog.load("engine_constants")["llamacpp"]


def gpu_share_default() -> float:
    """Return the share of streaming bandwidth llama.cpp's decode kernels reach (PR #6766)."""
    return float(constants()["gpu_share"]["value"])


def split_sync_s_default() -> float:
    """Return the seconds one CPU<->GPU hand-over costs (PR #7526)."""
    return float(constants()["split_sync_us"]["value"]) * 1e-6


Layers = Annotated[int, Meta(ge=0, le=MAX_LAYERS + 1)]  # -ngl counts the output layer too
MAX_OVERRIDES = 1000


class Options(Strict):
    """llama.cpp's options that decide placement."""

    n_gpu_layers: Layers | None = None  # default: all, the head included
    no_kv_offload: bool = False
    n_cpu_moe: Layers = 0  # --n-cpu-moe N
    cpu_moe: bool = False  # --cpu-moe
    # -ot, each "REGEX=CPU" or "REGEX=CUDA0" (or =cpu/=gpu); a string is split at its commas, as
    # -ot splits it, so once validated this is always a tuple
    override_tensor: tuple[str, ...] | str = ()
    threads: Annotated[int, Meta(ge=1, le=4096)] | None = None  # -t; default: host.threads
    numa: Literal["distribute", "isolate", "numactl"] | None = None  # --numa; default: no policy
    no_mmap: bool = False  # --no-mmap: weights copied into host buffers, so they must fit
    # default: catalog/engine_constants.yaml
    gpu_share: Annotated[float, Meta(gt=0, le=1)] | None = None
    split_sync_us: Annotated[float, Meta(ge=0, le=100_000)] | None = None  # default: PR #7526
    cache_ram: Annotated[int, Meta(ge=-1, le=1 << 32)] = 8192  # MiB; 0: off, -1: no limit

    def __post_init__(self) -> None:
        """Split a comma-separated ``override_tensor`` and check each of its rules."""
        super().__post_init__()
        rules = self.override_tensor
        if isinstance(rules, str):
            rules = tuple(x for x in rules.split(",") if x.strip())
            msgspec.structs.force_setattr(self, "override_tensor", rules)
        if len(rules) > MAX_OVERRIDES:
            raise FieldError(
                "override_tensor", "must be a list of 'REGEX=CPU' or 'REGEX=CUDA0' entries"
            )
        for entry in rules:
            try:
                _parse_rule(entry)
            except ValueError as exc:
                raise FieldError("override_tensor", str(exc)) from None


_DEVICES = {"cpu": "cpu", "gpu": "gpu"}


def _parse_rule(entry: Any) -> tuple[str, str]:
    """Return (pattern, 'cpu' | 'gpu') from one ``-ot`` entry, refusing what llama.cpp would."""
    if not isinstance(entry, str) or "=" not in entry or len(entry) > 1000:
        raise ValueError(f"override {entry!r} must be 'REGEX=CPU' or 'REGEX=CUDA0'")
    pattern, _, buffer = entry.rpartition("=")
    name = buffer.strip().lower()
    device = _DEVICES.get(name) or (
        "gpu" if re.fullmatch(r"(cuda|rocm|vulkan|metal|gpu)\d*", name) else ""
    )
    if not pattern or not device:
        raise ValueError(f"override {entry!r}: buffer {buffer!r} is not CPU or a GPU (CUDA0, ...)")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"override {entry!r}: bad regular expression ({exc})") from None
    return pattern, device


def placement(sc: Scenario) -> tuple[int, np.ndarray]:
    """Return (n_gpu_layers, a mask over the layer positions and the output layer on the GPU)."""
    n = sc.model.n_layers
    ngl = sc.options.n_gpu_layers if sc.options.n_gpu_layers is not None else n + 1
    ngl = min(ngl, n + 1)
    i_gpu_start = max(n + 1 - ngl, 0)
    return ngl, np.arange(n + 1) >= i_gpu_start


def gpu_split(sc: Scenario) -> np.ndarray:
    """Return the GPU of each layer position and the output layer (-1: on the CPU).

    ``--split-mode layer`` (the default) with no ``--tensor-split``: the split points are each
    device's free memory, normalised and summed, and GPU layer ``il`` goes to
    ``upper_bound(splits, (il - i_gpu_start) / act_gpu_layers)`` (ggml-org/llama.cpp
    src/llama-model.cpp ``load_tensors`` at a5410f046c01d01330c8a42f13b64a211fedf2c3). The GPUs of
    a profile are alike, so each holds an equal run of consecutive layers.
    """
    ngl, on_gpu = placement(sc)
    count = sc.system.gpu.count
    act = min(ngl, sc.model.n_layers + 1)
    start = int(np.argmax(on_gpu)) if on_gpu.any() else len(on_gpu)
    splits = np.arange(1, count + 1) / count
    pos = (np.arange(len(on_gpu)) - start) / max(act, 1)
    return np.where(on_gpu, np.searchsorted(splits, pos, side="right"), -1)


def gpu_boundaries(sc: Scenario) -> int:
    """Return how many times a token's graph passes from one GPU to the next (layer split)."""
    used = gpu_split(sc)
    return max(len(set(used[used >= 0].tolist())) - 1, 0)


def layers_per_gpu(sc: Scenario) -> list[int]:
    """Return how many layer positions (the output layer counts) each GPU holds."""
    split = gpu_split(sc)
    return np.bincount(split[split >= 0], minlength=sc.system.gpu.count).tolist()


def override_rules(o: Options) -> tuple[tuple[str, str], ...]:
    """Return the tensor overrides in llama.cpp's order: ``-ot`` entries, then the MoE flags."""
    rules = [_parse_rule(e) for e in o.override_tensor]
    if o.cpu_moe:
        rules.append((EXPS_REGEX, "cpu"))
    rules += [(rf"blk\.{i}{EXPS_REGEX}", "cpu") for i in range(o.n_cpu_moe)]
    return tuple(rules)


# common/common.h LLM_FFN_EXPS_REGEX: the routed-expert tensors (gate, up, down, fused gate_up)
EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"


def tensor_devices(sc: Scenario) -> tuple[TensorTable, np.ndarray]:
    """Return the model's tensors and, per tensor, True where its weights live on the GPU."""
    table = tensor_groups.tensor_table(sc.model, sc.setup.weights)
    _, layer_on_gpu = placement(sc)
    on_gpu = np.where(table.position >= 0, layer_on_gpu[np.maximum(table.position, 0)], False)
    forced = tensor_groups.match_overrides(table, override_rules(sc.options))
    on_gpu = np.where(forced == "gpu", True, np.where(forced == "cpu", False, on_gpu))
    return table, on_gpu.astype(bool)


def cpu_weight_rate(sc: Scenario) -> float:
    """Return the rate (B/s) at which CPU-side matmuls stream their weights (model/cpu_rate.py)."""
    o = sc.options
    return cpu_rate.weight_stream_rate(sc.system.host, sc.setup.weights, o.threads, o.numa)


def host_read_rate(sc: Scenario) -> float:
    """Return the rate (B/s) at which CPU attention reads host memory under ``numa``."""
    o, host = sc.options, sc.system.host
    return cpu_rate.host_stream_rate(host, o.threads or host.matmul_threads, o.numa)


def _read_bytes(sc: Scenario, table: TensorTable, batch: float) -> np.ndarray:
    """Return the bytes a step reads of each tensor: routed experts only where the batch routes."""
    k, n = decode.layers(sc.model, sc.setup.weights).expert_use
    touched = float(routing.touched_share(n, k, batch, sc.setup.routing.effective_experts))
    return table.nbytes * np.where(table.routed, touched, 1.0)


def paged_bytes(sc: Scenario, w_cpu: float, kv_cpu: float) -> float:
    """Return the host-resident weight bytes past host capacity that mmap leaves on disk."""
    if sc.options.no_mmap:
        return 0.0
    over = w_cpu + kv_cpu - capacity.host_capacity(sc.system)
    return min(max(over, 0.0), w_cpu)


def _constants(sc: Scenario) -> tuple[float, float]:
    o = sc.options
    share = o.gpu_share if o.gpu_share is not None else gpu_share_default()
    sync = o.split_sync_us * 1e-6 if o.split_sync_us is not None else split_sync_s_default()
    return share, sync


def _hand_overs(sc: Scenario, table: TensorTable, on_gpu: np.ndarray) -> tuple[int, int]:
    """Return the device changes along one token's graph: (host->GPU, GPU->host).

    Each layer runs its matmuls in order, each where its weights are (norms and biases go with
    the op they follow), and its attention where its KV lives, after the attention projections;
    the token embedding is looked up in host memory and the logits are sampled there.
    """
    _, layer_on_gpu = placement(sc)
    kv_on_gpu = layer_on_gpu[:-1] & (not sc.options.no_kv_offload)
    norms = tensor_groups.GROUPS.index("norms")
    attention = tensor_groups.GROUPS.index("attention")
    is_op = (table.group != norms) & np.array([not n.endswith(".bias") for n in table.names])
    seq = [False]  # False: host, True: GPU; the embedding lookup runs on the host
    for p in range(sc.model.n_layers):
        ops = np.flatnonzero((table.position == p) & is_op)
        attn = [i for i in ops if table.group[i] == attention]
        rest = [i for i in ops if table.group[i] != attention]
        seq += (
            [bool(on_gpu[i]) for i in attn] + [bool(kv_on_gpu[p])] + [bool(on_gpu[i]) for i in rest]
        )
    head = np.flatnonzero((table.position == sc.model.n_layers) & is_op)
    seq += [bool(on_gpu[i]) for i in head] + [False]  # sampling on the host
    ups = sum((not a) and b for a, b in itertools.pairwise(seq))
    downs = sum(a and (not b) for a, b in itertools.pairwise(seq))
    return ups, downs


def step_parts(sc: Scenario, context: np.ndarray, batch: float) -> dict[str, np.ndarray]:
    """Return seconds per token on the GPU, on the CPU and crossing devices, over ``context``."""
    return _step_parts_at(sc, batch)(context)


def _step_parts_at(sc: Scenario, batch: float) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """Return step_parts over a context for one scenario and batch, the rest computed once."""
    system, model = sc.system, sc.model
    share, sync = _constants(sc)
    pinned = sc.pinned_or(True)  # the CUDA backend copies through pinned host buffers
    table, on_gpu = tensor_devices(sc)
    lay = decode.layers(model, sc.setup.weights)
    k, n = lay.expert_use
    read = _read_bytes(sc, table, batch)  # bytes a step reads per tensor
    flops = 2 * batch * table.params * np.where(table.routed, k / n, 1.0)
    w_gpu = table.by_position(read, on_gpu)
    w_cpu = table.by_position(read, ~on_gpu)
    f_gpu = table.by_position(flops, on_gpu)
    f_cpu = table.by_position(flops, ~on_gpu)
    _, layer_on_gpu = placement(sc)
    kv_gpu_layer = np.append(layer_on_gpu[:-1] & (not sc.options.no_kv_offload), False)
    # attention over each position's cache, one request's bytes and FLOPs per cached token
    pos_class = np.array(lay.order)
    window = lay.window[pos_class]
    kvb = lay.kv_per_token[pos_class] * float(
        kv.attention_layer_token_bytes(sc.setup.cache_model, sc.setup.kv)
    )
    # a recurrent layer (gated DeltaNet, Mamba) reads its fixed state and writes it back each step
    state = 2 * batch * lay.state_values[pos_class] * kv.state_value_bytes(sc.setup.kv)
    attn_per_token = lay.attn_flops[pos_class]
    gpu_att = np.where(kv_gpu_layer, 1.0, 0.0)
    hbm, att_bw = system.gpu.streaming_bandwidth, system.gpu.attention_rate
    host_bw, host_flops = host_read_rate(sc), system.host.flops.value
    cpu_rate_w = cpu_weight_rate(sc)
    ups, downs = _hand_overs(sc, table, on_gpu)
    activations = batch * model.hidden * 4  # llama.cpp's activations are f32
    lat = system.link.latency.value
    link = ups * (activations / system.copy_rate("h2d", pinned=pinned) + lat + sync)
    logits_on_gpu = bool(
        on_gpu[
            (table.position == model.n_layers)
            & (table.group == tensor_groups.GROUPS.index("output"))
        ].any()
    )
    down_bytes = np.full(downs, activations, dtype=np.float64)
    if logits_on_gpu and downs:  # the last hand-over brings the logits back for sampling
        down_bytes[-1] = batch * model.vocab * 4
    link = link + float((down_bytes / system.copy_rate("d2h", pinned=pinned) + lat + sync).sum())
    # --split-mode layer: the activations pass from one GPU to the next at each boundary (the
    # profile has no GPU-GPU figure: its link's pinned rate and latency)
    link = link + gpu_boundaries(sc) * float(transfer.peer_time(system, activations))

    def at(context: np.ndarray) -> dict[str, np.ndarray]:
        held = np.minimum(np.asarray(context, dtype=np.float64)[..., None], window)
        kv_bytes = batch * held * kvb + state
        attn_flops = batch * held * attn_per_token
        gpu = (
            np.maximum(
                w_gpu / hbm + kv_bytes * gpu_att / att_bw,
                (f_gpu + attn_flops * gpu_att) / system.compute_rate,
            ).sum(axis=-1)
            / share
        )
        cpu = np.maximum(
            w_cpu / cpu_rate_w + kv_bytes * (1 - gpu_att) / host_bw,
            (f_cpu + attn_flops * (1 - gpu_att)) / host_flops,
        ).sum(axis=-1)
        return {"gpu": gpu, "cpu": cpu, "link": np.broadcast_to(link, np.shape(gpu))}

    return at


def _shares(on_gpu: float, on_cpu: float) -> decode.Split:
    """Return the shares of bytes held on the GPU and in host memory."""
    total = on_gpu + on_cpu
    return decode.Split(on_gpu / total, on_cpu / total, 0.0) if total else decode.Split()


def predict(sc: Scenario) -> Prediction:
    """Return llama.cpp's time per token, prefill and memory for the scenario."""
    system, model, o = sc.system, sc.model, sc.options
    parts_at = _step_parts_at(sc, sc.batch)

    def per_token(_point: np.ndarray, context: np.ndarray) -> np.ndarray:
        p = parts_at(context)
        # llama.cpp runs the graph in order: the step is the sum of its parts
        return np.stack([p["gpu"] + p["cpu"] + p["link"], p["gpu"], p["cpu"], p["link"]])

    # the exact mean over every generated token (each part convex and piecewise linear in the
    # context between the windows: sums of maxima of terms linear in min(context, window))
    windows = decode.layers(model, sc.setup.weights).window
    tpot, gpu_s, cpu_s, link_s = decode.token_mean(per_token, sc.prompt, sc.generate, windows)
    ngl, layer_on_gpu = placement(sc)
    table, on_gpu = tensor_devices(sc)
    w_gpu = float(table.nbytes[on_gpu].sum())
    w_cpu = float(table.nbytes[~on_gpu].sum())  # the token embeddings included
    final = sc.prompt + sc.generate
    kv_layers = kv.layer_bytes(sc.setup.cache_model, final, sc.setup.kv) * sc.batch
    kv_gpu = 0.0 if o.no_kv_offload else float(kv_layers[layer_on_gpu[:-1]].sum())
    kv_cpu = float(kv_layers.sum()) - kv_gpu
    # prefill: batches of 32+ tokens copy the CPU-resident weights (not the embedding table) to the
    # GPU and run there
    streamed = float(table.nbytes[~on_gpu & (table.position >= 0)].sum())
    on_gpu_setup = decode.Setup(system, model, sc.setup.weights, sc.setup.kv)
    ttft = float(decode.ttft(on_gpu_setup, sc.prompt, sc.batch)) + streamed / system.copy_rate(
        "h2d", pinned=sc.pinned_or(True)
    )
    # mmap: weights past host capacity stay file pages, read back from disk every step
    paged = paged_bytes(sc, w_cpu, kv_cpu)
    if paged:
        step_read = float(_read_bytes(sc, table, sc.batch)[~on_gpu].sum()) / w_cpu
        disk_s = paged * step_read / system.storage.read_bandwidth.value
        tpot = tpot + disk_s
    else:
        disk_s = 0.0
    mem = decode.Memory(
        gpu=np.asarray(w_gpu + kv_gpu),
        cpu=np.asarray(w_cpu + kv_cpu - paged),
        disk=np.asarray(paged),
        staging=np.asarray(0.0),
    )
    first = int(np.argmax(layer_on_gpu)) if layer_on_gpu.any() else model.n_layers + 1
    where = (
        "all on the CPU"
        if not layer_on_gpu.any()
        else f"layers {first}–{model.n_layers - 1} and the output layer on the GPU"
        if first < model.n_layers
        else "the output layer on the GPU"
    )
    rules = override_rules(o)
    moved = (
        []
        if not rules
        else [
            f"{len(rules)} tensor override(s): {tensor_groups_summary(table, on_gpu, layer_on_gpu)}"
        ]
    )
    kv_where = (
        "all KV in host memory (attention on the CPU)"
        if o.no_kv_offload
        else "each layer's KV with its layer"
    )
    return Prediction(
        scenario=sc,
        tpot_s=float(tpot),
        ttft_s=ttft,
        streams_s={
            "gpu": float(gpu_s),
            "cpu": float(cpu_s),
            "h2d": float(link_s),
            "d2h": 0.0,
            "disk_read": float(disk_s),
            "disk_write": 0.0,
        },
        memory=mem,
        by_overlap_s={},
        resolved=Resolved(
            weights=_shares(w_gpu, w_cpu),
            kv=_shares(kv_gpu, kv_cpu),
            attention="cpu" if o.no_kv_offload else "gpu",
            overlap="none",  # llama.cpp runs the graph's nodes in order
            pinned=sc.pinned_or(True),
            weights_format=sc.setup.weights,
            kv_format=sc.setup.kv,
        ),
        settings={
            "n_gpu_layers": ngl,
            "gpu_layers_from": first,
            "no_kv_offload": o.no_kv_offload,
            "n_cpu_moe": o.n_cpu_moe,
            "layers_per_gpu": layers_per_gpu(sc),  # the output layer counts, as in -ngl
            "cpu_moe": o.cpu_moe,
            "override_tensor": list(o.override_tensor),
            "weights_on_cpu_by_group": {
                g: float(b)
                for g, b in zip(
                    tensor_groups.GROUPS, table.by_group(table.nbytes, ~on_gpu), strict=True
                )
                if b
            },
        },
        policy="; ".join([f"-ngl {ngl}: {where}", *moved, kv_where, *_paging(paged)]),
    )


def _paging(paged: float) -> list[str]:
    """Return, when mmap leaves weights on disk, the policy's words for it."""
    return [f"mmap: {format_bytes(paged)} of weights read from disk each step"] if paged else []


def tensor_groups_summary(table: TensorTable, on_gpu: np.ndarray, layer_on_gpu: np.ndarray) -> str:
    """Return which groups the overrides moved off (or onto) their layer's device, in words."""
    layer_dev = np.where(table.position >= 0, layer_on_gpu[np.maximum(table.position, 0)], False)
    off = table.by_group(table.nbytes, layer_dev & ~on_gpu)
    on = table.by_group(table.nbytes, ~layer_dev & on_gpu)
    words = [
        f"{g} to the CPU ({format_bytes(b)})"
        for g, b in zip(tensor_groups.GROUPS, off, strict=True)
        if b
    ]
    words += [
        f"{g} to the GPU ({format_bytes(b)})"
        for g, b in zip(tensor_groups.GROUPS, on, strict=True)
        if b
    ]
    return ", ".join(words) or "nothing moved"


ENGINE = EngineSpec(
    name="llamacpp",
    options=Options,
    predict=predict,
    placement_option="options.n_gpu_layers (and options.no_kv_offload)",
    pin_option=None,
    refuses={
        "attention": "say options.no_kv_offload: true to keep the KV cache in host memory "
        "and attend on the CPU",
        "overlap": "llama.cpp runs the graph's nodes in order and has no overlap option; "
        "use engine: generic to compare overlap modes",
    },
    # llama.cpp never copies weights to the GPU per step, so there is nothing to stream
    routing_ignored=(
        ("stream", "gpu_hit_rate"),
        "llama.cpp computes each expert where it lies and never streams experts to the GPU; "
        "say where experts live with options.n_cpu_moe, options.cpu_moe or "
        "options.override_tensor instead",
    ),
    prefix_cache=PrefixCache(tiers=("gpu", "cpu"), rule=cache_rule),
)
