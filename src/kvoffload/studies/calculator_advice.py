"""``kvoffload advise``'s fastest configuration per catalog machine, model and context, for the page.

The calculator's "best placement that fits" button looks its answer up here rather than mirroring
the search in the browser: advise ranks llama.cpp's and vLLM's configurations by decode tokens/s
(studies/advise_search.py), and a faithful mirror would need vLLM's engine in JavaScript besides
llama.cpp's. Each entry is ``advise_all``'s (``kvoffload advise --model all``: the smallest
formats of each engine, a model past its own context advised at it) at each context of
``CONTEXTS``; the page uses the smallest grid context at or above the reader's, and says which.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from kvoffload.inputs.hardware import load_system, system_ids
from kvoffload.studies.advise import _KV_FLAG, advise_all
from kvoffload.studies.advise_search import GENERATE, NO_OFFLOAD, Workload

# 4K, 32K, 128K (131,072) and 1M tokens: the contexts advise is asked at (each costs a search
# over every catalog machine and model when the page is built)
CONTEXTS = (4096, 32768, 131072, 1048576)
KEYS = ("engine", "weights", "kv", "offload", "options", "tokens_per_s", "tpot_ms", "command")
_KV_FORMAT = {flag: fmt for fmt, flag in _KV_FLAG.items()}  # advise's KV names: our formats


def best_row(best: dict[str, Any] | None, context: int) -> dict[str, Any] | None:
    """Return the part of advise's best row the page shows (None: nothing fits)."""
    if best is None:
        return None
    kv = _KV_FORMAT.get(best["kv"], best["kv"])
    return {**{k: best[k] for k in KEYS}, "kv_format": kv, "context": context}


@cache
def machine_advice(machine: str) -> dict[str, list]:
    """Return, per model id, advise's best row (or None) at each context of ``CONTEXTS``."""
    system = load_system(machine)
    out: dict[str, list] = {}
    for context in CONTEXTS:
        for a in advise_all(system, Workload(context)):
            out.setdefault(a["model"], []).append(best_row(a["best"], a["context"]))
    return out


def advice_data() -> dict[str, Any]:
    """Return the page's lookup table: the grid, the workload's rule and each machine's answers."""
    return {
        "contexts": list(CONTEXTS),
        "generate": GENERATE,  # advise's Workload: min(GENERATE, context // 2) tokens generated
        "no_offload": NO_OFFLOAD,
        "best": {sid: machine_advice(sid) for sid in system_ids()},
    }
