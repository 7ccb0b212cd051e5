"""Every routed expert on the CPU, two engines: llama.cpp's ``--cpu-moe`` against KTransformers.

Both keep the routed experts in host memory and compute them on the CPU, with attention, the
shared experts and the KV cache on the GPU; they differ in how (``engines/each/llamacpp`` and
``engines/each/ktransformers``): llama.cpp hands the graph from GPU to CPU and back in every MoE
layer and, in prefill, copies the experts to the GPU for batches of 32 tokens or more;
KTransformers runs its own CPU kernels (llamafile's, or AMX's on a rule that names them) with the
shared experts overlapping them, and prefills on the CPU. On a host of two sockets each engine
also runs with its NUMA policy: llama.cpp's ``--numa distribute``, KTransformers built with
``USE_NUMA=1`` (the experts copied onto both sockets, twice the host memory).

KTransformers ships optimize rules for a few model types only (``ktransformers.DEFAULT_RULES``);
for any other model the comparison runs ``STAND_IN`` instead, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from kvoffload.engines.each import ktransformers
from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.models import load_model
from kvoffload.inputs.precision import weight_format
from kvoffload.inputs.text import markdown_text
from kvoffload.inputs.units import format_number
from kvoffload.model import capacity, cpu_rate
from kvoffload.model.prediction import Scenario
from kvoffload.studies.advise_commands import command_line

STAND_IN = "qwen3-30b-a3b"  # a model KTransformers has a rule for, that most hosts hold
GENERATE = 128  # tokens generated after the prompt (the decode rate is their mean)
KV = "fp16"

LLAMACPP = "llama.cpp"
KTRANSFORMERS = "KTransformers"


def _scenario(hardware: str, model: str, weights: str, context: int, engine: str,
              options: dict) -> Scenario:  # fmt: skip
    raw = {
        "hardware": hardware,
        "model": model,
        "engine": engine,
        "precision": {"weights": weights, "kv": KV},
        "workload": {"batch": 1, "prompt": context, "generate": GENERATE},
        "options": options,
    }
    return parse_scenario(raw, name="cpu-experts")


def llamacpp_share(weights: str) -> float:
    """Return the share of the memory rate llama.cpp's CPU matvecs reach for ``weights``."""
    return cpu_rate.kernel(weight_format(weights)).bandwidth_share


def takes(model: str) -> bool:
    """True when KTransformers ships an optimize rule for the model's type."""
    return load_model(model).model_type in ktransformers.DEFAULT_RULES


def _setups(sockets: int) -> list[tuple[str, str, str, dict]]:
    """Return (engine label, engine, setting, options) for each row; NUMA rows on 2+ sockets."""
    rows = [
        (LLAMACPP, "llamacpp", "--cpu-moe", {"cpu_moe": True}),
        (KTRANSFORMERS, "ktransformers", "its default rule", {}),
    ]
    if sockets > 1:
        rows.insert(1, (LLAMACPP, "llamacpp", "--cpu-moe --numa distribute",
                        {"cpu_moe": True, "numa": "distribute"}))  # fmt: skip
        rows.append((KTRANSFORMERS, "ktransformers", "built with USE_NUMA=1", {"use_numa": True}))
    return rows


def _possessive(name: str) -> str:
    return name + ("'" if name.endswith("s") else "'s")


@dataclass(frozen=True)
class CpuExperts:
    """The rows compared and which model they run (the page's, or the stand-in)."""

    model: str  # catalog id of the model compared
    model_name: str
    page_model_name: str  # the page's model, which KTransformers may not take
    stand_in: bool
    context: int
    rows: pd.DataFrame  # one row per setup (columns in ``compare``)

    def best_of(self, engine: str, metric: str) -> pd.Series | None:
        """Return ``engine``'s row with the highest ``metric`` among those that fit, else None."""
        rows = self.rows[(self.rows["engine"] == engine) & self.rows["fits"]]
        return rows.sort_values(metric, ascending=False).iloc[0] if len(rows) else None

    @property
    def sentence(self) -> str:
        """Return the comparison in words: each engine's best decode and prefill that fit."""
        model = markdown_text(self.model_name)
        lead = (
            f"KTransformers has no optimize rule for {markdown_text(self.page_model_name)}, so "
            f"this comparison runs {model}. "
            if self.stand_in
            else ""
        )
        where = (
            f"With every routed expert of {model} on the CPU and a {self.context:,}-token prompt"
        )
        metrics = (("decode_tokens_per_s", "decode"), ("prefill_tokens_per_s", "prefill"))
        fit = {e for e in (LLAMACPP, KTRANSFORMERS) if self.best_of(e, metrics[0][0]) is not None}
        if not fit:
            return (
                lead + f"Neither engine holds {model} on this machine with every expert on the CPU."
            )
        if len(fit) == 1:
            (engine,) = fit
            other = KTRANSFORMERS if engine == LLAMACPP else LLAMACPP
            d, p = (self.best_of(engine, m) for m, _ in metrics)
            return (
                lead + f"{where}, only {engine} fits this machine ({other} needs more memory than "
                f"it has): it decodes at {format_number(d['decode_tokens_per_s'])} tokens/s "
                f"({markdown_text(d['setting'])}) and prefills at "
                f"{format_number(p['prefill_tokens_per_s'])} ({markdown_text(p['setting'])})."
            )
        parts = []
        for metric, what in metrics:
            a, b = self.best_of(LLAMACPP, metric), self.best_of(KTRANSFORMERS, metric)
            win, lose = (a, b) if a[metric] >= b[metric] else (b, a)
            parts.append(
                f"the faster {what} is {_possessive(win['engine'])} ({markdown_text(win['setting'])}), "
                f"{format_number(win[metric])} tokens/s against {format_number(lose[metric])} "
                f"for {lose['engine']} ({markdown_text(lose['setting'])}), "
                f"{format_number(win[metric] / lose[metric])}×"
            )
        return lead + f"{where}, {parts[0]}; {parts[1]}."


def compare(hardware: str, model: str, weights: str = "q4_k_m", context: int = 4096) -> CpuExperts:
    """Return llama.cpp and KTransformers with every routed expert on the CPU, at batch 1.

    Columns: ``engine``, ``setting``, ``command``, ``decode_tokens_per_s``,
    ``prefill_tokens_per_s``, ``ttft_s``, ``gpu_bytes``, ``cpu_bytes``, ``fits``.
    """
    page = load_model(model)
    used = model if takes(model) else STAND_IN
    rows = []
    for label, engine, setting, options in _setups(
        _scenario(hardware, used, weights, context, "llamacpp", {}).system.host.sockets
    ):
        sc = _scenario(hardware, used, weights, context, engine, options)
        p = predict(sc, check=False)
        shown = (
            {**ktransformers.launch_options(sc), **options}
            if engine == "ktransformers"
            else options
        )
        rows.append(
            {
                "engine": label,
                "setting": setting,
                "command": command_line(engine, sc.model, weights, KV, shown, context, 1),
                "decode_tokens_per_s": 1.0 / p.tpot_s,
                "prefill_tokens_per_s": context / p.ttft_s,
                "ttft_s": p.ttft_s,
                "gpu_bytes": float(p.memory.gpu),
                "cpu_bytes": float(p.memory.cpu),
                "fits": bool(capacity.fits(sc.system, float(p.memory.gpu), float(p.memory.cpu))),
            }
        )
    return CpuExperts(used, load_model(used).name, page.name, used != model, context,
                      pd.DataFrame(rows))  # fmt: skip
