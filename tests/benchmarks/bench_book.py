"""Benchmark the book pipeline: cold build, warm rebuild, one chapter for a new profile.

Run with `make bench`. Works on a copy of the sources in a temporary folder, so the working
tree's book is untouched. Prints figures; asserts nothing.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from kvoffload.build.profile_run import run_for_profile
from kvoffload.build.site import build_book
from tests.conftest import copy_book_sources

PROFILE = """id: bench-box
name: "Benchmark box: RTX 4090 on a 12 GB/s link"
gpu: {base: rtx-4090}
link: {base: pcie4-x16, h2d_bandwidth: 12 GB/s, d2h_bandwidth: 11 GB/s}
host: {base: desktop-ddr5-2ch}
storage: {base: nvme-gen4}
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = copy_book_sources(Path(tmp) / "book")
        t0 = time.perf_counter()
        cold = build_book(root, None, progress=False)
        t_cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        warm = build_book(root, None, progress=False)
        t_warm = time.perf_counter() - t0
        profile = Path(tmp) / "bench.yaml"
        profile.write_text(PROFILE)
        t0 = time.perf_counter()
        run_for_profile(
            root, str(profile), chapter_keys=["01"], out=Path(tmp) / "run", progress=False
        )
        t_one = time.perf_counter() - t0
    print(f"cold_build_s: {t_cold:.1f} ({cold.executed} chapter runs executed)")
    print(f"warm_rebuild_s: {t_warm:.2f} ({warm.executed} executed, site rebuilt: {warm.built})")
    print(f"warm_over_cold: {t_warm / t_cold:.3f}")
    print(f"one_chapter_new_profile_s: {t_one:.1f} (execute + offline page)")


if __name__ == "__main__":
    main()
