"""What to run on a machine, with which flags: the ranked configurations and their command lines.

``advise`` answers for one model (every configuration that fits, fastest first, each with the
command that runs it); ``advise_all`` gives every catalog model's fastest configuration (the
search pruned to the smallest formats, advise_search.py). ``advice_frame`` and ``speed_frame``
shape the latter for the book's table and chart (pandas, imported there).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvoffload.inputs import detect
from kvoffload.inputs.hardware import System
from kvoffload.inputs.models import Model, load_model, model_ids
from kvoffload.inputs.units import format_bytes, format_number, format_seconds
from kvoffload.studies.advise_commands import command_line, kv_name
from kvoffload.studies.advise_search import (
    ENGINES,
    NO_OFFLOAD,
    Choice,
    Search,
    Workload,
    search,
)

ALL = "all"  # --model all: every catalog model
_KV_FLAG = {"fp16": "f16", "bf16": "auto"}  # the engines' names for the 16-bit cache


def model_path(ref: str) -> str:
    """Return the user's model file (a .gguf path or a config.json's folder), '' for a catalog id."""
    if ref in model_ids():
        return ""
    p = Path(ref)
    return str(p) if p.suffix.lower() == ".gguf" else str(p.parent if p.is_file() else p)


def flags(c: Choice) -> str:
    """Return what the configuration offloads, as the engine's flags ('no offload needed')."""
    o = c.options
    if not c.offload:
        return NO_OFFLOAD
    if c.engine == "vllm":
        return f"--cpu-offload-gb {o['cpu_offload_gb']:g}"
    if c.engine == "ktransformers":
        return "experts on the CPU" + (", USE_NUMA=1" if o.get("use_numa") else "")
    words = []
    if "override_tensor" in o:
        words.append(f"-ot {o['override_tensor']}")
    if "n_gpu_layers" in o:
        words.append(f"-ngl {o['n_gpu_layers']}")
    if "n_cpu_moe" in o:
        words.append(f"--n-cpu-moe {o['n_cpu_moe']}")
    if o.get("no_kv_offload"):
        words.append("--no-kv-offload")
    if o.get("numa"):
        words.append(f"--numa {o['numa']}")
    return " ".join(words)


# llama.cpp's --numa help (common/arg.cpp): "if run without this previously, it is recommended to
# drop the system page cache before using this"; its threads fault the mapped file in, so the pages
# sit where they read them only then (issue #11744)
NUMA_NOTE = (
    "--numa: drop the page cache before the first run with it (sync; echo 3 | sudo tee "
    "/proc/sys/vm/drop_caches), as llama.cpp's help asks; with the pages where an earlier run "
    "left them, the sockets read at about one socket's rate"
)


# a profile `hardware detect` wrote on a machine where it read no GPU
NO_GPU_NOTE = (
    "no GPU was detected on this machine: the rows are for a stand-in with the figures of {gpu}; "
    "give --hardware a profile with your GPU (kvoffload hardware detect --out my-box.yaml, "
    "then set its gpu: base to your card's catalog id)"
)


def notes(rows: Iterable[Mapping[str, Any]], system: System | None = None) -> list[str]:
    """Return what to know before running the rows' commands (one note per kind, in order)."""
    out = []
    stand_in = detect.placeholder_gpu(system.gpu.name) if system is not None else None
    if stand_in:
        out.append(NO_GPU_NOTE.format(gpu=stand_in))
    if any(r["options"].get("numa") for r in rows):
        out.append(NUMA_NOTE)
    return out


def row(c: Choice, model: Model, wl: Workload, path: str = "") -> dict[str, Any]:
    """Return one configuration as the JSON object ``advise --json`` prints."""
    return {
        "engine": c.engine,
        "weights": c.weights,
        "kv": kv_name(c.engine, c.kv),
        "offload": flags(c),
        "options": dict(c.options),
        "tokens_per_s": c.tokens_per_s,
        "tpot_ms": c.tpot_s * 1e3,
        "ttft_ms": c.ttft_s * 1e3,
        "gpu_bytes": int(c.gpu_bytes),
        "cpu_bytes": int(c.cpu_bytes),
        "command": command(c, model, wl, path),
    }


@dataclass(frozen=True)
class Advice:
    """One model's ranked configurations on one machine, with their command lines."""

    search: Search
    path: str  # the user's model file, '' for a catalog model

    @property
    def rows(self) -> list[dict[str, Any]]:
        """Return every configuration that fits, fastest first, each with its command line."""
        s = self.search
        return [
            {"rank": rank, **row(c, s.model, s.workload, self.path)}
            for rank, c in enumerate(s.choices, 1)
        ]

    def to_json(self) -> dict[str, Any]:
        """Return the advice as the JSON object documented in the README."""
        s = self.search
        return {
            "hardware": s.system.id,
            "model": s.model.id,
            "context": s.workload.context,
            "batch": s.workload.batch,
            "tried": s.tried,
            "configurations": self.rows,
            "notes": notes(self.rows, s.system),
            "left_out": [
                {"engine": e, "weights": w, "kv": kv_name(e, k), "why": why}
                for e, w, k, why in s.left_out
            ],
        }


def command(c: Choice, model: Model, wl: Workload, path: str = "") -> str:
    """Return the command line that runs a configuration."""
    return command_line(c.engine, model, c.weights, c.kv, c.options, wl.context, wl.batch, path)


def advise(
    system: System,
    model_ref: str,
    workload: Workload,
    engines: Iterable[str] = ENGINES,
    budget_s: float | None = None,
) -> Advice:
    """Return every configuration of ``engines`` that runs the model on the machine, fastest first."""
    model = load_model(model_ref)
    found = search(system, model, workload, engines, budget_s=budget_s)
    return Advice(found, model_path(model_ref))


def advise_all(
    system: System,
    workload: Workload,
    engines: Iterable[str] = ENGINES,
    budget_s: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Return each catalog model's fastest configuration that fits (``best`` None: none does).

    A model built for a shorter context than asked is advised at its own (``context``).
    """
    engines = tuple(engines)
    out = []
    for ident in model_ids():
        if progress is not None:
            progress(ident)
        s = fastest(system, load_model(ident), workload, engines, budget_s)
        best = row(s.choices[0], s.model, s.workload) if s.choices else None
        why = "; ".join(dict.fromkeys(w for *_, w in s.left_out)) if best is None else ""
        out.append({"model": ident, "context": s.workload.context, "best": best, "why": why})
    return out


def fastest(
    system: System,
    model: Model,
    workload: Workload,
    engines: Iterable[str] = ENGINES,
    budget_s: float | None = None,
) -> Search:
    """Return ``advise --model all``'s search for one model: the smallest formats of each
    engine, at the model's own context where it is shorter than ``workload``'s."""
    limit = model.max_positions or workload.context
    wl = Workload(min(workload.context, limit), workload.batch)
    return search(system, model, wl, engines, budget_s=budget_s, fastest_only=True)


def cells(r: dict[str, Any]) -> dict[str, str]:
    """Return a configuration's table cells for people (numbers through inputs.units)."""
    return {
        "engine": r["engine"],
        "weights": r["weights"],
        "KV": r["kv"],
        "offload": r["offload"],
        "tokens/s": format_number(r["tokens_per_s"]),
        "TTFT": format_seconds(r["ttft_ms"] / 1e3, digits=3),
        "GPU": format_bytes(r["gpu_bytes"], binary=False, digits=3),
        "host": format_bytes(r["cpu_bytes"], binary=False, digits=3),
    }


def advice_frame(found: list[dict[str, Any]]) -> Any:
    """Return ``advise_all``'s answers as a table for people: each model's fastest configuration."""
    import pandas as pd

    rows = []
    for a in found:
        b = a["best"]
        base = {"model": a["model"], "context": format_number(a["context"])}
        if b is None:
            rows.append({**base, "engine": "none fits", "note": a["why"]})
        else:
            rows.append({**base, **cells(b), "command": b["command"]})
    return pd.DataFrame(rows)


def speed_frame(found: list[dict[str, Any]]) -> Any:
    """Return ``advise_all``'s answers as numbers for a chart, one row per model: ``tokens_per_s``
    of its fastest configuration (nan where ``fits`` is False: none fits), ``offloads`` (it needs
    offload to fit), ``engine``, ``weights`` and ``offload`` (its flags)."""
    import pandas as pd

    rows = []
    for a in found:
        b = a["best"]
        rows.append(
            {
                "model": a["model"],
                "fits": b is not None,
                "tokens_per_s": b["tokens_per_s"] if b else float("nan"),
                "offloads": b is not None and b["offload"] != NO_OFFLOAD,
                "engine": b["engine"] if b else "",
                "weights": b["weights"] if b else "",
                "offload": b["offload"] if b else "",
            }
        )
    return pd.DataFrame(rows)
