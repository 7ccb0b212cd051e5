"""The engines side by side: one workload on one machine, llama.cpp's layer split, InfLLM's bytes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from kvoffload.engines.each import infllm
from kvoffload.engines.scenario import check_fits, parse_scenario, predict
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.models import Model, load_model
from kvoffload.inputs.precision import WeightFormat
from kvoffload.inputs.units import format_number
from kvoffload.model import decode, kv
from kvoffload.model.prediction import Scenario
from kvoffload.studies import fit_marks

KV = "bf16"  # every setup's cache format
# label -> (engine, options, placement, weights); options "half": offload half the weights (vLLM)
ENGINE_SETUPS: dict[str, tuple[str, dict[str, Any] | str, dict | None, str]] = {
    "generic, all KV in host memory": ("generic", {}, {"kv": {"cpu": 1.0}}, "bf16"),
    "llama.cpp, all layers on the GPU": ("llamacpp", {"fit": False}, None, "q4_k_m"),
    "llama.cpp, --no-kv-offload": (
        "llamacpp",
        {"no_kv_offload": True, "fit": False},
        None,
        "q4_k_m",
    ),
    "vLLM, half the weights offloaded": ("vllm", "half", None, "bf16"),
    "ZeRO-Inference, weights in host memory": ("zero-inference", {}, None, "bf16"),
    "HF Accelerate, weights in host memory": ("hf-accelerate", {}, None, "bf16"),
    "FlexGen, searched policy": ("flexgen", {}, None, "bf16"),
    "InfLLM": ("infllm", {}, None, "bf16"),
}


def _scenario(
    label: str, hardware: str | dict, model: str, prompt: int, generate: int, batch: int
) -> Scenario:
    """Return the scenario of one ``ENGINE_SETUPS`` row for the workload."""
    engine, options, placement, weights = ENGINE_SETUPS[label]
    if options == "half":
        w = decode.resident_weight_bytes(load_model(model), WeightFormat(weights))
        options = {"cpu_offload_gb": w / 2 / 2**30}
    raw = {
        "hardware": hardware,
        "model": model,
        "engine": engine,
        "precision": {"weights": weights, "kv": KV},
        "workload": {"batch": batch, "prompt": prompt, "generate": generate},
        "options": options,
    }
    if placement:
        raw["placement"] = placement
    return parse_scenario(raw, name=label)


def engine_predictions(
    hardware: str | dict, model: str, prompt: int, generate: int, batch: int = 1
) -> pd.DataFrame:
    """Return each engine's prediction for one workload on one machine (fitting or not).

    Times in ms or s as the column names say, memory in bytes, each step's busy time by resource;
    ``weights`` and ``kv`` name each setup's formats, ``fits`` says whether it fits and
    ``fits_text`` how (``fit_marks.fits_cell``: "yes" or what it needs of what the machine has).
    """
    rows = []
    for label in ENGINE_SETUPS:
        sc = _scenario(label, hardware, model, prompt, generate, batch)
        formats = {"weights": ENGINE_SETUPS[label][3], "kv": KV}
        try:
            pred = predict(sc, check=False)
        except InputError as exc:  # e.g. a policy search with nothing that fits
            rows.append({"engine": label, **formats, "fits": False,
                         "fits_text": "does not fit (see the note)", "note": exc.problem})  # fmt: skip
            continue
        out = pred.to_json()
        fits_text = fit_marks.memory_fits_cell(sc.system, pred.memory)
        rows.append(
            {
                "engine": label,
                **formats,
                "TPOT (ms)": out["tpot_ms"],
                "TTFT (s)": out["ttft_ms"] / 1e3,
                "decode tokens/s": out["decode_tokens_per_s"],
                "gpu_bytes": out["memory"]["gpu_bytes"],
                "cpu_bytes": out["memory"]["cpu_bytes"],
                "GPU (ms/step)": out["step"]["compute_ms"],
                "link (ms/step)": out["step"]["transfer_ms"],
                "CPU (ms/step)": out["step"]["cpu_ms"],
                "disk (ms/step)": out["step"]["disk_ms"],
                "fits": fits_text == fit_marks.FITS,
                "fits_text": fits_text,
                "note": out.get("policy") or "",
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Fastest:
    """The engine setup with the shortest decode step among those that fit, and FlexGen's policy."""

    engine: str | None  # None: no setup fits this machine
    tpot_ms: float  # nan when none fits
    flexgen_policy: str
    # faster setups that do not fit, (label, TPOT ms), fastest first: why they were not chosen
    faster_unfit: tuple[tuple[str, float], ...] = ()

    def sentence(self) -> str:
        """Return, as Markdown, which setup has the shortest step that fits, and what was passed over."""
        if self.engine is None:
            text = (
                "No engine's setup fits this machine for this workload (see the fits column "
                "and the notes under the table), so none is named the fastest."
            )
            if self.faster_unfit:
                e, t = self.faster_unfit[0]
                text += f" The shortest predicted step, `{e}` at {_ms(t)} ms, does not fit either."
            return text
        text = f"The shortest step that fits this machine is {_ms(self.tpot_ms)} ms, with `{self.engine}`."
        if self.faster_unfit:
            one = len(self.faster_unfit) == 1
            unfit = _and_list([f"`{e}` ({_ms(t)} ms)" for e, t in self.faster_unfit])
            text += (
                f" {unfit} {'is' if one else 'are'} faster but {'does' if one else 'do'} not fit "
                "(see the fits column)."
            )
        return text

    def takeaway(self) -> str:
        """Return the pick in one clause for the takeaways, as Markdown."""
        if self.engine is None:
            return "no engine's setup fits this workload, so none is named the fastest"
        return (
            f"the shortest step for this workload that fits is {_ms(self.tpot_ms)} ms, with "
            f"`{self.engine}`"
        )


def _ms(t: float) -> str:
    """Return milliseconds for prose: three figures, whole numbers from 100 (``format_number``)."""
    return format_number(t)


def _and_list(items: list[str]) -> str:
    """Return items joined as prose: "a", "a and b", "a, b and c"."""
    return " and ".join([", ".join(items[:-1]), items[-1]]) if len(items) > 1 else "".join(items)


def fastest(predictions: pd.DataFrame) -> Fastest:
    """Return the shortest step among the setups that were predicted and fit, and FlexGen's policy.

    A setup that does not fit (``fits`` false) is never chosen, however fast; those faster than
    the choice (or all, when none fits) are listed so the page can say why they were passed over.
    """
    ok = predictions.dropna(subset=["TPOT (ms)"])
    fit = ok[ok["fits"].astype(bool)]
    flex = predictions[predictions["engine"].str.startswith("FlexGen")].iloc[0]
    policy = str(flex["note"]).removeprefix("searched: ")  # the page says it was searched
    if fit.empty:
        best_engine, best_ms = None, float("nan")
        faster = ok[~ok["fits"].astype(bool)]
    else:
        best = fit.loc[fit["TPOT (ms)"].idxmin()]
        best_engine, best_ms = str(best["engine"]), float(best["TPOT (ms)"])
        faster = ok[~ok["fits"].astype(bool) & (ok["TPOT (ms)"] < best_ms)]
    faster = faster.sort_values("TPOT (ms)")
    passed = tuple(
        (str(e), float(t)) for e, t in zip(faster["engine"], faster["TPOT (ms)"], strict=True)
    )
    return Fastest(best_engine, best_ms, policy, passed)


def ngl_frame(
    hardware: str | dict,
    model: str,
    weights: str = "q4_k_m",
    prompt: int = 512,
    generate: int = 128,
) -> pd.DataFrame:
    """Return llama.cpp's decode tokens/s for every --n-gpu-layers value, with whether it fits."""
    n = load_model(model).n_layers
    rows = []
    for ngl in range(n + 2):
        raw = {"hardware": hardware, "model": model, "engine": "llamacpp", "precision": {"weights": weights, "kv": "fp16"},
               "workload": {"batch": 1, "prompt": prompt, "generate": generate}, "options": {"n_gpu_layers": ngl}}  # fmt: skip
        sc = parse_scenario(raw, name="ngl")
        pred = predict(sc, check=False)
        try:
            check_fits(sc, pred.memory)
            fits = True
        except InputError:
            fits = False
        rows.append({"n_gpu_layers": ngl, "tokens_per_s": 1 / pred.tpot_s, "fits": fits})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class LayerSplit:
    """llama.cpp's tokens/s at the ends and the middle of --n-gpu-layers, and two means of the ends."""

    cpu_only: float
    gpu_only: float
    half: float  # half the layers (counting the output layer) on the GPU
    all_fit: bool  # every setting fits the GPU's memory
    first_unfit: int | None = None  # the fewest --n-gpu-layers that do not fit (None: all fit)

    def fit_sentence(self) -> str:
        """Return, in words, which settings fit the machine."""
        if self.all_fit:
            return "Every setting fits this machine."
        if self.first_unfit == 0:
            return (
                "No setting fits this machine, not even every layer on the CPU, so none of these "
                "rates can be had here; the curve only shows its shape."
            )
        return (
            f"From {self.first_unfit} layer{'s' if self.first_unfit > 1 else ''} on the GPU the "
            "settings do not fit this machine "
            "(marked in the chart), so the all-GPU end is a rate this card cannot reach; the "
            "bend is the same."
        )

    @property
    def arithmetic_mean(self) -> float:
        """Return the average of the two ends: the straight line's midpoint."""
        return (self.cpu_only + self.gpu_only) / 2

    @property
    def harmonic_mean(self) -> float:
        """Return the harmonic mean of the two ends: what adding per-token times gives."""
        return 2 / (1 / self.cpu_only + 1 / self.gpu_only)


def layer_split(ngl: pd.DataFrame) -> LayerSplit:
    """Return the ends and the midpoint of an ``ngl_frame``."""
    rate = ngl["tokens_per_s"]
    return LayerSplit(
        cpu_only=float(rate.iloc[0]),
        gpu_only=float(rate.iloc[-1]),
        half=float(rate.iloc[(len(ngl) - 1) // 2]),
        all_fit=bool(ngl["fits"].all()),
        first_unfit=None if ngl["fits"].all() else int(ngl.loc[~ngl["fits"], "n_gpu_layers"].min()),
    )


def infllm_moved(
    model: Model, contexts: ArrayLike, options: infllm.Options | None = None
) -> pd.DataFrame:
    """Return the KV bytes (GB) one step moves with full offload and with InfLLM, and their ratio."""
    o = options or infllm.Options()
    per_token = kv.bytes_per_token(model)
    rows = [
        {"context": int(c), "full offload (GB per step)": float(kv.request_bytes(model, c)) / 1e9,
         "InfLLM (GB per step)": infllm.moved_tokens(o, int(c)) * per_token / 1e9}
        for c in np.asarray(contexts)
    ]  # fmt: skip
    moved = pd.DataFrame(rows)
    moved["ratio"] = moved["full offload (GB per step)"] / moved["InfLLM (GB per step)"].replace(
        0, np.nan
    )
    return moved


def infllm_ratio(moved: pd.DataFrame, context: int) -> float:
    """Return, from an ``infllm_moved`` frame, how many times fewer bytes InfLLM moves at ``context``."""
    return float(moved.set_index("context").loc[context, "ratio"])
