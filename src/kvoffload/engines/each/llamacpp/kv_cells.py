"""The KV cache llama.cpp allocates: ``-c``, ``-np``, ``-kvu`` and ``--swa-full``.

Without ``ctx_size`` the cache is what the scenario's requests hold at the end (each request's
prompt and output, a sliding layer at most its window), as llama-bench sizes its context to the
test. With ``ctx_size`` (``-c``, llama-server) llama.cpp allocates the whole context up front,
read in ggml-org/llama.cpp (src/llama-context.cpp at 001d906a6d86e2490e394361e7cc6f478b100088;
src/llama-kv-cache-iswa.cpp at 02c28f533ebba3e4ea944fc4a0719a012b3e7097):

- ``n_ctx`` is padded to a multiple of 256; without a unified cache (``-kvu``) each of the
  ``-np`` slots gets ``n_ctx_seq = pad(n_ctx / np, 256)`` cells and ``n_ctx`` becomes
  ``np x n_ctx_seq``; a unified cache is one stream of ``n_ctx`` cells;
- a sliding-window layer keeps ``pad(min(cells, n_swa x (np if unified else 1) + n_ubatch),
  256)`` cells a stream, or every cell with ``--swa-full``;
- a recurrent layer keeps one state a slot.

A request longer than its slot's cells, or more requests than slots, is refused as
llama-server refuses them.
"""

from __future__ import annotations

import numpy as np

from kvoffload.inputs.errors import InputError
from kvoffload.model import kv
from kvoffload.model.prediction import Scenario

PAD = 256  # GGML_PAD(n_ctx, 256), and the SWA cache's padding


def _pad(n: int) -> int:
    return -(-n // PAD) * PAD


def slots(sc: Scenario) -> int:
    """Return ``-np``: the option, else one slot a request of the batch."""
    return sc.options.parallel or sc.batch


def refuse(sc: Scenario) -> None:
    """Refuse a batch past the slots and a request past its slot's cells."""
    o = sc.options
    n = slots(sc)
    if sc.batch > n:
        raise InputError(
            f"options.parallel is {n} but the batch is {sc.batch}: llama-server runs at most "
            "one request a slot",
            field="options.parallel",
        )
    if o.ctx_size is None:
        return
    per_slot = _pad(o.ctx_size) if o.kv_unified else _pad(_pad(o.ctx_size) // n)
    tokens = sc.prompt + sc.generate
    if tokens > per_slot:
        raise InputError(
            f"options.ctx_size gives each of the {n} slot(s) {per_slot} tokens but a request "
            f"holds {tokens} (prompt + generate)",
            field="options.ctx_size",
        )


def layer_bytes(sc: Scenario) -> np.ndarray:
    """Return each layer's allocated cache bytes (all requests, the final context)."""
    o = sc.options
    model, fmt = sc.setup.cache_model, sc.setup.kv
    if o.ctx_size is None and not o.swa_full:
        return kv.layer_bytes(model, sc.prompt + sc.generate, fmt) * sc.batch
    per_token = kv.bytes_per_token_per_layer(model, fmt).astype(np.float64)
    state = kv.state_bytes_per_layer(model, fmt).astype(np.float64)
    windows = model.windows
    sliding = np.isfinite(windows) & (windows > 0)
    n = slots(sc)
    if o.ctx_size is None:  # --swa-full alone: every request's tokens in every layer
        cells = np.full(model.n_layers, float(sc.batch * (sc.prompt + sc.generate)))
        return cells * per_token + sc.batch * state
    streams = 1 if o.kv_unified else n
    base = _pad(o.ctx_size) if o.kv_unified else _pad(_pad(o.ctx_size) // n)
    cells = np.full(model.n_layers, float(base * streams))
    if not o.swa_full:
        swa = np.minimum(base, windows * (n if o.kv_unified else 1) + o.ubatch)
        swa = np.ceil(swa / PAD) * PAD
        cells = np.where(sliding, swa * streams, cells)
    return cells * per_token + n * state
