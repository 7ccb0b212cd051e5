"""Alternatives to KV offload: smaller weights, a smaller cache, or a shorter context (RAG), set
beside offloading the cache to host memory, for one machine, model, context and batch."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from kvoffload.inputs import catalog
from kvoffload.inputs.hardware import System
from kvoffload.inputs.models import Model
from kvoffload.inputs.precision import KvFormat, WeightFormat
from kvoffload.inputs.units import Dim, format_bytes, format_change, format_number, parse_quantity
from kvoffload.model import decode
from kvoffload.model.search import largest_true
from kvoffload.studies import memory_fit


@dataclass(frozen=True)
class Option:
    """One way to make a long context fit: formats, where the cache lives, a context cap."""

    key: str
    name: str
    weights: WeightFormat = WeightFormat.BF16
    kv: KvFormat = KvFormat.BF16
    kv_on_host: bool = False
    window: int | None = None  # RAG: the context is capped at this many tokens
    quality_key: str = ""


OPTIONS = (
    Option("bf16", "bf16, everything on the GPU"),
    Option("offload", "KV cache offloaded to host memory", kv_on_host=True, quality_key="offload"),
    Option(
        "w4a16", "W4A16 weights (AWQ/GPTQ int4)", weights=WeightFormat.INT4, quality_key="w4a16"
    ),
    Option(
        "q4_k_m",
        "GGUF Q4_K_M weights (llama.cpp)",
        weights=WeightFormat.Q4_K_M,
        quality_key="q4_k_m",
    ),
    Option("w8", "8-bit weights (FP8 or INT8)", weights=WeightFormat.FP8, quality_key="w8"),
    Option("kv_fp8", "FP8 KV cache", kv=KvFormat.FP8, quality_key="kv_fp8"),
    Option("kv_int8", "INT8 KV cache", kv=KvFormat.INT8, quality_key="kv_int8"),
    Option("kv_int4", "INT4 KV cache", kv=KvFormat.INT4, quality_key="kv_int4"),
    Option(
        "w4_kv8",
        "W4A16 weights and INT8 KV",
        weights=WeightFormat.INT4,
        kv=KvFormat.INT8,
        quality_key="w4a16",
    ),
    Option("rag8k", "RAG, 8K-token window", window=8_000, quality_key="rag"),
    Option("rag16k", "RAG, 16K-token window", window=16_000, quality_key="rag"),
)


@cache
def data() -> dict:
    """Return the quality figures and the article's table (catalog/alternatives.yaml)."""
    return catalog.load("alternatives")


def source_ids() -> list[str]:
    """Return the sources of the quality figures and the retrieval latency."""
    ids = [q["source"] for q in data()["quality"].values() if q["source"]]
    return [*ids, data()["retrieval_latency"]["source"]]


def retrieval_latency() -> float:
    """Return the assumed retrieval latency of a RAG request (s)."""
    return parse_quantity(data()["retrieval_latency"]["value"], Dim.TIME)


def setup(system: System, model: Model, option: Option) -> decode.Setup:
    """Return the decode setup an option runs with."""
    placement = (
        decode.Placement(kv=decode.Split(0, 1, 0)) if option.kv_on_host else decode.Placement()
    )
    return decode.Setup(system, model, option.weights, option.kv, placement)


def context_of(option: Option, context: ArrayLike) -> np.ndarray:
    """Return the context the model actually holds under an option (RAG caps it)."""
    c = np.asarray(context, dtype=np.float64)
    return np.minimum(c, option.window) if option.window else c


def _memory(
    system: System, model: Model, option: Option, context: ArrayLike, batch: ArrayLike
) -> decode.Memory:
    """Return what each tier holds under an option at (context, batch)."""
    ctx = context_of(option, context).astype(np.int64)
    return decode.memory(setup(system, model, option), ctx, np.asarray(batch, dtype=np.int64))


def gpu_bytes(
    system: System, model: Model, option: Option, context: ArrayLike, batch: ArrayLike = 1
) -> np.ndarray:
    """Return the GPU memory an option needs: weights, the cache it keeps there, staging buffers."""
    return _memory(system, model, option, context, batch).gpu


def host_bytes(
    system: System, model: Model, option: Option, context: ArrayLike, batch: ArrayLike = 1
) -> np.ndarray:
    """Return the host memory an option needs for the cache."""
    return _memory(system, model, option, context, batch).cpu


def fits(
    system: System, model: Model, option: Option, context: ArrayLike, batch: ArrayLike = 1
) -> np.ndarray:
    """Return whether every tier (GPU, host memory, disk) holds an option at (context, batch)."""
    ctx = context_of(option, context).astype(np.int64)
    return memory_fit.fits(setup(system, model, option), ctx, np.asarray(batch, dtype=np.int64))


def tpot(
    system: System,
    model: Model,
    option: Option,
    context: ArrayLike,
    batch: ArrayLike = 1,
    generate: int = 1,
) -> np.ndarray:
    """Return an option's TPOT (s): the mean step over ``generate`` tokens after ``context``."""
    return decode.tpot(setup(system, model, option), context_of(option, context), generate, batch)


def ttft(system: System, model: Model, option: Option, context: int, batch: int = 1) -> float:
    """Return an option's prefill (s); RAG adds the retrieval before it."""
    prefill = float(
        decode.ttft(setup(system, model, option), int(context_of(option, context)), batch)
    )
    return prefill + (retrieval_latency() if option.window else 0.0)


def longest_context(system: System, model: Model, option: Option, batch: int = 1) -> int:
    """Return the longest context (tokens) whose footprint fits every tier under an option.

    ``memory_fit.longest_context`` on the option's setup: the cache in GPU memory (host memory
    for offload), beside the weights and the GPU's buffers. RAG's window is not applied.
    """
    return int(memory_fit.longest_context(setup(system, model, option), batch))


def largest_batch(system: System, model: Model, option: Option, context: int) -> int:
    """Return the most requests that fit at ``context``, below 2**20 (0 when not even one does)."""
    ok = lambda b: fits(system, model, option, context, b)  # noqa: E731
    return int(largest_true(ok, (), (1 << 20) - 1))


def comparison(system: System, model: Model, context: int, batch: int = 1) -> pd.DataFrame:
    """Return every option's memory, fit, TPOT and TTFT, against bf16 on the GPU, with quality."""
    base = OPTIONS[0]
    base_gpu = float(gpu_bytes(system, model, base, context, batch))
    base_tpot = float(tpot(system, model, base, context, batch))
    quality = data()["quality"]
    rows = []
    for o in OPTIONS:
        g = float(gpu_bytes(system, model, o, context, batch))
        t = float(tpot(system, model, o, context, batch))
        q = quality.get(o.quality_key, {"delta": "—", "source": ""})
        rows.append(
            {
                "option": o.name,
                "key": o.key,
                "GPU memory": format_bytes(g),
                "GPU memory saved": format_bytes(max(base_gpu - g, 0.0)) if g <= base_gpu else "—",
                "saved_bytes": base_gpu - g,
                "fits": bool(fits(system, model, o, context, batch)),
                "longest context, batch 1": None if o.window else longest_context(system, model, o),
                "largest batch": largest_batch(system, model, o, context),
                "TPOT (ms)": t * 1e3,
                "TPOT change": t / base_tpot - 1,
                "TTFT (s)": ttft(system, model, o, context, batch),
                "quality": q["delta"],
                "quality source": catalog.source_title(q["source"]) if q["source"] else "",
            }
        )
    return pd.DataFrame(rows)


DECISION_CONTEXTS = (4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 512_000)  # tokens
DECISION_BATCHES = (1, 2, 4, 8, 16, 32, 64)  # requests


def decision_grid(
    system: System,
    model: Model,
    contexts: ArrayLike = DECISION_CONTEXTS,
    batches: ArrayLike = DECISION_BATCHES,
    budget_s: float = 0.05,
) -> pd.DataFrame:
    """Return, per (context, batch), the option meeting the TPOT budget with the least GPU memory."""
    ctx = np.asarray(contexts, dtype=np.float64)[:, None]
    b = np.asarray(batches, dtype=np.float64)[None, :]
    best = np.full(np.broadcast(ctx, b).shape, "none", dtype=object)
    best_mem = np.full(best.shape, np.inf)
    for o in OPTIONS[1:]:  # every alternative to keeping bf16 on the GPU, the offload included
        if o.window:
            continue  # RAG changes the task; the chart compares ways to keep the whole context
        mem = np.broadcast_to(gpu_bytes(system, model, o, ctx, b), best.shape)
        ok = fits(system, model, o, ctx, b) & (tpot(system, model, o, ctx, b) <= budget_s)
        better = ok & (mem < best_mem)
        best = np.where(better, o.name, best)
        best_mem = np.where(better, mem, best_mem)
    base = OPTIONS[0]
    base_ok = fits(system, model, base, ctx, b) & (tpot(system, model, base, ctx, b) <= budget_s)
    best = np.where(base_ok & (best == "none"), base.name, best)
    cc, bb = np.meshgrid(np.asarray(contexts), np.asarray(batches), indexing="ij")
    return pd.DataFrame({"context": cc.ravel(), "batch": bb.ravel(), "choice": best.ravel()})


@dataclass(frozen=True)
class DecisionSummary:
    """How often each choice wins in a decision grid."""

    top_sentence: str  # the most frequent choice and its share of the cells, as a clause
    offload_cells: int  # cells where offloading the cache is the least-memory choice
    none_cells: int  # cells where no option both fits and meets the budget
    cells: int


def decision_summary(grid: pd.DataFrame) -> DecisionSummary:
    """Return the most frequent choice of a ``decision_grid``, and the offload and empty cells."""
    counts = grid["choice"].value_counts()
    chosen = counts.drop("none", errors="ignore")
    top = (
        f"{chosen.index[0]} is the least-memory choice in {chosen.iloc[0] / len(grid):.0%} of the cells"
        if len(chosen)
        else "no option meets the budget in any cell"
    )
    return DecisionSummary(
        top_sentence=top,
        offload_cells=int(counts.get(OPTIONS[1].name, 0)),
        none_cells=int(counts.get("none", 0)),
        cells=len(grid),
    )


@dataclass(frozen=True)
class Headline:
    """Offloading the cache against bf16 on the GPU and W4A16 with INT8 KV, from a comparison."""

    base_tpot_ms: float
    offload_tpot_ms: float
    offload_saved: str  # GPU memory offloading frees, formatted
    w4kv8_tpot_ms: float
    w4kv8_saved: str
    reach: str  # a sentence: how far a smaller cache stretches the context and the batch

    @property
    def offload_x(self) -> float:
        """Return the offloaded step over the step with everything on the GPU."""
        return self.offload_tpot_ms / self.base_tpot_ms

    @property
    def base_tpot(self) -> str:
        """Return the step with everything on the GPU in ms, for prose ('275')."""
        return format_number(self.base_tpot_ms)

    @property
    def offload_tpot(self) -> str:
        """Return the offloaded step in ms, for prose ('1,490', never '1.49e+03')."""
        return format_number(self.offload_tpot_ms)

    @property
    def w4kv8_tpot(self) -> str:
        """Return the W4A16 + INT8-cache step in ms, for prose."""
        return format_number(self.w4kv8_tpot_ms)

    @property
    def offload_times(self) -> str:
        """Return ``offload_x`` for prose ('5.42')."""
        return format_number(self.offload_x)


def headline(frame: pd.DataFrame) -> Headline:
    """Return the comparison's headline figures and the sentence on context and batch reach."""
    rows = frame.set_index("key")
    base_ctx = int(rows.loc["bf16", "longest context, batch 1"])
    kv4_ctx = int(rows.loc["kv_int4", "longest context, batch 1"])
    base_b, kv8_b = (
        int(rows.loc["bf16", "largest batch"]),
        int(rows.loc["kv_int8", "largest batch"]),
    )
    if base_ctx == 0:
        fitting = ", ".join(frame.loc[frame["fits"], "option"]) or "none"
        reach = (
            "With bf16 weights the model does not fit this GPU at all; of the options, "
            f"{fitting} fit at this context."
        )
    else:
        reach = (
            f"An INT4 cache stretches the longest context that fits from {base_ctx:,} to {kv4_ctx:,} "
            f"tokens; an INT8 cache lifts the largest batch at this context from {base_b} to {kv8_b}."
        )
    return Headline(
        base_tpot_ms=float(rows.loc["bf16", "TPOT (ms)"]),
        offload_tpot_ms=float(rows.loc["offload", "TPOT (ms)"]),
        offload_saved=str(rows.loc["offload", "GPU memory saved"]),
        w4kv8_tpot_ms=float(rows.loc["w4_kv8", "TPOT (ms)"]),
        w4kv8_saved=str(rows.loc["w4_kv8", "GPU memory saved"]),
        reach=reach,
    )


ARTICLE_ROWS = {"offload": "offload", "w4a16": "w4a16", "kv_int8": "kv_int8", "rag": "rag8k"}


def article_table(system: System, model: Model, context: int, batch: int = 1) -> pd.DataFrame:
    """Return the article's comparison table, each adjective beside the figure computed for it."""
    frame = comparison(system, model, context, batch).set_index("key")
    base_gpu = float(gpu_bytes(system, model, OPTIONS[0], context, batch))
    rows = []
    for article_key, key in ARTICLE_ROWS.items():
        said = data()["article_table"][article_key]
        r = frame.loc[key]
        rows.append(
            {
                "method": r["option"],
                "article: memory saving": said["memory"],
                "GPU memory saved": f"{r['GPU memory saved']} ({r['saved_bytes'] / base_gpu:.0%})",
                "article: TPOT impact": said["tpot"],
                "TPOT change": f"{format_change(r['TPOT change'])} "
                f"({format_number(r['TPOT (ms)'])} ms)",
                "article: quality loss": said["quality"],
                "published quality figure": r["quality"],
                "source": r["quality source"] or "—",
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class ArticleFour:
    """The article's four methods, as this machine ranks them."""

    most_saving: str  # the option that frees the most GPU memory
    slower: str  # the options that make decode slower, listed ("none of them" if none)
    quant_gain: float  # the smallest TPOT gain (share) of the two quantised options


def article_four(frame: pd.DataFrame) -> ArticleFour:
    """Return which of the article's four methods saves most, which slow decode, what quantising gains."""
    four = frame.set_index("key").loc[list(ARTICLE_ROWS.values())]
    slower = four.loc[four["TPOT change"] > 0, "option"].tolist()
    quant = four.loc[["w4a16", "kv_int8"], "TPOT change"]
    return ArticleFour(
        most_saving=str(four.loc[four["saved_bytes"].idxmax(), "option"]),
        slower=", ".join(slower) if slower else "none of them",
        quant_gain=float(-quant.max()),
    )


def int4_checkpoints(model: Model) -> pd.DataFrame:
    """Return the weight bytes of an AWQ/GPTQ int4 checkpoint beside a GGUF Q4_K_M file, by part."""
    rows = []
    for fmt, label in (
        (WeightFormat.BF16, "bf16"),
        (WeightFormat.INT4, "AWQ/GPTQ int4, group 128"),
        (WeightFormat.Q4_K_M, "GGUF Q4_K_M"),
    ):
        w = model.weight_bytes(fmt)
        rows.append(
            {
                "checkpoint": label,
                "decoder layers": format_bytes(int(w.per_layer.sum())),
                "embeddings": format_bytes(w.embedding),
                "output layer": format_bytes(w.output),
                "total": format_bytes(w.total),
                "total_bytes": w.total,
                "bits per parameter": 8 * w.total / model.params,
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Int4Bits:
    """Bits per parameter of the two kinds of 4-bit checkpoint."""

    awq_gptq: float
    q4_k_m: float


def int4_bits(model: Model) -> Int4Bits:
    """Return the bits per parameter of an AWQ/GPTQ int4 checkpoint and of a GGUF Q4_K_M file."""
    bits = int4_checkpoints(model)["bits per parameter"]
    return Int4Bits(awq_gptq=float(bits.iloc[1]), q4_k_m=float(bits.iloc[2]))
