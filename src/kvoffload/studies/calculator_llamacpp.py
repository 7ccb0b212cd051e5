"""What the calculator's llama.cpp engine reads, exported from the package, and its scenario.

The page mirrors engines/each/llamacpp/ for the placements ``-ngl``, ``--n-cpu-moe``,
``--cpu-moe`` and ``--no-kv-offload`` (report/calculator/llamacpp.js), its prefill (ubatches, the
op-offload threshold, MMQ) and its KV formats' attention rates. It reads, per model and
GGUF format, each layer position's tensors split into routed experts and the rest (bytes and
parameters) and the order of its ops (``a`` attention, ``o`` other, ``r`` routed experts; runs
merged: a run on one device hands nothing over), run-length encoded over the positions; the CPU
matvec kernels per format (catalog/cpu_matvec.yaml); each machine's host (cores, threads, sockets,
the reserve) and its GPU's int8 rate; llama.cpp's engine constants, its options' defaults and the
command-line names advise_commands.py uses.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from kvoffload.engines.each import llamacpp
from kvoffload.engines.each.llamacpp import attention
from kvoffload.inputs.hardware import RESERVED_BASE_BYTES, RESERVED_SHARE, System
from kvoffload.inputs.limits import MAX_LAYERS
from kvoffload.inputs.models import Model, load_model, model_ids
from kvoffload.inputs.precision import KvFormat, WeightFormat
from kvoffload.model import cpu_rate, tensor_groups
from kvoffload.studies import advise_commands
from kvoffload.studies.advise_search import LLAMACPP_FORMATS, LLAMACPP_KV, weight_formats
from kvoffload.studies.calculator_models import runs

ENGINES = ("generic", "llamacpp")  # the engines the page evaluates, generic first
_DEFAULTS = msgspec.structs.asdict(llamacpp.Options())
# the options the mirror reads beyond the form's (options_of passes them on when given)
_PAGE_DEFAULTS = ("n_ubatch", "no_mmap", "no_pinned", "fork")


def llamacpp_formats(model: Model) -> tuple[str, ...]:
    """Return the GGUF formats the page offers ``model`` on llama.cpp: advise's, then the rest.

    gpt-oss's as published first (its experts in MXFP4); a MoE model also in ``mxfp4_moe``
    (llama-quantize MXFP4_MOE: experts in mxfp4, the other matrices in q8_0).
    """
    extra = (WeightFormat.MXFP4_MOE.value,) if model.moe is not None else ()
    return tuple(dict.fromkeys((*weight_formats(model, "llamacpp"), *LLAMACPP_FORMATS, *extra)))


def _ops(table: tensor_groups.TensorTable, p: int) -> str:
    """Return position ``p``'s ops as llamacpp._hand_overs orders them, equal neighbours merged."""
    norms = tensor_groups.GROUPS.index("norms")
    attention = tensor_groups.GROUPS.index("attention")
    is_op = (table.group != norms) & np.array([not n.endswith(".bias") for n in table.names])
    ops = np.flatnonzero((table.position == p) & is_op)
    kinds = ["a" for i in ops if table.group[i] == attention]
    kinds += ["r" if table.routed[i] else "o" for i in ops if table.group[i] != attention]
    return "".join(k for j, k in enumerate(kinds) if j == 0 or kinds[j - 1] != k)


def positions(model: Model, fmt: WeightFormat) -> dict[str, Any]:
    """Return one format's tensors per position for the page (tensor_groups.tensor_table).

    Each row: [other bytes, routed bytes, other parameters, routed parameters, ops, other
    matmuls, routed matmuls] (the matmuls each add llama.cpp's fixed time per op); positions
    0..n_layers-1 the decoder layers, n_layers the output layer; ``embedding_bytes`` the input
    embeddings (position -1, in host memory); ``output``: the output layer holds the logits' matmul.
    """
    table = tensor_groups.tensor_table(model, fmt)
    routed = table.routed
    cols = [
        table.by_position(table.nbytes, ~routed),
        table.by_position(table.nbytes, routed),
        table.by_position(table.params, ~routed),
        table.by_position(table.params, routed),
    ]
    ops = llamacpp.matmul_ops(table)
    other_ops = np.bincount(table.position[ops & ~routed], minlength=table.n_positions)
    routed_ops = np.bincount(table.position[ops & routed], minlength=table.n_positions)
    rows = [
        [*(float(c[p]) for c in cols), _ops(table, p), int(other_ops[p]), int(routed_ops[p])]
        for p in range(table.n_positions)
    ]
    head = (table.position == model.n_layers) & (
        table.group == tensor_groups.GROUPS.index("output")
    )
    return {
        "rows": runs(rows),
        "embedding_bytes": float(table.nbytes[table.position < 0].sum()),
        "output": bool(head.any()),
    }


def model_entry(model: Model) -> dict[str, Any]:
    """Return what llama.cpp's mirror reads of one model: its formats' positions, its -ngl 'all'."""
    formats = llamacpp_formats(model)
    return {
        "formats": list(formats),
        "all_layers": advise_commands.all_layers(model),
        "hidden": model.hidden,
        "vocab": model.vocab,
        "positions": {f: positions(model, WeightFormat(f)) for f in formats},
    }


def host_entry(system: System) -> dict[str, Any]:
    """Return a machine's host as llama.cpp's CPU side reads it (model/cpu_rate.py, capacity)."""
    h = system.host
    return {
        "sockets": h.sockets,
        "cross_socket_bandwidth": h.cross_socket_bandwidth.value
        if h.cross_socket_bandwidth
        else None,
        "cores": h.cores,
        "performance_cores": h.performance_cores,
        "threads": h.threads,
        "memory_reserved": h.memory_reserved.value if h.memory_reserved else None,
    }


def gpu_entry(system: System) -> dict[str, Any]:
    """Return a machine's GPU as llama.cpp's prefill reads it (prefill.prefill_rate), and its
    name, which vLLM's chunked-prefill default reads (vllm.batched_tokens)."""
    int8 = system.gpu.flops_int8
    return {"name": system.gpu.name, "flops_int8": int8.value if int8 else None}


def gpu_mapping(gpu: dict[str, Any]) -> dict[str, Any]:
    """Return ``gpu_entry``'s figures as an inline profile's GPU keys (those given)."""
    out: dict[str, Any] = {"name": gpu["name"]}
    if gpu["flops_int8"] is not None:
        out["flops_int8"] = f"{gpu['flops_int8']!r} FLOP/s"
    return out


def host_mapping(host: dict[str, Any]) -> dict[str, Any]:
    """Return ``host_entry``'s figures as an inline profile's host keys (those given)."""
    out: dict[str, Any] = {"sockets": host["sockets"]}
    for key in ("cores", "performance_cores", "threads"):
        if host[key] is not None:
            out[key] = host[key]
    if host["cross_socket_bandwidth"] is not None:
        out["cross_socket_bandwidth"] = f"{host['cross_socket_bandwidth']!r} B/s"
    if host["memory_reserved"] is not None:
        out["memory_reserved"] = f"{host['memory_reserved']!r} B"
    return out


def shared() -> dict[str, Any]:
    """Return llama.cpp's constants, CPU kernels and command-line names, as the page reads them."""
    formats = llamacpp_formats_all()
    kv_kernels = {k.value: w.value for k, w in attention._CPU_KERNEL.items()}
    kernels = {}
    for f in dict.fromkeys((*formats, *kv_kernels.values())):
        k = cpu_rate.kernel(WeightFormat(f))
        kernels[f] = {"bandwidth_share": k.bandwidth_share, "per_thread_bps": k.per_thread_bps}
    return {
        "engines": list(ENGINES),
        "gpu_op_s": llamacpp.gpu_op_s_default(),
        "split_sync_s": llamacpp.split_sync_s_default(),
        "activation_bytes": 4,  # llama.cpp's activations are f32 (llamacpp._step_parts_at)
        # attention.gpu_kv_rate and cpu_kv_rate: the block formats, their bytes per value, the
        # CPU kernel that reads each
        "kv_dequant_gpu": llamacpp.kv_dequant_gpu_default(),
        "kv_block_formats": [f.value for f in llamacpp.BLOCK_FORMATS],
        "kv_value_bytes": {f.value: attention.value_bytes(f) for f in KvFormat},
        "f16_bytes": attention._F16_BYTES,
        "kv_cpu_kernels": kv_kernels,
        # prefill: the op-offload threshold, MMQ's share of the int8 peak, the GGUF quant formats
        "offload_min_batch": llamacpp.OFFLOAD_MIN_BATCH,
        "mmq_int8_share": llamacpp.mmq_share_default(),
        "gguf_quant": {f: llamacpp.is_gguf_quant(WeightFormat(f)) for f in formats},
        "defaults": {k: _DEFAULTS[k] for k in _PAGE_DEFAULTS},
        "kv_formats": list(LLAMACPP_KV),
        "kv_flags": dict(advise_commands._LLAMA_KV),
        "kernels": kernels,
        "reserved_base_bytes": RESERVED_BASE_BYTES,
        "reserved_share": RESERVED_SHARE,
        "max_layers": MAX_LAYERS + 1,  # -ngl counts the output layer too
    }


def llamacpp_formats_all() -> tuple[str, ...]:
    """Return every format the page offers some model on llama.cpp."""
    out: dict[str, None] = {}
    for mid in model_ids():
        out.update(dict.fromkeys(llamacpp_formats(load_model(mid))))
    return tuple(out)


def options_of(inputs: dict[str, Any]) -> dict[str, Any]:
    """Return the scenario's llama.cpp options for the page's ``llamacpp`` inputs (given ones)."""
    lc = inputs.get("llamacpp") or {}
    out: dict[str, Any] = {}
    if lc.get("n_gpu_layers") is not None:
        out["n_gpu_layers"] = int(lc["n_gpu_layers"])
    else:  # every layer on the GPU, as the page's command says (-ngl all): no --fit search
        out["fit"] = False
    if lc.get("n_cpu_moe"):
        out["n_cpu_moe"] = int(lc["n_cpu_moe"])
    if lc.get("cpu_moe"):
        out["cpu_moe"] = True
    if lc.get("no_kv_offload"):
        out["no_kv_offload"] = True
    if lc.get("threads") is not None:
        out["threads"] = int(lc["threads"])
    if lc.get("numa"):
        out["numa"] = str(lc["numa"])
    for key in _PAGE_DEFAULTS:  # the prefill's and the fork's, where they differ from the default
        if lc.get(key) is not None and lc[key] != _DEFAULTS[key]:
            out[key] = lc[key]
    return out
