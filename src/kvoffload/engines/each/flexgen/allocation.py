"""Memory as FlexGen allocates it, and the GPU peak its LP plans for.

Memory is what FlexGen's runtime allocates (FlexLLMGen flexllmgen/flex_opt.py and
pytorch_backend.py @ 004ffef8): each weight tensor lies whole on one tier, picked by where its
midpoint falls in its layer's bytes (``init_weight_list``, L92-131), so ``--percent 20 80`` puts a
twelfth of OPT's layer bytes on the GPU, not a fifth; the next layer's weights load while one
computes; and the GPU holds the larger of the prefill's working set (one GPU batch's activations
and attention scores, :mod:`kvoffload.model.working_memory`) and the decode's. FlexGen's own
memory constraint is its LP's peak GPU memory (cost_model.py L283-323), kept within ``ALPHA_G`` of
the GPU (L43, L96).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from kvoffload.engines.each.flexgen.policy import COMPRESSED, SHARE_EPS, Costs, Options, Policies
from kvoffload.inputs.models import Model
from kvoffload.inputs.precision import WeightFormat
from kvoffload.model import capacity, decode, kv, working_memory
from kvoffload.model.prediction import Scenario

ALPHA_G = 0.8  # cost_model.py: alpha_g = 0.8 (L43); gmem = config.gmem * alpha_g (L96)
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
        gpu = self.total - self.below[np.searchsorted(self.mids, 1 - wg - SHARE_EPS)]
        return gpu, self.below[np.searchsorted(self.mids, wd - SHARE_EPS)]


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
