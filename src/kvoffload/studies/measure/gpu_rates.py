"""The GPU, with PyTorch when it has CUDA: host-device copies, device memory, one attention step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvoffload.inputs.hardware import Gpu, Link
from kvoffload.inputs.units import format_bytes, format_seconds
from kvoffload.studies.measure.plan import (
    Plan,
    Report,
    figure_key,
    gbps,
    measured_figure,
    plain_note,
)


def gpu(plan: Plan, report: Report, progress: Callable[[str], None]) -> None:
    """Measure host↔device copies, device memory bandwidth and one attention step, with PyTorch."""
    try:
        import torch
    except ImportError:
        report.skipped.append("GPU: PyTorch is not installed, so no GPU figure was measured")
        return
    if not torch.cuda.is_available():
        report.skipped.append("GPU: PyTorch has no CUDA device here, so no GPU figure was measured")
        return
    dev = torch.device("cuda")

    def timed(fn: Callable[[], Any], repeat: int = 5) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(repeat):
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            best = min(best, start.elapsed_time(end) / 1e3)
        return best

    rows = []
    for size in plan.gpu_sizes:
        progress(f"GPU: copies of {format_bytes(size, binary=True)}")
        d = torch.empty(size, dtype=torch.uint8, device=dev)
        for pinned in (True, False):
            h = torch.empty(size, dtype=torch.uint8, pin_memory=pinned)
            h2d = size / timed(lambda h=h, d=d, nb=pinned: d.copy_(h, non_blocking=nb))
            d2h = size / timed(lambda h=h, d=d, nb=pinned: h.copy_(d, non_blocking=nb))
            rows.append(
                {"bytes": size, "pinned": pinned, "h2d_gb_s": h2d / 1e9, "d2h_gb_s": d2h / 1e9}
            )
    report.tables["gpu_copies"] = rows
    big = max(plan.gpu_sizes)
    pinned_big = next(r for r in rows if r["bytes"] == big and r["pinned"])
    pageable_big = next(r for r in rows if r["bytes"] == big and not r["pinned"])
    smallest = next(r for r in rows if r["bytes"] == min(plan.gpu_sizes) and r["pinned"])
    latency = max(
        min(plan.gpu_sizes) / (smallest["h2d_gb_s"] * 1e9)
        - min(plan.gpu_sizes) / (pinned_big["h2d_gb_s"] * 1e9),
        1e-7,
    )
    report.figures[figure_key(Link, "h2d_bandwidth")] = measured_figure(
        gbps(pinned_big["h2d_gb_s"] * 1e9),
        f"torch pinned copy_ of {format_bytes(big, binary=True)}",
    )
    report.figures[figure_key(Link, "d2h_bandwidth")] = measured_figure(
        gbps(pinned_big["d2h_gb_s"] * 1e9),
        f"torch pinned copy_ of {format_bytes(big, binary=True)}",
    )
    report.figures[figure_key(Link, "pageable_bandwidth")] = measured_figure(
        gbps(pageable_big["h2d_gb_s"] * 1e9),
        f"torch pageable copy_ of {format_bytes(big, binary=True)}",
    )
    report.figures[figure_key(Link, "latency")] = measured_figure(
        format_seconds(latency), "smallest pinned copy minus its share of the large-copy rate"
    )
    progress("GPU: device memory bandwidth")
    x = torch.empty(big // 2, dtype=torch.uint8, device=dev)
    y = torch.empty_like(x)
    hbm = 2 * x.numel() / timed(lambda: y.copy_(x))
    report.figures[figure_key(Gpu, "memory_bandwidth_achievable")] = measured_figure(
        gbps(hbm), "torch device copy_, read + write counted"
    )
    progress("GPU: one attention step over a cache on the GPU and streamed from pinned host memory")
    heads, dim, tokens, layers = 8, 128, 32768, 8
    q = torch.randn(1, 32, 1, dim, device=dev, dtype=torch.float16)
    kv_host = [
        torch.randn(2, 1, heads, tokens, dim, dtype=torch.float16).pin_memory()
        for _ in range(layers)
    ]
    kv_dev = [t.to(dev) for t in kv_host]
    buf = [torch.empty_like(kv_dev[0]) for _ in range(2)]
    stream = torch.cuda.Stream()

    def attend(kv: Any) -> Any:
        k = kv[0].repeat_interleave(4, dim=1)
        v = kv[1].repeat_interleave(4, dim=1)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    on_gpu = timed(lambda: [attend(kv) for kv in kv_dev], 3)

    def streamed() -> None:
        for kv in kv_host:
            buf[0].copy_(kv, non_blocking=True)
            attend(buf[0])

    def prefetched() -> None:
        with torch.cuda.stream(stream):
            buf[0].copy_(kv_host[0], non_blocking=True)
        for i in range(layers):
            torch.cuda.current_stream().wait_stream(stream)
            if i + 1 < layers:
                with torch.cuda.stream(stream):
                    buf[(i + 1) % 2].copy_(kv_host[i + 1], non_blocking=True)
            attend(buf[i % 2])

    report.tables["gpu_attention_step"] = [
        {"placement": "KV on the GPU", "ms": on_gpu * 1e3, "layers": layers, "tokens": tokens},
        {
            "placement": "KV streamed from pinned host memory",
            "ms": timed(streamed, 3) * 1e3,
            "layers": layers,
            "tokens": tokens,
        },
        {
            "placement": "streamed, next layer prefetched on a second stream",
            "ms": timed(prefetched, 3) * 1e3,
            "layers": layers,
            "tokens": tokens,
        },
    ]
    report.notes.append(
        plain_note(f"GPU: {torch.cuda.get_device_name(0)}, PyTorch {torch.__version__}")
    )
