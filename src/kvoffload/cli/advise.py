"""``kvoffload advise``: what to run on a machine, with which flags, ranked by decode speed."""

from __future__ import annotations

import argparse
import sys

from kvoffload.cli.output import print_json
from kvoffload.inputs.errors import InputError

MAX_BUDGET_MS = 3_600_000.0  # an hour per token: beyond it nothing is interactive


def budget_ms(text: str) -> float:
    """Return a budget per generated token in ms, above 0 and at most an hour (argparse type)."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number of milliseconds") from None
    if not 0 < value <= MAX_BUDGET_MS:  # NaN fails this too
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: from above 0 to {MAX_BUDGET_MS:,.0f} ms")
    return value


def engine_list(text: str) -> tuple[str, ...]:
    """Return the engines to search, from a comma-separated list (argparse type)."""
    from kvoffload.studies.advise_search import ALL_ENGINES as ENGINES

    names = tuple(dict.fromkeys(x.strip() for x in text[:200].split(",") if x.strip()))
    bad = [n for n in names if n not in ENGINES]
    if bad or not names or len(text) > 200:
        shown = ", ".join(repr(n[:40]) for n in bad[:3]) or repr(text[:40])
        raise argparse.ArgumentTypeError(
            f"{shown}: advise searches the engines {', '.join(ENGINES)} (comma-separated)"
        )
    return names


def _table(rows: list[dict[str, str]], commands: list[str]) -> None:
    """Print rows as aligned columns, each followed by its command line, indented."""
    keys = list(rows[0])
    width = {k: max(len(k), *(len(r[k]) for r in rows)) for k in keys}
    print("  ".join(k.ljust(width[k]) for k in keys).rstrip())
    for r, cmd in zip(rows, commands, strict=True):
        print("  ".join(r[k].ljust(width[k]) for k in keys).rstrip())
        print(f"    {cmd}")


def _stand_in_note(system) -> None:
    """Print, under the header, the note that the GPU is a stand-in (hardware detect read none)."""
    from kvoffload.studies.advise import notes

    for note in notes([], system):
        print(f"  note: {note}")


def advise(args: argparse.Namespace) -> int:
    """Print the configurations that run the model on the machine, fastest first."""
    from kvoffload.inputs.hardware import load_system
    from kvoffload.inputs.units import format_number
    from kvoffload.studies.advise import ALL, advise, advise_all, cells, notes
    from kvoffload.studies.advise_search import Workload

    try:
        system = load_system(args.hardware)
    except InputError as exc:
        raise exc.within(field="--hardware") from None
    wl = Workload(args.context, args.batch)
    budget = None if args.budget_ms is None else args.budget_ms / 1e3
    where = f"context {format_number(wl.context)} tokens, batch {wl.batch}"
    if args.model == ALL:
        tty = sys.stderr.isatty() and not args.json
        progress = (lambda m: print(f"advise: {m}", file=sys.stderr, flush=True)) if tty else None
        found = advise_all(system, wl, args.engines, budget, progress)
        if args.json:
            best = [a["best"] for a in found if a["best"] is not None]
            print_json({"hardware": system.id, "context": wl.context, "batch": wl.batch,
                        "models": found, "notes": notes(best, system)})  # fmt: skip
            return 0
        print(f"The fastest configuration of each catalog model on {system.id} ({where})")
        _stand_in_note(system)
        rows, cmds = [], []
        for a in found:
            b = a["best"]
            cell = {"model": a["model"]}
            if b is None:
                rows.append({**cell, **dict.fromkeys(("engine", "weights", "KV", "offload",
                             "tokens/s", "TTFT", "GPU", "host"), "")})  # fmt: skip
                rows[-1]["engine"] = "none fits"
                cmds.append(a["why"])
            else:
                rows.append({**cell, **cells(b)})
                cmds.append(b["command"])
        _table(rows, cmds)
        for note in notes([a["best"] for a in found if a["best"] is not None]):
            print(f"  note: {note}")
        return 0
    try:
        result = advise(system, args.model, wl, args.engines, budget)
    except InputError as exc:
        raise exc.within(field=None if str(exc).startswith("--context") else "--model") from None
    if args.json:
        print_json(result.to_json())
        return 0
    s = result.search
    found = result.rows
    print(
        f"{s.model.id} on {system.id} ({where}): {len(found)} configurations fit "
        f"({s.tried} predicted), fastest first"
    )
    _stand_in_note(system)
    if found:
        _table([{"#": str(r["rank"]), **cells(r)} for r in found], [r["command"] for r in found])
    for note in notes(found):
        print(f"  note: {note}")
    for e, w, k, why in s.left_out:
        print(f"  left out: {e} {w} {k}: {why}".replace("  :", ":"))
    return 0
