"""``kvoffload measure``: measure this machine and write a hardware profile."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvoffload.cli.output import progress_steps
from kvoffload.inputs.errors import InputError


def measure(args: argparse.Namespace) -> int:
    """Measure, write the profile and print what was measured; 128 + the signal when stopped."""
    import socket

    from kvoffload.inputs import catalog
    from kvoffload.inputs.detect import DETECT, detect
    from kvoffload.inputs.signals import Interrupted, stop_on_signals
    from kvoffload.studies import measure

    base_raw = detect() if args.base == DETECT else None  # this machine's parts as the base
    if base_raw is None and args.base not in catalog.systems():
        raise InputError(f"unknown system id {args.base!r}", field="--base")
    directory = Path(args.dir)
    if not directory.is_dir():
        raise InputError("no such directory", field="--dir", file=str(directory))
    host = socket.gethostname().split(".")[0].lower() or "this-machine"
    out = Path(args.out or f"measured-{host}.yaml")
    measure.check_out(out)  # before minutes of measuring, not after
    plan = measure.Plan.quick() if args.quick else measure.Plan.full()
    steps = 5 + 1 + len(plan.request_sizes) * len(plan.queue_depths) + len(plan.gpu_sizes) + 2
    ident = "measured-" + "".join(c if c.isalnum() else "-" for c in host)
    progress, done = progress_steps(steps, quiet=args.quiet)
    try:
        # Ctrl-C, kill and a closed terminal stop it cleanly: the scratch file and any
        # half-written profile are removed on the way out
        with stop_on_signals():
            try:
                report = measure.run(quick=args.quick, directory=directory, progress=progress)
            finally:
                done()
            # validated against the hardware schema: a profile that would not load is never written
            raw = measure.profile(
                report,
                base=args.base,
                ident=ident,
                name=f"{host}, measured by kvoffload",
                base_raw=base_raw,
            )
            measure.write_profile(raw, out)
    except Interrupted as stop:
        print(
            f"kvoffload: measure stopped by {stop.name}: its scratch file was removed and "
            "no profile was written",
            file=sys.stderr,
        )
        return 128 + stop.signum
    for line in measure.summarise(report):
        print(line)
    print(f"profile: {out}  (use it with: kvoffload run --hardware {out} --chapter 03)")
    return 0
