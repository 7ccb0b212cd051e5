"""Faults around a book build: Ctrl-C, SIGTERM and SIGHUP stop it at once and leave no process
behind, the last site and the finished runs stay; two builds never share a checkout; the site is
swapped in without an instant where it is missing."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from kvoffload.bookbuild.jupyterbook import swap_in
from kvoffload.bookbuild.lock import exclusive
from kvoffload.bookbuild.profiles import ordered_profiles, plan, resolve_profile
from kvoffload.bookbuild.runner import cached, chapters
from kvoffload.bookbuild.site import EXECUTED, LOCK
from tests.support.chapters import write_chapter


def _checkout(root: Path) -> Path:
    """A checkout whose first chapter is quick and whose second sleeps, with an old site."""
    (root / "notebooks").mkdir(parents=True)
    (root / "_toc.yml").write_text("format: jb-book\nroot: index\n")
    (root / "_config.yml").write_text("title: t\n")
    for name, code in (
        ("01_quick", "print(hardware)"),
        ("02_slow", "import time\ntime.sleep(120)"),
    ):
        write_chapter(root, name, code, prose="")
    site = root / "_build" / "html"
    site.mkdir(parents=True)
    (site / "index.html").write_text("the last good site")
    return root


def _book(root: Path, tmp: Path | None = None) -> subprocess.Popen:
    """Start ``kvoffload book`` in ``root``, with ``tmp`` as its temporary folder if given."""
    env = None if tmp is None else {**os.environ, "TMPDIR": str(tmp)}
    return subprocess.Popen(
        [sys.executable, "-m", "kvoffload", "book", "--quiet", "--jobs", "2"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, as a shell's foreground job is
    )


def _quick_jobs(root: Path):
    profiles = [resolve_profile(p) for p in ordered_profiles(None)]
    return [
        j
        for j in plan(root, profiles, root / EXECUTED, chapters(root))
        if "quick" in j.profile + j.chapter.name
    ]


def _command(p: psutil.Process) -> str:
    """Return a process's command line, or "" once it has gone (children come and go)."""
    try:
        return " ".join(p.cmdline())
    except psutil.NoSuchProcess:  # ZombieProcess too
        return ""


def _alive(p: psutil.Process) -> bool:
    """True while the process runs and is not a zombie."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_for_sleeping_kernels(proc: subprocess.Popen, root: Path, timeout: float = 240) -> list:
    """Wait until every quick run is stored and two kernels run the slow chapter."""
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        kernels = [p for p in parent.children(recursive=True) if "ipykernel" in _command(p)]
        if len(kernels) == 2 and all(cached(j) for j in _quick_jobs(root)):
            time.sleep(1)  # both are inside the slow chapter's sleep by now
            return parent.children(recursive=True)
        time.sleep(0.2)
    raise AssertionError("the build never reached the slow chapter")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["Ctrl-C", "SIGTERM", "SIGHUP"])
def test_an_interrupt_stops_the_build_at_once_and_leaves_nothing_running(tmp_path, how):
    root = _checkout(tmp_path)
    # the system's temporary folder, as a build's (pytest's is too deep for the kernels' sockets)
    tmp = Path(tempfile.mkdtemp(prefix="kvt-"))
    proc = _book(root, tmp)
    try:
        children = _wait_for_sleeping_kernels(proc, root)
        assert children
        started = time.monotonic()
        if how == "Ctrl-C":  # the terminal sends SIGINT to the whole foreground group
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(getattr(signal, how))
        _, err = proc.communicate(timeout=5)
        assert time.monotonic() - started <= 5
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    expected = {"Ctrl-C": 130, "SIGTERM": 143, "SIGHUP": 129}[how]
    assert proc.returncode == expected, err
    assert len(err.strip().splitlines()) == 1 and "interrupted" in err, err
    time.sleep(0.5)
    alive = [p for p in children if _alive(p)]
    assert not alive, [_command(p) for p in alive]
    left = sorted(p.name for p in tmp.iterdir())  # the kernels' folders went with them
    shutil.rmtree(tmp, ignore_errors=True)
    assert left == []
    # the last site is untouched, the finished runs stay: the next build resumes from them
    assert (root / "_build" / "html" / "index.html").read_text() == "the last good site"
    assert all(cached(j) for j in _quick_jobs(root))


def test_a_second_build_in_the_same_checkout_is_refused_in_one_line(tmp_path):
    root = _checkout(tmp_path)
    with exclusive(root / LOCK, "kvoffload book"):
        proc = subprocess.run(
            [sys.executable, "-m", "kvoffload", "book", "--quiet"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "already running" in lines[0] and str(os.getpid()) in lines[0]
    assert (root / "_build" / "html" / "index.html").read_text() == "the last good site"
    # the lock ends with its holder: the next one may take it
    with exclusive(root / LOCK, "kvoffload book"):
        pass


def test_the_site_exists_at_every_instant_of_a_swap(tmp_path):
    target = tmp_path / "html"
    target.mkdir()
    (target / "index.html").write_text("0")
    missing = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if not (target / "index.html").is_file():
                missing.append(time.monotonic())

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for i in range(1, 200):
            new = tmp_path / "html.new"
            new.mkdir()
            (new / "index.html").write_text(str(i))
            swap_in(new, target)
    finally:
        done.set()
        watcher.join()
    assert not missing
    assert (target / "index.html").read_text() == "199"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["html"]  # no old site left behind
