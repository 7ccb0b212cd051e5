"""The constants the validation rests on: a testbed's measured figures and the engines' constants."""

from __future__ import annotations

import pandas as pd

from kvoffload.inputs import catalog
from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.units import format_number

ENGINE_NAMES = {
    "llamacpp": "llama.cpp",
    "flexgen": "FlexGen",
    "sglang": "SGLang",
    "ktransformers": "KTransformers",
}
COLUMNS = ["where", "constant", "value", "kind", "source"]


def calibration_rows(system_id: str) -> pd.DataFrame:
    """Return the constants a validation testbed and the engines use: value, kind and source.

    The testbed contributes its measured figures and the constants fitted on it (with the fit's
    machine); every engine constant comes with the kind (``fitted``, ``derived``, ...) and the
    source the catalog gives it.
    """
    system = load_system(system_id)
    rows = [
        {"where": system_id, "constant": name, "value": str(f),
         "kind": f"fitted on {f.machine}" if f.machine else f.kind.value, "source": f.source}
        for name, f in system.figures().items()
        if f.kind.value in ("measured", "fitted")
    ]  # fmt: skip
    for engine, entries in catalog.load("engine_constants").items():
        where = f"{ENGINE_NAMES.get(engine, engine)} engine"
        rows += [
            {"where": where, "constant": f"{name} ({c['unit']})", "value": format_number(c["value"], 4),
             "kind": f"{c['kind']} on {c['machine']}" if c.get("machine") else c["kind"],
             "source": c["source"]}
            for name, c in entries.items()
        ]  # fmt: skip
    # the CPU matvec kernels llama.cpp's CPU-side matmuls run at (fitted to CPU-only runs)
    matvec = catalog.load("cpu_matvec")["constants"]
    rows += [
        {"where": "llama.cpp engine (CPU matvec)", "constant": f"{name}: share of host bandwidth, per thread",
         "value": f"{format_number(c['bandwidth_share'])}, {c['per_thread']}", "kind": c["kind"],
         "source": "CPU-only runs " + ", ".join(c["from_rows"]) + " (catalog/cpu_matvec.yaml)"}
        for name, c in matvec.items()
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)
