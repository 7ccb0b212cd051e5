"""llama.cpp's ``--fit`` (on by default): the placement it picks when the user gives none.

``common_params_fit_impl`` (ggml-org/llama.cpp common/fit.cpp at
6d0892ba065b38ee790b825fdc8fb8e2c453e6dd; before it ``llama_params_fit_impl`` in src/llama.cpp,
the same steps; merged in pull request #16653; ``-fit on|off``, default on) runs before the
model loads and changes only what the user left unset. It gives up ("abort") where ``-ngl``,
``--tensor-split`` or a tensor override (``-ot``, ``--n-cpu-moe``, ``--cpu-moe``) is given, and
for ``--split-mode row`` and ``tensor``. Each device's target is its free memory less
``--fit-target`` (1,024 MiB); the devices are the profile's GPUs (``--split-mode none``: the
main GPU alone). Layer positions run 0 to ``n_layer``, the last the output layer.

1. the default placement stays if every device meets its target;
2. (the context is shrunk only where the user set none; a scenario always sets it);
3. devices are filled back to front, the last first, each with as many of the unassigned
   layers as fit, found by false position between a bound that fits and one that does not.
   For a MoE model these are "dense-only" layers, their routed experts in host memory
   (``ffn_(up|down|gate_up|gate)_(ch|)exps`` to the CPU), all but the first layer of the last
   device; a dense model's are whole layers. The layers no device takes stay on the CPU;
4. a MoE model whose dense part fits in all (every expert in host memory, the sum of the
   devices' surpluses above zero) then turns dense-only layers into whole ones, front to
   back: each device in turn takes whole layers from the dense-only ones while it fits, then
   tries part of one more: that layer's ``up`` experts kept on the device and the rest of its
   FFN overflowing (to the next device, or the CPU on the last), then ``up`` and ``gate``
   kept; failing ``up``, its attention alone.

The result is ``-ngl``, each device's layer count as ``--tensor-split`` (several devices) and
the tensor overrides, as the engine then runs them. Every probe's bytes are the engine's own
(engine.memory): weights and KV on each GPU, no compute buffers.

ik_llama.cpp's ``--fit`` (off by default; ``llm_load_tensors`` in src/llama.cpp at
8337e4cd3861406fc04e0854b1409cd1b027fbc9, ``fit`` with ``--fit-margin`` MiB, default 1,024) is
another search (``fitted_ik``): where the model's tensors and cache need more than the GPUs
have, a MoE model moves routed experts to the CPU (``blk.N.ffn_(up|down|gate|gate_up)_exps``),
under ``--split-mode layer`` those of each GPU's own layers from its last one down until that
GPU fits, under ``graph`` from layer 0 up until the whole fits; a dense model fills the last GPU
from the output layer down, the layers below the first that does not fit on the CPU. The layers
are spread over the GPUs as the engine spreads them (ik_llama.cpp's own greedy split by layer
size is not followed).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import msgspec
import numpy as np

from kvoffload.model import tensor_groups
from kvoffload.model.prediction import Scenario

MARGIN_MIB = 1024  # --fit-target's default: MiB left free on each device

# common_layer_fraction_t: which of a partial layer's tensors leave the device
ATTN, UP, GATE, MOE = "attn", "up", "gate", "moe"
_OVERFLOW = {  # get_overflow_pattern: the tensors of layer {il} that go elsewhere
    ATTN: r"ffn_(gate|up|gate_up|down).*",  # attention stays
    UP: r"ffn_(gate|gate_up|down).*",  # attention and up stay
    GATE: r"ffn_down.*",  # attention, up and gate stay
    MOE: r"ffn_(up|down|gate_up|gate)_(ch|)exps",  # everything but the routed experts stays
}
MOE_ALL = r"blk\.\d+\.ffn_(up|down|gate_up|gate)_(ch|)exps"  # every routed-expert tensor


@dataclass(frozen=True)
class Layers:
    """One device's share: ``n_layer`` positions, the last ``n_part`` of them partial."""

    n_layer: int = 0
    n_part: int = 0
    overflow: str = MOE  # what the first partial layer sends elsewhere

    @property
    def n_full(self) -> int:
        """Return the device's whole layers."""
        return self.n_layer - self.n_part


def applies(sc: Scenario) -> bool:
    """Return True where llama.cpp's fit would change the placement's unset parameters."""
    o = sc.options
    if o.fit and o.fork == "ik_llama":
        return not (o.override_tensor or o.n_cpu_moe or o.cpu_moe)
    return bool(
        o.fit
        and o.fork == "llama.cpp"
        and o.n_gpu_layers is None
        and not o.override_tensor
        and not o.n_cpu_moe
        and not o.cpu_moe
        and not any(o.tensor_split)
        and o.split_mode not in ("row", "tensor")
    )


def devices(sc: Scenario) -> list[int]:
    """Return the GPUs the fit fills, in device order: all, or ``main_gpu`` under ``-sm none``."""
    if sc.options.split_mode == "none":
        return [sc.options.main_gpu]
    return list(range(sc.system.n_gpus))


def _with(sc: Scenario, **changes: object) -> Scenario:
    """Return the scenario with some options changed (and ``fit`` off: the placement is set)."""
    return replace(sc, options=msgspec.structs.replace(sc.options, fit=False, **changes))


def placement_options(
    shares: Sequence[Layers], overflow_to: Sequence[str], n_layers: int
) -> dict[str, object]:
    """Return the options ``set_ngl_tensor_split_tbo`` writes for the devices' shares:
    ``n_gpu_layers``, ``tensor_split`` (several devices) and ``override_tensor`` rules.

    ``overflow_to[i]``: where device ``i``'s first partial layer sends its overflow (``CPU`` or
    ``CUDA<n>``); every later partial layer sends its routed experts to the CPU. The experts
    rules of consecutive partial layers are joined in one alternation (the layers are
    disjoint, so the first match is the same).
    """
    ngl = sum(s.n_layer for s in shares)
    il0 = n_layers + 1 - ngl
    first: list[str] = []
    experts: list[int] = []
    for share, to in zip(shares, overflow_to, strict=True):
        il0 += share.n_full
        for il in range(il0, il0 + share.n_part):
            if il == il0 and (share.overflow != MOE or to != "CPU"):
                first.append(rf"blk\.{il}\.{_OVERFLOW[share.overflow]}={to}")
            elif il < n_layers:  # the output layer's position has no blk.N tensors
                experts.append(il)
        il0 += share.n_part
    rules = list(first)
    if experts:
        rules.append(rf"blk\.({'|'.join(map(str, experts))})\.{_OVERFLOW[MOE]}=CPU")
    out: dict[str, object] = {"n_gpu_layers": ngl, "override_tensor": tuple(rules)}
    if len(shares) > 1:
        out["tensor_split"] = tuple(float(s.n_layer) for s in shares)
    return out


IK_EXPS = r"\.(ffn_(up|down|gate|gate_up)_exps\.(weight|scale))"  # ik's override pattern


def fitted_ik(
    sc: Scenario,
    gpu_bytes: Callable[[Scenario], Sequence[float]],
    layer_gpus: Callable[[Scenario], Sequence[int]],
) -> Scenario:
    """Return the scenario with the placement ik_llama.cpp's ``--fit`` picks; ``layer_gpus``:
    each layer position's GPU (-1: the CPU) for a scenario as given."""
    o, n = sc.options, sc.model.n_layers
    margin = (o.fit_margin or MARGIN_MIB) * 2**20
    ids = list(range(sc.system.n_gpus))
    free = [sc.system.devices[i].memory.value - margin for i in ids]
    used = [float(gpu_bytes(_with(sc))[i]) for i in ids]
    if sum(used) <= sum(free):  # required_mem <= available_mem: nothing changes
        return _with(sc)
    table = tensor_groups.tensor_table(sc.model, sc.setup.weights)
    exps = np.array([bool(re.search(IK_EXPS, name)) for name in table.names])
    exps &= table.position >= 0
    per_layer = np.bincount(table.position[exps], weights=table.nbytes[exps], minlength=n)[:n]
    if not per_layer.any():  # a dense model: the last GPU filled from the output layer down
        every = [float(b) for b in gpu_bytes(_with(sc, n_gpu_layers=n + 1))]
        one = [float(b) for b in gpu_bytes(_with(sc, n_gpu_layers=1))]
        layer = (sum(every) - sum(one)) / max(n, 1)
        base = sum(one) - layer  # ik's -ngl 1: one layer, no output layer
        fits = int(max(0.0, sum(free) - base) // layer) if layer > 0 else n + 1
        if fits >= n + 1:
            return _with(sc)
        # the output layer first, then layers from the top: ik's -ngl counts no output layer
        # below n_layer + 1, so the output layer is named on the last GPU
        last = f"CUDA{ids[-1]}"
        return _with(sc, n_gpu_layers=max(0, fits - 1), override_tensor=(rf"^output\.={last}",))
    moved: list[int] = []
    if o.split_mode in ("graph", "attn"):  # from layer 0 up until the whole fits
        over = sum(used) - sum(free)
        for il in range(n):
            if over <= 0:
                break
            if per_layer[il] > 0:
                moved.append(il)
                over -= per_layer[il]
    else:  # each GPU: the experts of its own last layers, down, until it fits
        where = np.asarray(layer_gpus(_with(sc)))[:n]
        for d in ids:
            over = used[d] - free[d]
            for il in range(n - 1, -1, -1):
                if over <= 0:
                    break
                if where[il] == d and per_layer[il] > 0:
                    moved.append(il)
                    over -= per_layer[il]
    if not moved:
        return _with(sc)
    rule = rf"blk\.({'|'.join(map(str, sorted(moved)))}){IK_EXPS}=CPU"
    return _with(sc, override_tensor=(rule,))


def fitted(
    sc: Scenario,
    gpu_bytes: Callable[[Scenario], Sequence[float]],
    layer_gpus: Callable[[Scenario], Sequence[int]] | None = None,
) -> Scenario:
    """Return the scenario with the placement ``--fit`` picks (the same where it picks none);
    ``gpu_bytes``: each GPU's bytes the engine holds for a scenario with its placement set;
    ``layer_gpus``: each layer position's GPU (ik_llama.cpp's search needs it)."""
    if not applies(sc):
        return sc
    if sc.options.fork == "ik_llama":
        if layer_gpus is None:
            raise ValueError("ik_llama.cpp's fit needs each layer's GPU")
        return fitted_ik(sc, gpu_bytes, layer_gpus)
    ids = devices(sc)
    nd, n = len(ids), sc.model.n_layers
    margin = sc.options.fit_target * 2**20
    targets = [sc.system.devices[i].memory.value - margin for i in ids]

    def used(probe: Scenario) -> list[float]:
        every = gpu_bytes(probe)
        return [float(every[i]) for i in ids]

    full = used(_with(sc))
    if all(u <= t for u, t in zip(full, targets, strict=True)):
        return _with(sc)
    moe = sc.model.moe is not None

    def set_up(shares: Sequence[Layers], to: Sequence[str]) -> Scenario:
        options = placement_options(shares, to, n)
        if nd == 1:
            options.pop("tensor_split", None)
        return _with(sc, **options)

    def mem(shares: Sequence[Layers], to: Sequence[str]) -> list[float]:
        return used(set_up(shares, to))

    surplus = 0.0
    if moe:
        dense = used(_with(sc, override_tensor=(f"{MOE_ALL}=CPU",)))
        surplus = sum(
            sc.system.devices[i].memory.value - d - margin for i, d in zip(ids, dense, strict=True)
        )
    to = ["CPU"] * nd
    shares = [Layers()] * nd
    now = mem(shares, to)

    def step(delta: int, target: float, low: float, high: float) -> int:
        """Return false position's next step: the linear guess, at least 1, below delta."""
        guess = int(delta * (target - low) // (high - low)) if high > low else 1
        return min(max(guess, 1), delta - 1)

    # step 3: dense-only (or whole, for a dense model) layers, back to front
    for d in range(nd - 1, -1, -1):
        unassigned = n + 1 - sum(s.n_layer for s in shares[d + 1 :])
        part = (unassigned if d < nd - 1 else unassigned - 1) if moe else 0
        high = [*shares]
        high[d] = replace(shares[d], n_layer=unassigned, n_part=part)
        if unassigned <= 0:
            continue
        mem_high = mem(high, to)
        if mem_high[d] <= targets[d]:
            shares, now = high, mem_high
            continue
        delta = high[d].n_layer - shares[d].n_layer
        while delta > 1:
            k = step(delta, targets[d], now[d], mem_high[d])
            test = [*shares]
            s = shares[d]
            grow = (k - 1 if d == nd - 1 and s.n_part == 0 else k) if moe else 0
            test[d] = replace(s, n_layer=s.n_layer + k, n_part=s.n_part + grow)
            mem_test = mem(test, to)
            if mem_test[d] <= targets[d]:
                shares, now = test, mem_test
            else:
                high, mem_high = test, mem_test
            delta = high[d].n_layer - shares[d].n_layer
    if not moe or surplus <= 0:
        return set_up(shares, to)

    # step 4: dense-only layers turned whole, front to back
    start = nd
    for d in range(nd - 1, -1, -1):
        if shares[d].n_layer > 0:
            start = d
            continue
        break
    d = 0
    while start < nd and d <= start:
        high = [*shares]
        for j in range(start, nd):
            move = high[j].n_layer if j < nd - 1 else high[j].n_layer - 1
            high[d] = replace(high[d], n_layer=high[d].n_layer + move)
            high[j] = replace(high[j], n_layer=high[j].n_layer - move, n_part=0)
        start_high = nd - 1
        mem_high = mem(high, to)
        if mem_high[d] > targets[d]:
            delta = high[d].n_full - shares[d].n_full
            while delta > 1:
                k = step(delta, targets[d], now[d], mem_high[d])
                test, start_test, done = [*shares], start, 0
                while start_test < nd:
                    c = min(k - done, test[start_test].n_part)
                    src = test[start_test]
                    test[start_test] = replace(src, n_layer=src.n_layer - c, n_part=src.n_part - c)
                    test[d] = replace(test[d], n_layer=test[d].n_layer + c)
                    done += c
                    if test[start_test].n_part > 0:
                        break
                    start_test += 1
                mem_test = mem(test, to)
                if mem_test[d] <= targets[d]:
                    shares, now, start = test, mem_test, start_test
                else:
                    high, mem_high, start_high = test, mem_test, start_test
                delta = high[d].n_full - shares[d].n_full
        else:
            shares, now, start = high, mem_high, start_high
        # part of one more layer, its overflow to the next device (or the CPU on the last)
        if start < nd and shares[start].n_layer > (0 if d < nd - 1 else 1):
            test, start_test = [*shares], start
            src = test[start_test]
            test[start_test] = replace(src, n_layer=src.n_layer - 1, n_part=src.n_part - 1)
            t = test[d]
            test[d] = replace(t, n_layer=t.n_layer + 1, n_part=t.n_part + 1, overflow=UP)
            if test[start_test].n_part == 0:
                start_test += 1
            to_test = [*to]
            if d < nd - 1:
                to_test[d] = f"CUDA{ids[d + 1]}"

            def fits(m: list[float], d: int = d) -> bool:
                return m[d] < targets[d] and (d + 1 == nd or m[d + 1] < targets[d + 1])

            mem_test = mem(test, to_test)
            if fits(mem_test):
                shares, to, now, start = test, to_test, mem_test, start_test
                test = [*test]
                test[d] = replace(test[d], overflow=GATE)
                mem_test = mem(test, to_test)
                if fits(mem_test):
                    shares, now = test, mem_test
            else:
                test[d] = replace(test[d], overflow=ATTN)
                mem_test = mem(test, to_test)
                if fits(mem_test):
                    shares, to, now, start = test, to_test, mem_test, start_test
        d += 1
    return set_up(shares, to)
