"""Run ``kvoffload ARGS`` in a process of its own, forked from a server that imported it once.

A real ``python -m kvoffload`` spends about 0.3 CPU-s starting Python and importing numpy and
the package before it reads its first argument; the suite runs over a hundred of them. Each run
here is still a separate process, started by multiprocessing's fork server (one per test
worker, single-threaded, with the package imported): it gets the caller's environment, working
folder and ``sys.argv`` as ``python -m kvoffload`` would, writes to its own stdout and stderr
(files the caller reads back), and its exit status is ``main``'s. What only a fresh interpreter
shows (what a command imports, the installed console script) is tested with real processes
(tests/cli/test_install.py).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# what every command imports before its first argument: the server holds them
PRELOAD = ["numpy", "yaml", "kvoffload.cli", "kvoffload.inputs.catalog"]
_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload([*PRELOAD, __name__])


def _child(args: list[str], env: dict[str, str], cwd: str, out: str, err: str) -> None:
    """Run the command line as ``python -m kvoffload`` does; exit with its status."""
    code = 1
    try:
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        for fd, path in ((1, out), (2, err)):
            os.dup2(os.open(path, os.O_WRONLY | os.O_TRUNC), fd)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
        import kvoffload

        sys.argv = [str(Path(kvoffload.__file__).with_name("__main__.py")), *args]
        from kvoffload.cli import main

        try:
            code = main(args)
        except SystemExit as exc:  # argparse: the status the interpreter would give
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:  # a message: printed, status 1
                print(exc.code, file=sys.stderr)
                code = 1
    except BaseException:  # an uncaught error: the interpreter's traceback and status 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)


def run_cli(args: list[str], timeout: float, env: dict[str, str]) -> tuple[int, str, str]:
    """Return (exit status, stdout, stderr) of ``kvoffload ARGS`` run in a forked process.

    Raise subprocess.TimeoutExpired, as subprocess.run does, when it runs past ``timeout``.
    """
    with tempfile.TemporaryDirectory(prefix="kvoffload-cli-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        out.touch()
        err.touch()
        proc = _context.Process(
            target=_child, args=(args, env, os.getcwd(), str(out), str(err)), daemon=True
        )
        proc.start()
        proc.join(timeout)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
            raise subprocess.TimeoutExpired(["kvoffload", *args], timeout)
        code = proc.exitcode  # -N for a signal, as subprocess gives it
        proc.close()
        read = lambda p: p.read_text(encoding="utf-8")  # noqa: E731
        return code, read(out), read(err)
