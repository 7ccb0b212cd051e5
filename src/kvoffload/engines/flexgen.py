"""FlexGen: weights, KV cache and activations placed over GPU, CPU and disk by fractions; a block of
GPU batches shares each loaded layer (zig-zag); attention on the CPU over CPU-resident cache
(``--cpu``); optional 4-bit group-wise compression; and FlexGen's overlap. The time model follows
FlexGen's own cost model (FlexLLMGen experimental/cost_model.py), overlap included: in decode a
layer waits for its host-to-GPU load and then takes the longest of its other streams; in prefill
it takes the longest of (load from CPU + read from disk), (store to CPU + write to disk) and
compute. The hardware profile's figures replace the cost model's fitted constants; without a
``percent`` policy, a search over a grid of policies picks the one with the highest throughput
that fits every tier.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from kvoffload.model import capacity, decode, kv
from kvoffload.model.prediction import Prediction, Resolved, Scenario
from kvoffload.spec import catalog
from kvoffload.spec.errors import InputError

COMPRESSED = (4 + 2 * 16 / 64) / 16  # 4-bit values plus an fp16 scale and minimum per group of 64
# HBM bytes FlexGen's TorchCompressedDevice.decompress moves per fp16 byte it produces, counted op
# by op from flexgen/compression.py for N values (packed N/2 bytes, output 2N bytes):
#   packed >> 4 and packed & 0xF: read N/2, write N/2 each          -> 2N
#   data[even] = ..., data[odd] = ...: read N/2, write N (fp16) each -> 3N
#   data.div_(scale), data.add_(mn): read 2N, write 2N each          -> 8N
# 13N bytes for 2N bytes of fp16: 6.5 per fp16 byte. No constant is fitted to a measurement; the
# value, its kind and source are kept in catalog/engine_constants.yaml (flexgen.dequant_traffic).
DEQUANT_TRAFFIC = float(catalog.load("engine_constants")["flexgen"]["dequant_traffic"]["value"])


class Options(BaseModel):
    """FlexGen's policy; leave out ``percent`` to let the search choose it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    percent: tuple[float, float, float, float, float, float] | None = None  # wG wC cG cC aG aC, %
    gpu_batch_size: int | None = Field(None, ge=1, le=100_000, strict=True)
    num_gpu_batches: int | None = Field(None, ge=1, le=10_000, strict=True)
    cpu_attention: bool = Field(False, strict=True)
    compress_weight: bool = Field(False, strict=True)
    compress_cache: bool = Field(False, strict=True)
    overlap: bool = Field(True, strict=True)
    pin_weight: bool = Field(True, strict=True)

    @field_validator("percent")
    @classmethod
    def _shares(cls, v: tuple | None) -> tuple | None:
        if v is None:
            return v
        if any(not 0 <= x <= 100 for x in v):
            raise ValueError("each percentage must be from 0 to 100")
        for name, (a, b) in (("weights", v[0:2]), ("cache", v[2:4]), ("activations", v[4:6])):
            if a + b > 100:
                raise ValueError(f"{name}: GPU and CPU shares add up to more than 100%")
        return v


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
    """Per policy: prefill and decode time (s), bytes per tier, throughput (tokens/s)."""

    prefill: np.ndarray
    step: np.ndarray
    streams: dict[str, np.ndarray]
    gpu_bytes: np.ndarray
    cpu_bytes: np.ndarray
    disk_bytes: np.ndarray
    throughput: np.ndarray


def pin_weight(sc: Scenario) -> bool:
    """Return FlexGen's --pin-weight: the option where given, else the scenario's pinned: (True)."""
    o = sc.options
    return o.pin_weight if "pin_weight" in o.model_fields_set else sc.pinned_or(True)


def cost(sc: Scenario, pol: Policies, o: Options) -> Costs:
    """Evaluate FlexGen's cost model for every policy at once."""
    system, model = sc.system, sc.model
    lay = decode.layers(model, sc.setup.weights)
    col = lambda x: np.asarray(x, dtype=np.float64)[:, None]  # noqa: E731 - policies down, layer classes across
    wg, wc, cg, cc, hg, hc = (col(getattr(pol, k)) for k in ("wg", "wc", "cg", "cc", "hg", "hc"))
    wd, cd, hd = 1 - wg - wc, 1 - cg - cc, 1 - hg - hc
    bls, gbs = col(pol.batch), col(pol.gbs)
    catt = col(pol.cpu_att)
    s, n = float(sc.prompt), float(sc.generate)
    sa = s + n / 2
    w = lay.weight_bytes[None, :]
    wf = w * (COMPRESSED if o.compress_weight else 1.0)
    ctok = (lay.kv_per_token * float(kv.bytes_per_token_per_layer(model, sc.setup.kv)[0]))[None, :]
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

    # memory: weights and cache by share, a double buffer for streamed layers, one GPU batch's
    # cache in fp16 when attention runs on the GPU over cache held elsewhere
    weights = decode.step_weight_bytes(model, sc.setup.weights) * (
        COMPRESSED if o.compress_weight else 1.0
    )
    total_kv = (
        bls[:, 0]
        * (s + n)
        * float(kv.bytes_per_token(model, sc.setup.kv))
        * (COMPRESSED if o.compress_cache else 1.0)
    )
    layer_w = float(lay.weight_bytes.max())
    w_stream = np.where(pol.wg < 1, 2 * layer_w, 0.0)
    kv_work = np.where(
        (pol.cg < 1) & (pol.cpu_att == 0), 2 * gbs[:, 0] * (s + n) * float(ctok.max()), 0.0
    )
    gpu_bytes = pol.wg * weights + pol.cg * total_kv + w_stream + kv_work
    cpu_bytes = pol.wc * weights + pol.cc * total_kv
    disk_bytes = (1 - pol.wg - pol.wc) * weights + (1 - pol.cg - pol.cc) * total_kv
    streams = {
        "gpu": gpu_g @ cnt,
        "cpu": cpu_g @ cnt,
        "h2d": ctog_g @ cnt,
        "d2h": gtoc_g @ cnt,
        "disk_read": dtoc_g @ cnt,
        "disk_write": ctod_g @ cnt,
    }
    return Costs(t_p, t_g, streams, gpu_bytes, cpu_bytes, disk_bytes, throughput)


def given_policy(sc: Scenario) -> Policies:
    """Return the scenario's own policy as a one-element Policies."""
    o = sc.options
    p = [x / 100 for x in o.percent]
    gbs = o.gpu_batch_size or sc.batch
    nb = o.num_gpu_batches or max(sc.batch // gbs, 1)
    one = lambda x: np.array([x], dtype=np.float64)  # noqa: E731
    return Policies(*(one(x) for x in p), one(gbs), one(nb), one(float(o.cpu_attention)))


GBS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 160, 256, 512)
NB = (1, 2, 3, 4, 6, 8, 12, 16)
SHARES = np.round(np.arange(0, 1.0001, 0.1), 2)
CACHE_SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)


def search(sc: Scenario) -> tuple[Policies, Costs, int]:
    """Return every policy on the grid, their costs, and the index of the best feasible one (-1: none)."""
    w = [(a, b) for a in SHARES for b in SHARES if a + b <= 1.0 + 1e-9]
    c = [(a, b) for a in CACHE_SHARES for b in CACHE_SHARES if a + b <= 1.0 + 1e-9]
    grid = list(itertools.product(GBS, NB, w, c, (0.0, 1.0)))
    arr = lambda f: np.array([f(g) for g in grid], dtype=np.float64)  # noqa: E731
    pol = Policies(
        wg=arr(lambda g: g[2][0]), wc=arr(lambda g: g[2][1]), cg=arr(lambda g: g[3][0]), cc=arr(lambda g: g[3][1]),
        hg=np.ones(len(grid)), hc=np.zeros(len(grid)), gbs=arr(lambda g: g[0]), nb=arr(lambda g: g[1]), cpu_att=arr(lambda g: g[4]),
    )  # fmt: skip
    costs = cost(sc, pol, sc.options)
    fits = capacity.fits(sc.system, costs.gpu_bytes, costs.cpu_bytes, costs.disk_bytes)
    if not fits.any():
        return pol, costs, -1
    best = int(np.argmax(np.where(fits, costs.throughput, -np.inf)))
    return pol, costs, best


def _describe(pol: Policies, i: int) -> str:
    pct = lambda x: round(100 * float(x[i]))  # noqa: E731
    return (
        f"--percent {pct(pol.wg)} {pct(pol.wc)} {pct(pol.cg)} {pct(pol.cc)} {pct(pol.hg)} {pct(pol.hc)} "
        f"--gpu-batch-size {int(pol.gbs[i])} --num-gpu-batches {int(pol.nb[i])}"
        + (" --cpu" if pol.cpu_att[i] else "")
    )


def predict(sc: Scenario) -> Prediction:
    """Return FlexGen's prediction for the scenario's policy, or for the best policy found."""
    searched = sc.options.percent is None
    if searched:
        pol, costs, i = search(sc)
        if i < 0:
            raise InputError(
                "FlexGen's policy search found no policy that fits GPU, host memory and disk",
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
        + f" ({float(costs.throughput[i]):.3g} tokens/s)",
    )
