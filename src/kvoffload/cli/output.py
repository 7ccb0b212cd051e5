"""What the commands print: JSON, and the progress of a measurement on stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any


def print_json(obj: Any) -> None:
    """Print ``obj`` as indented JSON, non-ASCII text kept as it is."""
    print(json.dumps(obj, indent=2, ensure_ascii=False))


def progress_steps(total: int, *, quiet: bool) -> tuple[Callable[[str], None], Callable[[], None]]:
    """Return (step, close): a tqdm bar with the book extras, plain lines on stderr without."""
    try:
        from tqdm import tqdm
    except ImportError:  # a core install
        done = 0

        def line(what: str) -> None:
            nonlocal done
            done += 1
            if not quiet:
                print(f"measuring [{done}/{total}] {what}", file=sys.stderr, flush=True)

        return line, lambda: None
    bar = tqdm(total=total, desc="measuring", unit="test", disable=quiet)

    def step(what: str) -> None:
        bar.set_postfix_str(what[:60])
        bar.update(1)

    return step, bar.close
