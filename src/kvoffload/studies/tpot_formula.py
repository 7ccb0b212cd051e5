"""The whole-model roofline the interactive chart evaluates in the browser, and its constants."""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from kvoffload.model import decode, kv


def interactive_frame(setup: decode.Setup, contexts: ArrayLike) -> pd.DataFrame:
    """Return, per context, the constants the in-browser TPOT formula needs (bytes, FLOPs)."""
    model = setup.model
    lay = decode.layers(model, setup.weights)
    s = np.asarray(contexts, dtype=np.int64)
    kv_bytes = kv.request_bytes(model, s, setup.kv).astype(float)  # one request
    held = np.minimum(s[:, None].astype(float), lay.window)
    attn = (lay.attn_flops * held) @ lay.count  # per request and token
    return pd.DataFrame({"context": s, "kv_bytes": kv_bytes, "attn_flops": attn})


def interactive_constants(setup: decode.Setup) -> dict[str, float]:
    """Return the profile's and model's constants for the in-browser formula (B, FLOPs, B/s, s).

    ``weights_link_bytes`` are the weights the setup keeps in host memory: they cross the link in
    every step, whatever the batch.
    """
    sysm = setup.system
    lay = decode.layers(setup.model, setup.weights)
    weights = decode.step_weight_bytes(setup.model, setup.weights)
    streamed = weights * setup.placement.weights.off  # host-resident weights cross every step
    transfers = setup.model.n_layers + (int(lay.count.sum()) if streamed else 0)
    return {
        "weights_bytes": weights,
        "weights_link_bytes": streamed,
        "dense_flops": float(lay.dense_flops @ lay.count),
        "hbm_bps": sysm.gpu.streaming_bandwidth,
        "attn_bps": sysm.gpu.attention_rate,
        "peak_flops": sysm.compute_rate,
        "link_gbps": sysm.copy_rate("h2d") / 1e9,
        "latency_s": sysm.link.latency.value * transfers,
    }


def tpot_formula(
    c: dict[str, float],
    kv_bytes: np.ndarray,
    attn_flops: np.ndarray,
    link_gbps: float,
    batch: float,
    overlap: str,
) -> np.ndarray:
    """Evaluate, in Python, the formula the interactive chart evaluates in the browser (ms)."""
    gpu = np.maximum(
        c["weights_bytes"] / c["hbm_bps"] + batch * kv_bytes / c["attn_bps"],
        batch * (c["dense_flops"] + attn_flops) / c["peak_flops"],
    )
    link = (c["weights_link_bytes"] + batch * kv_bytes) / (link_gbps * 1e9) + c["latency_s"]
    return 1e3 * (gpu + link if overlap == "none" else np.maximum(gpu, link))
