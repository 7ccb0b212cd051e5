"""Sample input texts the tests share: a good profile, bad profiles with the error each gives, a YAML bomb."""

from __future__ import annotations

from kvoffload.studies import measure

KiB, MiB = 1 << 10, 1 << 20

BOMB = """
a: &a ["x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: [*f,*f,*f,*f,*f,*f,*f,*f,*f]
"""

GOOD_PROFILE = """\
id: my-box
name: "A100 80GB on PCIe 4, my own host"
gpu: {base: a100-80gb-sxm}
link:
  base: pcie4-x16
  h2d_bandwidth: {value: "22 GB/s", kind: measured, source: "my nvbandwidth run"}
host: {memory: 512 GB, memory_bandwidth: 200 GB/s, flops: 3 TFLOP/s, name: "2x EPYC"}
storage: {name: nvme, read_bandwidth: 7 GB/s, write_bandwidth: 5 GB/s, read_latency: 80 us}
"""

PROFILE_OK = """
gpu: {base: a100-80gb-sxm}
link: {base: pcie4-x16}
host: {name: h, memory: 512 GB, memory_bandwidth: 200 GB/s, flops: 3 TFLOP/s}
storage: {name: s, read_bandwidth: 7 GB/s, write_bandwidth: 5 GB/s, read_latency: 80 us}
"""


def _swap(old: str, new: str) -> str:
    assert old in PROFILE_OK
    return PROFILE_OK.replace(old, new)


BAD_PROFILES = {
    "malformed-yaml": ("gpu: {base: a100-80gb-sxm\nlink: x\n", "malformed YAML"),
    "misspelled-part": (_swap("link:", "lnk:"), "lnk: unknown field"),
    "misspelled-field": (
        _swap("read_latency", "read_latncy"),
        "storage.read_latncy: unknown field",
    ),
    "missing-field": (
        _swap("flops: 3 TFLOP/s", "cores: 8"),
        "host.flops: required field is missing",
    ),
    "missing-part": (_swap("storage: {", "# storage: {"), "storage: required part is missing"),
    "zero": (
        _swap("memory_bandwidth: 200 GB/s", "memory_bandwidth: 0 GB/s"),
        "host.memory_bandwidth: 0 GB/s is zero",
    ),
    "negative": (_swap("7 GB/s", "-7 GB/s"), "storage.read_bandwidth: -7 GB/s is negative"),
    "nan": (
        _swap("7 GB/s", "nan GB/s"),
        "storage.read_bandwidth: 'nan GB/s' is not a finite number",
    ),
    "absurd": (
        _swap("200 GB/s", "200000 TB/s"),
        "host.memory_bandwidth: 200000 TB/s is outside the plausible range",
    ),
    "wrong-dimension": (
        _swap("200 GB/s", "200 GB"),
        "host.memory_bandwidth: '200 GB' is a size in bytes, expected a bandwidth",
    ),
    "unknown-unit": (
        _swap("80 us", "80 fortnights"),
        "storage.read_latency: '80 fortnights': unknown unit",
    ),
    "no-unit": (_swap("512 GB", "512"), "host.memory: 512 has no unit"),
    "ambiguous-unit": (_swap("512 GB", "512 KB"), "host.memory: '512 KB': 'KB' is ambiguous"),
    "unknown-base": (
        _swap("a100-80gb-sxm", "a100-80gb-sxn"),
        "gpu.base: unknown gpu id 'a100-80gb-sxn'",
    ),
    "unknown-id": (_swap("{base: pcie4-x16}", "pcie9-x16"), "link: unknown link id 'pcie9-x16'"),
    "negative-latency": (_swap("80 us", "-80 us"), "storage.read_latency: -80 us is negative"),
    "unknown-kind": (
        _swap("read_bandwidth: 7 GB/s", "read_bandwidth: {value: 7 GB/s, kind: guessed}"),
        "storage.read_bandwidth: kind 'guessed' is not one of spec, measured, fitted, assumed",
    ),
    "spec-without-source": (
        _swap("read_bandwidth: 7 GB/s", "read_bandwidth: {value: 7 GB/s, kind: spec}"),
        "storage.read_bandwidth: a spec figure needs a source",
    ),
    "figure-extra-key": (
        _swap("read_bandwidth: 7 GB/s", "read_bandwidth: {value: 7 GB/s, unit: GB/s}"),
        "storage.read_bandwidth: unknown key 'unit'",
    ),
    "achievable-above-raw": (
        _swap("{base: pcie4-x16}", "{base: pcie4-x16, h2d_bandwidth: 40 GB/s}"),
        "link: h2d_bandwidth 40 GB/s exceeds raw_bandwidth 31.5 GB/s",
    ),
    "duplicate-key": (PROFILE_OK + "gpu: {base: h100-sxm}\n", "duplicate key 'gpu'"),
    "alias-bomb": (BOMB, "aliases are not allowed"),
    "top-level-list": ("- gpu\n- link\n", "top level must be a mapping, got list"),
    "empty": ("", "top level must be a mapping, got empty"),
    "bad-count": (_swap("{base: a100-80gb-sxm}", "{base: a100-80gb-sxm, count: 0}"), "gpu.count: "),
    "bad-id": ("id: My Box!\n" + PROFILE_OK, "id: must be lowercase"),
}


# a measurement plan small enough for a test: a few MiB, two request sizes, two queue depths
TINY = measure.Plan(8 * MiB, 16 * MiB, 0.02, (4 * KiB, 64 * KiB), (1, 4), (64 * KiB,))
