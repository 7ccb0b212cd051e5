"""What the calculator's "best placement that fits" button needs to run ``kvoffload advise``'s search.

The page runs advise's search itself (report/calculator/advice.js mirrors advise_search.search
with ``fastest_only``, as ``advise --model all`` does): llama.cpp's configurations on the page's
llama.cpp mirror, vLLM's ``--cpu-offload-gb`` on the step model with vLLM's setup on one GPU
(engines/each/vllm.py). So its answer is advise's at the reader's own context, batch and figures.
This module exports what the search reads that the rest of the page's data does not hold: the
candidate formats per model and engine, the workload rule, vLLM's memory share, and the names
the command lines spell.
"""

from __future__ import annotations

from typing import Any

from kvoffload.engines.each.vllm import GiB
from kvoffload.engines.each.vllm import Options as VllmOptions
from kvoffload.inputs.models import load_model, model_ids
from kvoffload.studies import advise_commands
from kvoffload.studies.advise import _KV_FLAG, NUMA_NOTE
from kvoffload.studies.advise_search import (
    CPU_OFFLOAD,
    ENGINES,
    EXPS_CPU,
    GENERATE,
    NCMOE,
    NGL,
    NO_KV,
    NO_OFFLOAD,
    candidates,
)


def model_candidates(ident: str) -> dict[str, Any]:
    """Return, per engine, the weight and KV formats advise's fastest-only search tries, and the
    checkpoint vLLM serves (before an AWQ suffix)."""
    model = load_model(ident)
    out: dict[str, Any] = {"checkpoint": advise_commands.checkpoint(model, "bf16")}
    for engine in ENGINES:
        formats, kvs = candidates(model, engine, fastest_only=True)
        out[engine] = {"weights": list(formats), "kv": list(kvs)}
    return out


def advice_data() -> dict[str, Any]:
    """Return the search's constants for the page (advise_search.py and advise_commands.py)."""
    return {
        "engines": list(ENGINES),
        "generate": GENERATE,  # advise's Workload: min(GENERATE, context // 2) tokens generated
        "gib": GiB,
        "no_offload": NO_OFFLOAD,
        "ways": {
            "ngl": NGL,
            "ncmoe": NCMOE,
            "exps_cpu": EXPS_CPU,
            "no_kv": NO_KV,
            "cpu_offload": CPU_OFFLOAD,
        },
        # vLLM leaves 1 - gpu_memory_utilization of each GPU to others (engines/each/vllm.py)
        "gpu_memory_utilization": VllmOptions().gpu_memory_utilization,
        "kv_names": dict(_KV_FLAG),  # advise's names for the 16-bit caches
        "llama_kv": dict(advise_commands._LLAMA_KV),
        "vllm_kv": dict(advise_commands._VLLM_KV),
        "vllm_quantization": dict(advise_commands._VLLM_QUANT),
        "numa_note": NUMA_NOTE,  # advise.notes: what a --numa command needs before it runs
        "models": {ident: model_candidates(ident) for ident in model_ids()},
    }
