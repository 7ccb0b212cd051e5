"""FlexGen as an engine: the prediction for the scenario's policy or the best one found."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from kvoffload.engines.each.flexgen.allocation import ALPHA_G, lp_gpu_bytes
from kvoffload.engines.each.flexgen.cost_model import cost
from kvoffload.engines.each.flexgen.policy import Options, Policies, given_policy, pin_weight
from kvoffload.engines.each.flexgen.policy_search import policies, search
from kvoffload.engines.spec import EngineSpec
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.units import format_bytes, format_number
from kvoffload.model import decode
from kvoffload.model.prediction import Prediction, Resolved, Scenario


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


ENGINE = EngineSpec(
    name="flexgen",
    options=Options,
    predict=predict,
    placement_option="options.percent (wG wC cG cC aG aC), or leave it out to search",
    pin_option="pin_weight",
    refuses={
        "attention": "say options.cpu_attention: true to attend on the CPU (FlexGen's --cpu)",
        "overlap": "say options.overlap: true (FlexGen's overlap) or false (none) instead",
    },
    routing_ignored=(
        ("effective_experts", "stream", "gpu_hit_rate"),
        "FlexGen's cost model reads every weight of a layer each step and has no routing; "
        "use engine: generic or llamacpp for a MoE model's routing",
    ),
)
