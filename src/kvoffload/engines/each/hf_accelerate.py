"""HF Accelerate: weights copied in from host memory or disk before each layer runs (no
prefetch), through pageable host memory unless told otherwise.

Accelerate's ``weights: auto`` is ``from_pretrained(device_map="auto")``: transformers'
``_get_device_map`` calls ``get_balanced_memory`` for every string map but ``"sequential"``, then
``infer_auto_device_map`` (huggingface/transformers src/transformers/integrations/accelerate.py at
0086c243183268c0f47eaaf44bb8fb0830eff4a6). The map is built as huggingface/accelerate
src/accelerate/utils/modeling.py at 16cb6eb80dd9aa8b4df1a63ef57863e455d53b83 builds it:

- ``get_max_memory``: each GPU's free memory (here: its whole memory) and the available host
  memory; a ``max_memory`` given by the user names the only devices used.
- ``get_balanced_memory``: with one GPU and no user ``max_memory``, 90% of it ("10% for the
  buffer"); with several, every GPU but the last holds at most total // n plus 1.25 x the largest
  of the first no-split block (the first decoder layer: ``no_split_module_classes``) and the mean
  leaf module, and the last GPU keeps all of its memory.
- ``infer_auto_device_map``: the embedding, the decoder layers (never split) and the head, in
  order, fill GPU 0, 1, ..., then ``cpu``, then ``disk``; GPU 0 and ``cpu`` (the main devices)
  keep room for the largest layer still to place, so that an offloaded layer can be brought in.

``dispatch_model`` (big_modeling.py, same commit) runs a layer offloaded to ``cpu`` or ``disk`` on
the main device, GPU 0 (``execution_device``), copying its weights in before it runs
(``AlignDevicesHook`` with ``offload=True``); a change of execution device hands the hidden state

Several GPUs: Accelerate runs the layers in sequence, so a token takes one GPU's time for every
layer plus one hand-over of the hidden state per boundary, a GPU-to-GPU copy
(``transfer.peer_time``: the link's peer figures where given, else staged through host memory).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
from msgspec import UnsetType

from kvoffload.engines.layer_streaming import PINNED, TIER, copies_pinned
from kvoffload.engines.spec import EngineSpec
from kvoffload.inputs.errors import FieldError, InputError
from kvoffload.inputs.hardware import System
from kvoffload.inputs.models import Model
from kvoffload.inputs.precision import WeightFormat
from kvoffload.inputs.text import Strict
from kvoffload.inputs.units import Dim, UnitError, format_bytes, parse_quantity
from kvoffload.model import decode, kv
from kvoffload.model.prediction import Prediction, Scenario, predict_setup
from kvoffload.model.transfer import peer_time


def _size(v: str) -> float:
    """Return the bytes a size such as '20 GiB' gives; ValueError when it is not one."""
    try:
        value = parse_quantity(v, Dim.BYTES)
    except UnitError as exc:
        raise ValueError(str(exc)) from None
    if value < 0:
        raise ValueError(f"{v!r} is negative")
    return value


class MaxMemory(Strict):
    """Accelerate's ``max_memory``: a size per GPU (each one) and for host memory, as written."""

    gpu: str | None = None
    cpu: str | None = None

    def __post_init__(self) -> None:
        """Check that each limit given is a size."""
        super().__post_init__()
        for name in ("gpu", "cpu"):
            text = getattr(self, name)
            if text is not None:
                try:
                    _size(text)
                except ValueError as exc:
                    raise FieldError(name, str(exc)) from None

    @property
    def gpu_bytes(self) -> float | None:
        """Return each GPU's limit in bytes, or None when not given."""
        return None if self.gpu is None else _size(self.gpu)

    @property
    def cpu_bytes(self) -> float | None:
        """Return host memory's limit in bytes, or None when not given."""
        return None if self.cpu is None else _size(self.cpu)


class Options(Strict):
    """HF Accelerate's options (device_map offload, or ``auto``)."""

    weights: Literal["gpu", "cpu", "disk", "auto"] = "cpu"
    max_memory: MaxMemory | None = None
    pinned_given: bool | UnsetType = PINNED

    def __post_init__(self) -> None:
        """Check that ``max_memory`` comes only with ``weights: auto``."""
        super().__post_init__()
        if self.max_memory is not None and self.weights != "auto":
            raise ValueError("max_memory applies only with weights: auto")

    @property
    def pinned(self) -> bool:
        """Return the ``pinned`` option: False unless the file says true."""
        return self.pinned_given is True


# -- GPU to GPU -----------------------------------------------------------------------------------
def _activation_bytes(fmt: WeightFormat) -> int:
    """Return the bytes of one activation value: the model's dtype (fp32 or 16-bit)."""
    return 4 if fmt is WeightFormat.FP32 else 2


# -- Accelerate's auto device map -------------------------------------------------------------
Device = int | str  # a GPU index, "cpu" or "disk"


@dataclass(frozen=True)
class DeviceMap:
    """Where Accelerate put each unit: the embedding, every decoder layer, the head (in order)."""

    sizes: tuple[float, ...]  # bytes of each unit
    step_bytes: tuple[float, ...]  # bytes of each unit a decode step reads
    devices: tuple[Device, ...]
    max_memory: dict[Device, float]

    @property
    def execution(self) -> tuple[int, ...]:
        """Return the GPU each unit runs on: its own, or GPU 0 (the main device) if offloaded."""
        return tuple(d if isinstance(d, int) else 0 for d in self.devices)

    def hand_overs(self) -> tuple[int, bool]:
        """Return (changes of GPU along the layers, whether the logits go back to the input's)."""
        ex = self.execution
        return sum(a != b for a, b in itertools.pairwise(ex)), ex[-1] != ex[0]

    def bytes_on(self, tier: str) -> float:
        """Return the bytes held by 'gpu' (all GPUs), 'cpu' or 'disk'."""
        return float(
            sum(s for s, d in zip(self.sizes, self.devices, strict=True) if _tier(d) == tier)
        )

    def step_share(self) -> decode.Split:
        """Return the shares of a step's weight bytes on the GPUs, in host memory and on disk."""
        total = sum(self.step_bytes) or 1.0
        by = {t: 0.0 for t in ("gpu", "cpu", "disk")}
        for s, d in zip(self.step_bytes, self.devices, strict=True):
            by[_tier(d)] += s
        return decode.Split(by["gpu"] / total, by["cpu"] / total, by["disk"] / total)

    def largest_offloaded(self) -> float:
        """Return the bytes of the largest unit that is copied in before it runs (0: none)."""
        return max(
            (s for s, d in zip(self.sizes, self.devices, strict=True) if _tier(d) != "gpu"),
            default=0.0,
        )

    def settings(self, n_gpus: int) -> dict[str, Any]:
        """Return the layer counts per GPU, host memory and disk (decoder layers only)."""
        layers = self.devices[1:-1]
        return {
            "layers_per_gpu": [sum(d == i for d in layers) for i in range(n_gpus)],
            "layers_on_cpu": sum(d == "cpu" for d in layers),
            "layers_on_disk": sum(d == "disk" for d in layers),
            "embedding_on": _name(self.devices[0]),
            "head_on": _name(self.devices[-1]),
            "max_memory_bytes": {_name(k): v for k, v in self.max_memory.items()},
        }


def _tier(device: Device) -> str:
    return "gpu" if isinstance(device, int) else device


def _name(device: Device) -> str:
    return f"gpu{device}" if isinstance(device, int) else device


def units(model: Model, fmt: WeightFormat) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Return Accelerate's placement units in order, (bytes, bytes a step reads): the embedding,
    each decoder layer, the head (final norm and lm_head; tied to the embedding, it goes there)."""
    wb = model.weight_bytes(fmt)
    layers = [float(x) for x in wb.per_layer]
    sizes = (float(wb.embedding), *layers, float(wb.output))
    # a step reads one row of an untied embedding table; a tied one is the lm_head, read whole
    reads = (float(wb.embedding) if model.tie_embeddings else 0.0, *layers, float(wb.output))
    return sizes, reads


def balanced_memory(
    system: System, sizes: tuple[float, ...], user: MaxMemory | None
) -> dict[Device, float]:
    """Return the per-device limits ``get_balanced_memory`` gives ``infer_auto_device_map``."""
    n = system.gpu.count
    if user is None:
        mm: dict[Device, float] = {i: system.gpu.memory.value for i in range(n)}
        mm["cpu"] = system.host_memory
    else:  # get_max_memory keeps only the devices the user names
        gpu, cpu = user.gpu_bytes, user.cpu_bytes
        mm = {i: gpu for i in range(n)} if gpu is not None else {}
        if cpu is not None:
            mm["cpu"] = cpu
    gpus = [k for k in mm if isinstance(k, int) and mm[k] > 0]
    if len(gpus) == 1 and user is None:
        mm[gpus[0]] *= 0.9  # "90% is a good compromise"
    elif len(gpus) > 1:
        total = sum(sizes)
        no_split = sizes[1] if len(sizes) > 2 else 0.0  # the first decoder layer
        # a leaf module is one matrix or norm; their mean is below a decoder layer's size
        buffer = int(1.25 * no_split)
        per_gpu = total // len(gpus) + buffer
        for i in gpus[:-1]:
            mm[i] = min(per_gpu, mm[i])
    return mm


def infer_auto_device_map(
    sizes: tuple[float, ...], max_memory: dict[Device, float]
) -> list[Device]:
    """Return the device of each unit, filling GPUs in order, then 'cpu', then 'disk'."""
    gpus = [k for k in max_memory if isinstance(k, int)]
    devices: list[Device] = [*gpus, *(["cpu"] if "cpu" in max_memory else []), "disk"]
    main = {gpus[0], "cpu"} if gpus else {"cpu"}

    def largest(items: list[tuple[int, float]]) -> tuple[float, list[int]]:
        top = max((s for _, s in items), default=0.0)
        return top, [i for i, s in items if s == top]

    queue = list(enumerate(sizes))
    max_size, max_names = largest(queue)
    used = dict.fromkeys(devices, 0.0)
    out: list[Device] = ["disk"] * len(sizes)
    current = 0
    while queue:
        i, size = queue.pop(0)
        max_names = [j for j in max_names if j != i]
        if not max_names:  # the largest layers are placed: the next largest is kept room for
            max_size, max_names = largest(queue)
        device = devices[current]
        cap = None if device == "disk" else max_memory[device]
        if cap is not None and device in main:
            cap -= max_size
        if cap is None or used[device] + size <= cap:
            used[device] += size
            out[i] = device
            continue
        current += 1
        queue.insert(0, (i, size))
    return out


def device_map(sc: Scenario) -> DeviceMap:
    """Return where Accelerate puts the weights for the scenario's ``weights`` option."""
    o = sc.options
    sizes, reads = units(sc.model, sc.setup.weights)
    n = sc.system.gpu.count
    if o.weights == "auto":
        mm = balanced_memory(sc.system, sizes, o.max_memory)
        devices = infer_auto_device_map(sizes, mm)
    elif o.weights == "gpu":  # every layer on the GPUs, split in sequence as "auto" would
        mm = balanced_memory(sc.system, sizes, None) if n > 1 else {0: sc.system.gpu.memory.value}
        mm[n - 1] = float("inf")
        mm.pop("cpu", None)
        devices = infer_auto_device_map(sizes, mm)
    else:  # device_map={"": "cpu"} or "disk": every layer copied in and run on GPU 0
        mm = {}
        devices = [o.weights] * len(sizes)
    if o.weights == "auto" and not any(isinstance(d, int) for d in devices):
        raise InputError(
            "the auto device map puts no layer on a GPU (Accelerate would run the model on "
            "the CPU); give max_memory a gpu size that holds the largest layer",
            field="options.max_memory",
        )
    return DeviceMap(tuple(sizes), tuple(reads), tuple(devices), mm)


# -- the engine -------------------------------------------------------------------------------
def predict(sc: Scenario) -> Prediction:
    """Return HF Accelerate's prediction."""
    o = sc.options
    system = sc.system
    n = system.gpu.count
    dm = device_map(sc)
    auto = o.weights == "auto"
    weights = dm.step_share() if auto else TIER[o.weights]
    placement = decode.Placement(weights=weights, overlap="none", pinned=copies_pinned(sc))
    setup = replace(sc.setup, placement=placement)
    pred = predict_setup(sc, setup)
    mem = pred.memory
    if auto:  # whole units per tier, and room on the GPU for the largest offloaded one
        final = sc.prompt + sc.generate
        kv_all = float(kv.batch_bytes(sc.model, final, sc.batch, sc.setup.kv))
        staging = dm.largest_offloaded()
        mem = decode.Memory(
            gpu=np.asarray(dm.bytes_on("gpu") + kv_all + staging),
            cpu=np.asarray(dm.bytes_on("cpu")),
            disk=np.asarray(dm.bytes_on("disk")),
            staging=np.asarray(staging),
        )
    # hand-overs between GPUs: the hidden state per boundary, the logits back to the input's GPU
    boundaries, logits_back = dm.hand_overs()
    act = _activation_bytes(sc.setup.weights)
    hidden = sc.batch * sc.model.hidden * act
    logits = sc.batch * sc.model.vocab * act if logits_back else 0.0
    step_extra = float(boundaries * peer_time(system, hidden) + peer_time(system, logits))
    ttft_extra = float(
        boundaries * peer_time(system, hidden * sc.prompt) + peer_time(system, logits)
    )
    streams = dict(pred.streams_s)
    streams["h2d"] += step_extra
    what = {
        "gpu": "weights on the GPU"
        + (f"s, layers split over {n} GPUs in sequence" if n > 1 else ""),
        "cpu": "weights copied in from host memory before each layer runs",
        "disk": "weights copied in from disk before each layer runs",
        "auto": _describe_auto(dm, n),
    }[o.weights]
    settings: dict[str, Any] = {"weights": o.weights, "kv_offload": False}
    settings |= dm.settings(n) | {"gpu_hand_overs_per_step": boundaries + int(logits_back)}
    return replace(
        pred,
        tpot_s=pred.tpot_s + step_extra,
        ttft_s=pred.ttft_s + ttft_extra,
        streams_s=streams,
        memory=mem,
        by_overlap_s={},
        settings=settings,
        policy=f"{what} ({'pinned' if placement.pinned else 'pageable'})",
    )


def _describe_auto(dm: DeviceMap, n: int) -> str:
    s = dm.settings(n)
    gpus = " + ".join(str(c) for c in s["layers_per_gpu"])
    return (
        f'device_map="auto": {gpus} layers on the GPU{"s" if n > 1 else ""}, '
        f"{s['layers_on_cpu']} in host memory, {s['layers_on_disk']} on disk "
        f"({format_bytes(dm.bytes_on('cpu') + dm.bytes_on('disk'))} copied in before each layer runs)"
    )


ENGINE = EngineSpec(
    name="hf-accelerate",
    options=Options,
    predict=predict,
    placement_option="options.weights (gpu, cpu or disk)",
    pin_option="pinned",
    refuses={
        "attention": "Accelerate attends on the GPU and has no option to attend on the CPU; "
        "use engine: generic to model CPU attention",
        "overlap": "Accelerate copies each layer in before it runs (none) and has no "
        "overlap option; use engine: generic to compare overlap modes",
    },
    routing_ignored=((), ""),
)
