"""DeepSpeed ZeRO-Inference and HF Accelerate: weights streamed layer by layer from host memory
or disk. ZeRO prefetches while a layer computes (from NVMe, the disk read of a later layer runs
beside the copy of the next one) and can keep the KV cache in host memory with attention on the
CPU, and quantise weights to 4 bits; Accelerate copies each layer before it runs. Both use
pageable host memory unless told otherwise, except ZeRO's NVMe swap buffers, which are pinned.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kvoffload.model import decode
from kvoffload.model.prediction import Prediction, Scenario, predict_setup
from kvoffload.spec.precision import WeightFormat


class ZeroOptions(BaseModel):
    """ZeRO-Inference's options."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    weights: Literal["gpu", "cpu", "disk"] = "cpu"
    kv_offload: bool = Field(False, strict=True)
    quantize_weights: bool = Field(False, strict=True)  # 4-bit group-wise weights
    pinned: bool = Field(False, strict=True)


class AccelerateOptions(BaseModel):
    """HF Accelerate's options (device_map offload)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    weights: Literal["gpu", "cpu", "disk"] = "cpu"
    pinned: bool = Field(False, strict=True)


def options_for(engine: str) -> type[BaseModel]:
    """Return the options schema of 'zero-inference' or 'hf-accelerate'."""
    return ZeroOptions if engine == "zero-inference" else AccelerateOptions


def predict(sc: Scenario) -> Prediction:
    """Return the streaming engine's prediction."""
    o = sc.options
    zero = sc.engine == "zero-inference"
    w = {"gpu": decode.Split(), "cpu": decode.Split(0, 1, 0), "disk": decode.Split(0, 0, 1)}[
        o.weights
    ]
    kv_offload = zero and o.kv_offload
    placement = decode.Placement(
        weights=w,
        kv=decode.Split(0, 1, 0) if kv_offload else decode.Split(),
        attention="cpu" if kv_offload else "gpu",
        overlap="pipeline" if zero else "none",
        # ZeRO reads NVMe-resident weights asynchronously (libaio) into page-locked swap buffers
        # (AsyncPartitionedParameterSwapper pins them), so from disk its copies are pinned
        pinned=(o.pinned if "pinned" in o.model_fields_set else sc.pinned_or(False))
        or (zero and o.weights == "disk"),
    )
    fmt = WeightFormat.INT4 if zero and o.quantize_weights else sc.setup.weights
    # ZeRO's offloaded cache is allocated as 2 x layers x batch x length x hidden (its
    # model-support.md), so grouped KV heads are stored expanded to one per query head
    heads = sc.model.n_heads if kv_offload else None
    setup = decode.Setup(sc.system, sc.model, fmt, sc.setup.kv, placement, kv_heads_stored=heads)
    pred = predict_setup(sc, setup)
    what = f"weights streamed from {o.weights}" if o.weights != "gpu" else "weights on the GPU"
    extras = (", KV in host memory with CPU attention" if kv_offload else "") + (
        ", 4-bit weights" if fmt is WeightFormat.INT4 else ""
    )
    return replace(
        pred,
        by_overlap_s={},
        settings={"weights": o.weights, "kv_offload": kv_offload},
        policy=f"{what} layer by layer ({'prefetched' if zero else 'copied before each layer'}, {'pinned' if placement.pinned else 'pageable'}){extras}",
    )
