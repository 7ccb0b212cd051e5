"""MoE and partial offload with llama.cpp: experts on the CPU against whole layers, and routing.

A mixture-of-experts model that does not fit the GPU can be run three ways with llama.cpp at
batch 1: keep the routed experts of the first N layers in host memory and compute them on the CPU
(``--n-cpu-moe N``, which adds ``blk\\.i\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU`` for i < N:
``LLM_FFN_EXPS_REGEX`` and ``llm_add_n_cpu_ffn_overrides`` in ggml-org/llama.cpp common/common.h
at 001d906a6d86e2490e394361e7cc6f478b100088), move whole layers to the CPU (``-ngl``), or take a
smaller weight format that fits whole. Every figure is the llama.cpp engine's prediction
(``engines/each/llamacpp.py``); a fit is ``capacity.within`` / ``capacity.fits``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.models import Model
from kvoffload.inputs.precision import WeightFormat
from kvoffload.inputs.text import markdown_text
from kvoffload.inputs.units import format_number
from kvoffload.model import capacity, decode, routing, tensor_groups, transfer
from kvoffload.model.prediction import Scenario

# The formats tried for "a smaller format on the GPU", largest first; mxfp4 only where the model
# ships its experts in MXFP4 (gpt-oss), since requantising another model to it is not the usual path.
SMALLER_FORMATS = ("q8_0", "q6_k", "q5_k_m", "q4_k_m", "mxfp4", "q4_0")
GENERATE = 128  # tokens generated after the prompt (the step is averaged over them)
KV = "fp16"  # llama.cpp's default cache type (-ctk/-ctv f16)

WHOLE = "everything on the GPU"
EXPERTS = "experts on the CPU"
LAYERS = "whole layers on the CPU"
SMALLER = "a smaller format on the GPU"
NCMOE = "--n-cpu-moe"
NGL = "--n-gpu-layers"


def native_mxfp4(model: Model) -> bool:
    """True when the model ships its routed experts in MXFP4 (gpt-oss: quant_method mxfp4)."""
    return model.ships_mxfp4_experts


def _require_moe(model: Model) -> None:
    if model.moe is None:
        raise InputError(
            f"{model.name} is not a mixture of experts: --n-cpu-moe has no experts to move",
            field="model",
        )


def _scenario(
    hardware: str, model: str, fmt: str, prompt: int, options: dict, batch: int = 1
) -> Scenario:
    """Return a llama.cpp scenario for one placement of ``model`` in ``fmt``."""
    raw = {
        "hardware": hardware,
        "model": model,
        "engine": "llamacpp",
        "precision": {"weights": str(fmt), "kv": KV},
        "workload": {"batch": batch, "prompt": prompt, "generate": GENERATE},
        "options": {"fit": False, **options},  # the placement as given, no --fit search
    }
    return parse_scenario(raw, name="moe-offload")


_POINT_KEYS = ("gpu_bytes", "cpu_bytes", "tokens_per_s", "fits_gpu", "host_holds")


def _point(hardware: str, model: str, fmt: str, prompt: int, options: dict) -> dict:
    """Return one placement's GPU and host bytes, tokens/s and fits (the engine's prediction)."""
    sc = _scenario(hardware, model, fmt, prompt, options)
    pred = predict(sc, check=False)
    gpu, cpu = float(pred.memory.gpu), float(pred.memory.cpu)
    return {
        "gpu_bytes": gpu,
        "cpu_bytes": cpu,
        "tokens_per_s": sc.batch / pred.tpot_s,
        "fits_gpu": bool(capacity.within(gpu, sc.system.gpu_memory)),
        "host_holds": bool(capacity.within(cpu, sc.system.host_memory)),
        "fits": bool(capacity.fits(sc.system, gpu, cpu)),
    }


def ncmoe_curve(hardware: str, model: str, fmt: str = "q4_k_m", prompt: int = 4096) -> pd.DataFrame:
    """Return tokens/s and memory for every --n-cpu-moe (0..n_layers) and every -ngl (0..n+1).

    One row per setting: ``setting`` (``--n-cpu-moe`` or ``--n-gpu-layers``), ``value``,
    ``option`` (as typed), ``gpu_bytes``, ``cpu_bytes``, ``gpu_gb``, ``tokens_per_s`` at batch 1,
    ``fits_gpu``, ``host_holds``, ``fits`` (both), and ``capacity_gb`` (the machine's GPU memory).
    The --n-cpu-moe rows keep every layer on the GPU otherwise (llama.cpp's -ngl default here).
    """
    sc = _scenario(hardware, model, fmt, prompt, {})  # validates the inputs first
    llm = sc.model
    _require_moe(llm)
    rows = []
    for n in range(llm.n_layers + 1):
        rows.append({"setting": NCMOE, "value": n, "option": f"--n-cpu-moe {n}",
                     **_point(hardware, model, fmt, prompt, {"n_cpu_moe": n})})  # fmt: skip
    for n in range(llm.n_layers + 2):
        rows.append({"setting": NGL, "value": n, "option": f"-ngl {n}",
                     **_point(hardware, model, fmt, prompt, {"n_gpu_layers": n})})  # fmt: skip
    curve = pd.DataFrame(rows)
    curve["gpu_gb"] = curve["gpu_bytes"] / 1e9
    curve["capacity_gb"] = sc.system.gpu_memory / 1e9
    return curve


@dataclass(frozen=True)
class FitOptions:
    """The ways to run an MoE model with llama.cpp at batch 1 on one machine, one row per way.

    ``rows`` columns: ``way`` (everything on the GPU, then the three ways), ``option`` (as a user
    types it; empty where nothing fits), ``weights``, ``gpu_bytes``, ``cpu_bytes``,
    ``tokens_per_s``, ``fits_gpu``, ``host_holds``, ``note``.
    """

    model_name: str
    weights: str
    context: int
    gpu_capacity_bytes: float
    host_capacity_bytes: float
    n_layers: int
    n_experts: int
    experts_per_token: int
    rows: pd.DataFrame

    def row(self, way: str) -> pd.Series:
        """Return the row of one way (``WHOLE``, ``EXPERTS``, ``LAYERS`` or ``SMALLER``)."""
        return self.rows.set_index("way").loc[way]


def _none_row(way: str, weights: str, note: str) -> dict:
    return {"way": way, "option": "", "weights": weights, "gpu_bytes": math.nan,
            "cpu_bytes": math.nan, "tokens_per_s": math.nan, "fits_gpu": False,
            "host_holds": False, "note": note}  # fmt: skip


def _gb(x: float) -> str:
    return f"{format_number(x / 1e9)} GB"


def fit_options(hardware: str, model: str, fmt: str = "q4_k_m", context: int = 4096) -> FitOptions:
    """Compare experts on the CPU, whole layers on the CPU and a smaller format, at batch 1.

    (a) the smallest ``--n-cpu-moe`` whose GPU memory fits; (b) the largest ``-ngl`` that fits;
    (c) the largest of the formats in ``SMALLER_FORMATS`` with fewer weight bytes than ``fmt``
    that fits the GPU whole. A way that nothing makes fit keeps a row saying so.
    """
    sc = _scenario(hardware, model, fmt, context, {})  # validates the inputs first
    llm, wf, system = sc.model, sc.setup.weights, sc.system
    _require_moe(llm)
    curve = ncmoe_curve(hardware, model, fmt, context)
    whole = {"way": WHOLE, "option": "(defaults)", "weights": wf.value,
             **_point(hardware, model, fmt, context, {})}  # fmt: skip
    rows = [whole]

    experts = curve[(curve["setting"] == NCMOE) & curve["fits_gpu"]]
    if len(experts):
        e = experts.iloc[0]  # the fewest layers' experts on the CPU
        rows.append({"way": EXPERTS, "option": e["option"], "weights": wf.value,
                     **{k: e[k] for k in _POINT_KEYS}, "note": ""})  # fmt: skip
    else:
        least = curve[curve["setting"] == NCMOE]["gpu_bytes"].min()
        rows.append(_none_row(EXPERTS, wf.value, f"does not fit: with every expert on the CPU the "
                              f"GPU still needs {_gb(least)}"))  # fmt: skip

    layers = curve[(curve["setting"] == NGL) & curve["fits_gpu"]].iloc[-1]  # -ngl 0 always fits
    rows.append({"way": LAYERS, "option": layers["option"], "weights": wf.value,
                 **{k: layers[k] for k in _POINT_KEYS},
                 "note": "every layer on the CPU" if layers["value"] == 0 else ""})  # fmt: skip

    own = decode.resident_weight_bytes(llm, wf)
    candidates = [
        WeightFormat(f)
        for f in SMALLER_FORMATS
        if (f != "mxfp4" or native_mxfp4(llm))
        and decode.resident_weight_bytes(llm, WeightFormat(f)) < own
    ]
    candidates.sort(key=lambda f: decode.resident_weight_bytes(llm, f), reverse=True)
    for f in candidates:
        p = _point(hardware, model, f.value, context, {})
        if p["fits_gpu"]:
            rows.append({"way": SMALLER, "option": f"-m {llm.id}-{f.value.upper()}.gguf",
                         "weights": f.value, **p, "note": ""})  # fmt: skip
            break
    else:
        tried = ", ".join(f.value for f in candidates) or "none smaller than this one"
        rows.append(_none_row(SMALLER, "", f"no smaller format fits the GPU whole (tried {tried})"))

    frame = pd.DataFrame(rows).drop(columns="fits", errors="ignore")
    frame["note"] = frame["note"].fillna("")
    if whole["fits_gpu"]:
        frame.loc[frame["way"] != WHOLE, "note"] = "not needed: the whole model fits the GPU"
    return FitOptions(
        model_name=llm.name,
        weights=wf.value,
        context=context,
        gpu_capacity_bytes=system.gpu_memory,
        host_capacity_bytes=system.host_memory,
        n_layers=llm.n_layers,
        n_experts=llm.moe.n_experts,
        experts_per_token=llm.moe.experts_per_token,
        rows=frame[["way", "option", "weights", "gpu_bytes", "cpu_bytes", "tokens_per_s",
                    "fits_gpu", "host_holds", "note"]],
    )  # fmt: skip


def best_within(curve: pd.DataFrame, setting: str, budget_bytes: float) -> pd.Series | None:
    """Return the fastest point of one setting that uses at most ``budget_bytes`` of GPU memory."""
    ok = curve[(curve["setting"] == setting) & (curve["gpu_bytes"] <= budget_bytes)]
    return None if ok.empty else ok.loc[ok["tokens_per_s"].idxmax()]


def at_memory(curve: pd.DataFrame, setting: str, gpu_bytes: float) -> float:
    """Return one setting's tokens/s read off its curve at ``gpu_bytes`` (linear between points).

    Settings move GPU memory in steps of a layer (or a layer's experts), and the two curves' steps
    differ, so the curves are compared at the same GPU memory rather than setting by setting.
    Outside a curve's range the value at its nearer end is returned.
    """
    points = curve[curve["setting"] == setting].groupby("gpu_bytes")["tokens_per_s"].max()
    return float(np.interp(gpu_bytes, points.index.to_numpy(), points.to_numpy()))


def routed_bytes(hardware: str, model: str, fmt: str, batches: ArrayLike) -> pd.DataFrame:
    """Return the routed-expert bytes one decode step reads against batch, under uniform routing.

    Columns: ``batch``, ``experts_touched`` (per MoE layer), ``touched_share``, ``routed_gb`` (the
    bytes of the experts the batch touches: what llama.cpp reads, and what an engine that streams
    only routed experts moves over the link), ``all_experts_gb`` (every routed expert: what an
    engine that streams every expert moves), and the link time of each at this machine's pinned
    host-to-GPU copy rate (``link_touched_ms``: one copy per touched expert and layer;
    ``link_all_ms``: one copy per layer).
    """
    sc = _scenario(hardware, model, fmt, 1, {})
    llm, system = sc.model, sc.system
    _require_moe(llm)
    table = tensor_groups.tensor_table(llm, sc.setup.weights)
    every = float(table.nbytes[table.routed].sum())
    moe_layers = len(np.unique(table.position[table.routed]))
    n, k = llm.moe.n_experts, llm.moe.experts_per_token
    b = np.asarray(batches, dtype=np.float64)
    touched = routing.experts_touched(n, k, b)
    share = routing.touched_share(n, k, b)
    read = share * every
    return pd.DataFrame(
        {
            "batch": b.astype(np.int64),
            "experts_touched": touched,
            "touched_share": share,
            "routed_gb": read / 1e9,
            "all_experts_gb": np.full_like(b, every / 1e9),
            "link_touched_ms": transfer.link_time(system, read, transfers=touched * moe_layers)
            * 1e3,
            "link_all_ms": np.broadcast_to(transfer.link_time(system, every, transfers=moe_layers)
                                           * 1e3, b.shape),
        }
    )  # fmt: skip


def half_touched_batch(n_experts: int, per_token: int) -> int:
    """Return the smallest batch whose step touches at least half of each layer's routed experts."""
    miss = 1.0 - per_token / n_experts  # a token misses one expert with this probability
    return 1 if miss <= 0.5 else math.ceil(math.log(0.5) / math.log(miss))


@dataclass(frozen=True)
class Headline:
    """The values the chapter's prose needs, and its answer in one or two sentences."""

    model_name: str
    weights: str
    context: int
    gpu_gb: float  # the machine's GPU memory
    host_gb: float
    whole_fits: bool
    whole_gb: float
    whole_tps: float
    experts_option: str  # '' when no --n-cpu-moe fits
    experts_gb: float
    experts_cpu_gb: float
    experts_tps: float
    experts_host_holds: bool
    layers_option: str
    layers_gb: float
    layers_tps: float
    smaller_option: str  # '' when no smaller format fits
    smaller_weights: str
    smaller_tps: float
    speedup: float  # experts_tps / layers_tps (nan when no --n-cpu-moe fits)
    budget_gb: float  # the GPU memory at which the two curves are compared
    budget_experts_tps: float  # the --n-cpu-moe curve read off there
    budget_layers_tps: float  # the -ngl curve read off there
    share_batch_1: float  # of the routed experts, the share a batch-1 step reads
    half_batch: int  # the smallest batch that reads half of them
    share_batch_max: float
    batch_max: int

    @property
    def budget_ratio(self) -> float:
        """Return how many times faster experts on the CPU are at the same GPU memory."""
        return self.budget_experts_tps / self.budget_layers_tps

    @property
    def answer(self) -> str:
        """Return the chapter's answer for this machine in one or two sentences (Markdown)."""
        name = f"{markdown_text(self.model_name)} in {self.weights.upper()}"  # a user's config
        if self.whole_fits:
            return (
                f"{name} fits this GPU whole ({format_number(self.whole_gb)} GB of {format_number(self.gpu_gb)} GB with "
                f"a {self.context:,}-token cache) and decodes at {format_number(self.whole_tps)} tokens/s, so "
                f"nothing has to move to the CPU here. "
                + self._comparison(
                    f"Read off the curves below at half that ({format_number(self.budget_gb)} GB)"
                )
            )
        head = (
            f"{name} needs {format_number(self.whole_gb)} GB of GPU memory with a {self.context:,}-token "
            f"cache, more than this GPU's {format_number(self.gpu_gb)} GB."
        )
        if self.experts_option:
            body = (
                f" Keeping the routed experts of the first layers on the CPU "
                f"(`{self.experts_option}`) runs it at {format_number(self.experts_tps)} tokens/s, "
                f"{relative(self.speedup)} moving whole layers to the CPU "
                f"(`{self.layers_option}`, {format_number(self.layers_tps)} tokens/s)"
            )
            if not self.experts_host_holds:
                body += (
                    f", though host memory ({format_number(self.host_gb)} GB) cannot hold the "
                    f"{format_number(self.experts_cpu_gb)} GB it leaves there"
                )
        else:
            body = (
                f" Even with every expert on the CPU it does not fit; only whole layers on the "
                f"CPU (`{self.layers_option}`) run it, at {format_number(self.layers_tps)} tokens/s"
            )
        tail = (
            f"; a smaller file, {self.smaller_weights.upper()}, fits the GPU whole at "
            f"{format_number(self.smaller_tps)} tokens/s."
            if self.smaller_option
            else "; no smaller format fits the GPU whole."
        )
        return head + body + tail

    @property
    def comparison(self) -> str:
        """Return the equal-GPU-memory comparison of the two curves as a sentence (Markdown)."""
        return self._comparison(
            f"Read off the two curves at {format_number(self.budget_gb)} GB of GPU memory"
        )

    def _comparison(self, where: str) -> str:
        return (
            f"{where}, experts on the CPU give {format_number(self.budget_experts_tps)} tokens/s and whole "
            f"layers {format_number(self.budget_layers_tps)}: experts on the CPU run "
            f"{relative(self.budget_ratio)} whole layers there."
        )


def relative(ratio: float) -> str:
    """Return a speed ratio in words: 'N times as fast as', 'about as fast as' or 'slower than'."""
    if ratio >= 1.05:
        return f"{format_number(ratio, 2)} times as fast as"
    if ratio > 1 / 1.05:
        return "about as fast as"
    return f"{format_number(1 / ratio, 2)} times slower than"


def headline(fits: FitOptions, curve: pd.DataFrame, routed: pd.DataFrame) -> Headline:
    """Return the prose's values from ``fit_options``, ``ncmoe_curve`` and ``routed_bytes``.

    The curves are compared at this machine's GPU memory when the model does not fit whole, and at
    half the whole model's GPU memory when it does (no less than the least GPU memory
    --n-cpu-moe can use).
    """
    whole, experts, layers, smaller = (fits.row(w) for w in (WHOLE, EXPERTS, LAYERS, SMALLER))
    whole_fits = bool(whole["fits_gpu"])
    least = float(curve.loc[curve["setting"] == NCMOE, "gpu_bytes"].min())
    budget = whole["gpu_bytes"] / 2 if whole_fits else fits.gpu_capacity_bytes
    budget = max(float(budget), least)
    has_experts = bool(experts["option"])
    last = routed.iloc[-1]
    return Headline(
        model_name=fits.model_name,
        weights=fits.weights,
        context=fits.context,
        gpu_gb=fits.gpu_capacity_bytes / 1e9,
        host_gb=fits.host_capacity_bytes / 1e9,
        whole_fits=whole_fits,
        whole_gb=float(whole["gpu_bytes"]) / 1e9,
        whole_tps=float(whole["tokens_per_s"]),
        experts_option=str(experts["option"]),
        experts_gb=float(experts["gpu_bytes"]) / 1e9,
        experts_cpu_gb=float(experts["cpu_bytes"]) / 1e9,
        experts_tps=float(experts["tokens_per_s"]),
        experts_host_holds=bool(experts["host_holds"]),
        layers_option=str(layers["option"]),
        layers_gb=float(layers["gpu_bytes"]) / 1e9,
        layers_tps=float(layers["tokens_per_s"]),
        smaller_option=str(smaller["option"]),
        smaller_weights=str(smaller["weights"]),
        smaller_tps=float(smaller["tokens_per_s"]),
        speedup=float(experts["tokens_per_s"] / layers["tokens_per_s"])
        if has_experts
        else math.nan,
        budget_gb=budget / 1e9,
        budget_experts_tps=at_memory(curve, NCMOE, budget),
        budget_layers_tps=at_memory(curve, NGL, budget),
        share_batch_1=fits.experts_per_token / fits.n_experts,
        half_batch=half_touched_batch(fits.n_experts, fits.experts_per_token),
        share_batch_max=float(last["touched_share"]),
        batch_max=int(last["batch"]),
    )
