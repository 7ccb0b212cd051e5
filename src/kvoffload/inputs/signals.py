"""Stop a command cleanly on Ctrl-C, kill or a closed terminal: one ``Interrupted`` per process."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

# the signals that stop a command cleanly: Ctrl-C, kill, and a closed terminal
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived: raised in the main thread so every ``finally`` cleans up.

    A KeyboardInterrupt, so that no ``except Exception`` swallows it and the code that handles
    Ctrl-C (kill the kernels, keep the last site) handles SIGTERM and SIGHUP too; its message
    is the signal's name.
    """

    def __init__(self, signum: int):
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(self.name)


_stopping: list[int] = []  # the signal that stopped the outermost block, while it cleans up
_depth = 0  # blocks entered in the main thread and not yet left


def _stop(signum: int, _frame: object) -> None:
    if not _stopping:  # not SIG_IGN: a signal already pending would then warn on stderr
        _stopping.append(signum)
        raise Interrupted(signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGINT, SIGTERM and SIGHUP into ``Interrupted`` while the block runs.

    The first signal raises; any later one does nothing until the outermost block is left, so
    that the clean-up it started (a scratch file removed, threads joined, kernels killed) runs
    to its end. A signal ignored when the block starts stays ignored (``nohup``, a background
    job); a nested block keeps the outer one's handlers; outside the main thread, where Python
    cannot set handlers, the block runs as it is.
    """
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {
        sig: signal.signal(sig, _stop)
        for sig in STOP_SIGNALS
        if signal.getsignal(sig) not in (signal.SIG_IGN, _stop)
    }
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if not _depth:
            _stopping.clear()
