"""FlexGen: weights, KV cache and activations placed over GPU, CPU and disk by fractions; a block of
GPU batches shares each loaded layer (zig-zag); attention on the CPU over CPU-resident cache
(``--cpu``); optional 4-bit group-wise compression; and FlexGen's overlap. The time model follows
FlexGen's own cost model (FlexLLMGen experimental/cost_model.py), overlap included: in decode a
layer waits for its host-to-GPU load and then takes the longest of its other streams; in prefill
it takes the longest of (load from CPU + read from disk), (store to CPU + write to disk) and
compute. The hardware profile's figures replace the cost model's fitted constants.

Memory is what FlexGen's runtime allocates (FlexLLMGen flexllmgen/flex_opt.py and
pytorch_backend.py @ 004ffef8): each weight tensor lies whole on one tier, picked by where its
midpoint falls in its layer's bytes (``init_weight_list``, L92-131), so ``--percent 20 80`` puts a
twelfth of OPT's layer bytes on the GPU, not a fifth; the next layer's weights load while one
computes; and the GPU holds the larger of the prefill's working set (one GPU batch's activations
and attention scores, :mod:`kvoffload.model.working_memory`) and the decode's. Without a
``percent`` policy, a search picks the policy with the highest throughput that fits every tier
and FlexGen's own memory constraint: its LP's peak GPU memory (cost_model.py L283-323) within
``ALPHA_G`` of the GPU (L43, L96).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from typing import Annotated

import msgspec
import numpy as np
from msgspec import UNSET, Meta, UnsetType

from kvoffload.model import capacity, decode, kv, working_memory
from kvoffload.model.prediction import Prediction, Resolved, Scenario
from kvoffload.spec import catalog
from kvoffload.spec.errors import FieldError, InputError
from kvoffload.spec.limits import MAX_BATCH
from kvoffload.spec.models import Model
from kvoffload.spec.precision import WeightFormat
from kvoffload.spec.text import Strict
from kvoffload.spec.units import format_bytes, format_number

COMPRESSED = (4 + 2 * 16 / 64) / 16  # 4-bit values plus an fp16 scale and minimum per group of 64
# HBM bytes FlexGen's TorchCompressedDevice.decompress moves per fp16 byte it produces, counted op
# by op from flexgen/compression.py for N values (packed N/2 bytes, output 2N bytes):
#   packed >> 4 and packed & 0xF: read N/2, write N/2 each          -> 2N
#   data[even] = ..., data[odd] = ...: read N/2, write N (fp16) each -> 3N
#   data.div_(scale), data.add_(mn): read 2N, write 2N each          -> 8N
# 13N bytes for 2N bytes of fp16: 6.5 per fp16 byte. No constant is fitted to a measurement; the
# value, its kind and source are kept in catalog/engine_constants.yaml (flexgen.dequant_traffic).
DEQUANT_TRAFFIC = float(catalog.load("engine_constants")["flexgen"]["dequant_traffic"]["value"])


class Options(Strict):
    """FlexGen's policy; leave out ``percent`` to let the search choose it."""

    percent: tuple[float, float, float, float, float, float] | None = None  # wG wC cG cC aG aC, %
    gpu_batch_size: Annotated[int, Meta(ge=1, le=MAX_BATCH)] | None = None
    num_gpu_batches: Annotated[int, Meta(ge=1, le=10_000)] | None = None
    cpu_attention: bool = False
    compress_weight: bool = False
    compress_cache: bool = False
    overlap: bool = True
    # --pin-weight as the file gives it (UNSET: not given; see ``pin_weight``)
    pin_weight_given: bool | UnsetType = msgspec.field(default=UNSET, name="pin_weight")

    def __post_init__(self) -> None:
        """Check that the shares of each of weights, cache and activations fit in 100%."""
        super().__post_init__()
        v = self.percent
        if v is None:
            return
        if any(not 0 <= x <= 100 for x in v):
            raise FieldError("percent", "each percentage must be from 0 to 100")
        for name, (a, b) in (("weights", v[0:2]), ("cache", v[2:4]), ("activations", v[4:6])):
            if a + b > 100:
                raise FieldError("percent", f"{name}: GPU and CPU shares add up to more than 100%")

    @property
    def pin_weight(self) -> bool:
        """Return the ``pin_weight`` option: True unless the file says false."""
        return self.pin_weight_given is not False


@dataclass(frozen=True)
class Policies:
    """Policies as arrays (one entry per policy): shares in [0, 1], batch sizes, attention side."""

    wg: np.ndarray
    wc: np.ndarray
    cg: np.ndarray
    cc: np.ndarray
    hg: np.ndarray
    hc: np.ndarray
    gbs: np.ndarray
    nb: np.ndarray
    cpu_att: np.ndarray

    @property
    def batch(self) -> np.ndarray:
        """Return the effective batch: GPU batch size x number of GPU batches."""
        return self.gbs * self.nb


@dataclass(frozen=True)
class Costs:
    """Per policy: prefill and decode time (s), bytes per tier, throughput (tokens/s).

    ``gpu_bytes`` is the GPU's peak as FlexGen's runtime allocates; ``lp_gpu_bytes`` is the peak
    FlexGen's cost model writes into its LP, which its policy search keeps within ``ALPHA_G``.
    """

    prefill: np.ndarray
    step: np.ndarray
    streams: dict[str, np.ndarray]
    gpu_bytes: np.ndarray
    cpu_bytes: np.ndarray
    disk_bytes: np.ndarray
    throughput: np.ndarray
    lp_gpu_bytes: np.ndarray


def pin_weight(sc: Scenario) -> bool:
    """Return FlexGen's --pin-weight: the option where given, else the scenario's pinned: (True)."""
    o = sc.options
    return sc.pinned_or(True) if o.pin_weight_given is UNSET else o.pin_weight_given


def cost(sc: Scenario, pol: Policies, o: Options) -> Costs:
    """Evaluate FlexGen's cost model for every policy at once."""
    system, model = sc.system, sc.model
    lay = decode.layers(model, sc.setup.weights)
    col = lambda x: np.asarray(x, dtype=np.float64)[:, None]  # noqa: E731 - policies down, layer classes across
    wg, wc, cg, cc, hg, hc = (col(getattr(pol, k)) for k in ("wg", "wc", "cg", "cc", "hg", "hc"))
    wd, cd, hd = 1 - wg - wc, 1 - cg - cc, 1 - hg - hc
    bls = col(pol.batch)
    catt = col(pol.cpu_att)
    s, n = float(sc.prompt), float(sc.generate)
    sa = s + n / 2
    w = lay.weight_bytes[None, :]
    wf = w * (COMPRESSED if o.compress_weight else 1.0)
    ctok = (lay.kv_per_token * float(kv.attention_layer_token_bytes(model, sc.setup.kv)))[None, :]
    cf = ctok * (COMPRESSED if o.compress_cache else 1.0)
    hb = 2.0 * model.hidden * bls  # one token's hidden state per request, fp16
    # a compressed cache is allocated unpinned ("disable pin_memory due to high memory overhead",
    # TorchCompressedDevice.init_cache_one_gpu_batch), so its copies run at the pageable rate
    h2d = system.copy_rate("h2d", pinned=not o.compress_cache)
    w_in = system.copy_rate("h2d", pinned=pin_weight(sc))
    d2h = system.copy_rate("d2h", pinned=True)
    dr, dw = system.storage.read_bandwidth.value, system.storage.write_bandwidth.value
    hbm, att_bw = system.gpu.streaming_bandwidth, system.gpu.attention_rate
    peak = system.compute_rate
    host_bw, host_flops = system.host.memory_bandwidth.value, system.host.flops.value
    dense, attn = lay.dense_flops[None, :], lay.attn_flops[None, :]
    # FlexGen decompresses a layer's weights inside mha_gen/mlp, i.e. once per GPU batch, and the
    # cache in full: decompress(k_cache)[:src_s] expands all prompt + generate - 1 slots each step
    n_gpu_batches = col(pol.nb)
    dq_w = (n_gpu_batches * w * DEQUANT_TRAFFIC / hbm) if o.compress_weight else 0.0
    full_len = s + n - 1

    # prefill, per layer
    ctog_p = (wc + wd) * wf / w_in + (hc + hd) * s * hb / h2d
    gtoc_p = (cc + cd) * bls * (s + 1) * cf / d2h + (hc + hd) * s * hb / d2h
    dtoc_p = wd * wf / dr + hd * s * hb / dr
    ctod_p = cd * bls * (s + 1) * cf / dw + hd * s * hb / dw
    comp_p = bls * (s * dense + attn * s * s / 2) / peak + dq_w
    # decode, per layer, at the mean context
    kv_far = (cc + cd) * bls * sa * cf
    on_gpu_kv = np.where(catt > 0, cg, 1.0)
    ctog_g = (wc + wd) * wf / w_in + np.where(catt > 0, 0.0, kv_far) / h2d + (hc + hd) * hb / h2d
    gtoc_g = (cc + cd) * bls * cf / d2h + (hc + hd) * hb / d2h
    dtoc_g = (cd * bls * sa * cf + wd * wf) / dr + hd * hb / dr
    ctod_g = cd * bls * cf / dw + hd * hb / dw
    # each GPU batch's matmuls read the layer's fp16 weights (decompressed first when compressed),
    # and attention reads the fp16 cache (expanded first when compressed)
    gpu_g = np.maximum(
        n_gpu_batches * w / hbm + on_gpu_kv * bls * sa * ctok / att_bw,
        bls * (dense + attn * sa * on_gpu_kv) / peak,
    )
    kv_expanded = on_gpu_kv * bls * full_len * ctok
    gpu_g = gpu_g + dq_w + ((kv_expanded * DEQUANT_TRAFFIC / hbm) if o.compress_cache else 0.0)
    cpu_far = (cc + cd) * bls * sa
    cpu_g = np.where(
        catt > 0, np.maximum(cpu_far * ctok / host_bw, cpu_far * attn / host_flops), 0.0
    )
    cnt = lay.count
    if o.overlap:
        t_p = np.maximum.reduce([ctog_p + dtoc_p, gtoc_p + ctod_p, comp_p]) @ cnt
        t_g = (ctog_g + np.maximum.reduce([gtoc_g, dtoc_g, ctod_g, gpu_g + cpu_g])) @ cnt
    else:
        t_p = (ctog_p + gtoc_p + dtoc_p + ctod_p + comp_p) @ cnt
        t_g = (ctog_g + gtoc_g + dtoc_g + ctod_g + gpu_g + cpu_g) @ cnt
    throughput = pol.batch * n / (t_p + (n - 1) * t_g)
    streams = {
        "gpu": gpu_g @ cnt,
        "cpu": cpu_g @ cnt,
        "h2d": ctog_g @ cnt,
        "d2h": gtoc_g @ cnt,
        "disk_read": dtoc_g @ cnt,
        "disk_write": ctod_g @ cnt,
    }
    gpu_bytes, cpu_bytes, disk_bytes = memory(sc, pol, o)
    return Costs(
        t_p, t_g, streams, gpu_bytes, cpu_bytes, disk_bytes, throughput, lp_gpu_bytes(sc, pol, o)
    )


# -- memory -----------------------------------------------------------------------------------------
ALPHA_G = 0.8  # cost_model.py: alpha_g = 0.8 (L43); gmem = config.gmem * alpha_g (L96)
_EPS = 1e-9  # shares are compared with FlexGen's percentages; float noise must not move a tensor
_MLP_ROLES = ("ffn_", "exp_", "shexp_", "router")
_FP16 = working_memory.FP16


@dataclass(frozen=True)
class _Module:
    """One of FlexGen's layers (attention, MLP, input or output embedding) and how it splits."""

    mids: np.ndarray  # each matrix's midpoint along the module's bytes, as a share (ascending)
    below: np.ndarray  # bytes of the matrices before each midpoint, and the total last
    total: float  # the module's bytes, vectors included (they go with the matrices' shares)

    @classmethod
    def of(cls, matrices: list[float], vectors: float) -> _Module:
        sizes = np.asarray(matrices or [vectors or 0.0], dtype=np.float64)
        cum = np.cumsum(sizes)
        top = float(cum[-1]) or 1.0
        scale = (float(sizes.sum()) + (vectors if matrices else 0.0)) / top
        below = np.concatenate([[0.0], cum]) * scale
        return cls((cum - sizes / 2) / top, below, float(below[-1]))

    def placed(self, wg: np.ndarray, wd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return the bytes on the GPU and on disk under shares ``wg`` (GPU) and ``wd`` (disk).

        FlexGen's get_choice (flex_opt.py L82-89) puts a tensor on disk when its midpoint lies
        below the disk share, on the CPU below disk + CPU, else on the GPU.
        """
        gpu = self.total - self.below[np.searchsorted(self.mids, 1 - wg - _EPS)]
        return gpu, self.below[np.searchsorted(self.mids, wd - _EPS)]


@cache
def _modules(
    model: Model, fmt: WeightFormat
) -> tuple[tuple[tuple[_Module, _Module, int], ...], _Module, _Module]:
    """Return FlexGen's modules: (attention, MLP, how many) per distinct layer, input, output.

    FlexGen's OPT has its own token table in InputEmbed and in OutputEmbed (flex_opt.py L152-158,
    L216-224), so a tied table is held twice.
    """
    per_layer: dict[int, list[list[float]]] = {}
    inp: list[float] = []
    out: list[float] = []
    vec = {"in": 0.0, "out": 0.0}
    for t, b in model.tensor_bytes(fmt):
        one = float(b) / t.count
        if t.layer is None:
            head = t.role in ("output", "norm_final") or (
                t.role == "embed" and model.tie_embeddings
            )
            if t.role == "embed" or not head:
                if t.vector:
                    vec["in"] += float(b)
                else:
                    inp.extend([one] * t.count)
            if head:
                if t.vector:
                    vec["out"] += float(b)
                else:
                    out.extend([one] * t.count)
            continue
        att, mlp, att_v, mlp_v = per_layer.setdefault(t.layer, [[], [], [0.0], [0.0]])
        is_mlp = t.role.startswith(_MLP_ROLES) or getattr(t, "expert", False)
        if t.vector:
            (mlp_v if is_mlp else att_v)[0] += float(b)
        else:
            (mlp if is_mlp else att).extend([one] * t.count)
    groups: dict[tuple, int] = {}
    for att, mlp, att_v, mlp_v in per_layer.values():
        key = (tuple(att), att_v[0], tuple(mlp), mlp_v[0])
        groups[key] = groups.get(key, 0) + 1
    layers = tuple(
        (_Module.of(list(a), av), _Module.of(list(m), mv), k)
        for (a, av, m, mv), k in groups.items()
    )
    return layers, _Module.of(inp, vec["in"]), _Module.of(out, vec["out"])


def memory(sc: Scenario, pol: Policies, o: Options) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return the bytes FlexGen's runtime holds on the GPU (its peak), in host memory and on disk.

    GPU: the weights, cache and activations homed there, the weight buffers of the layers in
    flight, and the larger of the prefill's and the decode's working set:
    - prefill (``mha``/``mlp``, pytorch_backend.py L298-365, L569-584): one GPU batch's layer
      activations and score matrix (:func:`working_memory.prefill_stage_bytes`), the module's
      weights decompressed to fp16 when compressed, and the next GPU batch's hidden states when
      activations live off the GPU (``load_hidden`` of batch k+1 runs beside batch k);
    - decode (``mha_gen``, L367-469): the K and V copies attention makes of the GPU batch's cache
      it attends to (``permute(...).reshape``), their fp16 expansion when the cache is
      compressed, and the loaded cache of this and the next GPU batch when attention runs on the
      GPU over cache held elsewhere.
    """
    model, s, n = sc.model, float(sc.prompt), float(sc.generate)
    wg, wc, cg, cc = pol.wg, pol.wc, pol.cg, pol.cc
    hg, hc = pol.hg, pol.hc
    wd = 1 - wg - wc
    gbs, bls = pol.gbs, pol.batch
    cw = COMPRESSED if o.compress_weight else 1.0
    layer_mods, inp, out = _modules(model, sc.setup.weights)
    w_gpu = w_disk = 0.0
    total = inp.total + out.total
    att_off_max = mlp_off_max = 0.0
    att16 = mlp16 = 0.0
    for att, mlp, k in layer_mods:
        a_g, a_d = att.placed(wg, wd)
        m_g, m_d = mlp.placed(wg, wd)
        w_gpu, w_disk = w_gpu + k * (a_g + m_g), w_disk + k * (a_d + m_d)
        total += k * (att.total + mlp.total)
        att_off_max = np.maximum(att_off_max, att.total - a_g)
        mlp_off_max = np.maximum(mlp_off_max, mlp.total - m_g)
        att16, mlp16 = max(att16, att.total), max(mlp16, mlp.total)
    i_g, i_d = inp.placed(wg, wd)
    o_g, o_d = out.placed(wg, wd)
    w_gpu, w_disk = w_gpu + i_g + o_g, w_disk + i_d + o_d
    i_off, o_off = inp.total - i_g, out.total - o_g
    if o.overlap:
        # the next module loads while one computes (load_weight(i, j + 1, k)): an attention and
        # an MLP module in flight, or an embedding beside its neighbour
        staging = np.maximum.reduce(
            [att_off_max + mlp_off_max, mlp_off_max + o_off, o_off + i_off, i_off + att_off_max]
        )
    else:
        staging = np.maximum.reduce([att_off_max, mlp_off_max, i_off, o_off])
    dq_att, dq_mlp = (att16, mlp16) if o.compress_weight else (0.0, 0.0)

    per_token = float(kv.bytes_per_token(model, sc.setup.kv))
    total_kv = bls * (s + n) * per_token * (COMPRESSED if o.compress_cache else 1.0)
    ctok = float(np.max(kv.bytes_per_token_per_layer(model, sc.setup.kv)))  # K and V, a layer
    hid = _FP16 * model.hidden  # one token's hidden state
    home = cw * w_gpu + cg * total_kv

    att_p, mlp_p = working_memory.prefill_stage_bytes(model, s, gbs)
    prefill = (
        hg * bls * s * hid + np.maximum(att_p + dq_att, mlp_p + dq_mlp) + (1 - hg) * gbs * s * hid
    )
    attended = np.where(pol.cpu_att > 0, cg, 1.0) * gbs * (s + n) * ctok
    loaded = np.where((cg < 1) & (pol.cpu_att == 0), 2 * gbs * (s + n) * ctok, 0.0)
    decode_ws = (
        hg * bls * hid
        + (1 - hg) * gbs * hid
        + loaded
        + attended * (2.0 if o.compress_cache else 1.0)
        + max(dq_att, dq_mlp)
    )
    gpu = home + cw * staging + np.maximum(prefill, decode_ws)
    cpu = cw * (total - w_gpu - w_disk) + cc * total_kv + hc * bls * s * hid
    disk = cw * w_disk + (1 - cg - cc) * total_kv + (1 - hg - hc) * bls * s * hid
    return gpu, cpu, disk


def lp_gpu_bytes(sc: Scenario, pol: Policies, o: Options) -> np.ndarray:
    """Return the GPU's peak as FlexGen's cost model writes it into its LP (the larger phase).

    cost_model.py L284-323 with h1 the hidden size, h2 the MLP's, nh the heads: per phase the
    home (weights, hidden states and cache by share) plus the working set (a double buffer for
    the streamed layer, one GPU batch's hidden states, and ``inter_gpu_working``, which sums the
    q/k/v, attention, output and MLP activations, the prompt's score matrix included). The
    cache's 4·(s+n)·h1 bytes are the profile's K and V bytes per token; compression shrinks the
    weights and the cache by the compressed format's size (the LP divides the weights by 4).
    """
    model, lay = sc.model, decode.layers(sc.model, sc.setup.weights)
    s, n = float(sc.prompt), float(sc.generate)
    h1, h2, nh = float(model.hidden), float(model.intermediate), float(model.n_heads)
    cw = COMPRESSED if o.compress_weight else 1.0
    layers = np.arange(len(lay.count)) != lay.order[-1]  # the output head is no layer of the LP
    wi = cw * float(lay.weight_bytes[layers].max())
    wl = cw * float(lay.weight_bytes[layers] @ lay.count[layers])
    ctok = float(np.max(kv.bytes_per_token_per_layer(model, sc.setup.kv)))
    kv_home = (s + n) * float(kv.bytes_per_token(model, sc.setup.kv))
    kv_home *= COMPRESSED if o.compress_cache else 1.0
    wg, cg, hg = pol.wg, pol.cg, pol.hg
    gbs, bls = pol.gbs, pol.batch
    home_p = wl * wg + 2 * s * h1 * bls * hg + kv_home * bls * cg
    inter_p = gbs * s * (18 * h1 + 2 * h2) + 2 * gbs * nh * s * s
    work_p = 2 * wi * (1 - wg) + 2 * s * h1 * gbs * (1 - hg) + inter_p
    home_g = wl * wg + 2 * h1 * bls * hg + kv_home * bls * cg
    inter_g = gbs * (14 * h1 + 2 * h2) + gbs * cg * (4 * h1 + (s + n) * ctok + 2 * nh * (s + n))
    work_g = 2 * wi * (1 - wg) + 2 * h1 * gbs * (1 - hg) + gbs * (s + n) * ctok * cg + inter_g
    return np.maximum(home_p + work_p, home_g + work_g)


def fits(sc: Scenario, costs: Costs) -> np.ndarray:
    """Return which policies FlexGen's search may pick: every tier holds them, and the LP's
    GPU peak stays within ALPHA_G of the GPU's memory."""
    tiers = capacity.fits(sc.system, costs.gpu_bytes, costs.cpu_bytes, costs.disk_bytes)
    return tiers & (costs.lp_gpu_bytes <= ALPHA_G * sc.system.gpu_memory)


def given_policy(sc: Scenario) -> Policies:
    """Return the scenario's own policy as a one-element Policies."""
    o = sc.options
    p = [x / 100 for x in o.percent]
    gbs = o.gpu_batch_size or sc.batch
    nb = o.num_gpu_batches or max(sc.batch // gbs, 1)
    one = lambda x: np.array([x], dtype=np.float64)  # noqa: E731
    return Policies(*(one(x) for x in p), one(gbs), one(nb), one(float(o.cpu_attention)))


# -- search -----------------------------------------------------------------------------------------
# FlexGen's search tries GPU batch sizes 1, 2, 3, 4 then doubling, and every number of GPU batches
# up to the largest that fits (cost_model.py L497-524); the lattice adds the sizes between, and the
# refinement below moves off it by single steps.
GBS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 384, 512)
NB = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
# the coarse shares: (GPU, CPU) for weights and for the cache, in halves
HALVES = ((0.0, 0.0), (0.0, 0.5), (0.0, 1.0), (0.5, 0.0), (0.5, 0.5), (1.0, 0.0))
# activations: FlexGen's runtime keeps them whole on one device (flex_opt.py L608-615) and its LP
# not on disk (cost_model.py L179-180): on the GPU (1) or in host memory (0)
ACT_GPU = (1.0, 0.0)
TOP = 24  # lattice points whose best coarse policy the refinement starts from
FIRST_STEP, LAST_STEP = 0.25, 1 / 1024  # the refinement's share steps, halved on every miss
MAX_ROUNDS = 120


def policies(
    gbs: np.ndarray, nb: np.ndarray, cpu_att: np.ndarray, hg: np.ndarray, x: np.ndarray
) -> Policies:
    """Return policies from their lattice point and shares ``x`` = (wG, wC, cG, cC) per row."""
    f = lambda a: np.asarray(a, dtype=np.float64)  # noqa: E731
    return Policies(
        wg=f(x[:, 0]), wc=f(x[:, 1]), cg=f(x[:, 2]), cc=f(x[:, 3]), hg=f(hg), hc=1 - f(hg),
        gbs=f(gbs), nb=f(nb), cpu_att=f(cpu_att),
    )  # fmt: skip


def _take(pol: Policies, costs: Costs, keep: np.ndarray) -> tuple[Policies, Costs]:
    sub = lambda a: np.asarray(a)[keep]  # noqa: E731
    p = Policies(**{k: sub(getattr(pol, k)) for k in Policies.__dataclass_fields__})
    c = Costs(
        sub(costs.prefill), sub(costs.step), {k: sub(v) for k, v in costs.streams.items()},
        sub(costs.gpu_bytes), sub(costs.cpu_bytes), sub(costs.disk_bytes),
        sub(costs.throughput), sub(costs.lp_gpu_bytes),
    )  # fmt: skip
    return p, c


def _join(a: tuple[Policies, Costs], b: tuple[Policies, Costs]) -> tuple[Policies, Costs]:
    cat = lambda x, y: np.concatenate([np.asarray(x), np.asarray(y)])  # noqa: E731
    (pa, ca), (pb, cb) = a, b
    p = Policies(**{k: cat(getattr(pa, k), getattr(pb, k)) for k in Policies.__dataclass_fields__})
    c = Costs(
        cat(ca.prefill, cb.prefill), cat(ca.step, cb.step),
        {k: cat(v, cb.streams[k]) for k, v in ca.streams.items()},
        cat(ca.gpu_bytes, cb.gpu_bytes), cat(ca.cpu_bytes, cb.cpu_bytes),
        cat(ca.disk_bytes, cb.disk_bytes), cat(ca.throughput, cb.throughput),
        cat(ca.lp_gpu_bytes, cb.lp_gpu_bytes),
    )  # fmt: skip
    return p, c


def _valid(x: np.ndarray) -> np.ndarray:
    """Return whether shares (..., 4) are shares: each in [0, 1], GPU + CPU at most 1."""
    return (
        np.all((x >= -_EPS) & (x <= 1 + _EPS), axis=-1)
        & (x[..., 0] + x[..., 1] <= 1 + _EPS)
        & (x[..., 2] + x[..., 3] <= 1 + _EPS)
    )


def _score(sc: Scenario, lat: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Return the throughput of each (lattice point, shares) row, -inf where it may not run."""
    ok = _valid(x) & (lat[:, 0] >= 1) & (lat[:, 1] >= 1)
    out = np.full(len(x), -np.inf)
    if ok.any():
        xs = np.clip(x[ok], 0.0, 1.0)
        la = lat[ok]
        c = cost(sc, policies(la[:, 0], la[:, 1], la[:, 2], la[:, 3], xs), sc.options)
        out[ok] = np.where(fits(sc, c), c.throughput, -np.inf)
    return out


_UNIT = np.eye(4)
_W_MOVES = (_UNIT[0], -_UNIT[0], _UNIT[1], -_UNIT[1], _UNIT[0] - _UNIT[1], _UNIT[1] - _UNIT[0])
_C_MOVES = (_UNIT[2], -_UNIT[2], _UNIT[3], -_UNIT[3], _UNIT[2] - _UNIT[3], _UNIT[3] - _UNIT[2])


def _directions(sc: Scenario, lat: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Return the poll directions at each point, (points, directions, 4), longest entry 1.

    Each share alone, GPU against CPU within weights or cache, and every pairing of a weight move
    with a cache move, the cache's at three scales: equal, the one that keeps the LP's GPU peak
    (weights against cache on the GPU) and the one that keeps host memory (weights against cache
    in host memory) where they were. Along a full tier only such pairs can still gain.
    """
    k = len(x)
    pol = policies(lat[:, 0], lat[:, 1], lat[:, 2], lat[:, 3], x)
    eps = 1e-3
    up = lambda i: replace(pol, **{i: getattr(pol, i) + eps})  # noqa: E731
    base = lp_gpu_bytes(sc, pol, sc.options)
    d_wg = (lp_gpu_bytes(sc, up("wg"), sc.options) - base) / eps
    d_cg = (lp_gpu_bytes(sc, up("cg"), sc.options) - base) / eps
    weights = decode.step_weight_bytes(sc.model, sc.setup.weights)
    cache = pol.batch * (sc.prompt + sc.generate) * float(kv.bytes_per_token(sc.model, sc.setup.kv))
    ratios = np.stack(
        [
            np.ones(k),
            np.abs(d_wg) / np.maximum(np.abs(d_cg), 1.0),
            weights / np.maximum(cache, 1.0),
        ],
        axis=1,
    )  # (k, 3)
    singles = np.array(_W_MOVES + _C_MOVES)  # (12, 4)
    w = np.array(_W_MOVES)[:, None, None, :]  # (6, 1, 1, 4)
    c = np.array(_C_MOVES)[None, :, None, :]  # (1, 6, 1, 4)
    pairs = w[None] + ratios[:, None, None, :, None] * c[None]  # (k, 6, 6, 3, 4)
    d = np.concatenate([np.broadcast_to(singles, (k, 12, 4)), pairs.reshape(k, -1, 4)], axis=1)
    return d / np.max(np.abs(d), axis=-1, keepdims=True)


def _lattice_moves(lat: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return each point's lattice neighbours, (points, 10, 4) each with its shares.

    One step in the GPU batch size (an eighth of it, at least 1) or in the number of GPU batches,
    each with the shares kept and with the cache shares scaled so the cache keeps its bytes on
    the GPU and in host memory (the rest to or from disk): a larger batch along a full tier.
    And the other side for attention, and for the activations.
    """
    g, b = lat[:, 0], lat[:, 1]
    dg = np.maximum(1.0, np.floor(g / 8))
    moved = np.repeat(lat[:, None, :], 4, axis=1).copy()
    moved[:, 0, 0], moved[:, 1, 0] = g + dg, g - dg
    moved[:, 2, 1], moved[:, 3, 1] = b + 1, b - 1
    kept = np.repeat(x[:, None, :], 4, axis=1)
    scale = (g * b)[:, None] / np.maximum(moved[..., 0] * moved[..., 1], 1.0)
    cg = np.minimum(kept[..., 2] * scale, 1.0)
    cc = np.minimum(kept[..., 3] * scale, 1.0 - cg)
    scaled = np.stack([kept[..., 0], kept[..., 1], cg, cc], axis=-1)
    flipped = np.repeat(lat[:, None, :], 2, axis=1).copy()  # attention's side, activations' side
    flipped[:, 0, 2], flipped[:, 1, 3] = 1 - lat[:, 2], 1 - lat[:, 3]
    return (
        np.concatenate([moved, moved, flipped], axis=1),
        np.concatenate([kept, scaled, kept[:, :2]], axis=1),
    )


def refine(
    sc: Scenario, lat: np.ndarray, x: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return better policies near each start: a pattern search over the shares and the lattice.

    Every round polls each point's directions at its step and its lattice neighbours, moves to
    the best poll that raises the throughput (doubling the step, up to FIRST_STEP) or else halves
    the step; it ends when every step is below LAST_STEP. All points move at once.
    """
    lat, x = lat.astype(np.float64), x.astype(np.float64)
    f = _score(sc, lat, x)
    step = np.full(len(x), FIRST_STEP)
    for _ in range(MAX_ROUNDS):
        live = np.flatnonzero((step >= LAST_STEP) & np.isfinite(f))
        if len(live) == 0:
            break
        dirs = _directions(sc, lat[live], x[live])
        moves, moved_x = _lattice_moves(lat[live], x[live])
        k, m = len(live), dirs.shape[1]
        tx = np.concatenate([x[live, None, :] + step[live, None, None] * dirs, moved_x], axis=1)
        tl = np.concatenate([np.repeat(lat[live, None, :], m, 1), moves], axis=1)
        tf = _score(sc, tl.reshape(-1, 4), tx.reshape(-1, 4)).reshape(k, -1)
        j = np.argmax(tf, axis=1)
        best = tf[np.arange(k), j]
        gain = best > f[live] * (1 + 1e-12)
        won = live[gain]
        x[won], lat[won], f[won] = tx[gain, j[gain]], tl[gain, j[gain]], best[gain]
        step[won] = np.minimum(step[won] * 2, FIRST_STEP)
        step[live[~gain]] /= 2
    return lat, np.clip(x, 0.0, 1.0), f


def _product(*axes: np.ndarray) -> np.ndarray:
    """Return every combination of the rows of ``axes``, in itertools.product's order."""
    index = np.indices([len(a) for a in axes]).reshape(len(axes), -1)
    return np.concatenate([np.asarray(a)[i] for a, i in zip(axes, index, strict=True)], axis=1)


@cache
def _coarse_grid() -> tuple[np.ndarray, np.ndarray]:
    """Return the coarse lattice (GPU batch size, GPU batches, attention side, activations
    side) and the coarse shares (wG, wC, cG, cC), one row each, read-only."""
    column = lambda v: np.asarray(v, dtype=np.float64)[:, None]  # noqa: E731
    lattice = _product(column(GBS), column(NB), column((0.0, 1.0)), column(ACT_GPU))
    halves = np.asarray(HALVES, dtype=np.float64)
    shares = _product(halves, halves)
    lattice.flags.writeable = shares.flags.writeable = False
    return lattice, shares


def search(sc: Scenario) -> tuple[Policies, Costs, int]:
    """Return the policies tried that FlexGen's LP admits, their costs, and the best one's index.

    A coarse grid (GPU batch size × number of GPU batches × attention side × activation side ×
    weight and cache shares in halves) ranks the lattice; from the TOP lattice points' best
    policies a pattern search moves the shares continuously and the lattice point by steps.
    The best is the highest throughput that fits every tier (-1: none does).
    """
    lattice, shares = _coarse_grid()
    lat = np.repeat(lattice, len(shares), axis=0)
    x = np.tile(shares, (len(lattice), 1))
    pol = policies(lat[:, 0], lat[:, 1], lat[:, 2], lat[:, 3], x)
    costs = cost(sc, pol, sc.options)
    ok = fits(sc, costs)
    found = _take(pol, costs, costs.lp_gpu_bytes <= ALPHA_G * sc.system.gpu_memory)
    score = np.where(ok, costs.throughput, -np.inf).reshape(len(lattice), len(shares))
    per_point = score.max(axis=1)
    starts = np.argsort(-per_point)[:TOP]
    starts = starts[np.isfinite(per_point[starts])]
    if len(starts):
        at = starts * len(shares) + np.argmax(score[starts], axis=1)
        r_lat, r_x, _ = refine(sc, lat[at], x[at])
        r_pol = policies(r_lat[:, 0], r_lat[:, 1], r_lat[:, 2], r_lat[:, 3], r_x)
        r_costs = cost(sc, r_pol, sc.options)
        found = _join(found, _take(r_pol, r_costs, fits(sc, r_costs)))
    pol, costs = found
    ok = capacity.fits(sc.system, costs.gpu_bytes, costs.cpu_bytes, costs.disk_bytes)
    if not ok.any():
        return pol, costs, -1
    return pol, costs, int(np.argmax(np.where(ok, costs.throughput, -np.inf)))


def _describe(pol: Policies, i: int) -> str:
    pct = lambda x: round(100 * float(x[i]))  # noqa: E731
    return (
        f"--percent {pct(pol.wg)} {pct(pol.wc)} {pct(pol.cg)} {pct(pol.cc)} {pct(pol.hg)} {pct(pol.hc)} "
        f"--gpu-batch-size {int(pol.gbs[i])} --num-gpu-batches {int(pol.nb[i])}"
        + (" --cpu" if pol.cpu_att[i] else "")
    )


def predict(sc: Scenario) -> Prediction:
    """Return FlexGen's prediction for the scenario's policy, or for the best policy found."""
    if sc.system.gpu.count > 1:
        # its single-GPU path runs on TorchDevice("cuda:0") (flexllmgen/flex_opt.py); the
        # multi-GPU pipeline (dist_flex_opt.py) is not modelled
        raise InputError(
            "FlexGen's single-GPU engine runs on one GPU; set gpu.count to 1 "
            "(its pipeline-parallel dist_flex_opt is not modelled)",
            field="hardware.gpu.count",
        )
    searched = sc.options.percent is None
    if searched:
        pol, costs, i = search(sc)
        if i < 0:
            # the least any policy can ask of the GPU: one request, nothing homed there
            least = policies(*np.array([[1.0], [1.0], [1.0], [0.0]]), np.zeros((1, 4)))
            need = float(lp_gpu_bytes(sc, least, sc.options)[0])
            budget = ALPHA_G * sc.system.gpu_memory
            why = (
                f": a GPU batch of one {sc.prompt}-token prompt alone needs "
                f"{format_bytes(need)} in FlexGen's LP (its score matrix is heads x prompt² "
                f"x 2 bytes), over the {format_bytes(budget)} it allows"
                if need > budget
                else ""
            )
            raise InputError(
                "FlexGen's policy search found no policy that fits GPU, host memory and disk "
                f"with its LP's GPU peak within {ALPHA_G:.0%} of the GPU's memory" + why,
                field="options",
            )
    else:
        pol, i = given_policy(sc), 0
        costs = cost(sc, pol, sc.options)
    batch = float(pol.batch[i])
    step = float(costs.step[i])
    mem = decode.Memory(
        gpu=np.asarray(costs.gpu_bytes[i]),
        cpu=np.asarray(costs.cpu_bytes[i]),
        disk=np.asarray(costs.disk_bytes[i]),
        staging=np.asarray(0.0),
    )
    o = sc.options
    resolved = Resolved(
        weights=decode.Split(float(pol.wg[i]), float(pol.wc[i]), float(1 - pol.wg[i] - pol.wc[i])),
        kv=decode.Split(float(pol.cg[i]), float(pol.cc[i]), float(1 - pol.cg[i] - pol.cc[i])),
        attention="cpu" if pol.cpu_att[i] else "gpu",
        overlap="flexgen" if o.overlap else "none",
        pinned=pin_weight(sc),
        weights_format=sc.setup.weights,
        kv_format=sc.setup.kv,
    )
    settings = {
        "activations": {
            "gpu": float(pol.hg[i]),
            "cpu": float(pol.hc[i]),
            "disk": float(1 - pol.hg[i] - pol.hc[i]),
        },
        "gpu_batch_size": int(pol.gbs[i]),
        "num_gpu_batches": int(pol.nb[i]),
        "effective_batch": int(batch),
        "compress_weight": sc.options.compress_weight,
        "compress_cache": sc.options.compress_cache,
        "searched": searched,
        # the peak FlexGen's LP plans for, and the share of the GPU its search allows it
        "lp_gpu_bytes": float(costs.lp_gpu_bytes[i]),
        "lp_gpu_budget_bytes": ALPHA_G * sc.system.gpu_memory,
    }
    sc_eff = replace(sc, batch=int(batch))
    return Prediction(
        scenario=sc_eff,
        tpot_s=step,
        ttft_s=float(costs.prefill[i]),
        streams_s={k: float(v[i]) for k, v in costs.streams.items()},
        memory=mem,
        by_overlap_s={},
        resolved=resolved,
        settings=settings,
        policy=("searched: " if searched else "")
        + _describe(pol, i)
        + f" ({format_number(float(costs.throughput[i]))} tokens/s)",
    )
