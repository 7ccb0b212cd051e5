"""InfLLM: the initial tokens and a local window stay on the GPU with a few representative keys per
block of the rest; each step loads only the top-k blocks it selects, through a small GPU cache.
Defaults are the released configuration (thunlp/InfLLM config/*.yaml).

One GPU: the released runner loads the model onto one device
(``AutoModelForCausalLM.from_pretrained(...).bfloat16().cuda()``, thunlp/InfLLM benchmark/pred.py at
0fe9bc0f18472ff902c7237a3315ef46e043dad4), and its several-GPU script starts one such process per
GPU on its own share of the data (scripts/multiprocessing-benchmark.sh at
6205289276743b9812b8369dbeaea70aa6901452, ``CUDA_VISIBLE_DEVICES=${rank}``): independent copies, not
one model over several GPUs. A profile with ``gpu.count`` above 1 is refused.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

import msgspec
import numpy as np
from msgspec import Meta

from kvoffload.engines.spec import EngineSpec
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.limits import MAX_CONTEXT_TOKENS
from kvoffload.inputs.text import Strict
from kvoffload.model import decode, kv
from kvoffload.model.prediction import Prediction, Scenario, predict_setup


class Options(Strict):
    """InfLLM's memory settings."""

    block_size: Annotated[int, Meta(ge=1, le=65536)] = 128
    n_init: Annotated[int, Meta(ge=0, le=MAX_CONTEXT_TOKENS)] = 128
    n_local: Annotated[int, Meta(ge=1, le=MAX_CONTEXT_TOKENS)] = 4096
    topk: Annotated[int, Meta(ge=1, le=10**5)] = 16
    repr_tokens: Annotated[int, Meta(ge=1, le=1024)] = 4
    cached_blocks: Annotated[int, Meta(ge=0, le=10**6)] = 32
    # share of selected blocks already in the GPU cache (assumed)
    hit_rate: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.5


def moved_tokens(o: Options, context: int) -> int:
    """Return the tokens per layer and step that cross the link: selected blocks missing from the cache."""
    far = max(context - o.n_init - o.n_local, 0)
    selected = min(o.topk * o.block_size, far)
    return round((1 - o.hit_rate) * selected)


def predict(sc: Scenario) -> Prediction:
    """Return InfLLM's prediction: attention over a bounded window, a few blocks moved per step."""
    if sc.system.gpu.count > 1:
        raise InputError(
            f"InfLLM runs a model on one GPU (benchmark/pred.py: .cuda()); its several-GPU script "
            f"runs separate copies, one scenario each: give a profile with 1 GPU, not "
            f"{sc.system.gpu.count}",
            field="hardware.gpu.count",
        )
    o = sc.options
    span = o.n_init + o.n_local + o.topk * o.block_size
    attended = min(sc.prompt, span)
    moved = moved_tokens(o, sc.prompt)
    share = moved / attended if attended else 0.0
    setup = replace(
        sc.setup,
        placement=decode.Placement(
            kv=decode.Split(1 - share, share, 0.0), overlap="pipeline", pinned=sc.pinned_or(True)
        ),
    )
    pred = predict_setup(replace(sc, prompt=attended), setup)
    weights = decode.step_weight_bytes(sc.model, sc.setup.weights)
    final = sc.prompt + sc.generate
    per_token = kv.bytes_per_token(sc.model, sc.setup.kv)
    on_gpu_tokens = min(final, o.n_init + o.n_local + o.cached_blocks * o.block_size)
    blocks = max(final - o.n_init - o.n_local, 0) / o.block_size
    repr_keys = blocks * o.repr_tokens * per_token / 2  # keys only
    gpu = weights + sc.batch * (on_gpu_tokens * per_token + repr_keys)
    cpu = sc.batch * float(kv.request_bytes(sc.model, final, sc.setup.kv))
    mem = decode.Memory(
        gpu=np.asarray(gpu), cpu=np.asarray(cpu), disk=np.asarray(0.0), staging=np.asarray(0.0)
    )
    return replace(
        pred,
        scenario=sc,
        memory=mem,
        by_overlap_s={},
        settings=msgspec.structs.asdict(o)
        | {"attended_tokens": attended, "moved_tokens_per_layer": moved},
        policy=f"attends over {attended:,} tokens, moves {moved:,} tokens per layer and step ({o.topk} blocks of {o.block_size}, {o.hit_rate:.0%} cache hits)",
    )


ENGINE = EngineSpec(
    name="infllm",
    options=Options,
    predict=predict,
    placement_option="options.n_local, options.topk and options.cached_blocks",
    pin_option=None,
    refuses={
        "attention": "InfLLM attends on the GPU over the blocks it selects; set options.topk, "
        "options.n_local and options.cached_blocks instead",
        "overlap": "InfLLM always prefetches the selected blocks (pipeline) and has no overlap "
        "option; use engine: generic to compare overlap modes",
    },
    routing_ignored=(
        ("stream", "gpu_hit_rate"),
        "InfLLM keeps every weight on the GPU, so no expert is streamed; "
        "leave routing.stream and routing.gpu_hit_rate out",
    ),
)
