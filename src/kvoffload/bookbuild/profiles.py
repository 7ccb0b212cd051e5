"""Which profiles a build runs the chapters for, and the one job per chapter and profile."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kvoffload.bookbuild.runner import Chapter, Job, chapters, check_parameters, per_profile
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.hardware import System, load_system, system_ids

REFERENCE = "article-reference"
SECOND = "a100-80gb-sxm-pcie4"  # the article's machine with real figures: listed first after it


@dataclass(frozen=True)
class Profile:
    """A hardware profile to run the chapters for: its id and what the chapters are given."""

    id: str
    hardware: str  # the parameter value: a catalog id or an absolute profile path
    system: System
    files: tuple[Path, ...] = ()


def resolve_profile(ref: str) -> Profile:
    """Return the profile for a catalog id or a profile file path."""
    system = load_system(ref)
    if system.origin == "catalog":
        return Profile(system.id, ref, system)
    path = Path(ref).resolve()
    return Profile(system.id, str(path), system, (path,))


def ordered_profiles(ids: Sequence[str] | None) -> list[str]:
    """Return profile ids with the reference first and its real-figure twin second."""
    chosen = list(dict.fromkeys(ids or system_ids()))
    for ident in chosen:
        if ident not in system_ids():
            raise InputError(f"unknown system id {ident!r}", field="--profiles")
    if REFERENCE not in chosen:
        chosen.insert(0, REFERENCE)
    order = {REFERENCE: 0, SECOND: 1}
    return sorted(chosen, key=lambda i: (order.get(i, 2), system_ids().index(i)))


def plan(
    root: Path,
    profiles: Sequence[Profile],
    out_dir: Path,
    chosen: Sequence[Chapter] | None = None,
    params: dict | None = None,
) -> list[Job]:
    """Return one job per chapter and profile, refusing parameters a chapter does not declare."""
    jobs = []
    for chapter in chosen or chapters(root):
        if not per_profile(chapter):  # rendered once, on the reference machine's path
            check_parameters(chapter, params or {})
            out = out_dir / profiles[0].id / f"{chapter.name}.ipynb"
            jobs.append(Job(chapter, profiles[0].id, dict(params or {}), out))
            continue
        for p in profiles:
            values = {"hardware": p.hardware, **(params or {})}
            check_parameters(chapter, values)
            jobs.append(
                Job(chapter, p.id, values, out_dir / p.id / f"{chapter.name}.ipynb", p.files)
            )
    return jobs
