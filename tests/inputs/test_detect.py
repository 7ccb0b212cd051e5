"""`kvoffload hardware detect`: reading this machine, recorded tool output, hostile output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.inputs import catalog, detect, probe
from kvoffload.inputs.hardware import build_system, load_system

# recorded `nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.max,pcie.link.width.max
# --format=csv,noheader,nounits` output
RTX_4090 = "NVIDIA GeForce RTX 4090, 24564, 4, 16\n"
H100_PCIE = "NVIDIA H100 PCIe, 81559, 5, 16\nNVIDIA H100 PCIe, 81559, 5, 16\n"
H100_SXM = "NVIDIA H100 80GB HBM3, 81559, 5, 16\n"
UNKNOWN = "NVIDIA Quadro GV100, 32508, 3, 16\n"
DMIDECODE = """# dmidecode 3.3
Handle 0x0040, DMI type 17, 92 bytes
Memory Device
\tSize: 32 GB
\tLocator: DIMM_A1
\tType: DDR4
\tSpeed: 3200 MT/s
\tConfigured Memory Speed: 3200 MT/s

Handle 0x0041, DMI type 17, 92 bytes
Memory Device
\tSize: No Module Installed
\tType: Unknown

Handle 0x0042, DMI type 17, 92 bytes
Memory Device
\tSize: 32 GB
\tLocator: DIMM_B1
\tType: DDR4
\tSpeed: 3200 MT/s
\tConfigured Memory Speed: 3200 MT/s
"""
CPUINFO_5950X = "".join(
    f"processor\t: {i}\nmodel name\t: AMD Ryzen 9 5950X 16-Core Processor\n"
    f"physical id\t: 0\ncore id\t\t: {i % 16}\n\n"
    for i in range(32)
)


def _reading(smi: str = RTX_4090, cpuinfo: str = CPUINFO_5950X) -> probe.Reading:
    dimms, speed, kind = probe.parse_dmidecode(DMIDECODE)
    memory = probe.MemoryReading(64 * 2**30, dimms, speed, kind, "/proc/meminfo", "dmidecode")
    gpus = tuple(probe.parse_nvidia_smi(smi))
    return probe.Reading(gpus, probe.parse_cpuinfo(cpuinfo), memory)


def test_this_machine_cpu_cores_and_memory():
    reading = probe.read_machine()
    cpu = reading.cpu
    assert cpu.threads == os.cpu_count()
    assert cpu.cores is not None and 1 <= cpu.cores <= cpu.threads
    text = Path("/proc/cpuinfo").read_text()
    model = next(ln.split(":", 1)[1].strip() for ln in text.splitlines() if "model name" in ln)
    assert cpu.model == " ".join(model.split())
    total = next(ln for ln in Path("/proc/meminfo").read_text().splitlines() if "MemTotal" in ln)
    assert reading.memory.total_bytes == int(total.split()[1]) * 1024
    system = load_system("detect")  # the whole profile loads
    assert system.host.memory.value == reading.memory.total_bytes
    assert system.host.cores == cpu.cores
    assert system.host.memory.source == detect.SOURCE


def test_recorded_rtx_4090_picks_its_part():
    raw = detect.detected_profile(_reading(RTX_4090), "box")
    system = build_system(raw, ident=raw["id"], origin="test")
    assert system.gpu.name == "NVIDIA GeForce RTX 4090"
    assert system.gpu.memory.value == 24564 * 2**20
    assert "matched catalog part rtx-4090 by name" in raw["description"]
    assert system.gpu.flops_bf16.value == pytest.approx(165.2e12)
    assert raw["link"]["name"] == "PCIe 4.0 x16"
    # the host: the 5950X by name, its DDR4 DIMMs' peak detected, the rest from the catalog
    assert "desktop-ddr4-2ch" in raw["description"]
    assert system.host.memory_bandwidth_peak.value == pytest.approx(51.2e9)
    assert system.host.cores == 16


def test_recorded_h100_pcie_picks_its_part_and_counts_two():
    raw = detect.detected_profile(_reading(H100_PCIE), "box")
    system = build_system(raw, ident=raw["id"], origin="test")
    assert "catalog part h100-pcie by name" in raw["description"]
    assert system.gpu.count == 2
    assert system.gpu.memory.value == 81559 * 2**20
    assert system.gpu.flops_bf16.value == pytest.approx(756e12)
    assert raw["link"]["name"] == "PCIe 5.0 x16"


def test_a_mixed_rig_keeps_each_gpu_model_in_device_order():
    smi = "NVIDIA GeForce RTX 4090, 24564, 4, 16\nNVIDIA GeForce RTX 5090, 32607, 5, 16\n"
    smi += "NVIDIA GeForce RTX 4090, 24564, 4, 16\n"
    raw = detect.detected_profile(_reading(smi), "rig")
    system = build_system(raw, ident=raw["id"], origin="test")
    assert system.gpu.count == 2 and len(system.more_gpus) == 1
    assert system.more_gpus[0].name == "NVIDIA GeForce RTX 5090"
    assert system.more_gpus[0].memory.value == 32607 * 2**20
    assert system.gpu_memory == (2 * 24564 + 32607) * 2**20


def test_h100_sxm_name_and_the_closest_memory_among_name_matches():
    gpus = catalog.parts("gpu")
    assert detect.match_gpu("NVIDIA H100 80GB HBM3", 81559, gpus)[0] == "h100-sxm"
    assert detect.match_gpu("NVIDIA A100-SXM4-40GB", 40960, gpus)[0] == "a100-40gb-sxm"
    assert detect.match_gpu("NVIDIA A100 80GB PCIe", 81920, gpus)[0] == "a100-80gb-pcie"
    assert detect.match_gpu("NVIDIA GeForce RTX 3090", 24576, gpus)[0] == "rtx-3090"
    assert detect.match_gpu("NVIDIA GeForce RTX 3090 Ti", 24564, gpus)[0] == "rtx-3090-ti"
    assert detect.match_gpu("NVIDIA GeForce RTX 4060 Ti", 16380, gpus)[0] == "rtx-4060-ti-16gb"
    assert detect.match_gpu("NVIDIA RTX 6000 Ada Generation", 49140, gpus)[0] == "rtx-6000-ada"


def test_gpu_not_in_the_catalog_falls_back_by_memory_with_a_note():
    ident, note = detect.match_gpu("NVIDIA Quadro GV100", 32508, catalog.parts("gpu"))
    assert ident == "rtx-5090"  # 32 GiB, the catalog GPU closest in memory
    assert "not in the catalog" in note and "closest in memory" in note
    raw = detect.detected_profile(_reading(UNKNOWN), "box")
    build_system(raw, ident=raw["id"], origin="test")
    assert "not in the catalog" in raw["description"]
    assert raw["link"]["name"] == "PCIe 3.0 x16"


def test_host_by_channels_and_cores_when_the_model_is_unknown():
    cpu = probe.CpuReading("Some Server CPU", 96, 192, 1, "lscpu")
    memory = probe.MemoryReading(768 * 10**9, 12, 4800, "DDR5", "/proc/meminfo", "dmidecode")
    ident, _ = detect.match_host(probe.Reading((), cpu, memory), catalog.parts("host"))
    assert ident == "server-ddr5-12ch"


def _cpuinfo(model: str, sockets: int, cores_per_socket: int) -> str:
    return "".join(
        f"processor\t: {s * cores_per_socket + c}\nmodel name\t: {model}\n"
        f"physical id\t: {s}\ncore id\t\t: {c}\n\n"
        for s in range(sockets)
        for c in range(cores_per_socket)
    )


def test_a_small_one_socket_slice_of_a_server_is_held_to_one_socket():
    """A two-vCPU cloud VM of an EPYC host: its cores are nearest a two-socket part's, but one
    socket's DRAM is what one socket reads; the detected host keeps one socket."""
    memory = probe.MemoryReading(24 * 2**30, None, None, None, "/proc/meminfo", None)
    reading = probe.Reading((), probe.parse_cpuinfo(_cpuinfo("AMD EPYC", 1, 2)), memory)
    hosts = catalog.parts("host")
    ident, _ = detect.match_host(reading, hosts)
    assert hosts[ident].get("sockets", 1) == 1
    raw = detect.detected_profile(reading, "vm")
    host = build_system(raw, ident=raw["id"], origin="test").host
    assert host.sockets == 1 and host.cross_socket_bandwidth is None and host.cores == 2


def test_a_detected_socket_count_scales_the_matched_parts_dram_rates():
    """The model number names a two-socket part; a one-socket reading of that CPU keeps its
    per-socket rates, and no link between sockets."""
    hosts = catalog.parts("host")
    base = build_system(
        {"id": "x", "name": "x", "gpu": {"base": "rtx-4090"}, "link": {"base": "pcie4-x16"},
         "host": {"base": "server-2s-ddr5-24ch-epyc-9355"}, "storage": {"base": "nvme-gen4"}},
        ident="x", origin="test",
    ).host  # fmt: skip
    assert base.sockets == 2
    memory = probe.MemoryReading(768 * 10**9, None, None, None, "/proc/meminfo", None)
    cpuinfo = _cpuinfo("AMD EPYC 9355 32-Core Processor", 1, 32)
    reading = probe.Reading((), probe.parse_cpuinfo(cpuinfo), memory)
    ident, note = detect.match_host(reading, hosts)
    assert ident == "server-2s-ddr5-24ch-epyc-9355" and "by its CPU model" in note
    raw = detect.detected_profile(reading, "one-socket")
    host = build_system(raw, ident=raw["id"], origin="test").host
    assert host.sockets == 1 and host.cross_socket_bandwidth is None
    assert host.memory_bandwidth.value == pytest.approx(base.memory_bandwidth.value / 2, rel=1e-5)
    assert host.memory_bandwidth_peak.value == pytest.approx(
        base.memory_bandwidth_peak.value / 2, rel=1e-5
    )
    # read as two sockets it is the part as the catalog has it
    both = probe.Reading(
        (), probe.parse_cpuinfo(_cpuinfo("AMD EPYC 9355 32-Core Processor", 2, 32)), memory
    )
    two = build_system(detect.detected_profile(both, "two"), ident="two", origin="test").host
    assert two.sockets == 2 and two.memory_bandwidth.value == base.memory_bandwidth.value


def test_no_gpu_is_a_stated_placeholder():
    raw = detect.detected_profile(_reading(""), "box")
    system = build_system(raw, ident=raw["id"], origin="test")
    assert "no GPU detected" in raw["description"]
    # the GPU's own name says it is a stand-in, and which catalog GPU's figures it has
    stand_in = catalog.parts("gpu")[catalog.systems()[detect.FALLBACK_SYSTEM]["gpu"]]["name"]
    assert system.gpu.name.startswith("no GPU detected") and stand_in in system.gpu.name
    assert detect.placeholder_gpu(system.gpu.name) == stand_in
    found = detect.detected_profile(_reading(), "box")
    assert (
        detect.placeholder_gpu(build_system(found, ident=found["id"], origin="t").gpu.name) is None
    )
    assert detect.placeholder_gpu(load_system("rtx-4090-desktop").gpu.name) is None


HOSTILE = [
    "",
    "garbage\n\x00\x1b[31m",
    "NVIDIA GeForce RTX 4090, 99999999999999999999, 4, 16",
    "NVIDIA GeForce RTX 4090, -5, 4, 16",
    "NVIDIA GeForce RTX 4090, 24564, 99, 9999",
    "\x1b]0;evil\x07, 24564, [N/A], [N/A]",
    "a,b,c,d\n" * 10_000,
    "NVIDIA GeForce RTX 4090, nan, inf, 16",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_nvidia_smi_is_ignored(text):
    gpus = probe.parse_nvidia_smi(text)
    for g in gpus:
        assert 64 <= g.memory_mib <= 2**24 and g.pcie_gen in (None, *range(1, 8))
        assert g.name.isprintable() and "\x1b" not in g.name
    raw = detect.detected_profile(_reading(text), "box\x1b[31m")
    build_system(raw, ident=raw["id"], origin="test")


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=400))
def test_parsers_never_raise(text):
    probe.parse_nvidia_smi(text)
    probe.parse_cpuinfo(text)
    probe.parse_lscpu(text)
    probe.parse_dmidecode("Memory Device\n" + text)
    assert probe.parse_meminfo(text) in (None,) or probe.parse_meminfo(text) >= 10**8


def test_huge_meminfo_and_cpuinfo_numbers_are_refused():
    assert probe.parse_meminfo("MemTotal: 99999999999999999999 kB") is None
    assert probe.parse_meminfo("MemTotal: 12 kB") is None
    assert probe.parse_lscpu("Socket(s): 1\nCore(s) per socket: 999999\nCPU(s): 2").cores is None


def test_missing_tools_are_skipped_with_a_reason():
    def absent(args):
        return None, f"{args[0]}: not installed"

    reading = probe.read_machine(absent)
    assert any("nvidia-smi: not installed" in s for s in reading.skipped)
    assert any("dmidecode" in s for s in reading.skipped)


def test_cli_detect_prints_yaml_json_and_writes_out(tmp_path):
    cmd = [sys.executable, "-m", "kvoffload", "hardware", "detect"]
    shown = subprocess.run([*cmd, "--json"], capture_output=True, text=True, check=True)
    raw = json.loads(shown.stdout)
    assert raw["id"].startswith("detected")
    out = tmp_path / "me.yaml"
    subprocess.run([*cmd, "--out", str(out)], capture_output=True, text=True, check=True)
    assert load_system(str(out)).host.memory.source == detect.SOURCE
    yaml_text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert yaml_text.startswith("id: detected")


def test_amx_is_read_from_the_cpus_flags_and_kept_in_the_detected_host():
    """Intel AMX (KTransformers' AMXInt8 / AMXBF16 kernels) is the flags' amx_tile: present,
    absent, an Arm listing (no AMX) or no flags at all (not read)."""
    xeon = "processor\t: 0\nmodel name\t: Intel Xeon Gold 6454S\nflags\t\t: fpu avx512f amx_bf16 amx_tile amx_int8\n"
    assert probe.parse_cpuinfo(xeon).amx is True
    assert probe.parse_cpuinfo(xeon.replace(" amx_tile", "")).amx is False
    assert probe.parse_cpuinfo("processor\t: 0\nFeatures\t: fp asimd sve\n").amx is False
    assert probe.parse_cpuinfo(CPUINFO_5950X).amx is None
    flagged = CPUINFO_5950X.replace("core id", "flags\t\t: avx2 amx_tile\ncore id")
    raw = detect.detected_profile(_reading(cpuinfo=flagged))
    assert raw["host"]["amx"] is True
    assert build_system(raw, ident=raw["id"], origin="test").host.amx is True


def test_the_catalog_says_which_hosts_have_amx():
    hosts = catalog.parts("host")
    for ident, part in hosts.items():
        name = part["name"]
        if any(w in name for w in ("EPYC", "Ryzen", "Threadripper", "Grace", "Core i9")):
            assert part.get("amx") is False, ident
        if any(w in name for w in ("8480", "6454S")):
            assert part.get("amx") is True, ident
