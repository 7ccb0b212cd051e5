"""What ``--split-mode row`` adds: the copies between GPUs around each row-split matrix.

Under ``row`` each GPU-resident matrix is split by rows over the GPUs (``placement.split_rows``)
and multiplied on all of them at once. ``ggml_cuda_op_mul_mat`` then copies the input to every
other GPU (``cudaMemcpyPeerAsync``) and their rows of the output back to the GPU that runs the
layer (``ggml_cuda_Memcpy2DPeerAsync``), whose stream waits on each GPU's event; it takes the
input in chunks of ``MUL_MAT_SRC1_COL_STRIDE`` = 128 tokens when the matrix is split, each chunk
copied in and out (ggml-org/llama.cpp ggml/src/ggml-cuda/ggml-cuda.cu at
a5410f046c01d01330c8a42f13b64a211fedf2c3). The input goes as q8_1 (36 bytes per 32 values) for
a quantised GGUF weight, else as f32; the output comes back as f32. Each copy is a GPU-to-GPU
transfer (``transfer.peer_time``); the GPUs' copies run side by side, the largest share's last.
"""

from __future__ import annotations

import numpy as np

from kvoffload.engines.each.llamacpp.placement import row_shares
from kvoffload.engines.each.llamacpp.prefill import is_gguf_quant
from kvoffload.model import transfer
from kvoffload.model.prediction import Scenario
from kvoffload.model.tensor_groups import TensorTable

SRC1_COL_STRIDE = 128  # ggml-cuda.cu MUL_MAT_SRC1_COL_STRIDE: tokens per chunk of a split matmul


def exchange_s(sc: Scenario, table: TensorTable, split: np.ndarray, tokens: float) -> float:
    """Return the seconds one pass of ``tokens`` (at most one chunk) spends copying between GPUs
    around the split matrices ``split``."""
    if not split.any() or sc.options.split_mode != "row":
        return 0.0
    per_value = 36 / 32 if is_gguf_quant(sc.setup.weights) else 4.0
    largest = float(np.max(row_shares(sc)))
    src1 = tokens * table.cols[split] * per_value
    dst = tokens * table.rows[split] * largest * 4.0
    system = sc.system
    return float(transfer.peer_time(system, src1).sum() + transfer.peer_time(system, dst).sum())


def prefill_s(sc: Scenario, table: TensorTable, split: np.ndarray) -> float:
    """Return the seconds the prompt's ubatches spend copying between GPUs: each ubatch in
    chunks of 128 tokens, each chunk through every split matrix."""
    if not split.any() or sc.options.split_mode != "row":
        return 0.0

    def ubatch_s(tokens: int) -> float:
        chunks, tail = divmod(tokens, SRC1_COL_STRIDE)
        whole = chunks * exchange_s(sc, table, split, SRC1_COL_STRIDE)
        return whole + (exchange_s(sc, table, split, tail) if tail else 0.0)

    full, rest = divmod(sc.prompt * sc.batch, sc.options.ubatch)
    return full * ubatch_s(sc.options.ubatch) + (ubatch_s(rest) if rest else 0.0)
