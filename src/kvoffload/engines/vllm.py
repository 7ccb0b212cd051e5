"""vLLM: ``cpu_offload_gb`` streams weights every forward pass; the KV offloading connector is a
prefix cache in host memory that shortens the prefill on a hit and does not touch the decode step.
"""

from __future__ import annotations

from dataclasses import replace

from pydantic import BaseModel, ConfigDict, Field

from kvoffload.model import decode, kv
from kvoffload.model.prediction import Prediction, Scenario, predict_setup

GiB = 2**30


class Options(BaseModel):
    """vLLM's offloading options."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    cpu_offload_gb: float = Field(
        0.0, ge=0.0, le=1e6
    )  # GiB of weights per GPU kept in pinned host memory
    kv_offloading_size: float = Field(
        0.0, ge=0.0, le=1e6
    )  # GiB of host memory for prefix-cache blocks
    prefix_hit_rate: float = Field(0.0, ge=0.0, le=1.0)  # share of the prompt found in that cache


def predict(sc: Scenario) -> Prediction:
    """Return vLLM's prediction: weights streamed over the link (UVA) in every step, prefix reuse."""
    o = sc.options
    weights = decode.step_weight_bytes(sc.model, sc.setup.weights)
    off = min(o.cpu_offload_gb * GiB / weights, 1.0)
    # UVA: kernels read the offloaded weights over the link as they run, so nothing overlaps
    placement = decode.Placement(
        # vLLM pins the offloaded weights where the platform allows (is_pin_memory_available)
        weights=decode.Split(1 - off, off, 0.0),
        overlap="none",
        pinned=sc.pinned_or(True),
    )
    setup = decode.Setup(sc.system, sc.model, sc.setup.weights, sc.setup.kv, placement)
    pred = predict_setup(sc, setup)
    prompt_kv = float(kv.batch_bytes(sc.model, sc.prompt, sc.batch, sc.setup.kv))
    stored = min(1.0, o.kv_offloading_size * GiB / prompt_kv) if prompt_kv else 0.0
    hit = o.prefix_hit_rate * stored
    reload = hit * prompt_kv / sc.system.copy_rate("h2d", pinned=placement.pinned)
    ttft = (1 - hit) * pred.ttft_s + reload
    mem = decode.Memory(
        gpu=pred.memory.gpu,
        cpu=pred.memory.cpu + o.kv_offloading_size * GiB,
        disk=pred.memory.disk,
        staging=pred.memory.staging,
    )
    return replace(
        pred,
        ttft_s=ttft,
        memory=mem,
        by_overlap_s={},
        settings={
            "cpu_offload_gb": o.cpu_offload_gb,
            "weights_on_host_share": off,
            "kv_offloading_size": o.kv_offloading_size,
            "prefix_hit_rate": o.prefix_hit_rate,
        },
        policy=f"{off:.0%} of the weights streamed from {'pinned' if placement.pinned else 'pageable'} host memory every step; prefix cache {o.kv_offloading_size:g} GiB, {hit:.0%} of the prompt reloaded instead of recomputed",
    )
