"""SGLang's decode attention by ``--attention-backend``: which one it picks, and the Triton one's
serial walk over the cache at small batches.

Read in kvcache-ai/sglang at 04653fa88 (the fork kt-kernel runs in):

- **The default** (server_args.py, ``_handle_attention_backend_compatibility``): for MHA/GQA
  models ``fa3`` on Hopper, ``trtllm_mha`` on SM100 (B200/GB200/B300), ``aiter`` on ROCm, else
  ``flashinfer`` (``triton`` where FlashInfer is not installed); for MLA models ``fa3`` on
  Hopper, ``flashinfer`` on SM100, ``aiter`` on ROCm (DeepSeek's 128 heads), else ``triton``:
  an RTX 4090 or 5090 decodes DeepSeek with the Triton kernel unless told otherwise.
- **The Triton kernel** (layers/attention/triton_ops/decode_attention.py,
  ``_decode_grouped_att_m_fwd``): a grid of batch x cdiv(heads, min(16, heads per KV head)) x
  ``num_kv_splits`` programs, each walking its split of one sequence's cache in tiles of 32
  tokens (``BLOCK = 32``), every tile a load of the tokens' slots, then a gather of their keys
  and values at those slots, then two small dots. ``get_num_kv_splits`` (triton_backend.py)
  gives a lone sequence the cap, ``triton_attention_num_kv_splits`` (8), on every GPU of 34 SMs
  or more from a few hundred tokens on. So at batch 1 a layer's attention takes cdiv(cdiv(L, 8),
  32) tiles one after the other, at the tile's latency, far below the memory's rate: the cache's
  bytes over the attention bandwidth bound it only at larger batches.
- **The tile's time** (``triton_decode_tile_us``, catalog/engine_constants.yaml, ``sglang``):
  fitted on sgl-project/sglang pull request #21775's H100 table, Qwen3-8B decode at batch 1 from
  1,000 to 32,000 tokens with the kernel as above (its "Old Triton" column): 3.11 µs a tile,
  residuals within 1.3%; the same table's FlashInfer column reads the cache at 2.55 TB/s. Taken
  as the same on every GPU and head size (assumed). MLA's tiles carry the 576-value latent; their
  time comes from KTransformers' own fit of the same kernel on an RTX 4090 (``mla_decode_triton_ns``
  over its 4 splits and 32-token tiles: 2.06 µs).

Not modelled: the batch past the GPU's SMs (waves; the bandwidth bound takes over there), the
SM count's effect on the splits of a short cache, and the split-reduction kernel's fixed cost.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Annotated, Any, Literal

from msgspec import Meta

from kvoffload.inputs import catalog
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.text import Strict
from kvoffload.model import decode

# ``--attention-backend`` values the engines accept (server_args.py ATTENTION_BACKEND_CHOICES,
# the CUDA and ROCm ones); only ``triton`` has a cost of its own here, the others read the cache
# at the GPU's attention rate
Backend = Literal[
    "triton",
    "flashinfer",
    "fa3",
    "fa4",
    "trtllm_mha",
    "trtllm_mla",
    "flashmla",
    "cutlass_mla",
    "aiter",
    "torch_native",
]
# --fp8-gemm-backend's choices (server_args.py FP8_GEMM_RUNNER_BACKEND_CHOICES)
Fp8GemmBackend = Literal[
    "auto", "deep_gemm", "flashinfer_trtllm", "flashinfer_deepgemm", "cutlass", "triton", "aiter"
]
BLOCK_N = 32  # tokens a program takes per tile (``BLOCK`` in _decode_grouped_att_m_fwd)
MAX_KV_SPLITS = 8  # server_args.py ``triton_attention_num_kv_splits`` default
ARCHIVE_KV_SPLITS = 4  # KTransformers 0.2.1's forward_linux_triton: num_kv_splits 4
_HOPPER = re.compile(r"\b(GH|H)(100|200|800|20)\b", re.IGNORECASE)
_SM100 = re.compile(r"\bG?B(200|300)\b", re.IGNORECASE)
_ROCM = re.compile(r"\b(AMD|Instinct|Radeon)\b", re.IGNORECASE)


class ServingFlags(Strict):
    """SGLang's ``--attention-backend`` and the serving flags a launch command carries beside
    the modelled ones: the limits (``refuse_serving``) and flags accepted with no term of their
    own for one request on one GPU: mixed chunks (a decode batch beside a prefill chunk),
    shared-expert fusion (the same bytes either way), the P2P check, the FP8 GEMM backend (the
    engine's matmul rate) and CUDA graphs off (kernel launches are not modelled)."""

    attention_backend: Backend | None = None  # None: the one server_args.py picks
    max_running_requests: Annotated[int, Meta(ge=1, le=1 << 20)] | None = None
    tensor_parallel_size: Annotated[int, Meta(ge=1, le=64)] | None = None
    enable_mixed_chunk: bool | None = None
    disable_shared_experts_fusion: bool | None = None
    enable_p2p_check: bool | None = None
    fp8_gemm_backend: Fp8GemmBackend | None = None
    disable_cuda_graph: bool | None = None
    # --context-length (a longer request is refused), --disable-radix-cache (no GPU prefix tier:
    # engine sglang), --enable-torch-compile and --cuda-graph-max-bs (no term of their own)
    context_length: Annotated[int, Meta(ge=1, le=1 << 25)] | None = None
    disable_radix_cache: bool | None = None
    enable_torch_compile: bool | None = None
    cuda_graph_max_bs: Annotated[int, Meta(ge=1, le=1 << 16)] | None = None


SERVING_FLAGS = tuple(f for f in ServingFlags.__struct_fields__ if f != "attention_backend")


def refuse_serving(sc: Any) -> None:
    """Refuse what ``launch_server`` refuses under its own limits: a batch past
    ``--max-running-requests``, a ``--tensor-parallel-size`` other than the profile's one GPU."""
    o = sc.options
    cap = getattr(o, "max_running_requests", None)
    if cap is not None and sc.batch > cap:
        raise InputError(
            f"options.max_running_requests is {cap} but the batch is {sc.batch}: SGLang runs at "
            "most that many requests at once",
            field="options.max_running_requests",
        )
    length = getattr(o, "context_length", None)
    if length is not None and sc.prompt + sc.generate > length:
        raise InputError(
            f"options.context_length is {length} but a request holds {sc.prompt + sc.generate} "
            "tokens (prompt + generate): SGLang rejects it",
            field="options.context_length",
        )
    tp = getattr(o, "tensor_parallel_size", None)
    if tp is not None and tp != 1:
        raise InputError(
            f"options.tensor_parallel_size is {tp}: SGLang's tensor parallelism is not modelled "
            "(one GPU)",
            field="options.tensor_parallel_size",
        )


@cache
def constants() -> dict:
    """Return SGLang's engine constants with their sources (catalog/engine_constants.yaml)."""
    return catalog.load("engine_constants")["sglang"]


def backend(sc: Any) -> str:
    """Return a scenario's ``--attention-backend``: the option, else SGLang's default for it."""
    given = sc.options.attention_backend
    return given or default_backend(sc.system.gpu.name, sc.model.mla is not None)


def default_backend(gpu_name: str, mla: bool) -> str:
    """Return the backend SGLang picks with no ``--attention-backend``, by the GPU's family."""
    if _HOPPER.search(gpu_name):
        return "fa3"
    if _SM100.search(gpu_name):
        return "flashinfer" if mla else "trtllm_mha"
    if _ROCM.search(gpu_name):
        return "aiter"
    return "triton" if mla else "flashinfer"


def tile_s(mla: bool) -> float:
    """Return the seconds one program of the Triton kernel spends on one tile of 32 tokens."""
    if mla:
        ns = float(
            catalog.load("engine_constants")["ktransformers"]["mla_decode_triton_ns"]["value"]
        )
        return ns * 1e-9 * BLOCK_N * ARCHIVE_KV_SPLITS
    return float(constants()["triton_decode_tile_us"]["value"]) * 1e-6


def walk(backend: str, mla: bool) -> decode.AttentionWalk | None:
    """Return the Triton kernel's walk (8 splits of 32-token tiles) for ``triton``, else None."""
    return (
        decode.AttentionWalk(MAX_KV_SPLITS, BLOCK_N, tile_s(mla)) if backend == "triton" else None
    )
