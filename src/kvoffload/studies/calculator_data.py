"""What the offline calculator page needs from the package, as one JSON-ready mapping.

The page evaluates the generic engine's step model in the browser (report/calculator/); every
number it uses comes from here: each catalog machine's figures in base units (B, B/s, FLOP/s, s),
each catalog model's layer classes per weight format (``decode.layers``), its KV bytes per token
per KV format, its prefill working set per token, and the model's constants. ``scenario_for`` turns the
page's inputs into the scenario file ``kvoffload predict`` reads, so a test can hold the page to
the package at any point.

The page leaves out what it cannot express: tensor-group placement on the generic engine
(``compute: cpu``), MoE routing skew and expert streaming (uniform routing is used), several GPUs
(the step model runs the layers on one GPU at a time, so a reader types the machine's total
memory) and the engines other than ``generic`` and ``llamacpp`` (calculator_llamacpp.py: its
expert placement). The page runs advise's search itself (calculator_advice.py: its constants).

The reuse question (a prompt whose first tokens sit in a prefix cache) runs on an engine's own
rule (``RULES``: vLLM's native KV offloading connector): ``reuse_scenario_for`` writes the scenario
with its ``reuse:`` block, ``reuse_data`` exports the rule the engine builds (engines/each/vllm.py
``cache_rule``) and the prompts ``reuse.break_even_prompt`` tries.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kvoffload.engines.each import vllm
from kvoffload.engines.each.vllm import MAX_HOST_GIB, GiB
from kvoffload.engines.registry import ENGINES
from kvoffload.engines.scenario import parse_scenario
from kvoffload.engines.spec import CacheRule
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.hardware import System, load_system, system_ids
from kvoffload.inputs.limits import MAX_CONTEXT_TOKENS
from kvoffload.inputs.models import load_model, model_ids
from kvoffload.inputs.precision import KvFormat, WeightFormat
from kvoffload.model import decode, kv, reuse, working_memory
from kvoffload.model.routing import Routing
from kvoffload.studies import calculator_advice, calculator_llamacpp
from kvoffload.studies.calculator_models import WEIGHT_FORMATS, model_entry

VERSION = 1
BUDGET_MS = 50.0  # the article's TPOT budget for interactive use, drawn on the page's chart


@dataclass(frozen=True)
class FigureSpec:
    """One machine figure the page shows and lets a reader type: its key, unit and plausible range.

    ``scale`` converts the page's unit into base units; ``lo`` and ``hi`` are the range
    inputs/ranges.py's field accepts (base units, inclusive); ``optional`` figures may be left
    blank (no pageable rate, no disk bound); ``zero`` allows 0 (a link's latency).
    """

    key: str
    label: str
    unit: str
    scale: float
    lo: float
    hi: float
    optional: bool = False
    zero: bool = False
    main: bool = False  # shown at once; the others sit under "more figures"


# The ranges are those of inputs/ranges.py (Capacity, DeviceBandwidth, LinkBandwidth, FlopRate,
# Latency, storage capacity); tests/studies/test_calculator_data.py holds them to the profile loader.
FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("gpu_memory", "GPU memory", "GB", 1e9, 1e8, 1e15, main=True),
    FigureSpec("gpu_bandwidth", "GPU memory bandwidth", "GB/s", 1e9, 1e9, 1e14, main=True),
    FigureSpec("h2d", "Link, host→GPU", "GB/s", 1e9, 1e7, 1e13, main=True),
    FigureSpec("host_bandwidth", "Host memory bandwidth", "GB/s", 1e9, 1e7, 1e13, main=True),
    FigureSpec("gpu_flops", "GPU dense 16-bit rate reached", "TFLOP/s", 1e12, 1e9, 1e18),
    FigureSpec("attention_bandwidth", "GPU attention read rate", "GB/s", 1e9, 1e9, 1e14),
    # Gpu.attention_flops: prefill attention's measured rate; none: the matmuls' rate
    FigureSpec(
        "gpu_attention_flops", "GPU prefill attention rate", "TFLOP/s", 1e12, 1e9, 1e18, True
    ),
    FigureSpec("d2h", "Link, GPU→host", "GB/s", 1e9, 1e7, 1e13),
    FigureSpec("pageable", "Link, pageable memory", "GB/s", 1e9, 1e7, 1e13, optional=True),
    FigureSpec("link_latency", "Link latency per copy", "µs", 1e-6, 1e-9, 1.0, zero=True),
    FigureSpec("host_memory", "Host memory", "GB", 1e9, 1e8, 1e15),
    FigureSpec("host_flops", "CPU rate", "GFLOP/s", 1e9, 1e9, 1e18),
    # Host.attention_flops: PyTorch's attention on the CPU where measured; none: the CPU rate
    FigureSpec("host_attention_flops", "CPU attention (PyTorch)", "GFLOP/s", 1e9, 1e9, 1e18, True),
    FigureSpec("disk_read", "Disk read", "GB/s", 1e9, 1e7, 1e13),
    FigureSpec("disk_write", "Disk write", "GB/s", 1e9, 1e7, 1e13),
    FigureSpec("disk_latency", "Disk read latency", "µs", 1e-6, 1e-9, 1.0, zero=True),
    FigureSpec("disk_capacity", "Disk capacity", "GB", 1e9, 1e9, 1e16, optional=True),
)
# inputs/hardware.py's checks between figures: attention at most 2% above the memory's rate, the
# pageable rate at most the pinned host→GPU one
ATTENTION_SLACK = 1.02


def machine_figures(system: System) -> dict[str, float | None]:
    """Return the figures the step model reads from a system, in base units (None: not given)."""
    link, host, st = system.link, system.host, system.storage
    return {
        "gpu_memory": system.gpu_memory,
        "gpu_bandwidth": system.gpu.streaming_bandwidth,
        "h2d": link.h2d_bandwidth.value,
        "host_bandwidth": host.memory_bandwidth.value,
        "gpu_flops": system.compute_rate,
        "attention_bandwidth": system.gpu.attention_rate,
        "gpu_attention_flops": (
            system.gpu.attention_flops.value if system.gpu.attention_flops else None
        ),
        "d2h": link.d2h_bandwidth.value,
        "pageable": link.pageable_bandwidth.value if link.pageable_bandwidth else None,
        "link_latency": link.latency.value,
        "host_memory": system.host_memory,
        "host_flops": host.flops.value,
        "host_attention_flops": host.attention_flops.value if host.attention_flops else None,
        "disk_read": st.read_bandwidth.value,
        "disk_write": st.write_bandwidth.value,
        "disk_latency": st.read_latency.value,
        "disk_capacity": system.disk_capacity,
    }


def profile_mapping(
    figures: dict[str, float | None],
    name: str = "calculator machine",
    host_extra: dict | None = None,
    gpu_extra: dict | None = None,
) -> dict:
    """Return an inline hardware profile whose System has exactly ``figures`` (machine_figures' keys).

    One GPU holding the whole GPU memory, its achievable bandwidth as its rating, the dense rate
    reached as its peak (efficiency 1); the link's raw rate the faster of its two directions;
    ``host_extra`` (calculator_llamacpp.host_entry): the machine's cores, threads, sockets, reserve;
    ``gpu_extra`` (calculator_llamacpp.gpu_entry): its GPU's int8 rate.
    """
    f = figures
    gpu = {
        "name": name,
        "memory": f"{f['gpu_memory']!r} B",
        "memory_bandwidth": f"{f['gpu_bandwidth']!r} B/s",
        "memory_bandwidth_achievable": f"{f['gpu_bandwidth']!r} B/s",
        "attention_bandwidth": f"{f['attention_bandwidth']!r} B/s",
        "flops_bf16": f"{f['gpu_flops']!r} FLOP/s",
        **(
            {"attention_flops": f"{f['gpu_attention_flops']!r} FLOP/s"}
            if f["gpu_attention_flops"] is not None
            else {}
        ),
        **(calculator_llamacpp.gpu_mapping(gpu_extra) if gpu_extra else {}),
    }
    link = {
        "name": name,
        "raw_bandwidth": f"{max(f['h2d'], f['d2h'])!r} B/s",
        "h2d_bandwidth": f"{f['h2d']!r} B/s",
        "d2h_bandwidth": f"{f['d2h']!r} B/s",
        "latency": f"{f['link_latency']!r} s",
    }
    if f["pageable"] is not None:
        link["pageable_bandwidth"] = f"{f['pageable']!r} B/s"
    host = {
        "name": name,
        "memory": f"{f['host_memory']!r} B",
        "memory_bandwidth": f"{f['host_bandwidth']!r} B/s",
        "flops": f"{f['host_flops']!r} FLOP/s",
        **(
            {"attention_flops": f"{f['host_attention_flops']!r} FLOP/s"}
            if f["host_attention_flops"] is not None
            else {}
        ),
        **(calculator_llamacpp.host_mapping(host_extra) if host_extra else {}),
    }
    storage = {
        "name": name,
        "read_bandwidth": f"{f['disk_read']!r} B/s",
        "write_bandwidth": f"{f['disk_write']!r} B/s",
        "read_latency": f"{f['disk_latency']!r} s",
    }
    if f["disk_capacity"] is not None:
        storage["capacity"] = f"{f['disk_capacity']!r} B"
    return {"id": "calculator", "name": name, "gpu": gpu, "link": link, "host": host,
            "storage": storage}  # fmt: skip


def scenario_for(inputs: dict[str, Any]) -> dict[str, Any]:
    """Return the scenario mapping (as `kvoffload predict` reads it) for the page's inputs.

    ``inputs``: ``machine`` (a catalog id), ``figures`` (base units, overriding the machine's;
    may be empty), ``model``, ``weights_format``, ``kv_format``, ``prompt``, ``generate``,
    ``batch``, ``weights`` and ``kv`` (shares ``{gpu, cpu, disk}``), ``attention``, ``overlap``
    and ``pinned``. Without overrides the hardware is the catalog id itself. ``engine``
    ``llamacpp`` (default ``generic``): its ``llamacpp`` inputs are the options instead of the
    placement (calculator_llamacpp.options_of).
    """
    overrides = inputs.get("figures") or {}
    if overrides:
        system = load_system(inputs["machine"])
        figures = {**machine_figures(system), **overrides}
        hardware: str | dict = profile_mapping(
            figures,
            host_extra=calculator_llamacpp.host_entry(system),
            gpu_extra=calculator_llamacpp.gpu_entry(system),
        )
    else:
        hardware = inputs["machine"]
    if inputs.get("engine", "generic") == "llamacpp":
        return {
            "hardware": hardware,
            "model": inputs["model"],
            "engine": "llamacpp",
            "precision": {"weights": inputs["weights_format"], "kv": inputs["kv_format"]},
            "workload": {
                "batch": int(inputs["batch"]),
                "prompt": int(inputs["prompt"]),
                "generate": int(inputs["generate"]),
            },
            "options": calculator_llamacpp.options_of(inputs),
        }
    return {
        "hardware": hardware,
        "model": inputs["model"],
        "engine": "generic",
        "precision": {"weights": inputs["weights_format"], "kv": inputs["kv_format"]},
        "workload": {
            "batch": int(inputs["batch"]),
            "prompt": int(inputs["prompt"]),
            "generate": int(inputs["generate"]),
        },
        "placement": {"weights": dict(inputs["weights"]), "kv": dict(inputs["kv"])},
        "attention": inputs["attention"],
        "overlap": inputs["overlap"],
        "pinned": bool(inputs["pinned"]),
    }


def _shared() -> dict[str, Any]:
    """Return what every export of the step model carries: its modes, streams and constants."""
    return {
        "version": VERSION,
        "budget_ms": BUDGET_MS,
        "chunk_tokens": working_memory.CHUNK_TOKENS,
        "activation_bytes": working_memory.FP16,
        "overlap_modes": list(decode.OVERLAP_MODES),
        "streams": list(decode.STREAMS),
        "stream_names": dict(decode.STREAM_NAMES),
        # decode.cpu_stream_name: the 'cpu' stream named by what it holds
        "cpu_stream_names": {
            "attention": decode.cpu_stream_name(True, False),
            "matmuls": decode.cpu_stream_name(False, True),
        },
        "weight_formats": [f.value for f in WEIGHT_FORMATS],
        "kv_formats": [f.value for f in KvFormat],
        "state_value_bytes": {f.value: kv.state_value_bytes(f) for f in KvFormat},
    }


def calculator_data() -> dict[str, Any]:
    """Return everything the calculator page evaluates, JSON-ready (no NaN, no infinity)."""
    machines = []
    for sid in system_ids():
        system = load_system(sid)
        machines.append(
            {
                "id": sid,
                "name": system.name,
                "figures": machine_figures(system),
                "host": calculator_llamacpp.host_entry(system),
                "gpu": calculator_llamacpp.gpu_entry(system),
            }
        )
    models = []
    for mid in model_ids():
        model = load_model(mid)
        models.append({**model_entry(model), "llamacpp": calculator_llamacpp.model_entry(model)})
    return {
        **_shared(),
        "figures": [asdict(f) for f in FIGURES],
        "attention_slack": ATTENTION_SLACK,
        "machines": machines,
        "models": models,
        "reuse": reuse_data(),
        "llamacpp": calculator_llamacpp.shared(),
        "advice": calculator_advice.advice_data(),
    }


@dataclass(frozen=True)
class RuleChoice:
    """One engine's prefix-cache rule the page offers, as the scenario's engine and options say it.

    ``weights_option`` gives the GiB of weights in host memory, ``size_option`` the GiB of the
    host tier; ``options`` the rest (the engine's defaults otherwise).
    """

    key: str
    label: str
    engine: str
    options: dict[str, Any]
    weights_option: str
    size_option: str


RULES: tuple[RuleChoice, ...] = (
    RuleChoice(
        "vllm-native",
        "vLLM, native connector",
        "vllm",
        {"kv_offloading_backend": "native"},
        "cpu_offload_gb",
        "kv_offloading_size",
    ),
)


def rule_choice(key: str) -> RuleChoice:
    """Return the rule the page names ``key`` (ValueError for another)."""
    for choice in RULES:
        if choice.key == key:
            return choice
    raise ValueError(f"no rule {key!r}; the page offers {', '.join(c.key for c in RULES)}")


def cache_rule_of(choice: RuleChoice) -> CacheRule:
    """Return the prefix cache the engine builds for ``choice`` (a host tier of 1 GiB given)."""
    sc = parse_scenario(
        {
            "hardware": system_ids()[0],
            "model": "llama-3.1-8b",
            "engine": choice.engine,
            "options": {**choice.options, choice.size_option: 1.0},
            "workload": {"batch": 1, "prompt": 16, "generate": 1},
        }
    )
    return ENGINES[choice.engine].prefix_cache.rule(sc)


def reuse_data() -> dict[str, Any]:
    """Return what the page's reuse question reads: each rule's reload and the bounds it checks."""
    rules = []
    for choice in RULES:
        cache = cache_rule_of(choice)
        r = cache.reload
        rules.append(
            {
                **asdict(choice),
                "engine_tiers": list(ENGINES[choice.engine].prefix_cache.tiers),
                "tiers": list(cache.capacities),  # with a host tier given
                "reload": {
                    "block_tokens": r.block_tokens,
                    "per_item_s": r.copy.per_item_s,
                    "rate_share": r.copy.rate_share,
                    "combine": r.combine,
                    "per_hit_s": r.per_hit_s,
                    "item_spans_layers": r.item_spans_layers,
                    "recompute_last": r.recompute_last,
                    "pinned": r.pinned,
                },
                "break_even_grid": [int(x) for x in reuse.break_even_grid(r)],
            }
        )
    return {
        "rules": rules,
        "tiers": list(reuse.TIERS),
        "gib": GiB,
        "max_host_gib": MAX_HOST_GIB,
        "max_cached_tokens": MAX_CONTEXT_TOKENS,
        "break_even_limit": reuse.BREAK_EVEN_LIMIT,
        # vllm.batched_tokens: vllm serve's chunked-prefill budget, by the GPU's memory and name
        "batched_tokens": {
            "large": vllm.BATCHED_TOKENS_LARGE,
            "other": vllm.BATCHED_TOKENS,
            "large_gpu_bytes": vllm.LARGE_GPU_BYTES,
        },
    }


def reuse_scenario_for(inputs: dict[str, Any]) -> dict[str, Any]:
    """Return the scenario of the page's reuse question, as `kvoffload predict` reads it.

    ``inputs``: ``scenario_for``'s, with ``reuse``: ``rule`` (a ``RULES`` key),
    ``cached_tokens``, ``tier`` and ``host_cache_gib``. The machine, model, formats, workload and
    pinning are the page's; the weights' host share becomes the engine's weights option; the
    engine places the KV itself (vLLM: on the GPU). Weights on disk are refused (InputError).
    """
    r = inputs["reuse"]
    choice = rule_choice(r["rule"])
    if inputs["weights"]["disk"] > 0:
        raise InputError(
            f"{choice.label} keeps no weights on disk; give their disk share to host memory",
            field="placement.weights",
        )
    base = scenario_for(inputs)
    fmt = WeightFormat(inputs["weights_format"])
    weights = float(decode.step_weight_bytes(load_model(inputs["model"]), fmt))
    options = {
        **choice.options,
        choice.weights_option: inputs["weights"]["cpu"] * weights / GiB,
        choice.size_option: float(r["host_cache_gib"]),
    }
    return {
        "hardware": base["hardware"],
        "model": base["model"],
        "engine": choice.engine,
        "precision": base["precision"],
        "workload": base["workload"],
        "pinned": base["pinned"],
        "options": options,
        "reuse": {"cached_tokens": int(r["cached_tokens"]), "tier": r["tier"]},
    }


def sessions_that_fit(setup: decode.Setup, host_bytes: float, context: int) -> int:
    """Return how many sessions of ``context`` tokens the host tier's bytes hold, whole."""
    one = float(reuse.cache_bytes(setup, context))
    return int(host_bytes // one) if one > 0 else 0


def setup_data(setup: decode.Setup) -> dict[str, Any]:
    """Return the export for one setup: its machine and model alone, its formats and placement.

    The step model the browser evaluates (report/calculator/model.js) reads whole-model shares,
    uniform routing and every KV head stored; a setup it cannot express is refused (ValueError).
    """
    p = setup.placement
    plain = setup.kv_heads_stored is None and setup.cpu_kv_passes == 1.0
    if p.groups or not plain or setup.routing != Routing():
        raise ValueError(
            "the browser's step model takes whole-model shares, uniform routing and every KV head"
        )
    system, model = setup.system, setup.model
    return {
        **_shared(),
        "machines": [{"id": system.id, "name": system.name, "figures": machine_figures(system)}],
        "models": [model_entry(model)],
        "setup": {
            "weights_format": setup.weights.value,
            "kv_format": setup.kv.value,
            "weights": {t: float(getattr(p.weights, t)) for t in ("gpu", "cpu", "disk")},
            "kv": {t: float(getattr(p.kv, t)) for t in ("gpu", "cpu", "disk")},
            "attention": p.attention,
            "overlap": p.overlap,
            "pinned": p.pinned,
        },
    }
