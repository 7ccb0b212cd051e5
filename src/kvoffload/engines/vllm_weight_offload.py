"""Which weights vLLM's ``cpu_offload_gb`` moves to host memory, and the host memory they take.

``UVAOffloader._maybe_offload_to_cpu`` (vllm-project/vllm vllm/model_executor/offloader/uva.py at
00593fa7a4832bdabac6fcd06c1710d13c462fbf) is handed the decoder layers in order by
``make_layers``, its only caller (vllm/model_executor/models/utils.py; V0's
``maybe_offload_to_cpu`` there at d30d0c133c3f47a6436788f82398b21eb23df8c0 did the same), and
walks each layer's parameters in order, offloading a parameter whole while the bytes offloaded so
far are below the budget, so the one that crosses it goes too; embeddings and the output layer
stay on the GPU. It copies each to the CPU and, where pinned memory is available,
``pin_memory()``s it, and PyTorch's CachingHostAllocator rounds every pinned allocation up to the
next power of two (``CachingHostAllocatorImpl::allocate``, pytorch/pytorch
aten/src/ATen/core/CachingHostAllocator.h at 04456333a3945434205e77ea1e604a5b51684795); the CUDA
view UVA makes reads that block in place. Unpinned (``VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY``),
each takes its own bytes. vLLM's parameters are its fused linears: q, k and v in one
``qkv_proj``, a dense MLP's gate and up in one ``gate_up_proj``, a MoE layer's routed experts in
``w13_weight`` (gate and up, every expert) and ``w2_weight`` (down), a shared expert's gate and up
in one; with several GPUs each holds 1/N of each (tensor parallelism). Other tensors (MLA's
projections among them) are taken one by one, as the model lists them.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from kvoffload.inputs.models import Model
from kvoffload.inputs.precision import WeightFormat
from kvoffload.model import tensor_groups
from kvoffload.model.prediction import Scenario

# GGUF base names that vLLM fuses into one parameter, the first named standing for the fused one
_FUSED = (
    ("attn_q", "attn_k", "attn_v"),
    ("ffn_gate", "ffn_up"),
    ("ffn_gate_exps", "ffn_up_exps"),
    ("ffn_gate_shexp", "ffn_up_shexp"),
)
_INTO = {member: group[0] for group in _FUSED for member in group}


@cache
def layer_parameters(model: Model, fmt: WeightFormat) -> tuple[tuple[float, ...], ...]:
    """Return each decoder layer's parameter bytes in vLLM's order (the whole model's: one GPU)."""
    table = tensor_groups.tensor_table(model, fmt)
    layers: list[dict[str, float]] = [{} for _ in range(model.n_layers)]
    for name, pos, nbytes in zip(table.names, table.position, table.nbytes, strict=True):
        if not 0 <= pos < model.n_layers:
            continue
        parts = name.split(".")  # blk.N.base.weight (or .bias)
        key = f"{_INTO.get(parts[2], parts[2])}.{parts[-1]}"
        layer = layers[int(pos)]
        layer[key] = layer.get(key, 0.0) + float(nbytes)
    return tuple(tuple(layer.values()) for layer in layers)


@cache
def _sizes(model: Model, fmt: WeightFormat) -> np.ndarray:
    sizes = np.array([b for layer in layer_parameters(model, fmt) for b in layer], dtype=np.float64)
    sizes.flags.writeable = False
    return sizes


def parameter_bytes(sc: Scenario) -> np.ndarray:
    """Return the bytes of each decoder-layer parameter one GPU holds, in vLLM's offload order."""
    return _sizes(sc.model, sc.setup.weights) / sc.system.gpu.count


def offload(sc: Scenario, budget_bytes: float, *, pinned: bool) -> tuple[float, float]:
    """Return (bytes offloaded, host bytes they take) on one GPU for a budget of ``budget_bytes``."""
    sizes = parameter_bytes(sc)
    before = np.cumsum(sizes) - sizes
    moved = sizes[(before < budget_bytes) & (budget_bytes > 0)]
    if not pinned:
        return float(moved.sum()), float(moved.sum())
    rounded = np.where(moved > 0, 2.0 ** np.ceil(np.log2(np.maximum(moved, 1.0))), 0.0)
    return float(moved.sum()), float(rounded.sum())
