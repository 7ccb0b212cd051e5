"""llama.cpp on the host as built: --numa on two sockets, mmap paging past host memory."""

import pytest

from kvoffload.engines.scenario import parse_scenario, predict
from kvoffload.inputs.errors import InputError
from kvoffload.model import cpu_rate

DESKTOP = {
    "hardware": "rtx-3090-desktop",  # 64 GB of host memory, 59 GB of it for processes
    "model": "llama-3.1-70b",
    "engine": "llamacpp",
    "precision": {"weights": "q8_0", "kv": "fp16"},  # ~75 GB of weights
    "workload": {"batch": 1, "prompt": 512, "generate": 16},
}
TWO_SOCKETS = {
    **DESKTOP,
    "hardware": {"base": "epyc-9654-h100-pcie", "id": "two-socket",
                 "host": "server-2s-ddr5-24ch-epyc-9654"},
    "precision": {"weights": "q4_k_m", "kv": "fp16"},
}  # fmt: skip


def _run(raw, **options):
    return predict(parse_scenario({**raw, "options": {"n_gpu_layers": 0, **options}}))


def test_no_mmap_refuses_what_host_memory_cannot_hold_naming_the_tier():
    with pytest.raises(InputError, match="host memory"):
        _run(DESKTOP, no_mmap=True)


def test_mmap_pages_the_excess_from_disk_each_step_instead_of_refusing():
    paged = _run(DESKTOP)
    roomy = _run({**DESKTOP, "hardware": {"base": "rtx-3090-desktop", "id": "roomy",
                                          "host": {"base": "desktop-ddr4-2ch",
                                                   "memory": "256 GB"}}})  # fmt: skip
    excess = float(paged.memory.disk)
    assert 10e9 < excess < 30e9
    read_rate = paged.scenario.system.storage.read_bandwidth.value
    assert paged.streams_s["disk_read"] == pytest.approx(excess / read_rate)
    assert paged.tpot_s == pytest.approx(roomy.tpot_s + excess / read_rate)
    assert roomy.streams_s["disk_read"] == 0.0 and float(roomy.memory.disk) == 0.0
    assert "read from disk each step" in paged.policy


def test_two_sockets_decode_near_twice_as_fast_with_numa_distribute_as_without():
    plain, spread = _run(TWO_SOCKETS), _run(TWO_SOCKETS, numa="distribute")
    isolate = _run(TWO_SOCKETS, numa="isolate")
    host = plain.scenario.system.host
    # every weight on the CPU: the step is the matvec stream, so it scales with the host's rate
    # under each policy (both sockets' DRAM with distribute; one node's, shared, without)
    faster = cpu_rate.host_stream_rate(host, numa="distribute") / cpu_rate.host_stream_rate(host)
    assert faster > 1
    assert plain.tpot_s / spread.tpot_s == pytest.approx(faster, rel=0.05)
    assert isolate.tpot_s == pytest.approx(plain.tpot_s, rel=0.1)
