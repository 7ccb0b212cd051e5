"""llama.cpp: weights live where their buffers are, and each op runs where its weights live.

``--n-gpu-layers N`` puts the last N layers (counting the output layer) on the GPU
(``i_gpu_start = n_layer + 1 - N`` in llama.cpp's layer placement); the token embeddings stay in
host memory. Per-tensor overrides then move single tensors: ``-ot REGEX=CPU`` (``override_tensor``,
each pattern tried in order with ``std::regex_search`` on the GGUF tensor name, the first match
wins), ``--cpu-moe`` (all routed experts, ``LLM_FFN_EXPS_REGEX`` =
``\\.ffn_(up|down|gate|gate_up)_(ch|)exps``) and ``--n-cpu-moe N`` (the experts of layers 0..N-1,
``blk\\.i`` + that regex) — ggml-org/llama.cpp common/common.h at
001d906a6d86e2490e394361e7cc6f478b100088 (``llm_ffn_exps_cpu_override``,
``llm_add_n_cpu_ffn_overrides``). In decode, a matmul whose weights are in host memory runs on the
CPU; each change of device along the graph is a hand-over (the activations cross the link, the
backends synchronise). A routed-expert tensor is read only for the experts the batch routes to. A
layer's KV cache lives with its layer unless ``no_kv_offload`` keeps all of it in host memory,
where attention then runs on the CPU.

Two engine constants, each derived from a published llama.cpp measurement on another machine than
the ones the validation checks, apply to every scenario (both can be overridden in ``options``):

- ``gpu_op_us``: the fixed time each matmul on a GPU adds to a decode step (its kernel's launch
  and tail, and those of the small ops around it; a routed-expert stack is one op), beside its
  bytes at the card's streaming bandwidth: a cost per op, so it weighs most on a small model and
  a fast card. Without CUDA graphs every op is launched on its own each token, with them the
  token's ops are replayed as one graph (mozilla-ai/llamafile PR #1051 measures the difference
  on an L40S). With graphs (``gpu_op_us``) from PR #24216: llama-bench pp512 at microbatch 1
  of llama 1B F16 on an RTX 3090 (2026), one-token graphs at 371.74 tokens/s; without them
  (``gpu_op_us_no_graphs``, the ``cuda_graphs: false`` option) from PR #6766: LLaMA 2 7B Q4_0 on
  an RTX 4090 on master before CUDA graphs, 138.31 tokens/s. (PR #6766's own graphs run, 146.81,
  gives 10.97 µs: the per-op cost with graphs has fallen to about a third since 2024.)
- ``split_sync_us``: what each hand-over between the CPU and CUDA backends costs (synchronise,
  copy, wake the CPU threads). From PR #7526: LLaMA 7B Q4_0 on an RTX 3060 Laptop GPU, 66.24
  tokens/s with the cache on the GPU and 45.91 with ``--no-kv-offload`` (threadpool build), whose
  difference is 64 hand-overs per token, two per layer.

CPU-side matmuls stream their weights at ``cpu_weight_rate``, and CPU attention reads host memory,
at the rate ``numa`` (``--numa``) gives the host's sockets (model/cpu_rate.py
``host_stream_rate``); the logits come back to the host for sampling. llama.cpp maps the GGUF file
(``llama_mmap``, on unless ``--no-mmap``), so host-resident weights past what host memory holds
(``capacity.host_capacity``, the OS's reserve kept) are file pages the kernel evicts and reads back:
each step reads its share of that excess from disk at the storage's read rate, in the step's disk
stream, instead of refusing; with ``no_mmap`` the weights are copied into anonymous buffers and
must fit. (Under strict LRU a cyclic scan larger than memory would miss on every page; Linux's
active/inactive lists keep part resident, so the excess alone is the optimistic, lower bound.)
The host prompt cache (``cache_ram``, a scenario's ``reuse:``) is llamacpp_prompt_cache.py.

Two more constants, each fitted on published runs on other machines than the validation's: a
KV cache in a ggml block format costs ``kv_dequant_gpu`` times an f16 value per cached value on the
GPU (``attention``), and quantised GGUF prefill runs at ``mmq_int8_share`` of the int8 tensor-core
peak (``prefill``).

The package holds one job per module: ``options`` (the options and the engine constants),
``attention`` (the rates a KV cache is read at, by format and device), ``placement`` (where each
tensor lives, the CPU side's rates), ``step`` (the decode step), ``prefill`` (ubatches, the
op-offload threshold, MMQ), ``row_split`` (``-sm row``'s copies between GPUs),
``tensor_parallel`` (``-sm tensor`` and ik_llama.cpp's ``-sm graph``: their refusals and
all-reduces) and ``engine`` (the prediction and the registry entry). Their names are re-exported
here.
"""

from kvoffload.engines.each.llamacpp import row_split, tensor_parallel
from kvoffload.engines.each.llamacpp.attention import (
    BLOCK_FORMATS,
    cpu_kv_rate,
    gpu_kv_rate,
    kv_dequant_gpu_default,
)
from kvoffload.engines.each.llamacpp.engine import ENGINE, predict
from kvoffload.engines.each.llamacpp.options import (
    MAX_LAYERS,
    MAX_OVERRIDES,
    Layers,
    Options,
    _parse_rule,
    constants,
    gpu_op_s_default,
    mmq_share_default,
    ser_experts,
    split_sync_s_default,
)
from kvoffload.engines.each.llamacpp.placement import (
    EXPS_REGEX,
    _read_bytes,
    cpu_weight_rate,
    gpu_bytes_each,
    gpu_split,
    host_read_rate,
    layers_per_gpu,
    override_rules,
    paged_bytes,
    placement,
    row_shares,
    split_points,
    split_rows,
    split_tensors,
    tensor_devices,
    tensor_gpus,
    tensor_groups_summary,
)
from kvoffload.engines.each.llamacpp.prefill import (
    OFFLOAD_MIN_BATCH,
    is_gguf_quant,
    offloaded,
    prefill_rate,
    weights_pinned,
)
from kvoffload.engines.each.llamacpp.step import (
    _constants,
    _hand_overs,
    _step_parts_at,
    matmul_ops,
    step_parts,
)

__all__ = [
    "BLOCK_FORMATS",
    "ENGINE",
    "EXPS_REGEX",
    "MAX_LAYERS",
    "MAX_OVERRIDES",
    "OFFLOAD_MIN_BATCH",
    "Layers",
    "Options",
    "_constants",
    "_hand_overs",
    "_parse_rule",
    "_read_bytes",
    "_step_parts_at",
    "constants",
    "cpu_kv_rate",
    "cpu_weight_rate",
    "gpu_bytes_each",
    "gpu_kv_rate",
    "gpu_op_s_default",
    "gpu_split",
    "host_read_rate",
    "is_gguf_quant",
    "kv_dequant_gpu_default",
    "layers_per_gpu",
    "matmul_ops",
    "mmq_share_default",
    "offloaded",
    "override_rules",
    "paged_bytes",
    "placement",
    "predict",
    "prefill_rate",
    "row_shares",
    "row_split",
    "ser_experts",
    "split_points",
    "split_rows",
    "split_sync_s_default",
    "split_tensors",
    "step_parts",
    "tensor_devices",
    "tensor_gpus",
    "tensor_groups_summary",
    "tensor_parallel",
    "weights_pinned",
]
