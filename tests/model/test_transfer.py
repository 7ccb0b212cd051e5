"""Transfer times: bandwidth, latency, pinned vs pageable, NVMe request size and queue depth."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.inputs.errors import InputError
from kvoffload.inputs.hardware import load_system
from kvoffload.model import transfer

PROFILE = {
    "id": "test-box",
    "name": "a test machine with round figures",
    "gpu": {
        "name": "gpu",
        "memory": "80 GB",
        "memory_bandwidth": "2 TB/s",
        "flops_bf16": "312 TFLOP/s",
    },
    "link": {
        "name": "link",
        "raw_bandwidth": "32 GB/s",
        "h2d_bandwidth": "25 GB/s",
        "d2h_bandwidth": "20 GB/s",
        "pageable_bandwidth": "10 GB/s",
        "latency": "10 us",
    },
    "host": {
        "name": "host",
        "memory": "512 GB",
        "memory_bandwidth": "90 GB/s",
        "flops": "2 TFLOP/s",
    },
    "storage": {
        "name": "ssd",
        "read_bandwidth": "7 GB/s",
        "write_bandwidth": "5 GB/s",
        "read_latency": "80 us",
        "random_read_iops": "1e6 /s",
    },
}


@pytest.fixture
def box():
    return load_system(PROFILE)


def test_article_layer_time_over_pcie(box):
    # 500 MB at 32 GB/s is the article's 15.6 ms; at 25 GB/s achievable it is 20 ms + 10 us.
    assert float(transfer.transfer_time(500e6, 32e9)) == pytest.approx(15.625e-3)
    assert float(transfer.link_time(box, 500e6)) == pytest.approx(20e-3 + 10e-6)


def test_pageable_is_slower_and_d2h_uses_its_own_rate(box):
    assert float(transfer.link_time(box, 1e9, pinned=False)) == pytest.approx(0.1 + 1e-5)
    assert float(transfer.link_time(box, 1e9, "d2h")) == pytest.approx(0.05 + 1e-5)


def test_pageable_rate_missing_is_an_error_not_a_guess():
    raw = {
        **PROFILE,
        "link": {k: v for k, v in PROFILE["link"].items() if k != "pageable_bandwidth"},
    }
    with pytest.raises(InputError, match="pageable"):
        transfer.link_time(load_system(raw), 1e9, pinned=False)


def test_latency_dominates_small_transfers(box):
    sizes = np.array([4e3, 64e3, 1e6, 64e6])
    t = transfer.link_time(box, sizes)
    effective = sizes / t
    assert effective[0] < 0.02 * 25e9  # 4 kB: almost all latency
    assert effective[-1] > 0.99 * 25e9  # 64 MB: almost all bandwidth
    assert np.all(np.diff(effective) > 0)


def test_many_transfers_pay_latency_each(box):
    one = float(transfer.link_time(box, 32e6, transfers=1))
    many = float(transfer.link_time(box, 32e6, transfers=32))
    assert many - one == pytest.approx(31 * 10e-6)


def test_nvme_small_random_reads_fall_far_below_sequential(box):
    s = box.storage
    bw = transfer.nvme_bandwidth(s, 4096, 1)
    # one 4 KiB request per (80 us + 4096 B / 7 GB/s): about 51 MB/s
    assert float(bw) == pytest.approx(4096 / (80e-6 + 4096 / 7e9))
    assert float(bw) < 0.1 * 7e9
    # deep queues of large requests reach the sequential rate
    assert float(transfer.nvme_bandwidth(s, 1 << 20, 32)) == pytest.approx(7e9)
    # at QD 256 of 4 KiB, the IOPS rating caps it: 1e6 x 4096 B
    assert float(transfer.nvme_bandwidth(s, 4096, 256)) == pytest.approx(4.096e9)


def test_tiers_are_ordered_fastest_first(box):
    rates = [t.achievable.value for t in transfer.tiers(box)]
    assert [t.key for t in transfer.tiers(box)] == ["gpu", "link", "host", "storage"]
    times = [float(t.time(500e6)) for t in transfer.tiers(box)]
    assert rates[0] == max(rates) and times[0] == min(times)


positive = st.floats(min_value=1.0, max_value=1e13, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(positive, positive, positive, st.floats(0, 1e-3), st.integers(1, 1000))
def test_time_is_monotone_in_bytes_and_inverse_in_bandwidth(b1, b2, bw, lat, n):
    lo, hi = sorted((b1, b2))
    assert transfer.transfer_time(lo, bw, lat, n) <= transfer.transfer_time(hi, bw, lat, n)
    t1 = transfer.transfer_time(hi, bw, 0.0)
    t2 = transfer.transfer_time(hi, 2 * bw, 0.0)
    assert t2 == pytest.approx(t1 / 2)
    assert transfer.transfer_time(hi, 2 * bw, lat, n) <= transfer.transfer_time(hi, bw, lat, n)


@settings(max_examples=100, deadline=None)
@given(st.integers(512, 1 << 24), st.integers(1, 255))
def test_nvme_rate_grows_with_request_size_and_queue_depth(size, qd):
    s = load_system(PROFILE).storage
    assert transfer.nvme_bandwidth(s, size, qd) <= transfer.nvme_bandwidth(s, size * 2, qd) + 1e-6
    assert transfer.nvme_bandwidth(s, size, qd) <= transfer.nvme_bandwidth(s, size, qd + 1) + 1e-6
    assert transfer.nvme_bandwidth(s, size, qd) <= s.read_bandwidth.value * (1 + 1e-12)


def test_tier_read_times(box):
    tier = {t.key: t for t in transfer.tiers(box)}
    assert float(tier["gpu"].time(2e9, achievable=False)) == pytest.approx(1e-3)
    assert float(tier["host"].time(90e9)) == pytest.approx(1.0)
    # sequential: one latency, then the sequential rate; random 4 KiB at QD 1: far slower
    assert float(tier["storage"].time(7e9)) == pytest.approx(1.0 + 80e-6)
    slow = float(transfer.transfer_time(7e9, transfer.nvme_bandwidth(box.storage, 4096, 1)))
    assert slow > 50 * float(tier["storage"].time(7e9))


def test_a_gpu_to_gpu_hand_over_crosses_the_host_link_once(box):
    # no GPU-GPU figure in a profile: latency plus the bytes at the slower pinned direction
    slower = min(box.link_rate("h2d"), box.link_rate("d2h"))
    assert float(transfer.peer_time(box, 1e6)) == pytest.approx(10e-6 + 1e6 / slower)
    assert float(transfer.peer_time(box, 0.0)) == 0.0
    # a ring all-reduce over 4 GPUs passes 2 x 3/4 of the bytes
    assert float(transfer.peer_time(box, 1e6, share=1.5)) == pytest.approx(10e-6 + 1.5e6 / slower)


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_a_ring_all_reduce_pays_a_latency_per_step_and_moves_2_n_minus_1_over_n(box, gpus):
    """The ring: N - 1 reduce-scatter and N - 1 all-gather steps, each GPU passing a 1/N chunk
    per step; the all-gather alone for a gather. The bytes term does not grow with N."""
    slower = min(box.link_rate("h2d"), box.link_rate("d2h"))
    steps = 2 * (gpus - 1)
    want = steps * (10e-6 + 1e6 / gpus / slower)
    assert transfer.all_reduce_time(box, 1e6, gpus) == pytest.approx(want)
    gather = (gpus - 1) * (10e-6 + 1e6 / gpus / slower)
    assert transfer.gather_time(box, 1e6, gpus) == pytest.approx(gather)
    assert transfer.all_reduce_time(box, 0.0, gpus) == 0.0
    assert transfer.all_reduce_time(box, 1e6, 1) == 0.0  # one GPU: nothing to reduce


def test_a_gpu_to_gpu_figure_replaces_the_host_staged_copy():
    """P2P or NVLink: the profile's peer rate and latency; a peer rate alone keeps the link's
    latency; a peer latency without a rate is refused in one line."""
    direct = load_system({**PROFILE, "link": {**PROFILE["link"], "peer_bandwidth": "50 GB/s",
                                              "peer_latency": "2 us"}})  # fmt: skip
    assert float(transfer.peer_time(direct, 1e6)) == pytest.approx(2e-6 + 1e6 / 50e9)
    assert float(transfer.peer_time(direct, 0.0)) == 0.0
    rate_only = load_system({**PROFILE, "link": {**PROFILE["link"], "peer_bandwidth": "50 GB/s"}})
    assert float(transfer.peer_time(rate_only, 1e6)) == pytest.approx(10e-6 + 1e6 / 50e9)
    with pytest.raises(InputError) as info:
        load_system({**PROFILE, "link": {**PROFILE["link"], "peer_latency": "2 us"}})
    assert "link.peer_latency" in str(info.value) and "\n" not in str(info.value)
