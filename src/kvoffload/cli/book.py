"""``kvoffload book`` (the whole book) and ``kvoffload run`` (chapters for one machine)."""

from __future__ import annotations

import argparse
from pathlib import Path

from kvoffload.bookbuild.extras import require_book_extras
from kvoffload.inputs.errors import InputError


def book(args: argparse.Namespace) -> int:
    """Build the book and print what was executed and where the site is."""
    require_book_extras()
    from kvoffload.bookbuild.runner import find_root
    from kvoffload.bookbuild.site import build_book

    root = find_root()
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()] if args.profiles else None
    result = build_book(root, profiles, n_jobs=args.jobs, progress=not args.quiet)
    executed = result.executed
    cached = len(result.outcomes) - executed
    print(f"chapters: {executed} executed, {cached} unchanged (cached)")
    if not result.built:
        print("site: nothing changed, the site was not rebuilt")
    print(f"open {result.html / 'index.html'}  ({result.seconds:.1f} s)")
    return 0


def run_out(out: Path) -> Path:
    """Return ``out``; InputError when it is not a folder or could not be created or written."""
    from kvoffload.inputs.files import check_writable

    where = {"file": str(out), "field": "--out"}
    existing = out.absolute()
    while not existing.exists() and existing != existing.parent:  # the folder it would go in
        existing = existing.parent
    if not existing.is_dir():
        what = (
            "exists and is not a folder" if existing == out.absolute() else f"{existing} is a file"
        )
        raise InputError(what, **where)
    check_writable(existing, **where)
    return out


def _detected_file(out: Path | None) -> str:
    """Write this machine's detected profile where the run's output goes; return its path.

    ``out`` is claimed first (refused, with nothing written, when it holds the user's files), so
    the profile in it does not make the run refuse its own folder."""
    from kvoffload.bookbuild.profile_run import claim_folder
    from kvoffload.inputs.detect import detect
    from kvoffload.studies.measure import write_profile

    if out is not None:
        claim_folder(out)
    folder = out or Path("kvoffload-run")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "detected-profile.yaml"
    header = "# Written by `kvoffload run --hardware detect`: each figure's note says its source.\n"
    write_profile(detect(), path, header=header)
    print(f"profile:  {path} (detected)")
    return str(path)


def run(args: argparse.Namespace) -> int:
    """Re-run chapters for one machine and print the notebooks and pages written."""
    require_book_extras()
    from kvoffload.bookbuild.profile_run import run_for_profile
    from kvoffload.bookbuild.runner import find_root

    root = find_root()  # outside a checkout: refused before anything is written
    out = run_out(Path(args.out)) if args.out else None
    hardware = _detected_file(out) if args.hardware == "detect" else args.hardware
    try:
        result = run_for_profile(
            root,
            hardware,
            model=args.model,
            chapter_keys=args.chapter,
            out=out,
            n_jobs=args.jobs,
            progress=not args.quiet,
        )
    except OSError as exc:  # a full disk, a folder changed under it: one line, not a traceback
        where = exc.filename or out or "kvoffload-run"
        raise InputError(exc.strerror or str(exc), file=str(where)) from None
    for nb in result.notebooks:
        print(f"notebook: {nb}")
    for nb in result.notebooks:
        print(f"page:     {result.html / (nb.stem + '.html')}")
    return 0
