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


# vLLM's module path of each (fused) GGUF base name in a decoder layer, for offload_params and
# cpu_offload_params segment matches (Llama, Qwen, DeepSeek and Mixtral-style model files)
_VLLM_NAMES = {
    "attn_q": "self_attn.qkv_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_a": "self_attn.q_a_proj",
    "attn_q_b": "self_attn.q_b_proj",
    "attn_kv_a_mqa": "self_attn.kv_a_proj_with_mqa",
    "attn_kv_b": "self_attn.kv_b_proj",
    "attn_sinks": "self_attn.sinks",
    "attn_norm": "input_layernorm",
    "ffn_gate": "mlp.gate_up_proj",
    "ffn_down": "mlp.down_proj",
    "ffn_gate_exps": "mlp.experts.w13",
    "ffn_down_exps": "mlp.experts.w2",
    "ffn_gate_inp": "mlp.gate",
    "ffn_gate_shexp": "mlp.shared_experts.gate_up_proj",
    "ffn_down_shexp": "mlp.shared_experts.down_proj",
    "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
}
_EXPERTS = ("ffn_gate_exps", "ffn_down_exps")  # a FusedMoE's parameters: w13_weight, w2_bias


def vllm_name(base: str, suffix: str) -> str:
    """Return vLLM's dotted parameter name for a (fused) GGUF base name and suffix."""
    path = _VLLM_NAMES.get(base) or (
        f"self_attn.{base}" if base.startswith(("attn", "ssm")) else f"mlp.{base}"
    )
    return f"{path}_{suffix}" if base in _EXPERTS else f"{path}.{suffix}"


def matches(name: str, segments: tuple[str, ...]) -> bool:
    """Return whether a parameter's dotted name holds one of the segments (vLLM's rule,
    ``f".{p}." in f".{name}."``: ``experts`` matches ``mlp.experts.w2_weight``, ``w2`` does not)."""
    return any(f".{p}." in f".{name}." for p in segments)


def pinned_bytes(sizes: np.ndarray) -> np.ndarray:
    """Return the host bytes pinned tensors of these sizes take: each rounded up to a power of
    two by PyTorch's CachingHostAllocator (zero stays zero)."""
    return np.where(sizes > 0, 2.0 ** np.ceil(np.log2(np.maximum(sizes, 1.0))), 0.0)


@cache
def layer_parameters(model: Model, fmt: WeightFormat) -> tuple[tuple[tuple[str, float], ...], ...]:
    """Return each decoder layer's (vLLM name, bytes) parameters in vLLM's order (one GPU: all)."""
    table = tensor_groups.tensor_table(model, fmt)
    layers: list[dict[str, float]] = [{} for _ in range(model.n_layers)]
    for name, pos, nbytes in zip(table.names, table.position, table.nbytes, strict=True):
        if not 0 <= pos < model.n_layers:
            continue
        parts = name.split(".")  # blk.N.base.weight (or .bias)
        key = vllm_name(_INTO.get(parts[2], parts[2]), parts[-1])
        layer = layers[int(pos)]
        layer[key] = layer.get(key, 0.0) + float(nbytes)
    return tuple(tuple(layer.items()) for layer in layers)


@cache
def _sizes(model: Model, fmt: WeightFormat, segments: tuple[str, ...] = ()) -> np.ndarray:
    sizes = np.array(
        [
            b if not segments or matches(n, segments) else 0.0
            for layer in layer_parameters(model, fmt)
            for n, b in layer
        ],
        dtype=np.float64,
    )
    sizes.flags.writeable = False
    return sizes


def parameter_bytes(sc: Scenario, segments: tuple[str, ...] = ()) -> np.ndarray:
    """Return the bytes of each decoder-layer parameter one GPU holds, in vLLM's offload order
    (zero for one the ``segments``, vLLM's ``cpu_offload_params``, do not name: never moved)."""
    return _sizes(sc.model, sc.setup.weights, tuple(segments)) / sc.system.gpu.count


def offload(
    sc: Scenario, budget_bytes: float, *, pinned: bool, segments: tuple[str, ...] = ()
) -> tuple[float, float]:
    """Return (bytes offloaded, host bytes they take) on one GPU for a budget of ``budget_bytes``,
    of the parameters the ``segments`` name (none: any)."""
    sizes = parameter_bytes(sc, segments)
    before = np.cumsum(sizes) - sizes
    moved = sizes[(before < budget_bytes) & (budget_bytes > 0) & (sizes > 0)]
    if not pinned:
        return float(moved.sum()), float(moved.sum())
    return float(moved.sum()), float(pinned_bytes(moved).sum())
