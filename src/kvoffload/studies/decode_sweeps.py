"""Decode steps swept over context or batch: per overlap mode, layer, placement and KV format."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.units import format_number
from kvoffload.model import capacity, decode


def overlap_frame(setup: decode.Setup, contexts: ArrayLike, batch: int = 1) -> pd.DataFrame:
    """Return TPOT (ms) against context for every overlap mode, one vectorised call per mode.

    ``fits`` says whether the machine holds the step at that context (its buffers per mode).
    """
    contexts = np.asarray(contexts)
    rows = []
    for mode in decode.OVERLAP_MODES:
        t = decode.tpot(setup, contexts, 1, batch, mode) * 1e3
        mem = decode.memory(setup.with_overlap(mode), contexts, batch)
        fits = np.broadcast_to(
            capacity.fits(setup.system, mem.gpu, mem.cpu, mem.disk), contexts.shape
        )
        rows += [
            {"overlap": mode, "context": int(c), "tpot_ms": float(v), "fits": bool(f)}
            for c, v, f in zip(contexts, t, fits, strict=True)
        ]
    return pd.DataFrame(rows)


def layer_frame(setup: decode.Setup, contexts: ArrayLike, batch: int = 1) -> pd.DataFrame:
    """Return one full-attention layer's GPU time and link time (ms) against context."""
    contexts = np.asarray(contexts)
    per = decode.stream_times(setup, contexts, batch)
    copy = "host→GPU copy of its KV"
    if setup.placement.weights.off > 0:
        copy += " and streamed weights"
    rows = []
    for name, key in (("GPU work of the layer", "gpu"), (copy, "h2d")):
        for c, v in zip(contexts, per[key][..., 0], strict=True):
            rows.append({"stream": name, "context": int(c), "ms": float(v) * 1e3})
    return pd.DataFrame(rows)


def placements(
    setup: decode.Setup, context: int, batches: ArrayLike
) -> tuple[decode.Setup, decode.Setup]:
    """Return two placements over ``batches``: all KV in host memory, and KV spilled when HBM fills."""
    p = setup.placement  # the weights stay where the setup put them
    offloaded = replace(setup, placement=replace(p, kv=decode.Split(0, 1, 0)))
    return offloaded, decode.spill(_resident(setup), context, batches)


def _resident(setup: decode.Setup) -> decode.Setup:
    """Return the setup with every cache byte on the GPU, the weights where the setup put them."""
    return replace(setup, placement=replace(setup.placement, kv=decode.Split()))


def _fits(setup: decode.Setup, context: int, batches: np.ndarray) -> np.ndarray:
    """Return, per batch, whether the setup fits every tier of its machine."""
    mem = decode.memory(setup, context, batches)
    return np.broadcast_to(capacity.fits(setup.system, mem.gpu, mem.cpu, mem.disk), batches.shape)


def batch_frame(setup: decode.Setup, context: int, batches: ArrayLike) -> pd.DataFrame:
    """Return TPOT (ms) against batch: all KV offloaded, and KV spilled only when HBM is full.

    ``fits`` says whether the machine holds that batch (GPU memory, host memory, disk).
    """
    batches = np.asarray(batches)
    offloaded, spilled = placements(setup, context, batches)
    rows = []
    for name, st in (
        ("all KV in host memory", offloaded),
        ("KV on the GPU until it is full", spilled),
    ):
        t = decode.tpot(st, context, 1, batches) * 1e3
        fits = _fits(st, context, batches)
        rows += [
            {"placement": name, "batch": int(b), "tpot_ms": float(v), "fits": bool(f)}
            for b, v, f in zip(batches, t, fits, strict=True)
        ]
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class SpillSlopes:
    """How TPOT grows with the batch (ms per request), all offloaded and spilled when HBM fills."""

    full_at: int  # the first batch whose cache no longer fits wholly on the GPU (else the last)
    slope_all_ms: float  # all KV in host memory
    slope_before_ms: float  # KV on the GPU, before it fills (0 when it is full from the start)
    slope_after_ms: float  # KV spilled, after the GPU fills (0 when it never fills)
    spill_max_ms: float  # TPOT at the largest batch, spilled
    first_batch: int = 1  # the smallest batch of the sweep
    last_fit: int = 0  # the largest batch up to which the machine holds both placements (0: none)
    last_batch: int = 0  # the largest batch of the sweep

    @property
    def full_from_start(self) -> bool:
        """Return whether GPU memory holds no whole cache beside the weights from the first batch."""
        return self.full_at == self.first_batch and self.slope_before_ms == 0

    def knee(self) -> str:
        """Return, in words, where GPU memory fills ("batch 17 here", ...)."""
        if self.full_from_start:
            return "here GPU memory is full from the first request"
        if self.slope_after_ms == 0:
            return f"here it does not fill up to batch {self.last_batch}"
        return f"batch {self.full_at} here"

    def sentence(self) -> str:
        """Return, in words, how TPOT grows with the batch when the cache spills only on overflow."""
        if self.full_from_start:
            text = (
                "Here GPU memory has no room for a whole cache beside the weights, so the second "
                "placement spills from the first request and the two lines nearly meet: each "
                f"request adds {self.slope_after_ms:.1f} ms because its cache crosses the link "
                "every step."
            )
        elif self.slope_after_ms == 0:
            text = (
                f"With the second placement TPOT grows by {self.slope_before_ms:.2f} ms per "
                "request (the GPU reads one more cache from its own memory), and GPU memory does "
                f"not fill up to batch {self.last_batch}."
            )
        else:
            text = (
                f"With the second placement TPOT first grows by {self.slope_before_ms:.2f} ms per "
                "request (the GPU reads one more cache from its own memory); once GPU memory is "
                f"full, at batch {self.full_at}, each further request adds "
                f"{self.slope_after_ms:.1f} ms because its whole cache now crosses the link "
                "every step."
            )
        if not self.last_fit:
            text += (
                " This machine holds no batch with either placement, so no points are drawn: the "
                "lines only trace the model."
            )
        elif self.last_fit < self.last_batch:
            text += (
                " Points are drawn only where this machine holds the batch: from batch "
                f"{self.last_fit + 1} on, one placement or both do not fit its memory, and the "
                "lines there only trace the model."
            )
        return text


def spill_slopes(setup: decode.Setup, context: int, batches: ArrayLike) -> SpillSlopes:
    """Return the median TPOT slopes before and after GPU memory fills, and with all KV offloaded."""
    batches = np.asarray(batches)
    offloaded, spilled = placements(setup, context, batches)
    on_gpu = np.asarray(spilled.placement.kv.gpu)
    last = len(batches) - 1
    full = int(np.argmax(on_gpu < 1)) if np.any(on_gpu < 1) else last
    t_spill = decode.tpot(spilled, context, 1, batches) * 1e3
    t_all = decode.tpot(offloaded, context, 1, batches) * 1e3
    # before GPU memory fills, every cache is on the GPU: the slope of that placement alone (the
    # step into the first spilled batch is not part of it)
    t_gpu = decode.tpot(_resident(setup), context, 1, batches[: full + 1]) * 1e3
    fits = np.logical_and.accumulate(
        _fits(spilled, context, batches) & _fits(offloaded, context, batches)
    )
    return SpillSlopes(
        first_batch=int(batches[0]),
        last_batch=int(batches[-1]),
        last_fit=int(batches[fits].max()) if np.any(fits) else 0,
        full_at=int(batches[full]),
        slope_all_ms=float(np.median(np.diff(t_all))),
        slope_before_ms=float(np.median(np.diff(t_gpu))) if full > 0 else 0.0,
        slope_after_ms=float(np.median(np.diff(t_spill[full:]))) if full < last else 0.0,
        spill_max_ms=float(t_spill[-1]),
    )


LLAMACPP_KV_FORMATS = ("fp16", "q8_0", "q4_0")  # --cache-type-k/v f16, q8_0, q4_0


@dataclass(frozen=True)
class KvFormatSweep:
    """llama.cpp's ms per token against context for each KV format, and what it says."""

    frame: pd.DataFrame  # kv_format, context, tpot_ms, fits
    slope_ratio: dict[str, float]  # ms per cached token of each format over f16's

    def sentence(self) -> str:
        """Return what the sweep shows, in words."""
        if not np.isfinite(self.slope_ratio["q8_0"]):
            return "The model holds too few of the swept contexts to compare the slopes."
        q8 = format_number(self.slope_ratio["q8_0"], 2)
        q4 = format_number(self.slope_ratio["q4_0"], 2)
        return (
            f"Each cached token costs {q8} times as much with a q8_0 cache as with f16, and "
            f"{q4} times with q4_0, though they hold about half and a quarter of the bytes: "
            "the vector kernel dequantises every value it reads."
        )


def kv_format_frame(
    hardware: str, model: str, contexts: ArrayLike, weights: str = "q4_k_m"
) -> KvFormatSweep:
    """Return llama.cpp's ms per token (every layer on the GPU) against context per KV format.

    One token generated after ``context`` tokens of prompt, so TPOT is the step at that context;
    ``fits`` says whether the machine holds weights and cache there. Contexts beyond the model's
    are left out.
    """
    rows, slopes = [], {}
    for fmt in LLAMACPP_KV_FORMATS:
        for c in np.asarray(contexts):
            raw = {
                "hardware": hardware,
                "model": model,
                "engine": "llamacpp",
                "precision": {"weights": weights, "kv": fmt},
                "workload": {"batch": 1, "prompt": int(c), "generate": 1},
                "options": {"fit": False},  # every layer on the GPU, as the sweep asks
            }
            try:
                p = predict(parse_scenario(raw, name="kv format sweep"), check=False)
            except InputError:
                continue  # beyond the model's context
            mem = p.memory
            fits = bool(capacity.fits(p.scenario.system, mem.gpu, mem.cpu, mem.disk))
            rows.append(
                {"kv_format": fmt, "context": int(c), "tpot_ms": p.tpot_s * 1e3, "fits": fits}
            )
        mine = [r for r in rows if r["kv_format"] == fmt]
        slopes[fmt] = (
            (mine[-1]["tpot_ms"] - mine[0]["tpot_ms"]) / (mine[-1]["context"] - mine[0]["context"])
            if len(mine) > 1
            else float("nan")  # one context: no slope
        )
    ratio = {f: slopes[f] / slopes["fp16"] for f in LLAMACPP_KV_FORMATS}
    return KvFormatSweep(pd.DataFrame(rows), ratio)
