"""Run the command line: parse, call the command's handler, turn errors into one line and a status."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from kvoffload.bookbuild.errors import BuildError, ChapterError
from kvoffload.cli.parser import build_parser
from kvoffload.inputs.errors import InputError, one_line


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; bad input exits 2 with one line on stderr."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InputError as exc:
        print(f"kvoffload: error: {exc}", file=sys.stderr)
        return 2
    except (ChapterError, BuildError) as exc:
        print(f"kvoffload: build failed: {one_line(' '.join(str(exc).split()))}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. piped into head
        return 0
    except KeyboardInterrupt as exc:  # Ctrl-C, or inputs.signals.Interrupted (SIGTERM, SIGHUP too)
        return _interrupted(args.command, exc)


def _interrupted(command: str, exc: KeyboardInterrupt) -> int:
    """Print one line for an interrupted command; return 128 + the signal's number."""
    import signal

    try:  # Interrupted's message is the signal's name; a plain Ctrl-C has no message
        stop = signal.Signals[str(exc)]
    except KeyError:
        stop = signal.SIGINT
    kept = (
        "; finished chapters stay cached and the last site is kept"
        if command in ("book", "run")
        else ""
    )
    print(f"kvoffload: interrupted ({stop.name}){kept}", file=sys.stderr)
    return 128 + stop.value
