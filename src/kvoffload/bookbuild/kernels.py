"""Warm kernels: one IPython kernel per worker runs many notebooks, each in a clean namespace.

A kernel start and the chapters' imports cost more than most chapters compute, so each worker
keeps one kernel for all of its jobs. Before every notebook the kernel's user namespace is
emptied (``%reset -f``) and its working folder restored, so a name defined by one chapter is
never visible to the next; imported modules stay loaded, which is the point. A kernel that died
is replaced before the next job.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

KERNEL_NAME = "python3"
START_TIMEOUT_S = 300  # a busy two-core machine can take over a minute to start one
CELL_TIMEOUT_S = 1200  # no chapter cell computes for 20 minutes: one that does is stuck
STDERR_TAIL_BYTES = 4096  # read of the kernel's own error output when it fails to start
STDERR_QUOTED_CHARS = 600  # the end of it, quoted in the error
# Unix sockets, not TCP: jupyter_client picks TCP ports by binding and releasing them, and a port
# taken by another process before the kernel binds it kills the kernel at start (jupyter/
# jupyter_client#276), which parallel builds and test workers made happen; a socket path longer
# than this (a long TMPDIR) does not fit in sockaddr_un (104 bytes on macOS), so TCP is kept there
MAX_IPC_PATH = 100
RESET_TIMEOUT_S = 60  # emptying the namespace takes milliseconds; a kernel that does not answer
# in this time was broken by the last notebook (a patched module it relies on) and is replaced
# run before every notebook: an empty user namespace, the chapter folder as working folder
_RESET = (
    "get_ipython().run_line_magic('reset', '-f')\n"
    "import os as _kvoffload_os\n"
    "_kvoffload_os.chdir({cwd!r})\n"
    "del _kvoffload_os\n"
    # counted as a fresh kernel counts: this cell ends by adding one, the chapter's first is 1
    "get_ipython().execution_count = 0\n"
)
# run once in a new kernel, before its first notebook: the modules the chapters will import,
# loaded while the caller still prepares (a module a chapter imports stays loaded, as it does
# between two chapters of a warm kernel); one that fails to import is left to the chapter
_PREIMPORT = (
    "import importlib as _kvoffload_importlib\n"
    "for _kvoffload_name in {names!r}:\n"
    "    try:\n"
    "        _kvoffload_importlib.import_module(_kvoffload_name)\n"
    "    except Exception:\n"
    "        pass\n"
    "del _kvoffload_importlib, _kvoffload_name\n"
)

# the folders of the kernels not yet ended: a build stopped by a signal may exit before a kernel
# still starting on its own thread is ended (the kernel then exits with its parent), so what is
# left is removed at exit
_LIVE_FOLDERS: set[Path] = set()


@atexit.register
def _remove_live_folders() -> None:
    for folder in list(_LIVE_FOLDERS):
        shutil.rmtree(folder, ignore_errors=True)


@cache
def _client_class() -> type:
    """Return a NotebookClient that never ends the kernel itself (the Kernel object does).

    nbclient registers an exit hook per run that shuts the kernel down and destroys the zmq
    context; with a kernel shared between runs that hook can block the interpreter's exit.
    """
    from jupyter_core.utils import run_sync
    from nbclient import NotebookClient

    class SharedKernelClient(NotebookClient):
        async def _async_cleanup_kernel(self) -> None:
            return None

        _cleanup_kernel = run_sync(_async_cleanup_kernel)

    return SharedKernelClient


class KernelBroken(RuntimeError):
    """The kernel did not come back clean between two notebooks: start another one."""


@dataclass(frozen=True)
class CellFailure:
    """A notebook cell that raised: its index in the executed notebook, and the error."""

    index: int
    ename: str
    evalue: str


class Kernel:
    """One warm IPython kernel, driven from a single thread."""

    def __init__(self, cwd: Path, on_spawn: Callable[[], None] | None = None) -> None:
        """Start the kernel with ``cwd`` as its working folder; wait until it answers.

        ``on_spawn`` is called once the kernel's process is started, before it answers.
        """
        from nbformat.v4 import new_notebook

        self.cwd = str(cwd)
        # the kernel's connection file, sockets and error output: removed when it ends
        self._dir = Path(tempfile.mkdtemp(prefix="kvoffload-kernel-"))
        _LIVE_FOLDERS.add(self._dir)
        self._km = None
        boot = _client_class()(
            new_notebook(), kernel_name=KERNEL_NAME, startup_timeout=START_TIMEOUT_S
        )
        try:
            boot.create_kernel_manager()
            self._km = boot.km
            if len(str(self._dir / "kernel-ipc-5")) <= MAX_IPC_PATH:
                boot.km.transport = "ipc"
            boot.km.connection_file = str(self._dir / "kernel.json")
            with open(self._dir / "stderr", "wb") as stderr:  # the kernel holds its own copy
                boot.start_new_kernel(cwd=self.cwd, stdout=subprocess.DEVNULL, stderr=stderr)
            if on_spawn is not None:
                on_spawn()
            boot.start_new_kernel_client()
        except Exception as exc:
            tail = self._stderr_tail()
            self.kill()
            said = f"; it wrote: {tail}" if tail else ""
            raise KernelBroken(f"the kernel did not start ({exc}){said}") from exc
        self._kc = boot.kc

    def _stderr_tail(self) -> str:
        """Return the end of the kernel's error output, on one line (empty when none)."""
        try:
            with open(self._dir / "stderr", "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - STDERR_TAIL_BYTES))
                text = f.read(STDERR_TAIL_BYTES).decode("utf-8", "replace")
        except OSError:
            return ""
        return " ".join(text.split())[-STDERR_QUOTED_CHARS:]

    @property
    def _process(self):
        return getattr(getattr(self._km, "provisioner", None), "process", None)

    @property
    def pid(self) -> int | None:
        """Return the kernel's process id (the leader of its own session), if it was started."""
        return getattr(self._process, "pid", None)

    def alive(self) -> bool:
        """True while the kernel's process runs."""
        process = self._process
        return process is not None and process.poll() is None

    def _client(self, nb, timeout: float | None = None):
        client = _client_class()(
            nb,
            km=self._km,
            kernel_name=KERNEL_NAME,
            timeout=timeout,
            record_timing=False,  # no timestamps: the same inputs give the same notebook
            allow_errors=False,
            store_widget_state=False,
            # one stream output per name and cell, whatever pieces the kernel flushed it in (a
            # print's parts arrive as one message or several, by timing)
            coalesce_streams=True,
        )
        client.kc = self._kc
        return client

    def reset(self) -> None:
        """Empty the user namespace and restore the working folder; raise KernelBroken if it fails."""
        from nbformat.v4 import new_code_cell, new_notebook

        nb = new_notebook(cells=[new_code_cell(_RESET.format(cwd=self.cwd))])
        try:
            self._client(nb, timeout=RESET_TIMEOUT_S).execute()
        except Exception as exc:  # a timeout, a dead kernel, an error: this kernel is done
            self.kill()
            raise KernelBroken(f"{type(exc).__name__}: {exc}") from exc

    def preimport(self, names: Sequence[str]) -> None:
        """Import the modules ``names`` in the kernel (each one that fails is skipped)."""
        from nbformat.v4 import new_code_cell, new_notebook

        nb = new_notebook(cells=[new_code_cell(_PREIMPORT.format(names=list(names)))])
        with contextlib.suppress(Exception):  # a broken kernel is found and replaced by run()
            self._client(nb, timeout=CELL_TIMEOUT_S).execute()

    def run(self, nb) -> CellFailure | None:
        """Execute ``nb`` in place in a clean namespace; return the failing cell, if one raised."""
        from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

        self.reset()
        client = self._client(nb, timeout=CELL_TIMEOUT_S)
        started: list[int] = []
        failed: list[int] = []
        client.on_cell_start = lambda cell, cell_index: started.append(cell_index)
        client.on_cell_error = lambda cell, cell_index, execute_reply: failed.append(cell_index)
        try:
            client.execute()
        except CellExecutionError as exc:
            index = failed[0] if failed else -1
            return CellFailure(index, exc.ename, exc.evalue)
        except (CellTimeoutError, DeadKernelError, TimeoutError) as exc:
            self.kill()  # stuck or dead: the next notebook gets a new kernel
            index = started[-1] if started else -1
            if isinstance(exc, DeadKernelError):
                return CellFailure(index, type(exc).__name__, "the kernel died")
            return CellFailure(
                index, type(exc).__name__, f"the kernel gave no answer within {CELL_TIMEOUT_S} s"
            )
        return None

    def kill(self) -> None:
        """Kill the kernel's whole process group at once (used on interrupt and at the end)."""
        pid = self.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # the kernel leads its own session and group
            process = self._process
            if process is not None:
                process.wait()
        shutil.rmtree(self._dir, ignore_errors=True)
        _LIVE_FOLDERS.discard(self._dir)

    def close(self) -> None:
        """Stop the client's channels and end the kernel."""
        try:
            self._kc.stop_channels()
        finally:
            self.kill()  # and its folder: connection file, sockets and error output
            from jupyter_core.utils import run_sync

            # the manager's own sockets; best effort, the kernel is gone either way
            with contextlib.suppress(Exception):
                run_sync(self._km.cleanup_resources)()


class EarlyKernel:
    """A kernel started on a thread of its own before the jobs are known, then handed to them.

    The constructor returns once the kernel's process is started; the kernel's own start (a
    second or more) overlaps the caller's imports and preparation. ``preimport`` names the
    modules the jobs import, loaded as soon as the kernel answers; ``take`` returns the kernel,
    ready. Whoever does not take it calls ``close``.
    """

    def __init__(self, cwd: Path) -> None:
        """Start a kernel in ``cwd`` on a new thread; return when its process runs."""
        self._names: queue.SimpleQueue[list[str]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._kernel: Kernel | None = None  # started and not taken
        self._error: BaseException | None = None
        self._ended = False  # killed or closed: a kernel that starts afterwards is ended
        spawned = threading.Event()
        self._thread = threading.Thread(
            target=self._start, args=(cwd, spawned), name="kvoffload-early-kernel", daemon=True
        )
        self._thread.start()
        spawned.wait(START_TIMEOUT_S)

    def _start(self, cwd: Path, spawned: threading.Event) -> None:
        try:
            kernel = Kernel(cwd, on_spawn=spawned.set)
        except BaseException as exc:  # raised by take(), for the job that needed the kernel
            self._error = exc
            return
        finally:
            spawned.set()
        with self._lock:
            self._kernel = kernel
            ended = self._ended
        if ended:
            kernel.kill()
        else:
            kernel.preimport(self._names.get())

    def preimport(self, names: Sequence[str]) -> None:
        """Import ``names`` in the kernel as soon as it answers (called at most once)."""
        self._names.put(list(names))

    def take(self) -> Kernel:
        """Return the kernel once started and warmed; raise what kept it from starting."""
        self._names.put([])  # nothing (more) to import: do not wait for a list
        self._thread.join()
        with self._lock:
            kernel, self._kernel = self._kernel, None
        if kernel is None:
            raise self._error or KernelBroken("the kernel was closed before it was taken")
        return kernel

    def kill(self) -> None:
        """Kill the kernel now, started or still starting, unless taken (from any thread)."""
        with self._lock:
            self._ended = True
            kernel = self._kernel
        if kernel is not None:
            kernel.kill()

    def close(self) -> None:
        """End the kernel unless it was taken."""
        self.kill()
        self._names.put([])
        self._thread.join()
        with self._lock:
            kernel, self._kernel = self._kernel, None
        if kernel is not None:
            kernel.close()
