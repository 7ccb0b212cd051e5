"""The hardware catalog: documented ids, every figure sourced, the article's own profile."""

from __future__ import annotations

import itertools

import pytest

from kvoffload.inputs import catalog
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.figures import Kind
from kvoffload.inputs.hardware import build_part, load_system, system_ids

GPU_IDS = set(
    [
        "a100-40gb-sxm",
        "a100-40gb-pcie",
        "rtx-2080",
        "a100-80gb-sxm",
        "a100-80gb-pcie",
        "h100-sxm",
        "h100-pcie",
        "h200",
        "gh200",
        "b200",
        "l4",
        "l40s",
        "t4",
        "a10",
        "rtx-3070-ti",
        "rtx-3090-ti",
        "rtx-4090",
        "rtx-a6000",
        "mi300x",
        "rtx-3060-12gb",
        "rtx-3080-10gb",
        "rtx-3090",
        "rtx-4060-ti-16gb",
        "rtx-4070-ti",
        "rtx-4080",
        "rtx-5080",
        "rtx-5090",
        "rtx-6000-ada",
    ]
)
LINK_IDS = {
    "pcie3-x16",
    "pcie4-x8",
    "pcie4-x16",
    "pcie5-x16",
    "pcie6-x16",
    "nvlink-c2c",
    "nvlink-c2c-blackwell",
}
SYSTEM_IDS = set(
    [
        "article-reference",
        "a100-80gb-sxm-pcie4",
        "h100-pcie-pcie5",
        "h100-sxm-pcie5",
        "h200-sxm-pcie5",
        "gh200-nvlink-c2c",
        "l40s-pcie4",
        "rtx-4090-desktop",
        "rtx-3070-ti-desktop",
        "t4-pcie3",
    ]
)


def test_catalog_ids_are_the_documented_ones():
    assert set(catalog.parts("gpu")) == GPU_IDS
    assert set(catalog.parts("link")) == LINK_IDS
    assert set(system_ids()) >= SYSTEM_IDS
    hosts = set(catalog.parts("host"))
    assert {"desktop-ddr5-2ch", "server-ddr5-8ch", "server-ddr5-12ch", "grace-lpddr5x"} <= hosts
    assert {"nvme-gen4", "nvme-gen5"} <= set(catalog.parts("storage"))


@pytest.mark.parametrize("kind", catalog.PART_KINDS)
def test_every_part_validates_alone(kind):
    for ident in catalog.parts(kind):
        build_part(kind, ident)


def _all_figures():
    for ident in system_ids():
        for key, fig in load_system(ident).figures().items():
            yield ident, key, fig
    for kind in catalog.PART_KINDS:
        for ident in catalog.parts(kind):
            part = build_part(kind, ident)
            for name in type(part).__struct_fields__:
                fig = getattr(part, name)
                if hasattr(fig, "kind"):
                    yield ident, f"{kind}.{name}", fig


def test_every_catalog_figure_has_a_kind_and_a_registered_source():
    registry = catalog.sources()
    missing = [
        f"{ident} {key}: {fig.source!r}"
        for ident, key, fig in _all_figures()
        if fig.source not in registry
    ]
    assert not missing, missing


def test_every_source_has_a_title_and_a_kind():
    for ident, entry in catalog.sources().items():
        assert entry.get("title"), ident
        assert entry.get("kind") in {
            "specification",
            "measurement",
            "article",
            "paper",
            "code",
            "derivation",
        }, ident
        if entry["kind"] in {"measurement", "paper", "code"}:  # must be traceable
            assert str(entry.get("url", "")).startswith("https://"), ident


def test_measured_figures_say_how_they_were_measured():
    for ident, key, fig in _all_figures():
        if fig.kind is Kind.MEASURED:
            assert fig.note, f"{ident} {key} is measured but the note does not say how"


def test_article_reference_is_exactly_the_articles_figures():
    s = load_system("article-reference")
    assert s.gpu.memory_bandwidth.value == 2e12
    assert s.link.h2d_bandwidth.value == 32e9
    assert s.host.memory_bandwidth.value == 90e9
    assert s.storage.read_bandwidth.value == 7e9
    for fig in (
        s.gpu.memory_bandwidth,
        s.link.h2d_bandwidth,
        s.host.memory_bandwidth,
        s.storage.read_bandwidth,
    ):
        assert fig.kind is Kind.ASSUMED and fig.source == "kvoffload-article"
    assert "A100" in s.gpu.name and "80" in s.gpu.name


def test_real_a100_differs_from_the_article_where_measurements_say_so():
    article, real = load_system("article-reference"), load_system("a100-80gb-sxm-pcie4")
    assert real.link.raw_bandwidth.value == 31.5e9
    assert real.link.h2d_bandwidth.kind is Kind.MEASURED
    assert real.link.h2d_bandwidth.value < article.link.h2d_bandwidth.value
    assert real.gpu.memory == article.gpu.memory


def test_link_generations_double():
    raw = [build_part("link", f"pcie{g}-x16").raw_bandwidth.value for g in (3, 4, 5, 6)]
    for lo, hi in itertools.pairwise(raw):
        assert 1.9 < hi / lo < 2.1
    c2c = build_part("link", "nvlink-c2c")
    assert c2c.h2d_bandwidth.value > 5 * build_part("link", "pcie5-x16").h2d_bandwidth.value


def test_gpu_memory_capacities_are_vendor_figures():
    gpus = {i: build_part("gpu", i) for i in GPU_IDS}
    # GPU memory "GB" ratings are binary in practice (an "80 GB" A100 reports 81920 MiB)
    assert gpus["a100-80gb-sxm"].memory.value == 80 * 2**30
    assert gpus["h200"].memory.value == 141 * 2**30
    assert gpus["rtx-3070-ti"].memory.value == 8 * 2**30
    assert gpus["t4"].memory.value == 16 * 2**30
    assert gpus["h100-sxm"].memory_bandwidth.value == 3.35e12


def test_attention_rate_defaults_to_the_streaming_rate_and_may_not_exceed_the_memory():
    t4 = load_system("t4-pcie3").gpu
    assert t4.attention_rate < t4.streaming_bandwidth < t4.memory_bandwidth.value
    plain = build_part("gpu", "t4")
    assert plain.attention_rate == plain.streaming_bandwidth
    too_fast = {"value": "400 GB/s", "kind": "assumed", "source": "kvoffload-assumption"}
    with pytest.raises(Exception, match="attention_bandwidth"):
        build_part("gpu", {"base": "t4", "attention_bandwidth": too_fast})


def test_a_fitted_figure_names_its_machine_and_only_a_fitted_one_does():
    from kvoffload.inputs.figures import Kind, parse_figure
    from kvoffload.inputs.units import Dim

    raw = {"value": "79 GB/s", "kind": "fitted", "source": "flexllmgen-cost-model"}
    with pytest.raises(ValueError, match="names the machine"):
        parse_figure(raw, Dim.BANDWIDTH, lo=1e6, hi=1e15)
    fig = parse_figure({**raw, "machine": "GCP T4"}, Dim.BANDWIDTH, lo=1e6, hi=1e15)
    assert fig.kind is Kind.FITTED and fig.to_json()["machine"] == "GCP T4"
    with pytest.raises(ValueError, match="names the machine"):
        parse_figure(
            {**raw, "kind": "measured", "machine": "GCP T4"}, Dim.BANDWIDTH, lo=1e6, hi=1e15
        )


def test_the_t4_testbeds_fits_are_fitted_not_measured():
    t4 = load_system("t4-pcie3")
    for fig in (
        t4.gpu.attention_bandwidth,
        t4.gpu.compute_efficiency,
        t4.link.h2d_bandwidth,
        t4.host.attention_flops,
    ):
        assert fig.kind.value == "fitted" and fig.machine and fig.source == "flexllmgen-cost-model"


def test_pytorchs_cpu_attention_rate_is_its_own_figure_not_the_cpus_rate():
    """FlexGen's fitted cpu_flops is PyTorch's attention on the CPU: the FlexGen and ZeRO
    testbeds attend at it, while the CPU's own rate (llama.cpp's and KTransformers' kernels)
    stays the host's; a host without the figure attends at its CPU rate."""
    for system in ("t4-pcie3", "a6000-lambda"):
        host = load_system(system).host
        assert host.attention_rate == pytest.approx(12.3e9)
        assert host.flops.value > 100 * host.attention_rate
    plain = load_system("rtx-4090-desktop").host
    assert plain.attention_flops is None and plain.attention_rate == plain.flops.value


def _host_part(**extra: object) -> object:
    raw = {"name": "h", "memory": "512 GB", "memory_bandwidth": "480 GB/s", "flops": "1 TFLOP/s"}
    return build_part("host", {**raw, **extra})


def test_sockets_split_the_whole_machines_bandwidth_and_a_link_needs_two():
    """A two-socket host's memory_bandwidth is the machine's; each socket reads half of it."""
    two = _host_part(sockets=2, cross_socket_bandwidth="100 GB/s")
    assert two.socket_bandwidth == pytest.approx(240e9)
    assert _host_part().socket_bandwidth == 480e9
    with pytest.raises(InputError, match="cross_socket_bandwidth"):
        _host_part(cross_socket_bandwidth="100 GB/s")


def test_reserved_memory_is_the_figure_or_the_default():
    """The OS keeps 4 GiB plus 1/64 of the memory unless the profile says."""
    assert _host_part().reserved_memory == pytest.approx(4 * 2**30 + 512e9 / 64)
    assert _host_part(memory_reserved="0 GB").reserved_memory == 0.0
