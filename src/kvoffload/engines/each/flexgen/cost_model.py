"""FlexGen's cost model: prefill and decode time per policy.

The time model follows FlexGen's own cost model (FlexLLMGen experimental/cost_model.py), overlap
included: in decode a layer waits for its host-to-GPU load and then takes the longest of its other
streams; in prefill it takes the longest of (load from CPU + read from disk), (store to CPU +
write to disk) and compute. The hardware profile's figures replace the cost model's fitted constants.
"""

from __future__ import annotations

import numpy as np

from kvoffload.engines.each.flexgen.allocation import lp_gpu_bytes, memory
from kvoffload.engines.each.flexgen.policy import (
    COMPRESSED,
    DEQUANT_TRAFFIC,
    Costs,
    Options,
    Policies,
    pin_weight,
)
from kvoffload.model import decode, kv
from kvoffload.model.prediction import Scenario


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
    # the cache is allocated unpinned in host memory, compressed or not ("disable pin_memory due
    # to high memory overhead": TorchDevice, TorchMixedDevice and TorchCompressedDevice
    # .init_cache_one_gpu_batch, FlexLLMGen flexllmgen/pytorch_backend.py and compression.py at
    # 004ffef82b46e8dc8685c55d0cdda650bdaf1269), so its loads run at the pageable rate; hidden
    # states take allocate's default, pinned on the CPU. New KV goes back at the pinned d2h rate:
    # the profiles give no pageable device-to-host figure.
    h2d = system.copy_rate("h2d", pinned=False)
    act_in = system.copy_rate("h2d", pinned=True)
    w_in = system.copy_rate("h2d", pinned=pin_weight(sc))
    d2h = system.copy_rate("d2h", pinned=True)
    dr, dw = system.storage.read_bandwidth.value, system.storage.write_bandwidth.value
    hbm, att_bw = system.gpu.streaming_bandwidth, system.gpu.attention_rate
    peak = system.compute_rate
    host_bw, host_flops = system.host.memory_bandwidth.value, system.host.attention_rate
    dense, attn = lay.dense_flops[None, :], lay.attn_flops[None, :]
    # FlexGen decompresses a layer's weights inside mha_gen/mlp, i.e. once per GPU batch, and the
    # cache in full: decompress(k_cache)[:src_s] expands all prompt + generate - 1 slots each step
    n_gpu_batches = col(pol.nb)
    dq_w = (n_gpu_batches * w * DEQUANT_TRAFFIC / hbm) if o.compress_weight else 0.0
    full_len = s + n - 1

    # prefill, per layer
    ctog_p = (wc + wd) * wf / w_in + (hc + hd) * s * hb / act_in
    gtoc_p = (cc + cd) * bls * (s + 1) * cf / d2h + (hc + hd) * s * hb / d2h
    dtoc_p = wd * wf / dr + hd * s * hb / dr
    ctod_p = cd * bls * (s + 1) * cf / dw + hd * s * hb / dw
    comp_p = bls * (s * dense + attn * s * s / 2) / peak + dq_w
    # decode, per layer, at the mean context
    kv_far = (cc + cd) * bls * sa * cf
    on_gpu_kv = np.where(catt > 0, cg, 1.0)
    ctog_g = (wc + wd) * wf / w_in + np.where(catt > 0, 0.0, kv_far) / h2d + (hc + hd) * hb / act_in
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
