"""The article's claims as data: each recomputed by the package and judged by a stated rule."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from kvoffload.inputs import catalog
from kvoffload.inputs.hardware import build_part, load_system
from kvoffload.inputs.models import load_model
from kvoffload.inputs.precision import kv_format, weight_format
from kvoffload.inputs.units import Dim, UnitError, format_number, format_quantity, parse_quantity
from kvoffload.model import decode, kv, transfer
from kvoffload.studies import decode_budget

VERDICTS = ("holds", "imprecise", "wrong", "not verifiable")

# -- the rule: one for every recomputed claim, stated here once ----------------------------------
HOLDS_WITHIN = 0.05  # relative error |claimed - recomputed| / |recomputed| at most this: holds
IMPRECISE_WITHIN = 0.25  # at most this: imprecise; beyond it: wrong
# What a claim's number is, which says how the rule applies to it:
#   measure     a quantity (bytes, seconds, a rate, a ratio): judged by its relative error; a range
#               ({min, max}, either end open) holds inside and is judged by its distance to the
#               nearer end outside
#   count       a whole number fixed by a definition (layers, heads, device crossings): right only
#               if equal (or inside its range), else wrong, however close
#   comparison  an order the article asserts ({gt: x} or {lt: x}: "faster than", "below"): holds
#               if strictly true, else wrong
KINDS = ("measure", "count", "comparison")
NEW = "not listed"  # previous_verdict of a claim the earlier version of the chapter did not check


def rule_verdict(error: float) -> str:
    """Return the verdict a relative error earns under the rule."""
    if error <= HOLDS_WITHIN:
        return "holds"
    return "imprecise" if error <= IMPRECISE_WITHIN else "wrong"


# -- recomputations: each returns one number in base units (s, B, B/s) or a plain ratio ---------
def _offloaded(system: str, model: str) -> decode.Setup:
    return decode.offloaded(load_system(system), load_model(model))


def part_figure(kind: str, ident: str, field: str) -> float:
    """Return a catalog part's figure, e.g. ('gpu', 'a100-80gb-sxm', 'memory_bandwidth')."""
    value = getattr(build_part(kind, ident), field)
    return float(value.value)


def system_figure(system: str, path: str) -> float:
    """Return a system's figure by 'part.field'."""
    part, field = path.split(".")
    return float(getattr(getattr(load_system(system), part), field).value)


def layer_kv_bytes(model: str, tokens: int, half: bool = False) -> float:
    """Return one layer's K+V bytes at ``tokens`` (or K alone with ``half``)."""
    b = kv.full_layer_bytes(load_model(model), tokens)
    return b / 2 if half else float(b)


def layer_move_time(system: str, model: str, tokens: int, tier: str) -> float:
    """Return seconds to move one layer's K+V over a tier ('gpu', 'link', 'host', 'storage')."""
    t = {x.key: x for x in transfer.tiers(load_system(system))}[tier]
    return float(t.time(layer_kv_bytes(model, tokens)))


def layer_move_ratio(system: str, model: str, tokens: int, tier: str) -> float:
    """Return a tier's time for one layer's K+V over the GPU memory's time."""
    return layer_move_time(system, model, tokens, tier) / layer_move_time(
        system, model, tokens, "gpu"
    )


def step_link_time(system: str, model: str, tokens: int, batch: int = 1) -> float:
    """Return the seconds per decode step spent copying every layer's cache to the GPU."""
    return float(decode.step(_offloaded(system, model), tokens, batch).streams["h2d"])


def per_token_link_time(system: str, model: str, all_layers: bool = True) -> float:
    """Return the link time that one cached token adds per step (all layers, or one layer)."""
    m = load_model(model)
    s = load_system(system)
    per_layer = float(kv.attention_layer_token_bytes(m)) / s.link.h2d_bandwidth.value
    return per_layer * (m.n_layers if all_layers else 1)


def layer_gpu_time(system: str, model: str, tokens: int, batch: int = 1) -> float:
    """Return one full-attention layer's GPU time (weights and cache read, or FLOPs)."""
    return float(decode.stream_times(_offloaded(system, model), tokens, batch)["gpu"][..., 0])


def layer_stall_time(system: str, model: str, tokens: int) -> float:
    """Return how long the GPU waits per layer for the next layer's cache."""
    return layer_move_time(system, model, tokens, "link") - layer_gpu_time(system, model, tokens)


def layer_link_over_gpu(system: str, model: str, tokens: int) -> float:
    """Return one layer's copy time over its GPU time."""
    return layer_move_time(system, model, tokens, "link") / layer_gpu_time(system, model, tokens)


def gpu_time_ratio(system: str, model: str, tokens: int, batch: int, base: int = 1) -> float:
    """Return how much the GPU's per-step work grows from batch ``base`` to ``batch``."""
    st = _offloaded(system, model)
    a = float(decode.step(st, tokens, base).streams["gpu"])
    b = float(decode.step(st, tokens, batch).streams["gpu"])
    return b / a


def link_time_ratio(system: str, model: str, tokens: int, batch: int, base: int = 1) -> float:
    """Return how much the per-step link time grows from batch ``base`` to ``batch``."""
    return step_link_time(system, model, tokens, batch) / step_link_time(
        system, model, tokens, base
    )


def batch_slope_changes(system: str, model: str, tokens: int, max_batch: int = 64) -> float:
    """Return how many times TPOT's slope against batch jumps (more than 5x) as HBM fills."""
    s, m = load_system(system), load_model(model)
    b = np.arange(1, max_batch + 1)
    t = decode.step(decode.spill(decode.Setup(s, m), tokens, b), tokens, b).total
    d = np.diff(t)
    jumps = d[1:] / d[:-1]
    return float(np.sum(jumps > 5))


def batch_vs_context_growth(system: str, model: str, tokens: int, batch: int = 1) -> float:
    """Return d ln(link time)/d ln(batch) over d ln(link time)/d ln(context): 1 means alike."""
    st = _offloaded(system, model)
    t0 = float(decode.step(st, tokens, batch).streams["h2d"])
    tb = float(decode.step(st, tokens, 2 * batch).streams["h2d"])
    ts = float(decode.step(st, 2 * tokens, batch).streams["h2d"])
    return math.log(tb / t0) / math.log(ts / t0)


def llamacpp_offloadable_layers(model: str) -> float:
    """Return the layers llama.cpp offers to offload: the repeating layers plus the output layer."""
    return float(load_model(model).n_layers + 1)


def llamacpp_device_crossings(model: str, n_gpu_layers: int) -> float:
    """Return how often the hidden state changes device per token with -ngl N (contiguous split)."""
    n = load_model(model).n_layers
    i_gpu_start = max(
        n + 1 - n_gpu_layers, 0
    )  # llama.cpp: layers from here on (and the output) on the GPU
    return float(0 < i_gpu_start <= n)


def harmonic_midpoint(fast: float, slow: float) -> float:
    """Return tokens/s with half the layers at each speed: times add, so rates combine harmonically."""
    return 2 / (1 / fast + 1 / slow)


def arithmetic_midpoint(fast: float, slow: float) -> float:
    """Return the average of two rates."""
    return (fast + slow) / 2


def nvme_random_share(storage: str, request: str, queue_depth: int) -> float:
    """Return effective random-read bandwidth at a request size and queue depth over sequential."""
    st = build_part("storage", storage)
    size = parse_quantity(request, Dim.BYTES)
    return float(transfer.nvme_bandwidth(st, size, queue_depth) / st.read_bandwidth.value)


def weight_bytes(model: str, precision: str) -> float:
    """Return a model's weight bytes in a format."""
    return float(load_model(model).weight_bytes(weight_format(precision)).total)


def kv_ratio(model: str, fmt: str) -> float:
    """Return a KV format's bytes over bf16's."""
    m = load_model(model)
    return kv.bytes_per_token(m, kv_format(fmt)) / kv.bytes_per_token(m)


def tpot(
    system: str,
    model: str,
    tokens: int,
    batch: int = 1,
    overlap: str = "none",
    kv_on_gpu: bool = False,
    generate: int = 1,
) -> float:
    """Return TPOT (s, ``decode.tpot``) after ``tokens`` with all KV in host memory (or on the GPU)."""
    s, m = load_system(system), load_model(model)
    st = decode.Setup(s, m) if kv_on_gpu else decode.offloaded(s, m, overlap)
    return float(decode.tpot(st, tokens, generate, batch, overlap))


def tpot_w4_change(system: str, model: str, tokens: int, generate: int = 1) -> float:
    """Return TPOT with int4 weights over TPOT with bf16 weights, everything on the GPU."""
    s, m = load_system(system), load_model(model)
    w4 = decode.Setup(s, m, weight_format("int4"))
    return float(
        decode.tpot(w4, tokens, generate) / decode.tpot(decode.Setup(s, m), tokens, generate)
    )


def max_context(system: str, model: str, budget: str, batch: int = 1) -> float:
    """Return the longest context (tokens) whose TPOT meets a budget and fits, all KV in host memory."""
    budget_s = parse_quantity(budget, Dim.TIME)
    return float(decode_budget.longest_within(_offloaded(system, model), budget_s, batch))


def storage_step_time(system: str, model: str, tokens: int) -> float:
    """Return the seconds to read every layer's cache from storage once (KV on NVMe)."""
    s, m = load_system(system), load_model(model)
    return float(kv.request_bytes(m, tokens)) / s.storage.read_bandwidth.value


def hbm_kv_time(system: str, model: str, tokens: int) -> float:
    """Return the seconds for the GPU to read the whole cache from its own memory."""
    s, m = load_system(system), load_model(model)
    return float(kv.request_bytes(m, tokens)) / s.gpu.memory_bandwidth.value


def link_over_hbm(system: str, model: str, tokens: int) -> float:
    """Return the link time of the whole cache over the GPU memory's time for it."""
    return step_link_time(system, model, tokens) / hbm_kv_time(system, model, tokens)


def model_layers(model: str) -> float:
    """Return the number of repeating layers."""
    return float(load_model(model).n_layers)


def link_time_at(model: str, tokens: int, rate: str) -> float:
    """Return the seconds to copy one request's whole cache at a given link rate."""
    return float(kv.request_bytes(load_model(model), tokens)) / parse_quantity(rate, Dim.BANDWIDTH)


def link_over_hbm_at(system: str, model: str, tokens: int, rate: str) -> float:
    """Return the copy time of the whole cache at ``rate`` over the GPU memory's time for it."""
    return link_time_at(model, tokens, rate) / hbm_kv_time(system, model, tokens)


def layer_attention_time(system: str, model: str, tokens: int, batch: int = 1) -> float:
    """Return one full-attention layer's attention alone on the GPU: read its K and V, or its FLOPs.

    The article's "attention of one layer" (0.25 ms at 128K): the layer's weights are not in it.
    """
    s, m = load_system(system), load_model(model)
    lay = decode.layers(m, weight_format("bf16"))
    read = batch * kv.full_layer_bytes(m, tokens) / s.gpu.attention_rate
    flops = batch * float(np.max(lay.attn_flops)) * tokens / s.compute_rate
    return float(max(read, flops))


def layer_link_over_attention(system: str, model: str, tokens: int) -> float:
    """Return one layer's copy over the link over that layer's attention time on the GPU."""
    return layer_move_time(system, model, tokens, "link") / layer_attention_time(
        system, model, tokens
    )


def step_flops(model: str, tokens: int, batch: int = 1) -> float:
    """Return one decode step's FLOPs over every layer and the head: matmuls plus attention."""
    lay = decode.layers(load_model(model), weight_format("bf16"))
    per_token = lay.dense_flops + lay.attn_flops * np.minimum(tokens, lay.window)
    return float(batch * (per_token @ lay.count))


def flops_ratio(model: str, tokens: int, batch: int, base: int = 1) -> float:
    """Return how much a decode step's FLOPs (연산량) grow from batch ``base`` to ``batch``."""
    return step_flops(model, tokens, batch) / step_flops(model, tokens, base)


def copy_per_token_ratio(system: str, model: str, tokens: int, batch: int) -> float:
    """Return the link time per generated token at ``batch`` over that at batch 1 (cache in host memory).

    1 means batching does not share the copy out: each request brings its own cache.
    """
    return (
        step_link_time(system, model, tokens, batch) / batch / step_link_time(system, model, tokens)
    )


def cpu_attention_layer_bytes(model: str, batch: int = 1) -> float:
    """Return the bytes one layer moves over the link per step when attention runs beside the cache.

    The query goes to the CPU with the new token's K and V, the attention output comes back
    (FlexGen ``--cpu``, ZeRO-Inference's KV offload); the cache itself does not cross.
    """
    m = load_model(model)
    lay = decode.layers(m, weight_format("bf16"))
    return float(batch * (lay.qo_bytes + kv.attention_layer_token_bytes(m)))


def system_ratio(system: str, num: str, den: str) -> float:
    """Return one system figure over another, each given as 'part.field'."""
    return system_figure(system, num) / system_figure(system, den)


def tpot_penalty(
    system: str, model: str, tokens: int, weights: str = "bf16", kv_fmt: str = "bf16", base: int = 0
) -> float:
    """Return how much slower TPOT gets with a format (or ``tokens`` instead of ``base``), 0 if faster.

    Everything on the GPU; a penalty is TPOT over the bf16 TPOT (at ``base`` tokens when given),
    less one, and never below zero: a change that speeds decode up carries no penalty.
    """
    s, m = load_system(system), load_model(model)
    variant = decode.Setup(s, m, weight_format(weights), kv_format(kv_fmt))
    ratio = decode.tpot(variant, tokens, 1) / decode.tpot(decode.Setup(s, m), base or tokens, 1)
    return float(max(ratio - 1, 0.0))


def storage_context_within(system: str, model: str, budget: str) -> float:
    """Return the longest context (tokens) whose whole cache storage reads once within ``budget``."""
    s, m = load_system(system), load_model(model)
    budget_s = parse_quantity(budget, Dim.TIME)
    return float(budget_s * s.storage.read_bandwidth.value / kv.request_bytes(m, 1))


def model_positions(model: str) -> float:
    """Return the longest context a model is built for (its max_position_embeddings)."""
    return float(load_model(model).max_positions)


FUNCTIONS: dict[str, Callable[..., float]] = {
    f.__name__: f
    for f in (
        part_figure, system_figure, layer_kv_bytes, layer_move_time, layer_move_ratio, step_link_time,
        per_token_link_time, layer_gpu_time, layer_stall_time, layer_link_over_gpu, gpu_time_ratio,
        link_time_ratio, batch_slope_changes, batch_vs_context_growth, llamacpp_offloadable_layers,
        llamacpp_device_crossings, harmonic_midpoint, arithmetic_midpoint, nvme_random_share,
        weight_bytes, kv_ratio, tpot, tpot_w4_change, max_context, storage_step_time, hbm_kv_time,
        link_over_hbm, model_layers, link_time_at, link_over_hbm_at, layer_attention_time,
        layer_link_over_attention, step_flops, flops_ratio, copy_per_token_ratio,
        cpu_attention_layer_bytes, system_ratio, tpot_penalty, storage_context_within,
        model_positions,
    )
}  # fmt: skip


# -- claims --------------------------------------------------------------------------------------
def _value(x: Any) -> float:
    """Read a claimed value: a number, or a quantity string with a unit."""
    if isinstance(x, int | float) and not isinstance(x, bool):
        return float(x)
    for dim in Dim:
        try:
            return parse_quantity(x, dim)
        except UnitError:
            continue
    raise ValueError(f"cannot read claimed value {x!r}")


def _is_range(c: Any) -> bool:
    return isinstance(c, dict) and ("min" in c or "max" in c)


def _is_order(c: Any) -> bool:
    return isinstance(c, dict) and ("gt" in c or "lt" in c)


@dataclass(frozen=True)
class Claim:
    """One claim of the article."""

    id: str
    section: str
    quote: str
    gloss: str
    verdict: str
    reason: str
    claimed: Any = None  # a value, {min, max} (either may be left out), or {gt|lt: x}
    recompute: dict | None = None  # {call: name, args: {...}}
    kind: str = "measure"  # how the rule applies: see KINDS
    quantity: str = ""  # what the claimed number measures, where the quote does not say it
    unit: str = ""  # how to show the values: a Dim name, or '' for a plain number
    source: str = ""
    correct: str = ""
    conclusion: str = ""
    previous_verdict: str = ""  # the verdict before the re-judging (NEW for an added claim)
    previous_gloss: str = ""  # the gloss before, where it changed
    change_reason: str = ""  # why the verdict or the gloss changed
    previous_reason: str = ""  # the reason the previous verdict gave, where the verdict changed
    earlier: tuple = ()  # older re-judgings, newest first: {verdict, change_reason}

    def __post_init__(self) -> None:
        problems = []
        if self.kind not in KINDS:
            problems.append(f"kind {self.kind!r} is not one of {KINDS}")
        if (self.kind == "comparison") != _is_order(self.claimed):
            problems.append("a comparison, and only a comparison, claims {gt: x} or {lt: x}")
        if self.verdict not in VERDICTS:
            problems.append(f"verdict {self.verdict!r} is not one of {VERDICTS}")
        if self.previous_verdict not in ("", NEW, *VERDICTS):
            problems.append(f"previous_verdict {self.previous_verdict!r} is not a verdict")
        changed = self.previous_verdict or self.previous_gloss
        if changed and not self.change_reason:
            problems.append("a changed verdict or gloss needs a change_reason")
        if self.change_reason and not changed:
            problems.append("change_reason without a previous_verdict or previous_gloss")
        if self.previous_verdict == self.verdict:
            problems.append("previous_verdict equals the verdict: leave it out")
        if self.previous_reason and not self.previous_verdict:
            problems.append("previous_reason without a previous_verdict")
        if self.earlier and not self.previous_verdict:
            problems.append("earlier re-judgings without a previous_verdict")
        for e in self.earlier:
            if e.get("verdict") not in (NEW, *VERDICTS) or len(e.get("change_reason", "")) < 20:
                problems.append(f"earlier re-judging {e!r} needs a verdict and a change_reason")
        if problems:
            raise ValueError(f"claim {self.id}: " + "; ".join(problems))

    def recomputed(self) -> float | None:
        """Return the package's value for the claim, or None for a fact checked against a source."""
        if not self.recompute:
            return None
        return float(FUNCTIONS[self.recompute["call"]](**self.recompute.get("args", {})))

    def error(self, value: float) -> float:
        """Return the relative distance from the claim to ``value`` (0 when a range or order holds)."""
        c = self.claimed
        if _is_order(c):
            ok = value > _value(c["gt"]) if "gt" in c else value < _value(c["lt"])
            return 0.0 if ok else math.inf
        if _is_range(c):
            lo, hi = _value(c.get("min", -math.inf)), _value(c.get("max", math.inf))
            if lo <= value <= hi:
                return 0.0
            target = lo if value < lo else hi
        else:
            target = _value(c)
        if value == 0:
            return 0.0 if target == 0 else math.inf
        return abs(target - value) / abs(value)

    def judged(self, value: float) -> str:
        """Return the verdict the recomputed value implies under the rule."""
        err = self.error(value)
        if self.kind == "count" and err > 0:
            return "wrong"  # a count is right or wrong, however close
        return rule_verdict(err)

    @property
    def changed(self) -> bool:
        """Whether the re-judging changed this claim's verdict or gloss, or added the claim."""
        return bool(self.previous_verdict or self.previous_gloss)

    @property
    def verdicts(self) -> tuple[str, ...]:
        """Return the claim's verdicts, oldest first, ending with the current one."""
        older = [e["verdict"] for e in reversed(self.earlier)]
        return (*older, *([self.previous_verdict] if self.previous_verdict else []), self.verdict)

    @property
    def added(self) -> bool:
        """Whether a re-judging added this claim (the earlier chapter did not list it)."""
        return self.verdicts[0] == NEW

    def show(self, value: float | None) -> str:
        """Format a value in the claim's unit."""
        if value is None:
            return "—"
        if self.unit:
            return format_quantity(value, Dim[self.unit])
        return format_number(value, 4)

    def claimed_text(self) -> str:
        """Format what the article claims."""
        c = self.claimed
        if c is None:
            return "—"
        if _is_range(c):
            if "max" not in c:
                return f"at least {c['min']}"
            if "min" not in c:
                return f"at most {c['max']}"
            return f"{c['min']}–{c['max']}"
        if _is_order(c):
            return ", ".join(f"{'>' if k == 'gt' else '<'} {v}" for k, v in c.items())
        return str(c)


@cache
def load_claims() -> tuple[Claim, ...]:
    """Return the article's claims from catalog/claims.yaml."""
    raw = catalog.load("claims")
    return tuple(Claim(**{**c, "earlier": tuple(c.get("earlier", ()))}) for c in raw["claims"])


@cache
def omitted() -> tuple[dict, ...]:
    """Return the article's numbers that are not claims, each with the reason it is left out."""
    raw = catalog.load("claims")
    return tuple(raw.get("omitted", []))


def sections() -> list[str]:
    """Return the article's sections in the order the claims appear."""
    return list(dict.fromkeys(c.section for c in load_claims()))


def changed() -> tuple[Claim, ...]:
    """Return the claims whose verdict or gloss the re-judging changed, and the claims it added."""
    return tuple(c for c in load_claims() if c.changed)


def summary() -> dict[str, int]:
    """Return how many claims got each verdict."""
    counts = dict.fromkeys(VERDICTS, 0)
    for c in load_claims():
        counts[c.verdict] += 1
    return counts
