"""Reading this machine: GPU, CPU and memory from tools and /proc, each parser a pure function."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

TOOL_TIMEOUT_S = 10.0  # a tool that hangs (a wedged driver) is given up on, not waited for
MAX_TOOL_CHARS = 1_000_000  # more than any real output; the rest is ignored
MAX_GPUS = 64
NAME_MAX = 100
NVIDIA_SMI_QUERY = (
    "--query-gpu=name,memory.total,pcie.link.gen.max,pcie.link.width.max",
    "--format=csv,noheader,nounits",
)


@dataclass(frozen=True)
class GpuReading:
    """One GPU as a tool reported it: name, memory in MiB, PCIe generation and width."""

    name: str
    memory_mib: int
    pcie_gen: int | None
    pcie_width: int | None
    tool: str


@dataclass(frozen=True)
class CpuReading:
    """The CPU: model name, physical cores, hardware threads and sockets (None: not read)."""

    model: str | None = None
    cores: int | None = None
    threads: int | None = None
    sockets: int | None = None
    tool: str = ""
    amx: bool | None = None  # the flags name amx_tile (Intel AMX); None: no flags line read


@dataclass(frozen=True)
class MemoryReading:
    """Host memory: size in bytes, populated DIMMs (one per channel assumed), speed and type."""

    total_bytes: int | None = None
    dimms: int | None = None
    speed_mts: int | None = None
    dimm_type: str | None = None
    tool: str = ""
    dimm_tool: str = ""


@dataclass(frozen=True)
class Reading:
    """Everything read on this machine, and each tool skipped with its reason."""

    gpus: tuple[GpuReading, ...] = ()
    cpu: CpuReading = field(default_factory=CpuReading)
    memory: MemoryReading = field(default_factory=MemoryReading)
    skipped: tuple[str, ...] = ()


def clean_name(text: str) -> str | None:
    """Return a name as printable ASCII on one line, at most NAME_MAX characters; None if empty."""
    kept = "".join(c if " " <= c <= "~" else " " for c in text)
    name = " ".join(kept.split())[:NAME_MAX].strip()
    return name or None


def _int(text: str, lo: int, hi: int) -> int | None:
    """Return ``text`` as a whole number from lo to hi, else None (garbage and huge numbers)."""
    text = text.strip()
    if not re.fullmatch(r"\d{1,12}", text):
        return None
    value = int(text)
    return value if lo <= value <= hi else None


# -- parsers: text in, readings out; hostile text gives None or nothing, never an exception ---------


def parse_nvidia_smi(text: str) -> list[GpuReading]:
    """Return the GPUs of ``nvidia-smi --query-gpu=name,memory.total,pcie...`` CSV output."""
    gpus: list[GpuReading] = []
    for line in text[:MAX_TOOL_CHARS].splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 4:
            continue
        name = clean_name(cells[0])
        memory = _int(cells[1], 64, 2**24)  # MiB: 64 MiB to 16 TiB
        if name is None or memory is None:
            continue
        gen = _int(cells[2], 1, 7)
        width = _int(cells[3], 1, 32)
        gpus.append(GpuReading(name, memory, gen, width, "nvidia-smi"))
        if len(gpus) == MAX_GPUS:
            break
    return gpus


def _fields(text: str) -> list[tuple[str, str]]:
    """Return the 'key: value' pairs of a /proc or lscpu listing, keys lowercased."""
    pairs = []
    for line in text[:MAX_TOOL_CHARS].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            pairs.append((key.strip().lower(), value.strip()))
    return pairs


def parse_cpuinfo(text: str) -> CpuReading:
    """Return the CPU of /proc/cpuinfo: model, physical cores (socket, core) pairs, threads."""
    model = None
    threads = 0
    physical = core = None
    pairs: set[tuple[str, str]] = set()
    sockets: set[str] = set()
    amx = None
    for key, value in _fields(text):
        if key == "processor":
            threads += 1
            physical = core = None
        elif key == "model name" and model is None:
            model = clean_name(value)
        elif key == "physical id":
            physical = value
            sockets.add(value)
        elif key == "core id":
            core = value
        elif key == "flags" and amx is None:  # x86's feature flags
            amx = "amx_tile" in value.split()
        elif key == "features" and amx is None:  # an Arm CPU's: no AMX
            amx = False
        if physical is not None and core is not None:
            pairs.add((physical, core))
    cores = len(pairs) if pairs and len(pairs) <= threads else None
    return CpuReading(
        model=model,
        cores=cores if cores and cores <= 4096 else None,
        threads=threads if 0 < threads <= 65_536 else None,
        sockets=len(sockets) if 0 < len(sockets) <= 64 else None,
        tool="/proc/cpuinfo",
        amx=amx,
    )


def parse_lscpu(text: str) -> CpuReading:
    """Return the CPU of ``lscpu`` output: model, sockets x cores per socket, CPUs."""
    values = dict(reversed(_fields(text)))  # the first of a repeated key wins
    model = clean_name(values.get("model name", ""))
    sockets = _int(values.get("socket(s)", ""), 1, 64)
    per_socket = _int(values.get("core(s) per socket", ""), 1, 4096)
    threads = _int(values.get("cpu(s)", ""), 1, 65_536)
    cores = sockets * per_socket if sockets and per_socket else None
    if cores is not None and (cores > 4096 or (threads is not None and cores > threads)):
        cores = None
    return CpuReading(model, cores, threads, sockets, "lscpu")


def parse_meminfo(text: str) -> int | None:
    """Return MemTotal of /proc/meminfo in bytes, or None when absent or implausible."""
    for key, value in _fields(text):
        if key == "memtotal":
            number, _, unit = value.partition(" ")
            kib = _int(number, 1, 2**40)
            if kib is None or unit.strip().lower() not in ("kb", ""):
                return None
            total = kib * 1024
            return total if 10**8 <= total <= 10**15 else None
    return None


def parse_dmidecode(text: str) -> tuple[int | None, int | None, str | None]:
    """Return (populated DIMMs, configured MT/s, DDR type) of ``dmidecode -t memory`` output."""
    dimms = 0
    speeds: list[int] = []
    types: set[str] = set()
    for block in re.split(r"\n(?=Memory Device)", text[:MAX_TOOL_CHARS]):
        if not block.startswith("Memory Device"):
            continue
        values = dict(_fields(block))
        size = values.get("size", "")
        if not re.match(r"\d+\s*(MB|GB|TB)\b", size):
            continue  # "No Module Installed", garbage
        dimms += 1
        for key in ("configured memory speed", "configured clock speed", "speed"):
            m = re.fullmatch(r"(\d{3,5})\s*(MT/s|MHz)", values.get(key, ""))
            if m and 800 <= int(m.group(1)) <= 20_000:
                speeds.append(int(m.group(1)))
                break
        kind = values.get("type", "")
        if re.fullmatch(r"(LP)?DDR\d", kind):
            types.add(kind)
    if not 0 < dimms <= 64:
        return None, None, None
    return dimms, (min(speeds) if speeds else None), (types.pop() if len(types) == 1 else None)


# -- tools: each run with a timeout; a missing or failing tool is skipped with its reason ----------

Runner = Callable[[list[str]], tuple[str | None, str | None]]


def run_tool(args: list[str]) -> tuple[str | None, str | None]:
    """Return (stdout, None), or (None, why it was skipped): missing, failed or timed out."""
    if shutil.which(args[0]) is None:
        return None, f"{args[0]}: not installed"
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, errors="replace", timeout=TOOL_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return None, f"{args[0]}: no answer in {TOOL_TIMEOUT_S:g} s"
    except OSError as exc:
        return None, f"{args[0]}: {exc.strerror or exc}"
    if done.returncode != 0:
        said = clean_name(done.stderr or "") or f"exit status {done.returncode}"
        return None, f"{args[0]}: {said}"
    return done.stdout[:MAX_TOOL_CHARS], None


def read_text(path: str) -> tuple[str | None, str | None]:
    """Return (the file's text, None), or (None, why it could not be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(MAX_TOOL_CHARS), None
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"


def _torch_gpus() -> tuple[list[GpuReading], str | None]:
    """Return the GPUs PyTorch sees (no PCIe figures), or why it could not be asked."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return [], "PyTorch: not installed"
    try:
        import torch

        if not torch.cuda.is_available():
            return [], "PyTorch: no CUDA or ROCm device"
        gpus = []
        for i in range(min(torch.cuda.device_count(), MAX_GPUS)):
            props = torch.cuda.get_device_properties(i)
            name = clean_name(props.name)
            if name:
                gpus.append(GpuReading(name, props.total_memory // 2**20, None, None, "PyTorch"))
        return gpus, None
    except Exception as exc:  # a broken driver install: skip it, say why
        return [], f"PyTorch: {clean_name(str(exc)) or type(exc).__name__}"


def _edac_dimms(root: Path = Path("/sys/devices/system/edac/mc")) -> int | None:
    """Return the DIMMs the EDAC driver lists with a size, or None where it lists none."""
    try:
        sizes = [p.read_text().strip() for p in root.glob("mc*/dimm*/size")]
    except OSError:
        return None
    count = sum(1 for s in sizes if s.isdigit() and int(s) > 0)
    return count if 0 < count <= 64 else None


def read_machine(run: Runner = run_tool) -> Reading:
    """Read the GPUs, CPU and memory of this machine; every tool that failed is in ``skipped``."""
    skipped: list[str] = []
    out, why = run(["nvidia-smi", *NVIDIA_SMI_QUERY])
    gpus = parse_nvidia_smi(out) if out is not None else []
    if why:
        skipped.append(why)
    elif not gpus:
        skipped.append("nvidia-smi: no GPU in its output")
    if not gpus:
        gpus, why = _torch_gpus()
        if why:
            skipped.append(why)
    text, why = read_text("/proc/cpuinfo")
    cpu = parse_cpuinfo(text) if text is not None else CpuReading()
    if why:
        skipped.append(why)
    if cpu.model is None or cpu.cores is None:
        out, why = run(["lscpu"])
        if out is not None:
            other = parse_lscpu(out)
            cpu = CpuReading(
                cpu.model or other.model,
                cpu.cores or other.cores,
                cpu.threads or other.threads,
                cpu.sockets or other.sockets,
                "lscpu" if cpu.cores is None else cpu.tool,
                cpu.amx,
            )
        elif why:
            skipped.append(why)
    text, why = read_text("/proc/meminfo")
    total = parse_meminfo(text) if text is not None else None
    if why:
        skipped.append(why)
    out, why = run(["dmidecode", "-t", "memory"])
    dimms, speed, kind = parse_dmidecode(out) if out is not None else (None, None, None)
    dimm_tool = "dmidecode" if dimms else ""
    if why:
        skipped.append(f"{why} (DIMM channels and speed need root)")
    if dimms is None:
        dimms = _edac_dimms()
        dimm_tool = "EDAC sysfs" if dimms else ""
    memory = MemoryReading(total, dimms, speed, kind, "/proc/meminfo" if total else "", dimm_tool)
    return Reading(tuple(gpus), cpu, memory, tuple(skipped))
