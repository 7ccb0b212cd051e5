"""``kvoffload hardware``: list the catalog's profiles, show one with its sources, validate a file."""

from __future__ import annotations

import argparse

from kvoffload.cli.output import print_json


def list_profiles(_: argparse.Namespace) -> int:
    """Print each catalog system profile's id and name."""
    from kvoffload.inputs.hardware import load_system, system_ids

    width = max(len(i) for i in system_ids())
    for ident in system_ids():
        system = load_system(ident)
        print(f"{ident:<{width}}  {system.name}")
    return 0


def show_profile(args: argparse.Namespace) -> int:
    """Print a profile's figures with their kind and source, or its JSON."""
    from kvoffload.inputs import catalog
    from kvoffload.inputs.hardware import load_system

    system = load_system(args.profile)
    if args.json:
        print_json(system.to_json())
        return 0
    registry = catalog.sources()
    print(f"{system.id}: {system.name}")
    if system.description:
        print(f"  {system.description}")
    print(f"  (from {system.origin})")
    current = ""
    parts = system.parts()
    for key, fig in system.figures().items():
        part, field = key.split(".", 1)
        if part != current:
            current = part
            print(f"{part}: {parts[part].name}")
        source = registry.get(fig.source, {}).get("title", fig.source) or "no source given"
        print(f"  {field:<28} {fig!s:<26} {fig.kind.value:<9} {source}")
    return 0


def validate_profile(args: argparse.Namespace) -> int:
    """Check a profile file and print how many figures of each kind it holds."""
    from kvoffload.inputs.hardware import load_system

    system = load_system(args.file)
    counts: dict[str, int] = {}
    for fig in system.figures().values():
        counts[fig.kind.value] = counts.get(fig.kind.value, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    print(f"{args.file}: valid profile '{system.id}' ({summary})")
    return 0


def detect_profile(args: argparse.Namespace) -> int:
    """Print this machine's detected profile (YAML, or JSON), or write it to ``--out``."""
    import yaml

    from kvoffload.inputs.detect import detect
    from kvoffload.inputs.hardware import build_system

    raw = detect()
    build_system(raw, ident=raw["id"], origin="detected")  # never print one that would not load
    if args.out:
        from pathlib import Path

        from kvoffload.studies.measure import write_profile

        header = (
            "# Written by `kvoffload hardware detect`: each figure's note says where it is from.\n"
        )
        write_profile(raw, Path(args.out), header=header)
        print(f"profile: {args.out}  (use it with: kvoffload run --hardware {args.out})")
    elif args.json:
        print_json(raw)
    else:
        print(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True), end="")
    return 0
