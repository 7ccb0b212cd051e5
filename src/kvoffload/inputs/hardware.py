"""System profiles: the schema of each part, composition of catalog parts with overrides."""

from __future__ import annotations

import difflib
import re
from functools import cache
from pathlib import Path
from typing import Annotated, Any, ClassVar

import msgspec
from msgspec import Meta

from kvoffload.inputs import catalog, detect
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.figures import Figure, parse_figures
from kvoffload.inputs.files import check_path, display_name, load_mapping, stat_mode
from kvoffload.inputs.measurements import build_measurements
from kvoffload.inputs.ranges import (
    Capacity,
    Count,
    CrossSocketBandwidth,
    DeviceBandwidth,
    DiskCapacity,
    Efficiency,
    FlopRate,
    Iops,
    Latency,
    LinkBandwidth,
    ReservedMemory,
)
from kvoffload.inputs.text import (
    NAME_CHARS,
    NOTE_CHARS,
    PlainName,
    PlainText,
    Strict,
    plain_text,
    unknown_field,
    validate,
)
from kvoffload.inputs.units import format_quantity


class Part(Strict):
    """A hardware part as a profile gives it: text stripped, figures read by ``build_part``."""

    strip_text: ClassVar[bool] = True


class Gpu(Part, kw_only=True):
    """An accelerator: memory, memory bandwidth and dense tensor FLOP rates."""

    name: PlainName
    interface: PlainName | None = None
    memory: Capacity
    memory_bandwidth: DeviceBandwidth
    memory_bandwidth_achievable: DeviceBandwidth | None = None
    flops_bf16: FlopRate
    flops_fp8: FlopRate | None = None
    flops_int8: FlopRate | None = None
    compute_efficiency: Efficiency | None = None  # share of the dense peak that GEMMs reach
    # the rate at which decode attention reads the KV cache, where measured below the memory's
    attention_bandwidth: DeviceBandwidth | None = None
    # the 16-bit FLOP/s prefill's causal attention reaches (a FlashAttention-class kernel over a
    # long prompt), where measured; without it attention runs at the matmuls' rate. Not held
    # below flops_bf16: a profile may give the dense rate reached there (the calculator does)
    attention_flops: FlopRate | None = None
    count: Annotated[int, Meta(ge=1, le=64)] = 1

    def __post_init__(self) -> None:
        """Check the text, then that achievable rates stay below the peak."""
        super().__post_init__()
        _not_above(self, "memory_bandwidth_achievable", "memory_bandwidth", slack=1.02)
        _not_above(self, "attention_bandwidth", "memory_bandwidth", slack=1.02)

    @property
    def streaming_bandwidth(self) -> float:
        """Return the rate (B/s) at which kernels stream GPU memory: measured if known, else spec."""
        return (self.memory_bandwidth_achievable or self.memory_bandwidth).value

    @property
    def attention_rate(self) -> float:
        """Return the rate (B/s) at which decode attention reads the KV cache."""
        return (
            self.attention_bandwidth.value if self.attention_bandwidth else self.streaming_bandwidth
        )

    @property
    def compute_rate(self) -> float:
        """Return the dense bf16 rate GEMMs reach (FLOP/s): peak x compute_efficiency."""
        eff = self.compute_efficiency.value if self.compute_efficiency else 1.0
        return self.flops_bf16.value * eff


class Link(Part, kw_only=True):
    """The host-GPU link: raw and achievable per-direction rates, per-transfer latency; where the
    GPUs copy to each other directly, that rate and latency."""

    name: PlainName
    raw_bandwidth: LinkBandwidth
    h2d_bandwidth: LinkBandwidth
    d2h_bandwidth: LinkBandwidth
    pageable_bandwidth: LinkBandwidth | None = None
    latency: Latency
    # GPU-to-GPU copies where the GPUs reach each other directly (P2P over PCIe, an NVLink
    # bridge or switch), per direction, and their fixed cost; absent: a copy between GPUs is
    # staged through host memory over this link (GeForce cards ship with P2P off)
    peer_bandwidth: LinkBandwidth | None = None
    peer_latency: Latency | None = None

    def __post_init__(self) -> None:
        """Check the text, then that achievable rates stay below the raw rate."""
        super().__post_init__()
        for name in ("h2d_bandwidth", "d2h_bandwidth", "pageable_bandwidth"):
            _not_above(self, name, "raw_bandwidth")
        _not_above(self, "pageable_bandwidth", "h2d_bandwidth")
        if self.peer_latency is not None and self.peer_bandwidth is None:
            raise InputError(
                "peer_latency needs peer_bandwidth (GPU-to-GPU copies without one are staged "
                "through host memory at the link's own rates)",
                field="peer_latency",
            )


# What a host keeps from processes where its profile gives no ``memory_reserved`` (assumed): the
# kernel's page descriptors (Linux's struct page, 64 B per 4 KiB page: 1/64 of the memory, never
# free) plus 4 GiB for the OS, its services and the page cache's floor (min_free_kbytes, the
# file pages of running programs); a 64 GB machine keeps 5 GB, a 1.5 TB one 28 GB.
RESERVED_BASE_BYTES = 4 * 2**30
RESERVED_SHARE = 1 / 64


class Host(Part, kw_only=True):
    """The CPU side: DRAM capacity and bandwidth, sockets, CPU FLOP rate."""

    name: PlainName
    memory: Capacity
    # the whole machine's achievable read rate: every socket reading its own DRAM
    memory_bandwidth: LinkBandwidth
    memory_bandwidth_peak: LinkBandwidth | None = None
    # host memory the OS keeps from processes; default: RESERVED_BASE_BYTES + RESERVED_SHARE
    memory_reserved: ReservedMemory | None = None
    flops: FlopRate
    # the rate attention over a cache in host memory reaches when PyTorch computes it on this CPU
    # (FlexGen's fitted cpu_flops), where measured: the generic step, FlexGen, ZeRO-Inference and
    # Accelerate attend at it; llama.cpp's and KTransformers' own kernels run at ``flops``
    attention_flops: FlopRate | None = None
    cores: Count | None = None  # every socket's
    # cores that run matmul threads at full speed (P-cores of a hybrid CPU); default: cores
    performance_cores: Count | None = None
    # threads CPU-side matmuls use (llama.cpp -t); default: the performance cores
    threads: Count | None = None
    # CPU sockets, each with its own DRAM (a NUMA node): memory and cores split evenly over them
    sockets: Annotated[int, Meta(ge=1, le=8)] = 1
    # the achievable rate at which one socket reads another's DRAM, per direction (UPI, xGMI)
    cross_socket_bandwidth: CrossSocketBandwidth | None = None
    # Intel AMX tiles (amx_tile, amx_int8 and amx_bf16 in /proc/cpuinfo: Xeon Sapphire Rapids and
    # later), which KTransformers' AMXInt8 / AMXBF16 kernels need; None: not stated
    amx: bool | None = None

    @property
    def matmul_threads(self) -> int | None:
        """Return the threads CPU-side matmuls run on: ``threads``, else the performance cores."""
        return self.threads or self.performance_cores or self.cores

    @property
    def attention_rate(self) -> float:
        """Return the FLOP/s of PyTorch's attention on this CPU: ``attention_flops``, else ``flops``."""
        return (self.attention_flops or self.flops).value

    @property
    def socket_bandwidth(self) -> float:
        """Return one socket's achievable read rate of its own DRAM (B/s)."""
        return self.memory_bandwidth.value / self.sockets

    @property
    def reserved_memory(self) -> float:
        """Return the bytes of host memory the OS keeps from processes: the figure, or the default."""
        if self.memory_reserved is not None:
            return self.memory_reserved.value
        return RESERVED_BASE_BYTES + RESERVED_SHARE * self.memory.value

    def __post_init__(self) -> None:
        """Check the text, that the achievable rate stays below the peak, and the socket link."""
        super().__post_init__()
        _not_above(self, "memory_bandwidth", "memory_bandwidth_peak")
        if self.sockets == 1 and self.cross_socket_bandwidth is not None:
            raise ValueError("cross_socket_bandwidth needs sockets: 2 or more")


class Storage(Part, kw_only=True):
    """An SSD or array: sequential rates, small-read latency and peak random-read IOPS."""

    name: PlainName
    read_bandwidth: LinkBandwidth
    write_bandwidth: LinkBandwidth
    read_latency: Latency
    random_read_iops: Iops | None = None
    capacity: DiskCapacity | None = None


PART_MODELS: dict[str, type[Part]] = {
    "gpu": Gpu,
    "link": Link,
    "host": Host,
    "storage": Storage,
}


def _not_above(part: Part, name: str, limit: str, slack: float = 1.0) -> None:
    a, b = getattr(part, name), getattr(part, limit)
    if a is not None and b is not None and a.value > b.value * slack:
        raise ValueError(
            f"{name} {format_quantity(a.value, a.dim)} exceeds {limit} "
            f"{format_quantity(b.value, b.dim)}"
        )


MAX_GPUS = 64  # every GPU of a machine, ``gpu`` and ``more_gpus`` together


class System(Strict, kw_only=True):
    """A whole machine: one GPU type (times count), other GPU models beside it (``more_gpus``,
    each times its count: a mixed rig), its link, the host and storage."""

    id: str
    name: PlainName
    description: PlainText = ""
    origin: str  # 'catalog' or the file it was read from
    gpu: Gpu
    link: Link
    host: Host
    storage: Storage
    more_gpus: tuple[Gpu, ...] = ()  # after gpu in device order (CUDA0 is gpu's first)
    # tables kept by `kvoffload measure`; reports read them, the model does not
    measurements: dict = msgspec.field(default_factory=dict)

    # -- capacity and rates: the one place the model reads them from ----------------------------
    @property
    def devices(self) -> tuple[Gpu, ...]:
        """Return every GPU in device order: ``gpu`` times its count, then each of ``more_gpus``."""
        return tuple(g for part in (self.gpu, *self.more_gpus) for g in [part] * part.count)

    @property
    def n_gpus(self) -> int:
        """Return how many GPUs the machine has, of every model."""
        return sum(part.count for part in (self.gpu, *self.more_gpus))

    @property
    def gpu_memory(self) -> float:
        """Return the GPU memory of the whole machine in bytes: every GPU's together."""
        return float(sum(part.memory.value * part.count for part in (self.gpu, *self.more_gpus)))

    @property
    def host_memory(self) -> float:
        """Return the host memory in bytes."""
        return self.host.memory.value

    @property
    def disk_capacity(self) -> float | None:
        """Return the storage capacity in bytes, or None when the profile does not bound it."""
        return self.storage.capacity.value if self.storage.capacity is not None else None

    @property
    def compute_rate(self) -> float:
        """Return one GPU's dense bf16 rate that GEMMs reach (FLOP/s): peak x compute_efficiency."""
        return self.gpu.compute_rate

    def link_rate(self, direction: str = "h2d", *, pinned: bool = True) -> float:
        """Return the link's achievable rate (B/s) for 'h2d' or 'd2h', pinned or pageable."""
        if direction not in ("h2d", "d2h"):
            raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
        link = self.link
        pinned_rate = (link.h2d_bandwidth if direction == "h2d" else link.d2h_bandwidth).value
        if pinned:
            return pinned_rate
        if link.pageable_bandwidth is None:
            raise InputError(
                "this profile gives no rate for pageable memory", field="link.pageable_bandwidth"
            )
        return min(link.pageable_bandwidth.value, pinned_rate)

    def copy_rate(self, direction: str = "h2d", *, pinned: bool = True) -> float:
        """Return the host<->GPU copy rate (B/s): the link or host DRAM, whichever is slower."""
        return min(self.link_rate(direction, pinned=pinned), self.host.memory_bandwidth.value)

    def parts(self) -> dict[str, Part]:
        """Return every part by its place in the profile: gpu, link, host, storage, more_gpus[i]."""
        out: dict[str, Part] = {kind: getattr(self, kind) for kind in catalog.PART_KINDS}
        out.update({f"more_gpus[{i}]": g for i, g in enumerate(self.more_gpus)})
        return out

    def figures(self) -> dict[str, Figure]:
        """Return every quantity as 'part.field' -> Figure (more GPUs as 'more_gpus[i].field')."""
        out: dict[str, Figure] = {}
        for kind, part in self.parts().items():
            for name in part.__struct_fields__:
                value = getattr(part, name)
                if isinstance(value, Figure):
                    out[f"{kind}.{name}"] = value
        return out

    def to_json(self) -> dict[str, Any]:
        """Return the resolved profile: every quantity with its kind and source."""
        registry = catalog.sources()
        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "origin": self.origin,
        }
        for kind in catalog.PART_KINDS:
            out[kind] = _part_json(getattr(self, kind), registry)
        if self.more_gpus:
            out["more_gpus"] = [_part_json(g, registry) for g in self.more_gpus]
        return out


def _part_json(part: Part, registry: dict) -> dict[str, Any]:
    """Return one part's fields: each figure with its kind and source."""
    entry: dict[str, Any] = {}
    for name in part.__struct_fields__:
        value = getattr(part, name)
        if isinstance(value, Figure):
            entry[name] = value.to_json(registry)
        elif value is not None:
            entry[name] = value
    return entry


_ID = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")
_SYSTEM_KEYS = {
    "id",
    "name",
    "description",
    "base",
    "measurements",
    "more_gpus",
    *catalog.PART_KINDS,
}


def build_part(kind: str, raw: Any, inherited: dict | None = None) -> Part:
    """Validate one part given as a catalog id, or a mapping with optional 'base' overrides."""
    table = catalog.parts(kind)
    if isinstance(raw, str):
        if raw not in table:
            raise catalog.unknown_id(kind, raw, table).within(field=kind)
        merged = dict(table[raw])
    elif isinstance(raw, dict):
        base = raw.get("base")
        if base is not None:
            if not isinstance(base, str) or base not in table:
                raise catalog.unknown_id(kind, str(base), table).within(field=f"{kind}.base")
            merged = {**table[base], **{k: v for k, v in raw.items() if k != "base"}}
        else:
            merged = {**(inherited or {}), **raw}
    else:
        raise InputError("must be a catalog id or a mapping of fields", field=kind)
    schema = PART_MODELS[kind]
    try:
        return validate(parse_figures(schema, merged), schema, unknown=unknown_field)
    except InputError as exc:
        raise exc.within(field=kind) from None


def _raw_part(kind: str, raw: Any) -> dict:
    """Return a part reference as a flat mapping of fields (for inheritance from a base)."""
    table = catalog.parts(kind)
    if isinstance(raw, str):
        return dict(table.get(raw, {}))
    if isinstance(raw, dict) and isinstance(raw.get("base"), str):
        return {**table.get(raw["base"], {}), **{k: v for k, v in raw.items() if k != "base"}}
    return dict(raw) if isinstance(raw, dict) else {}


def build_system(raw: Any, *, ident: str, origin: str) -> System:
    """Validate a whole profile mapping (parts by id or mapping, optional base system)."""
    if not isinstance(raw, dict):
        raise InputError("a profile must be a mapping")
    for key in raw:
        if key not in _SYSTEM_KEYS:
            close = difflib.get_close_matches(str(key), sorted(_SYSTEM_KEYS), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise InputError(
                f"unknown field; {hint}(fields: {', '.join(sorted(_SYSTEM_KEYS))})", field=str(key)
            )
    base_raw: dict = {}
    if "base" in raw:
        base_id = raw["base"]
        table = catalog.systems()
        if not isinstance(base_id, str) or base_id not in table:
            raise catalog.unknown_id("system", str(base_id), table).within(field="base")
        base_raw = table[base_id]
    sid = raw.get("id", ident)
    if not isinstance(sid, str) or not _ID.match(sid):
        raise InputError("must be lowercase letters, digits, '.' and '-'", field="id")
    for key, most in (("name", NAME_CHARS), ("description", NOTE_CHARS)):
        if key in raw:
            plain_text(raw[key], field=key, max_chars=most)
    built: dict[str, Any] = {}
    for kind in catalog.PART_KINDS:
        if kind in raw:
            inherited = _raw_part(kind, base_raw[kind]) if kind in base_raw else None
            built[kind] = build_part(kind, raw[kind], inherited)
        elif kind in base_raw:
            built[kind] = build_part(kind, base_raw[kind])
        else:
            raise InputError("required part is missing", field=kind)
    more = _more_gpus(raw.get("more_gpus", base_raw.get("more_gpus", [])), built["gpu"])
    measurements = raw.get("measurements", {})
    if not isinstance(measurements, dict):
        raise InputError("must be a mapping", field="measurements")
    name = (raw.get("name") or "").strip() or base_raw.get("name") or sid
    description = raw.get("description", base_raw.get("description", "")).strip()
    return System(
        id=sid,
        name=plain_text(name, field="name", max_chars=NAME_CHARS),
        description=plain_text(description, field="description", max_chars=NOTE_CHARS),
        origin=origin,
        measurements=build_measurements(measurements),
        more_gpus=more,
        **built,
    )


def _more_gpus(raw: Any, gpu: Gpu) -> tuple[Gpu, ...]:
    """Validate ``more_gpus``: a list of GPU parts (catalog ids or mappings), MAX_GPUS in all."""
    if not isinstance(raw, list):
        raise InputError("must be a list of GPUs (catalog ids or mappings)", field="more_gpus")
    if len(raw) > MAX_GPUS:
        raise InputError(f"lists more than {MAX_GPUS} GPUs", field="more_gpus")
    out = []
    for i, entry in enumerate(raw):
        try:
            out.append(build_part("gpu", entry))
        except InputError as exc:  # gpu.memory -> more_gpus[0].memory
            where = f"more_gpus[{i}]" + (exc.field or "").removeprefix("gpu")
            raise InputError(exc.problem, file=exc.file, field=where) from None
    total = gpu.count + sum(g.count for g in out)
    if total > MAX_GPUS:
        raise InputError(f"{total} GPUs in all, more than {MAX_GPUS}", field="more_gpus")
    return tuple(out)


def system_ids() -> list[str]:
    """Return the catalog's system profile ids."""
    return list(catalog.systems())


@cache
def _catalog_system(ident: str) -> System:
    """Return the catalog's profile ``ident``, built once per process (a System is frozen)."""
    try:
        return build_system(catalog.systems()[ident], ident=ident, origin="catalog")
    except InputError as exc:  # a broken catalog is a bug, but say where
        raise exc.within(file=f"catalog systems.yaml ({ident})") from None


def load_system(ref: str | Path | dict) -> System:
    """Return a System from a catalog id, ``detect`` (this machine), a profile file, or a mapping."""
    if isinstance(ref, dict):
        return build_system(ref, ident="inline", origin="inline")
    text = str(ref)
    if text == detect.DETECT:  # this machine, read now: `hardware: detect`, `--hardware detect`
        raw = detect.detect()
        return build_system(raw, ident=raw["id"], origin="detected by kvoffload hardware detect")
    table = catalog.systems()
    if text in table:
        return _catalog_system(text)
    try:
        path = Path(check_path(text))
    except InputError:  # too long to be a path, or a NUL: a path only when it looks like one
        if "/" in text or Path(text[-8:]).suffix.lower() in _PROFILE_SUFFIXES:
            raise
        raise catalog.unknown_id("system", text, table) from None
    if path.suffix.lower() in _PROFILE_SUFFIXES or stat_mode(path) is not None:
        raw = load_mapping(path)
        try:
            return build_system(raw, ident=_stem_id(path), origin=str(path))
        except InputError as exc:
            raise exc.within(file=display_name(str(path))) from None
    raise catalog.unknown_id("system", text, table)


_PROFILE_SUFFIXES = {".yaml", ".yml", ".json"}


def _stem_id(path: Path) -> str:
    stem = re.sub(r"[^a-z0-9.\-]+", "-", path.stem.lower()).strip("-")
    return stem or "profile"
