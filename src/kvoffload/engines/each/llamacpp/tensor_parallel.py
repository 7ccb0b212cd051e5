"""What tensor parallelism adds to llama.cpp: the modes' refusals and the collectives between GPUs.

``-sm tensor`` (ggml-org/llama.cpp #19378, merged 2026-04-09, experimental) wraps the GPUs into
one meta device: every GPU layer's weights and KV are split over all of them
(``placement.split_tensors``), each GPU runs every op of the layer on its share, and a matmul
whose weight is split along its input (the attention output, the down projections) leaves each
GPU a partial sum that the GPUs all-reduce before the next op: one collective after the attention
block and one after the FFN block of every layer ("Tensor-parallel splits each layer across GPUs
and does multiple cross-GPU reductions per layer", docs/multi-gpu.md at
5815cb840bfe5be1895c6ca6afcf9ce05d8b486f). The all-reduce is a ring over the link of the
f32 activations (``transfer.all_reduce_time``: 2(N-1) steps, each with the link's latency; NCCL
where built in, the default); an output layer split by vocabulary rows is gathered for sampling.
The same document lists the mode's hard errors, which exit 2 here with llama.cpp's words: flash
attention off, a quantised KV cache, and the architectures it is not implemented for. ik_llama.cpp's ``-sm graph`` (ikawrakow/ik_llama.cpp
#1067, December 2025) splits each layer's attention heads and FFN over the GPUs and reduces after
each in the same way; it takes a quantised cache (#1177 runs ``-ctk q6_0``) and, since #1835
(2026-05-19), MLA models and ``--n-cpu-moe``, but not ``-ngl`` below the layer count for a MoE
model with shared experts.
"""

from __future__ import annotations

import numpy as np

from kvoffload.engines.each.llamacpp.placement import is_tensor_parallel, placement, row_shares
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.precision import KvFormat
from kvoffload.model import transfer
from kvoffload.model.prediction import Scenario
from kvoffload.model.tensor_groups import TensorTable

# docs/multi-gpu.md: "LLAMA_SPLIT_MODE_TENSOR not implemented for architecture" (its list, as the
# HF model types the catalog and the GGUF reader give them); DeepSeek2 is every MLA model
NOT_IMPLEMENTED = frozenset({
    "grok", "mpt", "olmoe", "deepseek_v2", "deepseek_v3", "kimi_k2", "glm_moe_dsa", "nemotron_h",
    "granitemoehybrid", "lfm2_moe", "minimax_m2", "mistral4", "kimi_linear", "jamba",
    "falcon_h1", "mamba", "mamba2", "plamo2", "minicpm3", "gemma3n", "olmo2", "bitnet", "t5",
})  # fmt: skip
_PLAIN_KV = (KvFormat.FP32, KvFormat.FP16, KvFormat.BF16)
# the matmuls whose weight is split along its input: each leaves a partial sum to all-reduce
_ATTENTION_OUT = (".attn_output.", ".ssm_out.")
_FFN_OUT = (".ffn_down.", ".ffn_down_exps.", ".ffn_down_shexp.")


def check(sc: Scenario) -> None:
    """Refuse what the tensor-parallel modes refuse (exit 2), with the engine's own reasons."""
    o, model = sc.options, sc.model
    if o.no_kv_offload:
        raise InputError(
            f"--split-mode {o.split_mode} splits each layer's KV over the GPUs; a cache kept in "
            "host memory (no_kv_offload) is not modelled with it",
            field="options.no_kv_offload",
        )
    if o.split_mode == "graph":
        _, on_gpu = placement(sc)
        moe = model.moe
        if moe is not None and moe.n_shared_experts and not on_gpu[:-1].all():
            raise InputError(
                "ik_llama.cpp's -sm graph does not work with -ngl below the layer count for a "
                "MoE model with shared experts (ik_llama.cpp #1835): keep every layer on the "
                "GPUs and move experts with n_cpu_moe or override_tensor",
                field="options.n_gpu_layers",
            )
        return
    if o.flash_attn == "off":
        raise InputError(
            "SPLIT_MODE_TENSOR requires flash_attn to be enabled (llama.cpp refuses -sm tensor "
            "with -fa off)",
            field="options.flash_attn",
        )
    if sc.setup.kv not in _PLAIN_KV:
        raise InputError(
            "simultaneous use of SPLIT_MODE_TENSOR and KV cache quantization not implemented: "
            f"-sm tensor takes an f32, f16 or bf16 cache, not {sc.setup.kv.value}",
            field="precision.kv",
        )
    if model.mla is not None or model.model_type in NOT_IMPLEMENTED:
        raise InputError(
            f"LLAMA_SPLIT_MODE_TENSOR not implemented for architecture {model.model_type!r} "
            "(llama.cpp's docs/multi-gpu.md); use split_mode layer",
            field="options.split_mode",
        )


def _ends_with(table: TensorTable, split: np.ndarray, parts: tuple[str, ...]) -> np.ndarray:
    """Return, per layer position, whether a split tensor of one of ``parts`` lies there."""
    names = np.asarray(table.names, dtype=str)
    hit = np.zeros(len(names), dtype=bool)
    for part in parts:
        hit |= np.char.find(names, part) >= 0
    pos = table.position[split & hit]
    return np.bincount(pos[pos >= 0], minlength=int(table.position.max()) + 1) > 0


def collectives(table: TensorTable, split: np.ndarray) -> int:
    """Return the all-reduces one pass through the graph makes: per layer, one after a split
    attention output and one after a split down projection (dense, shared or routed experts)."""
    if not split.any():
        return 0
    attention = _ends_with(table, split, _ATTENTION_OUT)
    ffn = _ends_with(table, split, _FFN_OUT)
    return int(np.count_nonzero(attention) + np.count_nonzero(ffn))


def _gpus(sc: Scenario, split: np.ndarray) -> int:
    """Return the GPUs a tensor-parallel split spans (0 when the scenario has none)."""
    if not split.any() or not is_tensor_parallel(sc):
        return 0
    n = int(np.count_nonzero(row_shares(sc) > 0))
    return n if n > 1 else 0


def _reduces_s(sc: Scenario, count: int, tokens: float, n: int) -> float:
    """Return ``count`` all-reduces of ``tokens`` tokens' f32 activations over ``n`` GPUs."""
    return count * transfer.all_reduce_time(sc.system, tokens * sc.model.hidden * 4.0, n)


def exchange_s(sc: Scenario, table: TensorTable, split: np.ndarray, tokens: float) -> float:
    """Return the seconds one pass of ``tokens`` spends in collectives: each all-reduce of the
    f32 activations, and the gather of a split output layer's logits (decode: one per token)."""
    n = _gpus(sc, split)
    if not n:
        return 0.0
    model = sc.model
    output = split & (table.position == model.n_layers)
    gather_s = (
        transfer.gather_time(sc.system, tokens * model.vocab * 4.0, n) if output.any() else 0.0
    )
    return _reduces_s(sc, collectives(table, split), tokens, n) + gather_s


def prefill_s(sc: Scenario, table: TensorTable, split: np.ndarray) -> float:
    """Return the seconds the prompt's ubatches spend in all-reduces (the logits of the last
    token only, as llama.cpp's prefill outputs them, are left out)."""
    n = _gpus(sc, split)
    if not n:
        return 0.0
    count = collectives(table, split)
    full, rest = divmod(sc.prompt * sc.batch, sc.options.ubatch)
    whole = full * _reduces_s(sc, count, sc.options.ubatch, n)
    return whole + (_reduces_s(sc, count, rest, n) if rest else 0.0)
