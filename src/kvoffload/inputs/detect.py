"""A profile of this machine: what was detected, over the closest catalog parts for the rest."""

from __future__ import annotations

import math
import re
import socket
from typing import Any

from kvoffload.inputs import catalog
from kvoffload.inputs.probe import GpuReading, Reading, clean_name, read_machine

DETECT = "detect"  # the hardware id that means "this machine"
SOURCE = "kvoffload-detect"
FALLBACK_SYSTEM = "rtx-4090-desktop"  # parts for what could not be detected at all
# the GPU part's name when none was read: its figures are a catalog GPU's, a stand-in
NO_GPU = "no GPU detected (a placeholder with the figures of {name})"
# testbed hosts described by one published setup, not machines a reader owns
_NOT_CHOSEN_HOSTS = frozenset({"article-ddr5", "gcp-t4-host", "lambda-a6000-host"})
_STRICT = frozenset({"ti", "super", "ada"})  # a different chip when one name has it, the other not
_FORM = frozenset({"pcie", "sxm", "nvl"})  # the same chip in another form: a penalty only
_FAMILIES = frozenset({"epyc", "xeon", "threadripper", "ryzen", "core", "grace"})
_NOT_MODEL = re.compile(r"^(\d+gb|hbm\d\w*|gddr\d\w*)$")


def _tokens(name: str) -> list[str]:
    """Return a GPU name's tokens: lowercase, 'sxm4'/'sxm5' as 'sxm', an H100 'HBM3' as SXM."""
    words = re.findall(r"[a-z0-9]+", name.lower())
    out = ["sxm" if re.fullmatch(r"sxm\d?", w) else w for w in words]
    if "hbm3" in out and "pcie" not in out and "nvl" not in out:
        out.append("sxm")  # nvidia-smi calls the SXM5 H100 "H100 80GB HBM3"
    return out


def _model_tokens(tokens: list[str]) -> set[str]:
    """Return the tokens that name a chip: those holding a digit, memory sizes and types aside."""
    return {t for t in tokens if re.search(r"\d", t) and not _NOT_MODEL.match(t)}


def _mib(figure: Any) -> float:
    """Return a catalog memory figure in MiB."""
    text = str(figure["value"] if isinstance(figure, dict) else figure)
    number, unit = text.split()
    return float(number) * {"GiB": 1024, "GB": 1e9 / 2**20, "TiB": 2**20}[unit]


def _distance(a: float, b: float) -> float:
    """Return how far apart two positive sizes are, as the magnitude of their log ratio."""
    return abs(math.log(a / b))


def match_gpu(name: str, memory_mib: float, table: dict[str, dict]) -> tuple[str, str]:
    """Return (catalog GPU id, note): by name, the closest memory among equals; else by memory."""
    tokens = _tokens(name)
    model = _model_tokens(tokens)
    scored = []
    for ident, part in table.items():
        theirs = _tokens(str(part.get("name", "")))
        if not model or not model <= _model_tokens(theirs):
            continue
        if (_STRICT & set(tokens)) != (_STRICT & set(theirs)):
            continue
        form = len((_FORM & set(tokens)) ^ (_FORM & set(theirs)))
        scored.append((form, _distance(memory_mib, _mib(part["memory"])), ident))
    if scored:
        form, far, ident = min(scored)
        note = f"GPU {name!r} matched catalog part {ident} by name"
        if form:
            note += " (its form factor, PCIe or SXM, is not in one of the names)"
        if far > math.log(1.1):
            note += "; its memory differs from the part's by more than 10%"
        return ident, note
    ident = min(table, key=lambda i: (_distance(memory_mib, _mib(table[i]["memory"])), i))
    note = (
        f"GPU {name!r} is not in the catalog: its rates are those of {ident}, "
        "the catalog GPU closest in memory, and are likely wrong"
    )
    return ident, note


def _host_numbers(part: dict) -> tuple[float | None, int | None, str | None]:
    """Return a catalog host's peak DRAM rate (GB/s), cores and DDR type (from its name)."""
    peak = part.get("memory_bandwidth_peak")
    rate = None
    if isinstance(peak, dict):
        number, unit = str(peak["value"]).split()
        rate = float(number) * {"GB/s": 1.0, "TB/s": 1000.0}.get(unit, math.nan)
    kind = re.search(r"\b(LP)?DDR\d", str(part.get("name", "")))
    return rate, part.get("cores"), kind.group(0) if kind else None


def match_host(reading: Reading, table: dict[str, dict]) -> tuple[str, str]:
    """Return (catalog host id, note): the CPU model's number in the name, then DRAM and cores."""
    cpu, mem = reading.cpu, reading.memory
    model = set(re.findall(r"[a-z]*\d{3,}[a-z]*", (cpu.model or "").lower()))
    family = _FAMILIES & set(re.findall(r"[a-z]+", (cpu.model or "").lower()))
    peak = mem.dimms * mem.speed_mts * 8 / 1000 if mem.dimms and mem.speed_mts else None
    scored = []
    for ident, part in table.items():
        if ident in _NOT_CHOSEN_HOSTS:
            continue
        rate, cores, kind = _host_numbers(part)
        theirs = set(re.findall(r"[a-z]*\d{3,}[a-z]*", str(part.get("name", "")).lower()))
        words = set(re.findall(r"[a-z]+", str(part.get("name", "")).lower()))
        score = 0.0 if model & theirs else 1.5 if family & words else 3.0
        if peak and rate and math.isfinite(rate):
            score += _distance(peak, rate)
        if cpu.cores and cores:
            score += 0.5 * _distance(cpu.cores, cores)
        if mem.dimm_type and kind and mem.dimm_type != kind:
            score += 0.5
        if cpu.sockets and cpu.sockets != part.get("sockets", 1):
            score += 1.0  # a socket's DRAM and cores do not come from another socket count
        scored.append((score, ident))
    score, ident = min(scored)
    how = "by its CPU model" if score < 1.5 else "by CPU family, memory channels, speed and cores"
    return ident, f"host matched catalog part {ident} {how}"


def match_link(gpu: GpuReading | None, gpu_part: dict) -> tuple[str, str]:
    """Return (catalog link id, note): the detected PCIe generation and width, else the GPU's."""
    links = catalog.parts("link")
    interface = str(gpu_part.get("interface", ""))
    if "NVLink-C2C" in interface:
        return "nvlink-c2c", "link from the GPU part: NVLink-C2C"
    gen, width, how = (gpu.pcie_gen, gpu.pcie_width, "detected") if gpu else (None, None, "")
    if gen is None:
        m = re.search(r"PCIe (\d)\.0 x(\d+)", interface)
        gen, width, how = (int(m.group(1)), int(m.group(2)), "the GPU part's") if m else (4, 16, "")
    ident = f"pcie{gen}-x{width}"
    if ident in links:
        return ident, f"link: {how} PCIe {gen}.0 x{width}"
    ident = f"pcie{min(max(gen, 3), 6)}-x16"
    return ident, f"link: {how} PCIe {gen}.0 x{width} is not in the catalog; {ident} is used"


def _from_catalog(part: dict, ident: str) -> dict:
    """Return a catalog part's fields, each figure's note saying which catalog part it is from."""
    out: dict[str, Any] = {}
    for key, value in part.items():
        if isinstance(value, dict) and "value" in value:
            note = f"from catalog part {ident}" + (
                f": {value['note']}" if value.get("note") else ""
            )
            value = {**value, "note": note[:2000]}
        out[key] = value
    return out


def _detected(value: str, tool: str, what: str) -> dict[str, str]:
    """Return a figure read on this machine, its note naming the tool."""
    return {"value": value, "kind": "spec", "source": SOURCE, "note": f"detected: {what} ({tool})"}


def _gpu_part(reading: Reading, notes: list[str]) -> tuple[dict, GpuReading | None, dict]:
    """Return (the GPU part, the GPU read, its catalog part) for the profile."""
    gpus = catalog.parts("gpu")
    if not reading.gpus:
        ident = catalog.systems()[FALLBACK_SYSTEM]["gpu"]
        notes.append(f"no GPU detected: the GPU is catalog part {ident}, a placeholder")
        part = _from_catalog(gpus[ident], ident)
        part["name"] = NO_GPU.format(name=gpus[ident]["name"])[:120]
        return part, None, gpus[ident]
    first = reading.gpus[0]
    part, ident = _detected_gpu(first, reading, gpus, notes)
    return part, first, gpus[ident]


def _detected_gpu(
    one: GpuReading, reading: Reading, gpus: dict, notes: list[str]
) -> tuple[dict, str]:
    """Return the GPU part of every GPU read with ``one``'s name, and its catalog id."""
    ident, note = match_gpu(one.name, one.memory_mib, gpus)
    notes.append(note)
    same = [g for g in reading.gpus if g.name == one.name]
    part = _from_catalog(gpus[ident], ident)
    part["name"] = one.name
    part["memory"] = _detected(f"{one.memory_mib} MiB", one.tool, "memory.total")
    if len(same) > 1:
        part["count"] = len(same)
    return part, ident


def _more_gpus(reading: Reading, notes: list[str]) -> list[dict]:
    """Return the parts of the GPUs of other models than the first one read (a mixed rig)."""
    gpus = catalog.parts("gpu")
    names = list(dict.fromkeys(g.name for g in reading.gpus))[1:]
    firsts = [next(g for g in reading.gpus if g.name == name) for name in names]
    return [_detected_gpu(one, reading, gpus, notes)[0] for one in firsts]


def _host_part(reading: Reading, notes: list[str]) -> dict:
    """Return the host part: the closest catalog host with the detected memory, cores and DIMMs."""
    hosts = catalog.parts("host")
    ident, note = match_host(reading, hosts)
    notes.append(note)
    base = hosts[ident]
    part = _from_catalog(base, ident)
    cpu, mem = reading.cpu, reading.memory
    said = [cpu.model or "CPU model not read"]
    if cpu.cores:
        said.append(f"{cpu.cores} cores")
    if cpu.threads:
        said.append(f"{cpu.threads} threads")
    part["name"] = ", ".join(said)[:120]
    if cpu.amx is not None:  # read from the CPU's flags, not the matched part's
        part["amx"] = cpu.amx
    if mem.total_bytes:
        part["memory"] = _detected(f"{mem.total_bytes} B", mem.tool, "MemTotal, what the OS sees")
    if cpu.cores and cpu.cores != base.get("cores"):
        part["cores"] = cpu.cores
        part.pop("performance_cores", None)
        part.pop("threads", None)
        flops = base["flops"]
        number, unit = str(flops["value"]).split()
        part["flops"] = {
            "value": f"{float(number) * cpu.cores / base['cores']:.6g} {unit}",
            "kind": "assumed",
            "source": flops.get("source", "kvoffload-assumption"),
            "note": f"catalog part {ident}'s rate ({flops['value']}, {base['cores']} cores) "
            f"scaled to the {cpu.cores} detected cores",
        }
    if cpu.sockets and cpu.sockets != base.get("sockets", 1):
        _take_sockets(part, base, ident, cpu.sockets)
    if mem.dimms and mem.speed_mts:
        peak = mem.dimms * mem.speed_mts * 8 / 1000
        what = f"{mem.dimms} DIMMs (one per channel assumed) x {mem.speed_mts} MT/s x 8 B"
        part["memory_bandwidth_peak"] = _detected(f"{peak:.6g} GB/s", mem.dimm_tool, what)
        bw, old = base["memory_bandwidth"], _host_numbers(base)[0]
        if old:
            number, unit = str(bw["value"]).split()
            share = float(number) * (1000.0 if unit == "TB/s" else 1.0) / old
            part["memory_bandwidth"] = {
                "value": f"{peak * min(share, 1.0):.4g} GB/s",
                "kind": "assumed",
                "source": bw.get("source", "kvoffload-assumption"),
                "note": f"the detected peak at catalog part {ident}'s share of its peak "
                f"({share:.0%}); measure it with kvoffload measure",
            }
    return part


def _take_sockets(part: dict, base: dict, ident: str, sockets: int) -> None:
    """Give ``part`` the detected socket count: the base's DRAM rates per socket times it, and no
    link between sockets on one."""
    was = base.get("sockets", 1)
    part["sockets"] = sockets
    for name in ("memory_bandwidth", "memory_bandwidth_peak"):
        figure = base.get(name)
        if not isinstance(figure, dict):
            continue
        number, unit = str(figure["value"]).split()
        part[name] = {
            "value": f"{float(number) * sockets / was:.6g} {unit}",
            "kind": "assumed" if name == "memory_bandwidth" else figure.get("kind", "assumed"),
            "source": figure.get("source", "kvoffload-assumption"),
            "note": f"catalog part {ident}'s {figure['value']} over its {was} sockets, times the "
            f"{sockets} detected (physical id in /proc/cpuinfo, or lscpu)",
        }
    if sockets == 1:
        part.pop("cross_socket_bandwidth", None)


def placeholder_gpu(name: str) -> str | None:
    """Return the catalog GPU standing in, from a GPU part's ``name``, where ``hardware detect``
    read none (None: a GPU)."""
    head, tail = NO_GPU.split("{name}")
    if name.startswith(head) and name.endswith(tail):
        return name[len(head) : len(name) - len(tail)]
    return None


def detected_profile(reading: Reading, host: str = "this-machine") -> dict[str, Any]:
    """Return the profile mapping of a machine read into ``reading`` (pure: no tool is run)."""
    notes: list[str] = []
    gpu, first, gpu_base = _gpu_part(reading, notes)
    more = _more_gpus(reading, notes)
    link_id, link_note = match_link(first, gpu_base)
    notes.append(link_note)
    host_part = _host_part(reading, notes)
    links = catalog.parts("link")
    storage_id = catalog.systems()[FALLBACK_SYSTEM]["storage"]
    notes.append(f"storage not detected: catalog part {storage_id}")
    host = clean_name(host) or "this-machine"
    ident = "detected-" + re.sub(r"[^a-z0-9.]+", "-", host.lower())
    read = [f"GPU ({first.tool})" if first else None]
    read += [f"CPU ({reading.cpu.tool})" if reading.cpu.model else None]
    read += [f"memory size ({reading.memory.tool})" if reading.memory.total_bytes else None]
    read += [f"DIMMs ({reading.memory.dimm_tool})" if reading.memory.dimm_tool else None]
    detected = ", ".join(r for r in read if r) or "nothing"
    description = (
        f"Detected by kvoffload hardware detect. Read on this machine: {detected}. "
        "Measured: nothing (run kvoffload measure). From the catalog: everything else, "
        f"each figure's note naming its part. {'; '.join(notes)}."
    )
    if reading.skipped:
        description += f" Skipped: {'; '.join(reading.skipped)}."
    profile = {
        "id": ident[:60].strip("-.") or "detected",
        "name": f"{host[:60]}, detected by kvoffload",
        "description": description[:2000],
        "gpu": gpu,
        "link": _from_catalog(links[link_id], link_id),
        "host": host_part,
        "storage": storage_id,
    }
    if more:  # GPUs of other models, in the order the tool listed them (llama.cpp runs them)
        profile["more_gpus"] = more
    return profile


def detect() -> dict[str, Any]:
    """Read this machine and return its profile mapping."""
    host = socket.gethostname().split(".")[0] or "this-machine"
    return detected_profile(read_machine(), host)
