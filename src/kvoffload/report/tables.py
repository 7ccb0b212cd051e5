"""The chapters' tables: figures with their kind and source, computed from the specs."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import pandas as pd

from kvoffload.model import kv, transfer
from kvoffload.spec import catalog
from kvoffload.spec.hardware import System, load_system
from kvoffload.spec.models import Model, load_model, model_ids
from kvoffload.spec.precision import KvFormat, WeightFormat
from kvoffload.spec.units import Dim, format_bandwidth, format_bytes, format_seconds, parse_quantity


@cache
def article() -> dict:
    """Return the article's own figures (catalog/article.yaml)."""
    return catalog.load("article")


source_title = catalog.source_title


def sources_table(ids: list[str]) -> pd.DataFrame:
    """Return the registered sources behind a page's figures: id, title, kind and address."""
    known = catalog.sources()
    rows = [
        {
            "source": i,
            "title": known[i].get("title", ""),
            "kind": known[i].get("kind", ""),
            "address": known[i].get("url", ""),
        }
        for i in dict.fromkeys(ids)
        if i in known
    ]
    return pd.DataFrame(rows, columns=["source", "title", "kind", "address"])


def tier_table(system: System) -> pd.DataFrame:
    """Return the bandwidth of each tier: raw rating and achievable rate, each with kind and source."""
    rows = []
    for tier in transfer.tiers(system):
        rows.append(
            {
                "tier": tier.name,
                "rated": format_bandwidth(tier.raw.value),
                "rated kind": tier.raw.kind.value,
                "achievable": format_bandwidth(tier.achievable.value),
                "achievable kind": tier.achievable.kind.value,
                "per-transfer latency": format_seconds(tier.latency.value) if tier.latency else "—",
                "source (achievable)": source_title(tier.achievable.source),
            }
        )
    return pd.DataFrame(rows)


def layer_move_table(system: System, model: Model, tokens: int) -> pd.DataFrame:
    """Return the time to move one layer's K+V over each tier, rated and achievable, and the ratio to GPU memory."""
    nbytes = kv.full_layer_bytes(model, tokens)
    rows = []
    tiers = transfer.tiers(system)
    base_rated = float(tiers[0].time(nbytes, achievable=False))
    base_real = float(tiers[0].time(nbytes, achievable=True))
    for tier in tiers:
        rated = float(tier.time(nbytes, achievable=False))
        real = float(tier.time(nbytes, achievable=True))
        rows.append(
            {
                "tier": tier.name,
                "time at rated bandwidth (ms)": rated * 1e3,
                "× GPU memory (rated)": rated / base_rated,
                "time at achievable rate (ms)": real * 1e3,
                "× GPU memory (achievable)": real / base_real,
            }
        )
    return pd.DataFrame(rows)


def article_layer_figures() -> dict[str, float]:
    """Return the article's per-tier times (s) for one layer's K+V, keyed by tier."""
    return {
        row["tier"]: parse_quantity(row["time"], Dim.TIME) for row in article()["layer_transfer"]
    }


def model_kv_table(
    tokens: int, fmt: KvFormat = KvFormat.BF16, ids: list[str] | None = None
) -> pd.DataFrame:
    """Return KV bytes per token and per request at ``tokens`` for catalog models."""
    rows = []
    for ident in ids or model_ids():
        m = load_model(ident)
        windows = sorted({w for w in m.layer_windows if w is not None})
        sliding = sum(w is not None for w in m.layer_windows)
        per_request = int(kv.request_bytes(m, tokens, fmt))
        rows.append(
            {
                "model": ident,
                "attention": m.attention_kind.upper(),
                "layers": m.n_layers,
                "KV heads": "latent" if m.mla else m.n_kv_heads,
                "cached per token and layer": " + ".join(f"{c}×{n}" for c, n in m.kv_vectors()),
                "sliding layers": f"{sliding} (window {', '.join(map(str, windows))})"
                if sliding
                else "—",
                "bytes per token": kv.bytes_per_token(m, fmt),
                f"per request at {tokens:,} tokens": format_bytes(per_request),
                "_per_request_bytes": per_request,
            }
        )
    return pd.DataFrame(rows)


def kv_precision_table(model: Model, tokens: int) -> pd.DataFrame:
    """Return the KV cache of one request at ``tokens`` in each KV precision."""
    bf16 = int(kv.request_bytes(model, tokens, KvFormat.BF16))
    rows = []
    for fmt in KvFormat:
        b = int(kv.request_bytes(model, tokens, fmt))
        rows.append(
            {
                "precision": fmt.value,
                "bytes per token": kv.bytes_per_token(model, fmt),
                f"per request at {tokens:,} tokens": format_bytes(b),
                "relative to bf16": b / bf16,
            }
        )
    return pd.DataFrame(rows)


def max_context_table(
    system: System, model: Model, batches: np.ndarray, weight_bytes: int
) -> pd.DataFrame:
    """Return the longest context that fits next to the weights in GPU memory, per batch."""
    budget = system.gpu.memory.value - weight_bytes
    out = kv.max_context(model, max(budget, 0.0), np.asarray(batches))
    return pd.DataFrame({"batch": np.asarray(batches), "longest context that fits (tokens)": out})


def show(df: pd.DataFrame, name: str, formats: dict | str | None = None, precision: int = 3) -> Any:
    """Return a table styled for the page: no index column, fixed number formats, stable ids."""
    styler = df.style.hide(axis="index").format(formats, precision=precision)
    styler.set_uuid(name)
    styler.set_table_attributes('class="kvoffload-table"')
    return styler


def budget_table(reference: System, system: System, model: Model) -> pd.DataFrame:
    """Return the article's TPOT-bound table beside the package's figures, article's and this profile's."""
    from kvoffload.model import decode

    rows = []
    ref = decode.offloaded(reference, model)
    mine = decode.offloaded(system, model)
    for row in article()["tpot_bound"]["rows"]:
        n = int(row["tokens"])
        ref_step = decode.step(ref, n, 1)
        my_step = decode.step(mine, n, 1)
        rows.append(
            {
                "context": f"{row['label']} ({n:,} tokens)",
                "article (ms)": parse_quantity(row["time"], Dim.TIME) * 1e3,
                "link time, article's figures (ms)": float(ref_step.streams["h2d"]) * 1e3,
                "TPOT, article's figures (ms)": float(ref_step.total) * 1e3,
                "link time, this profile (ms)": float(my_step.streams["h2d"]) * 1e3,
                "TPOT, this profile (ms)": float(my_step.total) * 1e3,
                "TPOT, this profile, perfect overlap (ms)": float(
                    decode.step(mine, n, 1, "perfect").total
                )
                * 1e3,
            }
        )
    return pd.DataFrame(rows)


ENGINE_SETUPS = {
    "generic, all KV in host memory": ("generic", {}, {"kv": {"cpu": 1.0}}, "bf16"),
    "llama.cpp, all layers on the GPU": ("llamacpp", {}, None, "q4_k_m"),
    "llama.cpp, --no-kv-offload": ("llamacpp", {"no_kv_offload": True}, None, "q4_k_m"),
    "vLLM, half the weights offloaded": ("vllm", "half", None, "bf16"),
    "ZeRO-Inference, weights in host memory": ("zero-inference", {}, None, "bf16"),
    "HF Accelerate, weights in host memory": ("hf-accelerate", {}, None, "bf16"),
    "FlexGen, searched policy": ("flexgen", {}, None, "bf16"),
    "InfLLM": ("infllm", {}, None, "bf16"),
}


def engine_predictions(
    hardware: str, model: str, prompt: int, generate: int, batch: int = 1
) -> pd.DataFrame:
    """Return each engine's prediction for one workload on one machine (fitting or not)."""
    from kvoffload.engines.scenario import check_fits, parse_scenario, predict
    from kvoffload.spec.errors import InputError

    m = load_model(model)
    rows = []
    for label, (engine, options, placement, weights) in ENGINE_SETUPS.items():
        if options == "half":
            options = {"cpu_offload_gb": m.weight_bytes(WeightFormat(weights)).total / 2 / 2**30}
        raw = {
            "hardware": hardware,
            "model": model,
            "engine": engine,
            "precision": {"weights": weights, "kv": "bf16"},
            "workload": {"batch": batch, "prompt": prompt, "generate": generate},
            "options": options,
        }
        if placement:
            raw["placement"] = placement
        sc = parse_scenario(raw, name=label)
        try:
            pred = predict(sc, check=False)
        except InputError as exc:  # e.g. a policy search with nothing that fits
            rows.append({"engine": label, "fits": False, "note": exc.problem})
            continue
        out = pred.to_json()
        try:
            check_fits(sc, pred.memory)
            fits, note = True, ""
        except InputError as exc:
            fits, note = False, exc.problem
        rows.append(
            {
                "engine": label,
                "TPOT (ms)": out["tpot_ms"],
                "TTFT (s)": out["ttft_ms"] / 1e3,
                "decode tokens/s": out["decode_tokens_per_s"],
                "GPU memory": format_bytes(out["memory"]["gpu_bytes"]),
                "host memory": format_bytes(out["memory"]["cpu_bytes"]),
                "GPU (ms/step)": out["step"]["compute_ms"],
                "link (ms/step)": out["step"]["transfer_ms"],
                "CPU (ms/step)": out["step"]["cpu_ms"],
                "disk (ms/step)": out["step"]["disk_ms"],
                "fits": fits,
                "note": note or (out.get("policy") or ""),
            }
        )
    return pd.DataFrame(rows)


def calibration_table(system_id: str) -> pd.DataFrame:
    """Return the constants a validation testbed and the engines use: value, kind and source."""
    from kvoffload.engines import flexgen, llamacpp

    system = load_system(system_id)
    rows = [
        {"where": system_id, "constant": name, "value": str(f), "kind": f.kind.value, "source": f.source}
        for name, f in system.figures().items()
        if f.kind.value == "measured"
    ]  # fmt: skip
    rows += [
        {"where": "llama.cpp engine", "constant": "gpu_share (of streaming bandwidth)",
         "value": f"{llamacpp.gpu_share_from_source():.1%}", "kind": "measured", "source": "llama-cpp-pr-6766"},
        {"where": "llama.cpp engine", "constant": "split_sync (per CPU<->GPU hand-over)",
         "value": f"{llamacpp.split_sync_s_from_source() * 1e6:.0f} µs", "kind": "measured", "source": "llama-cpp-pr-7526"},
        {"where": "FlexGen engine", "constant": "decompression traffic (bytes per fp16 byte)",
         "value": f"{flexgen.DEQUANT_TRAFFIC:g}", "kind": "derived", "source": "flexllmgen-compression"},
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["where", "constant", "value", "kind", "source"])
