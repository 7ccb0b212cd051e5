"""The verdict a page opens with: one machine, one workload, the cache on the GPU or in host memory.

For a hardware profile and a workload (model, context, tokens generated, batch, formats) the
verdict holds TPOT (``decode.tpot``: the mean decode step over the generated tokens, as
``kvoffload predict`` gives it) with every byte on the GPU, TPOT with the whole cache in host
memory (the weights placed by ``decode_step.place``: on the GPU where they fit, else as much as
fits and the rest streamed over the link), their ratio, the longest context that meets the TPOT
budget with the cache offloaded (``decode_budget.budget_contexts``), and what fits the GPU
(``memory_fit.longest_context``, as chapter 02 gives it).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace

import numpy as np

from kvoffload.inputs.hardware import System, load_system
from kvoffload.inputs.models import Model, load_model
from kvoffload.inputs.precision import kv_format, weight_format
from kvoffload.inputs.units import format_bytes
from kvoffload.model import decode, kv
from kvoffload.studies import decode_budget, decode_step, engines_compared, fit_marks, memory_fit

BUDGET_MS = 50.0  # the article's interactive TPOT budget (ms per token)
MACHINE_CONTEXTS = (8_000, 32_000, 128_000)  # the Machines page's columns, the article's rows


@dataclass(frozen=True)
class Workload:
    """What a page computes: a model, its context, tokens generated and batch, the formats."""

    model: str  # catalog id or a Hugging Face config.json path
    context: int  # tokens already in the cache at the first decode step (the prompt)
    batch: int = 1  # requests decoded together
    weights: str = "bf16"
    kv: str = "bf16"
    generate: int = 1  # tokens generated: TPOT is the mean step over them (a scenario's default)


HEADLINE = Workload("llama-3.1-8b", 32_000, 1)  # the index pages' and the intro's workload


def describe(workload: Workload, model: Model | None = None) -> str:
    """Return the workload in words: "Llama 3.1 8B, bf16 weights and cache, 32,000 tokens, batch 1"."""
    name = (model or load_model(workload.model)).name
    formats = (
        f"{workload.weights} weights and cache"
        if workload.weights == workload.kv
        else f"{workload.weights} weights, {workload.kv} cache"
    )
    who = "one request" if workload.batch == 1 else f"a batch of {workload.batch:,}"
    made = f", {workload.generate:,} tokens generated" if workload.generate > 1 else ""
    return f"{name}, {formats}, {workload.context:,} tokens of context{made}, {who}"


def ngl_workload() -> str:
    """Return the workload of chapter 04's llama.cpp --n-gpu-layers curve, from its defaults."""
    params = inspect.signature(engines_compared.ngl_frame).parameters
    weights = str(params["weights"].default).upper()
    return (
        f"{weights} weights, fp16 cache, a {int(params['prompt'].default):,}-token prompt and "
        f"{int(params['generate'].default):,} generated tokens"
    )


@dataclass(frozen=True)
class Verdict:
    """One machine's answer for one workload: TPOT with the cache on the GPU and offloaded."""

    system_id: str
    system_name: str
    model_name: str
    workload: Workload
    budget_ms: float
    gpu_ms: float  # TPOT, weights and cache on the GPU (overlap none)
    gpu_fits: bool  # weights, cache and buffers fit GPU memory at the workload's last step
    offloaded_ms: float  # TPOT, the cache in host memory, weights placed to fit
    offloaded_fits: bool  # that placement fits GPU memory, host memory and disk
    weights_gpu_share: float  # share of the weights kept on the GPU when the cache is offloaded
    longest_offloaded: int  # longest context meeting the budget, cache offloaded (0: none)
    longest_on_gpu: int  # longest context whose weights and cache fit GPU memory (0: none)
    max_context: int | None  # the model's own window (max_position_embeddings), None: unbounded
    weight_bytes: float  # every weight the model has, in its format
    cache_bytes: float  # the batch's cache at the workload's context
    gpu_memory: float  # the machine's GPU memory
    link_gbs: float  # achievable host->GPU copy rate (GB/s): pinned link, capped by host memory
    gpu_bytes: float = float("nan")  # GPU memory the all-GPU setup needs at the last step

    @property
    def ratio(self) -> float:
        """Return how many times the all-GPU TPOT the offloaded TPOT is."""
        return self.offloaded_ms / self.gpu_ms

    @property
    def weights_fit(self) -> bool:
        """Return whether the weights alone fit GPU memory (beside the offloaded cache's buffers)."""
        return self.weights_gpu_share >= 1

    @property
    def meets_on_gpu(self) -> bool:
        """Return whether the all-GPU TPOT meets the budget."""
        return self.gpu_ms <= self.budget_ms

    @property
    def meets_offloaded(self) -> bool:
        """Return whether the offloaded TPOT meets the budget."""
        return self.offloaded_ms <= self.budget_ms

    @property
    def longest_is_window(self) -> bool:
        """Return whether the budget allows the model's whole context window with the cache offloaded."""
        return self.max_context is not None and self.longest_offloaded >= self.max_context

    def fits_sentence(self) -> str:
        """Return, in words, what fits this machine's GPU memory for this workload."""
        have = f"the GPU's {format_bytes(self.gpu_memory, binary=False)}"
        b = self.workload.batch
        tokens = (
            f"{self.longest_on_gpu:,} tokens of cache"
            if b == 1
            else f"{self.longest_on_gpu:,} tokens of context for each of {b:,} requests"
        )
        weights = f"the {format_bytes(self.weight_bytes, binary=False)} of weights"
        cache = f"the {format_bytes(self.cache_bytes, binary=False)} cache"
        if self.gpu_fits:
            return (
                f"{weights[0].upper()}{weights[1:]} and {cache} fit in {have}; the GPU holds "
                f"the weights and up to {tokens}."
            )
        if self.weights_fit:
            room = f"up to {tokens}" if self.longest_on_gpu else "no cache at all"
            return (
                f"{weights[0].upper()}{weights[1:]} fit in {have} but not with {cache}: the GPU "
                f"holds the weights and {room}, so the cache must move or shrink."
            )
        tail = (
            "even that does not fit this machine"
            if not self.offloaded_fits
            else "the rest streams over the link in every step"
        )
        return (
            f"{weights[0].upper()}{weights[1:]} do not fit in {have}: with the cache offloaded "
            f"{100 * self.weights_gpu_share:.0f}% of them stay on the GPU and {tail}."
        )


def _setups(system: System, model: Model, workload: Workload) -> tuple[decode.Setup, decode.Setup]:
    """Return the workload's setups: everything on the GPU, and the cache in host memory."""
    fmt = {
        "weights": weight_format(workload.weights, field="weights"),
        "kv": kv_format(workload.kv, field="kv"),
    }
    return decode.Setup(system, model, **fmt), replace(decode.offloaded(system, model), **fmt)


def longest_on_gpu(setup: decode.Setup, batch: int = 1) -> int:
    """Return the longest context whose weights, cache and buffers all fit (0: none), as chapter 02."""
    return int(memory_fit.longest_context(setup, batch))


def verdict(
    hardware: str | System, workload: Workload = HEADLINE, budget_ms: float = BUDGET_MS
) -> Verdict:
    """Return the verdict for one profile (catalog id, profile path or System) and one workload."""
    system = hardware if isinstance(hardware, System) else load_system(hardware)
    model = load_model(workload.model)
    n, b, g = int(workload.context), int(workload.batch), int(workload.generate)
    last = n + g - 1  # the context of the last decode step: the fit is checked there
    on_gpu, offloaded = _setups(system, model, workload)
    placed = decode_step.place(offloaded, last, b)
    longest = decode_budget.budget_contexts(placed.setup, budget_ms / 1e3, [b], g)
    cache = float(kv.batch_bytes(on_gpu.cache_model, last, b, on_gpu.kv))
    return Verdict(
        system_id=system.id,
        system_name=system.name,
        model_name=model.name,
        workload=workload,
        budget_ms=float(budget_ms),
        gpu_ms=float(decode.tpot(on_gpu, n, g, b)) * 1e3,
        gpu_fits=bool(np.all(memory_fit.fits(on_gpu, last, b))),
        gpu_bytes=float(decode.memory(on_gpu, last, b).gpu),
        offloaded_ms=float(decode.tpot(placed.setup, n, g, b)) * 1e3,
        offloaded_fits=placed.fits,
        weights_gpu_share=placed.gpu_share,
        longest_offloaded=int(longest.no_overlap[0]),
        longest_on_gpu=longest_on_gpu(on_gpu, b),
        max_context=model.max_positions,
        weight_bytes=placed.weight_bytes,
        cache_bytes=cache,
        gpu_memory=float(system.gpu_memory),
        link_gbs=system.copy_rate("h2d") / 1e9,
    )


@dataclass(frozen=True)
class MachineRow:
    """One machine on the Machines page: its link and the headline model at three contexts."""

    system_id: str
    system_name: str
    link_gbs: float  # achievable host->GPU rate (GB/s), pinned, capped by host memory
    on_gpu_ms: tuple[float, ...]  # per context of ``MACHINE_CONTEXTS``
    offloaded_ms: tuple[float, ...]
    fits_on_gpu: tuple[bool, ...]  # weights and cache on the GPU, per context
    gpu_fit_cells: tuple[str, ...]  # per context: "yes" or what the all-GPU setup needs of the GPU
    offloaded_fits: tuple[bool, ...]  # the offloaded placement fits the machine, per context
    longest_offloaded: int  # within the budget, cache offloaded, one request (as on the index page)
    weights_fit: bool  # the weights alone fit the GPU
    longest_on_gpu: int  # longest context whose weights and cache fit GPU memory (0: none)


def _gpu_fit_cell(v: Verdict) -> str:
    """Return whether the all-GPU setup fits, as a fits column says it (``fit_marks``)."""
    if v.gpu_fits:
        return fit_marks.FITS
    return fit_marks.shortfall_text("GPU memory", v.gpu_bytes, v.gpu_memory)


def machine_row(
    hardware: str | System,
    model: str = HEADLINE.model,
    contexts: tuple[int, ...] = MACHINE_CONTEXTS,
    budget_ms: float = BUDGET_MS,
) -> MachineRow:
    """Return one machine's row of the cross-machine table (one request, bf16)."""
    system = hardware if isinstance(hardware, System) else load_system(hardware)
    verdicts = [verdict(system, Workload(model, c, 1), budget_ms) for c in contexts]
    # the longest context as the index page's verdict gives it (weights placed at its context)
    head = (
        verdicts[contexts.index(HEADLINE.context)]
        if HEADLINE.context in contexts
        else verdict(system, Workload(model, HEADLINE.context, 1), budget_ms)
    )
    return MachineRow(
        system_id=system.id,
        system_name=system.name,
        link_gbs=system.copy_rate("h2d") / 1e9,
        on_gpu_ms=tuple(v.gpu_ms for v in verdicts),
        offloaded_ms=tuple(v.offloaded_ms for v in verdicts),
        fits_on_gpu=tuple(v.gpu_fits for v in verdicts),
        gpu_fit_cells=tuple(_gpu_fit_cell(v) for v in verdicts),
        offloaded_fits=tuple(v.offloaded_fits for v in verdicts),
        longest_offloaded=head.longest_offloaded,
        weights_fit=head.weights_fit,
        longest_on_gpu=head.longest_on_gpu,
    )
