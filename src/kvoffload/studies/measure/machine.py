"""Measure this machine: every part it allows, a part that cannot be measured skipped with its reason."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kvoffload.studies.measure.gpu_rates import gpu
from kvoffload.studies.measure.host_rates import host_memory
from kvoffload.studies.measure.plan import Plan, Report, plain_note
from kvoffload.studies.measure.storage_rates import storage


def run(*, quick: bool, directory: Path, progress: Callable[[str], None] | None = None) -> Report:
    """Measure everything this machine allows; a part that cannot be measured is skipped with its reason."""
    return run_plan(Plan.quick() if quick else Plan.full(), directory=directory, progress=progress)


def run_plan(
    plan: Plan, *, directory: Path, progress: Callable[[str], None] | None = None
) -> Report:
    """Measure with an explicit plan (what ``run`` does with the quick or full plan)."""
    report = Report()
    say = progress or (lambda _: None)
    host_memory(plan, report, say)
    try:
        storage(plan, report, say, directory)
    except OSError as exc:
        report.skipped.append(
            plain_note(f"storage: could not measure in {directory}: {exc.strerror or exc}")
        )
    try:
        gpu(plan, report, say)
    except Exception as exc:  # a broken driver must not lose the host and storage figures
        report.skipped.append(plain_note(f"GPU: measurement failed: {type(exc).__name__}: {exc}"))
    return report
