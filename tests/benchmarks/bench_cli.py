"""Benchmark: how long the CLI takes to refuse bad input, and to answer a kv query.

Run with `make bench`. Prints figures; asserts nothing (speed is measured here, not tested).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.test_cli import BAD_PROFILES


def _time(args: list[str], repeat: int = 3) -> float:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kvoffload", *args], capture_output=True, check=False)
        runs.append(time.perf_counter() - t0)
    return min(runs)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        times = {}
        for case, (text, _) in sorted(BAD_PROFILES.items()):
            path = Path(tmp) / f"{case}.yaml"
            path.write_text(text)
            times[case] = _time(["hardware", "validate", str(path)], repeat=1)
    worst = max(times, key=times.get)
    print(f"bad_input_cases: {len(times)}")
    print(f"bad_input_median_s: {statistics.median(times.values()):.3f}")
    print(f"bad_input_worst_s: {times[worst]:.3f} ({worst})")
    print(f"kv_query_s: {_time(['kv', 'llama-3.1-8b', '--seq', '128000', '--json']):.3f}")
    print(f"hardware_show_s: {_time(['hardware', 'show', 'a100-80gb-sxm-pcie4', '--json']):.3f}")


if __name__ == "__main__":
    main()
