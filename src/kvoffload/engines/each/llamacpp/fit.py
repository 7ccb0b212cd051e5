"""llama.cpp's ``--fit`` (on by default): the placement it picks when the user gives none.

``llama_params_fit`` (ggml-org/llama.cpp src/llama.cpp, ``llama_params_fit_impl``, read in a
2026 copy; merged in pull request #16653; ``-fit on|off``, default on: ``bool fit_params =
true`` in common/common.h) runs before the model loads and changes only what the user left
unset. It gives up ("abort") where ``-ngl`` or a tensor override (``-ot``, ``--n-cpu-moe``,
``--cpu-moe``) is given, or for ``--split-mode row``. On one GPU, with a target of the GPU's
free memory less ``--fit-target`` (1,024 MiB):

1. the default placement, everything on the GPU, stays if it fits the target;
2. (the context is shrunk only where the user set none; a scenario always sets it);
3. a MoE model whose dense tensors fit with every expert in host memory takes the experts of its
   first ``n_layer + 1 - full`` layers to the host, ``full = (target - dense) // per_layer +
   n_dense_lead + 1``, ``per_layer`` the full placement's bytes over the dense one's shared
   among the expert layers (the same as ``--n-cpu-moe``);
4. otherwise (a dense model, or one whose dense part does not fit) ``-ngl`` is the layers that
   fit: ``(target - base) // per_layer`` from the bytes of 1 and of every layer on the GPU.

The bytes are the engine's own (engine.memory): weights and KV on the GPU. Several GPUs (its
layer-per-device search) are not modelled: the placement stays as given. ik_llama.cpp's own
``--fit`` is not modelled either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import msgspec

from kvoffload.inputs.models import Model
from kvoffload.model.prediction import Scenario

MARGIN_MIB = 1024  # --fit-target's default: MiB left free on each device


def applies(sc: Scenario) -> bool:
    """Return True where llama.cpp's fit would change the placement's unset parameters."""
    o = sc.options
    return bool(
        o.fit
        and o.fork == "llama.cpp"
        and o.n_gpu_layers is None
        and not o.override_tensor
        and not o.n_cpu_moe
        and not o.cpu_moe
        and o.split_mode != "row"
        and sc.system.n_gpus == 1
    )


def _with(sc: Scenario, **changes: object) -> Scenario:
    """Return the scenario with some options changed (and ``fit`` off: the placement is set)."""
    return replace(sc, options=msgspec.structs.replace(sc.options, fit=False, **changes))


def dense_lead(model: Model) -> int:
    """Return the layers before the first that holds routed experts (``n_layer_dense_lead``)."""
    moe = {t.layer for t in model.tensors() if t.layer is not None and t.role.startswith("exp_")}
    return min(moe) if moe else model.n_layers


def fitted(sc: Scenario, gpu_bytes: Callable[[Scenario], float]) -> Scenario:
    """Return the scenario with the placement ``--fit`` picks (the same where it picks none);
    ``gpu_bytes``: the GPU bytes the engine holds for a scenario with its placement set."""
    if not applies(sc):
        return sc
    target = sc.system.gpu_memory - sc.options.fit_target * 2**20
    full = gpu_bytes(_with(sc))
    if full <= target:
        return _with(sc)
    n = sc.model.n_layers
    if sc.model.moe is not None:
        dense = gpu_bytes(_with(sc, cpu_moe=True))
        if dense <= target:
            lead = dense_lead(sc.model)
            per_layer = (full - dense) // max(n - lead, 1)
            full_layers = int((target - dense) // per_layer) + lead + 1
            return _with(sc, n_cpu_moe=max(0, min(n, n + 1 - full_layers)))
    one = gpu_bytes(_with(sc, n_gpu_layers=1))
    every = gpu_bytes(_with(sc, n_gpu_layers=n))
    per_layer = (every - one) / max(n - 1, 1)
    ngl = int((target - (one - per_layer)) // per_layer)
    return _with(sc, n_gpu_layers=max(0, min(n + 1, ngl)))
