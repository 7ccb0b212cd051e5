"""The prediction both KTransformers engines return: experts in host memory, attention on the GPU."""

from __future__ import annotations

from typing import Any

import numpy as np

from kvoffload.model import decode
from kvoffload.model.prediction import Prediction, Resolved, Scenario


def experts_on_cpu(
    sc: Scenario,
    times_s: tuple[float, float, float, float, float],
    bytes_held: tuple[float, float, float],
    settings: dict[str, Any],
    policy: str,
) -> Prediction:
    """Return the Prediction of a KTransformers engine.

    ``times_s``: TPOT, TTFT and the GPU's, the CPU's and the link's time a token (s);
    ``bytes_held``: the GPU's weights, the rest the GPU holds (KV, reserve), the host's bytes.
    """
    tpot, ttft, gpu_t, cpu_t, link_t = times_s
    weights_gpu, gpu_other, host_bytes = bytes_held
    total = weights_gpu + host_bytes
    return Prediction(
        scenario=sc,
        tpot_s=float(tpot),
        ttft_s=float(ttft),
        streams_s={
            "gpu": float(gpu_t),
            "cpu": float(cpu_t),
            "h2d": float(link_t),
            "d2h": 0.0,
            "disk_read": 0.0,
            "disk_write": 0.0,
        },
        memory=decode.Memory(
            gpu=np.asarray(weights_gpu + gpu_other),
            cpu=np.asarray(host_bytes),
            disk=np.asarray(0.0),
            staging=np.asarray(0.0),
        ),
        by_overlap_s={},
        resolved=Resolved(
            weights=decode.Split(weights_gpu / total, host_bytes / total, 0.0),
            kv=decode.Split(),
            attention="gpu",
            overlap="none",
            pinned=True,
            weights_format=sc.setup.weights,
            kv_format=sc.setup.kv,
        ),
        settings=settings,
        # the CPU computes routed experts only: attention and its KV cache stay on the GPU
        cpu_work=(False, True),
        policy=policy,
    )
