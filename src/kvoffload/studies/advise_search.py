"""The configurations llama.cpp and vLLM offer for one model on one machine, predicted and kept if they fit.

Each configuration is a ``Scenario`` built directly (no file) and predicted by the engine's own
``predict`` (``engines.scenario.predict``); it fits when ``prediction.shortfalls`` finds no tier
over its capacity (``model/capacity.py``), with the memory each engine reports (vLLM's includes
what ``gpu_memory_utilization`` leaves to others). The search is pruned by monotonicity, each
bisection by ``model/search.py``:

- llama.cpp: everything on the GPU first (``-ngl 99``; when it fits nothing offloaded is faster);
  else the largest ``-ngl`` that fits (fewer layers on the GPU is slower), the smallest
  ``--n-cpu-moe`` that fits (more experts on the CPU is slower), ``-ot exps=CPU`` with the largest
  ``-ngl`` when even every expert on the CPU leaves too much on the GPU, and ``--no-kv-offload``;
  on a machine with several GPUs each of these also with ``-sm row`` (each matrix split by rows
  over the GPUs) and ``-sm tensor`` (every layer split over them, all-reduces between; where
  llama.cpp takes it: an unquantised cache, an architecture it implements), kept where it fits,
  so the fastest split mode ranks first;
- vLLM: the smallest ``--cpu-offload-gb`` (whole GiB) that fits;
- KTransformers (asked for with ``engines``; not searched by default): its one placement, every
  routed expert on the CPU with the model type's optimize rule and ``cpu_infer`` at its default,
  and on a host of two sockets also built with ``USE_NUMA=1`` (the experts on both sockets);
  with a BF16 GGUF, on a host with AMX, the model type's AMX rule (its kernels load BF16 experts
  only); a model type it ships no rule for is left out with its reason.

Formats run from the largest to the smallest; a smaller weight or KV format never holds more
bytes nor reads more per token, so ``fastest_only`` tries only the smallest of each engine, and
for llama.cpp also its f16 cache, which its attention reads without dequantising.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvoffload.engines.each import ktransformers
from kvoffload.engines.registry import validate_options
from kvoffload.engines.scenario import held_memory, predict
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.hardware import System
from kvoffload.inputs.models import Model
from kvoffload.inputs.precision import kv_format, weight_format
from kvoffload.model import decode
from kvoffload.model.decode import Memory
from kvoffload.model.prediction import Prediction, Scenario, shortfalls
from kvoffload.model.search import largest_true

ENGINES = ("llamacpp", "vllm")  # the engines advised by default, in the order they are listed
ALL_ENGINES = (*ENGINES, "ktransformers")  # the engines ``engines`` may name
GENERATE = 128  # tokens generated at the end of the context (the step is their mean)
GiB = 2**30

# largest first; llama.cpp's published GGUF quantisations, vLLM's checkpoints (int4: AWQ)
LLAMACPP_FORMATS = ("q8_0", "q6_k", "q5_k_m", "q4_k_m")
LLAMACPP_KV = ("fp16", "q8_0", "q4_0")  # -ctk/-ctv f16, q8_0, q4_0
VLLM_FORMATS = ("bf16", "fp8", "int4")
VLLM_KV = ("bf16", "fp8")  # --kv-cache-dtype auto (the model's 16 bits), fp8
KT_KV = ("bf16",)  # KTransformers' cache: the model's 16 bits (its optimize rules set no other)

NO_OFFLOAD = "no offload needed"
NGL = "-ngl"
NCMOE = "--n-cpu-moe"
EXPS_CPU = "-ot exps=CPU"
NO_KV = "--no-kv-offload"
CPU_OFFLOAD = "--cpu-offload-gb"
KT_EXPERTS = "every expert on the CPU (KTransformers)"


def weight_formats(model: Model, engine: str) -> tuple[str, ...]:
    """Return the weight formats tried for ``model`` on ``engine``, largest first.

    A .gguf file: its own tensor types (llama.cpp only). gpt-oss: MXFP4 experts as published:
    for llama.cpp ggml-org's GGUF, file type MXFP4 MoE (the other matrices in q8_0: the 59.02 GiB
    llama-bench prints for gpt-oss-120b, tests/inputs/test_formats.py); for vLLM the native
    checkpoint (the rest in bf16). Otherwise the engine's formats.
    """
    if getattr(model, "gguf_tensors", ()):
        return ("gguf",) if engine == "llamacpp" else ()
    if model.ships_mxfp4_experts:
        return ("mxfp4",) if engine == "vllm" else ("mxfp4_moe",)
    if engine == "ktransformers":  # a BF16 GGUF for its AMX kernels, else llama.cpp's files
        return ("bf16", *LLAMACPP_FORMATS)
    return VLLM_FORMATS if engine == "vllm" else LLAMACPP_FORMATS


def kv_formats(engine: str) -> tuple[str, ...]:
    """Return the KV formats tried on ``engine``, largest first."""
    return {"llamacpp": LLAMACPP_KV, "vllm": VLLM_KV}.get(engine, KT_KV)


def candidates(
    model: Model, engine: str, fastest_only: bool = False
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Return the (weight formats, KV formats) ``search`` tries for ``model`` on ``engine``.

    ``fastest_only``: the smallest weights read the fewest bytes; a quantised cache reads fewer
    bytes but llama.cpp dequantises it value by value in attention (kv_dequant_gpu), so there its
    largest (f16) and smallest formats both stay candidates.
    """
    formats, kvs = weight_formats(model, engine), kv_formats(engine)
    if fastest_only and formats:
        # KTransformers' BF16 file runs another kernel (AMX), so it stays beside the smallest
        formats = (
            tuple(dict.fromkeys((formats[0], formats[-1])))
            if engine == "ktransformers"
            else formats[-1:]
        )
        kvs = tuple(dict.fromkeys((kvs[0], kvs[-1]))) if engine == "llamacpp" else kvs[-1:]
    return formats, kvs


@dataclass(frozen=True)
class Workload:
    """What is asked of the machine: a context (prompt and generated tokens) per request, a batch."""

    context: int
    batch: int = 1

    @property
    def generate(self) -> int:
        """Return the tokens generated at the end of the context."""
        return max(1, min(GENERATE, self.context // 2))

    @property
    def prompt(self) -> int:
        """Return the prompt tokens: the context less those generated."""
        return self.context - self.generate


@dataclass(frozen=True)
class Choice:
    """One configuration that was predicted: the engine, formats, options, speed and memory."""

    engine: str
    weights: str
    kv: str
    options: Mapping[str, Any]  # the engine's options as a scenario's ``options:`` spells them
    way: str  # NO_OFFLOAD, NGL, NCMOE, EXPS_CPU, NO_KV or CPU_OFFLOAD
    tpot_s: float
    ttft_s: float
    gpu_bytes: float
    cpu_bytes: float
    batch: int
    fits: bool

    @property
    def tokens_per_s(self) -> float:
        """Return the decode rate, tokens per second over the batch."""
        return self.batch / self.tpot_s

    @property
    def offload(self) -> bool:
        """True when something is kept off the GPU."""
        return self.way != NO_OFFLOAD


def rank_key(c: Choice) -> tuple[float, float]:
    """Return the ranking key: the fastest decode first, then the shortest TTFT."""
    return (-c.tokens_per_s, c.ttft_s)


@dataclass(frozen=True)
class Search:
    """Every configuration that fits, fastest first, and what was left out (and why)."""

    model: Model
    system: System
    workload: Workload
    choices: tuple[Choice, ...]
    tried: int
    left_out: tuple[tuple[str, str, str, str], ...] = field(default=())  # engine, weights, kv, why


class _Probe:
    """One (engine, weight format, KV format): its predictions by options, each made once."""

    def __init__(self, system: System, model: Model, engine: str, weights: str, kv: str,
                 wl: Workload) -> None:  # fmt: skip
        self.key = (system, model, engine, weight_format(weights), kv_format(kv), wl)
        self.engine, self.weights, self.kv, self.wl = engine, weights, kv, wl
        self.system = system
        self._seen: dict[tuple, Prediction] = {}
        self._held: dict[tuple, Memory] = {}

    def _scenario(self, options: Mapping[str, Any]) -> Scenario:
        system, model, engine, wf, kf, wl = self.key
        # every placement tried is spelled out (the command gives -ngl): llama.cpp's --fit never acts
        given = {"fit": False, **options} if engine == "llamacpp" else dict(options)
        return Scenario(system, model, engine, decode.Setup(system, model, wf, kf), wl.batch,
                        wl.prompt, wl.generate, validate_options(engine, given))  # fmt: skip

    def prediction(self, options: Mapping[str, Any]) -> Prediction:
        """Return the engine's prediction with these options (InputError where it refuses)."""
        key = tuple(sorted(options.items()))
        if key not in self._seen:
            self._seen[key] = predict(self._scenario(options), check=False)
        return self._seen[key]

    @property
    def tried(self) -> int:
        """Return how many configurations were tried (a fit asked, or a prediction made)."""
        return len(self._held.keys() | self._seen.keys())

    def gpu_fits(self, options: Mapping[str, Any]) -> bool:
        """True when the GPU holds what these options put there (the fit alone, not timed)."""
        key = tuple(sorted(options.items()))
        if key not in self._held:
            self._held[key] = (
                self._seen[key].memory
                if key in self._seen
                else held_memory(self._scenario(options))
            )
        return not any(
            t.startswith("GPU memory") for t, _, _ in shortfalls(self.system, self._held[key])
        )

    def choice(self, options: Mapping[str, Any], way: str) -> Choice:
        """Return the configuration with these options as a Choice."""
        p = self.prediction(options)
        return Choice(self.engine, self.weights, self.kv, dict(options), way, p.tpot_s, p.ttft_s,
                      float(p.memory.gpu), float(p.memory.cpu), self.wl.batch,
                      not shortfalls(self.system, p.memory))  # fmt: skip


def _largest(ok: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """Return the largest n in [lo, hi] with ``ok(n)`` (monotone: true up to some n), else None."""
    if not ok(lo):
        return None
    found = largest_true(lambda m: np.asarray(ok(lo + int(m))), (), hi - lo)
    return lo + int(found)


def _llamacpp(probe: _Probe, n_layers: int, moe: bool) -> list[Choice]:
    """Return llama.cpp's configurations for one pair of formats (module docstring)."""
    if probe.gpu_fits({}):
        out = [probe.choice({}, NO_OFFLOAD)]
    else:
        out = _llamacpp_offloads(probe, n_layers, moe)
    if probe.system.host.sockets > 1:  # each placement again with --numa distribute (same fit)
        out += [probe.choice({**c.options, "numa": "distribute"}, c.way) for c in out if c.offload]
    if probe.system.n_gpus > 1:  # the same placements with the weights split over the GPUs
        for c in list(out):
            for mode in ("row", "tensor"):
                split = {**c.options, "split_mode": mode}
                try:
                    fits = probe.gpu_fits(split)
                except InputError:  # -sm tensor refuses a quantised cache, some architectures
                    continue
                if fits:
                    out.append(probe.choice(split, c.way))
    return out


def _llamacpp_offloads(probe: _Probe, n_layers: int, moe: bool) -> list[Choice]:
    """Return llama.cpp's offloading configurations when everything does not fit the GPU."""
    out = []
    ngl = _largest(lambda n: probe.gpu_fits({"n_gpu_layers": n}), 0, n_layers)
    if ngl is not None:
        out.append(probe.choice({"n_gpu_layers": ngl}, NGL))
    if moe:  # the experts of layers 0..N-1 on the CPU: the smallest N that fits
        kept = _largest(lambda m: probe.gpu_fits({"n_cpu_moe": n_layers - m}), 0, n_layers - 1)
        if kept is not None:
            out.append(probe.choice({"n_cpu_moe": n_layers - kept}, NCMOE))
        else:  # every expert on the CPU is still too much: fewer layers on the GPU besides
            rule = {"override_tensor": "exps=CPU"}
            ngl = _largest(lambda n: probe.gpu_fits({**rule, "n_gpu_layers": n}), 0, n_layers)
            if ngl is not None:
                out.append(probe.choice({**rule, "n_gpu_layers": ngl}, EXPS_CPU))
    if probe.gpu_fits({"no_kv_offload": True}):
        out.append(probe.choice({"no_kv_offload": True}, NO_KV))
    return out


def _vllm(probe: _Probe, model: Model, system: System) -> list[Choice]:
    """Return vLLM's configuration for one pair of formats: the smallest cpu_offload_gb that fits."""
    weights = decode.step_weight_bytes(model, weight_format(probe.weights)) / system.gpu.count
    top = max(1, math.ceil(weights / GiB))
    kept = _largest(lambda m: probe.gpu_fits({"cpu_offload_gb": float(top - m)}), 0, top)
    if kept is None:
        return []
    gb = float(top - kept)
    return [probe.choice({"cpu_offload_gb": gb} if gb else {}, CPU_OFFLOAD if gb else NO_OFFLOAD)]


def _ktransformers(probe: _Probe, model: Model, system: System) -> list[Choice]:
    """Return KTransformers' configurations: its default rule, and built with USE_NUMA=1 on a
    host of several sockets (InputError where it ships no rule for the model)."""
    sc = probe._scenario({})
    rule = ktransformers.rule(sc)
    if probe.weights == "bf16":  # a BF16 GGUF: the AMX kernels, which need AMX and a rule
        rule = ktransformers.amx_rule(model.model_type) or ""
        if not (system.host.amx and rule):
            raise InputError(
                "a BF16 GGUF is searched for KTransformers' AMX kernels only, which "
                + ("this host has not (amx not true)" if rule else "it ships no rule for")
            )
    base = ktransformers.launch_options(sc, rule)
    setups = [base, {**base, "use_numa": True}] if system.host.sockets > 1 else [base]
    return [probe.choice(o, KT_EXPERTS) for o in setups if probe.gpu_fits(o)]


def search(
    system: System,
    model: Model,
    workload: Workload,
    engines: Iterable[str] = ENGINES,
    *,
    budget_s: float | None = None,
    fastest_only: bool = False,
) -> Search:
    """Return every configuration of ``engines`` that fits, fastest first (module docstring).

    ``budget_s``: the longest time per generated token accepted; slower ones are left out.
    ``fastest_only``: only the smallest weight and KV formats of each engine (for the best one),
    and llama.cpp's f16 cache beside its smallest.
    """
    model.check_context(workload.context, what="--context ")
    found: list[Choice] = []
    left: list[tuple[str, str, str, str]] = []
    tried = 0
    for engine in engines:
        formats, kvs = candidates(model, engine, fastest_only)
        if not formats:
            why = (
                "reads a GGUF folder beside the model's config.json, not one .gguf file"
                if engine == "ktransformers"
                else "serves a Hugging Face checkpoint, not a .gguf file"
            )
            left.append((engine, "", "", why))
            continue
        for fmt in formats:
            for kvf in kvs:
                probe = _Probe(system, model, engine, fmt, kvf, workload)
                try:
                    if engine == "llamacpp":
                        got = _llamacpp(probe, model.n_layers, model.moe is not None)
                    elif engine == "ktransformers":
                        got = _ktransformers(probe, model, system)
                    else:
                        got = _vllm(probe, model, system)
                except InputError as exc:  # the engine refuses this model or machine
                    got = []
                    left.append((engine, fmt, kvf, str(exc)))
                tried += probe.tried
                fits = [c for c in got if c.fits]
                if got and not fits:
                    left.append((engine, fmt, kvf, "host memory does not hold the rest"))
                elif not got and not any(x[:3] == (engine, fmt, kvf) for x in left):
                    left.append((engine, fmt, kvf, "does not fit the GPU however it is split"))
                if budget_s is not None:
                    slow = [c for c in fits if c.tpot_s > budget_s]
                    if slow and len(slow) == len(fits):
                        left.append((engine, fmt, kvf, "slower than the budget"))
                    fits = [c for c in fits if c.tpot_s <= budget_s]
                found += fits
    return Search(model, system, workload, tuple(sorted(found, key=rank_key)), tried, tuple(left))
