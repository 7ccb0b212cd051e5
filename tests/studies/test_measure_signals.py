"""Stop signals: `kvoffload measure` stopped by Ctrl-C, kill or a closed terminal leaves no scratch
file and says so in one line; inputs.signals.stop_on_signals keeps an ignored signal ignored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvoffload.inputs.signals import Interrupted, stop_on_signals
from tests.support.paths import REPO

# `kvoffload measure --quick`, with a plan small enough for a test: the host-memory part is
# left out (it is not what these tests stop) and the storage part reads a 32 MiB scratch file
# for half a second per point, nine points, so a signal finds it mid-measurement.
HARNESS = """
import sys
from kvoffload.studies import measure
MiB = 1 << 20
measure.Plan.quick = staticmethod(
    lambda: measure.Plan(8 * MiB, 32 * MiB, 0.5, (4096, 65536, MiB), (1, 4, 16), (65536,))
)
from kvoffload.studies.measure import machine
machine.host_memory = lambda plan, report, progress: None
from kvoffload.cli import main
sys.exit(main(sys.argv[1:]))
"""
SCRATCH = ".kvoffload-measure-*"
WAIT_S = 30  # a hang guard only: each case normally ends in well under a second


def _as_from_a_terminal() -> None:
    """Give the child the default stop signals a shell gives a foreground command.

    A background job (`make test &`) inherits SIGINT ignored, and `measure` keeps an ignored
    signal ignored, as `nohup` expects.
    """
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _start(tmp_path: Path) -> tuple[subprocess.Popen, Path, Path]:
    scratch_dir, out = tmp_path / "scratch", tmp_path / "me.yaml"
    scratch_dir.mkdir()
    cmd = [sys.executable, "-c", HARNESS, "measure", "--quick", "--quiet"]
    proc = subprocess.Popen(
        [*cmd, "--out", str(out), "--dir", str(scratch_dir)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_from_a_terminal,
    )
    deadline = time.monotonic() + WAIT_S
    while not list(scratch_dir.glob(SCRATCH)):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            _, err = proc.communicate()
            pytest.fail(f"the scratch file never appeared (exit {proc.returncode}): {err}")
        time.sleep(0.01)
    return proc, scratch_dir, out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_signal_removes_the_scratch_file_and_says_so_in_one_line(sig, tmp_path):
    proc, scratch_dir, out = _start(tmp_path)
    time.sleep(0.3)  # into the reads, with reader threads running
    proc.send_signal(sig)
    try:
        stdout, stderr = proc.communicate(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"measure did not stop after {sig.name}")
    assert proc.returncode == 128 + sig, stderr
    assert not list(scratch_dir.glob(SCRATCH))
    assert not out.exists() and list(tmp_path.glob(".kvoffload-*")) == []
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0] == (
        f"kvoffload: measure stopped by {sig.name}: its scratch file was removed and "
        "no profile was written"
    )
    assert "Traceback" not in stderr and stdout == ""


def test_more_signals_during_the_clean_up_change_nothing(tmp_path):
    proc, scratch_dir, _ = _start(tmp_path)
    sent = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    # pending together: the first one handled stops it, the others are no-ops. The child is
    # stopped while they are sent, so that all three are pending when it runs again (sent one
    # by one from a loaded machine, a later one could arrive after the clean-up had ended)
    proc.send_signal(signal.SIGSTOP)
    for sig in sent:
        proc.send_signal(sig)
    proc.send_signal(signal.SIGCONT)
    _, stderr = proc.communicate(timeout=WAIT_S)
    first = next(s for s in sent if proc.returncode == 128 + s)
    assert not list(scratch_dir.glob(SCRATCH))
    assert stderr.strip().splitlines() == [
        f"kvoffload: measure stopped by {first.name}: its scratch file was removed and "
        "no profile was written"
    ]


def test_uninterrupted_the_harness_writes_a_profile(tmp_path):
    """The harness above measures for real: left alone it ends with a profile and exit 0."""
    proc, scratch_dir, out = _start(tmp_path)
    stdout, stderr = proc.communicate(timeout=WAIT_S * 2)
    assert proc.returncode == 0, stderr
    assert out.is_file() and "profile:" in stdout
    assert not list(scratch_dir.glob(SCRATCH))


def test_a_signal_ignored_at_the_start_stays_ignored(tmp_path):
    """`nohup kvoffload measure` must survive the terminal closing."""
    scratch_dir, out = tmp_path / "scratch", tmp_path / "me.yaml"
    scratch_dir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", HARNESS, "measure", "--quick", "--quiet", "--out", str(out),
         "--dir", str(scratch_dir)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )  # fmt: skip
    deadline = time.monotonic() + WAIT_S
    while not list(scratch_dir.glob(SCRATCH)) and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGHUP)
    _, stderr = proc.communicate(timeout=WAIT_S * 2)
    assert proc.returncode == 0, stderr
    assert out.is_file() and not list(scratch_dir.glob(SCRATCH))


# -- inputs.signals.stop_on_signals on its own, as `kvoffload book` and `measure` use it ----------
# code inside the block that sleeps, then says whether it finished or was stopped
SLEEPER = """
import sys, time
from kvoffload.inputs.signals import Interrupted, stop_on_signals
try:
    with stop_on_signals():
        print("ready", flush=True)
        time.sleep(float(sys.argv[1]))
    print("finished", flush=True)
except Interrupted as stop:
    print(f"stopped by {stop.name}", flush=True)
    sys.exit(128 + stop.signum)
"""


def _sleeper(seconds: float, preexec) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", SLEEPER, str(seconds)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec,
    )
    assert proc.stdout.readline() == "ready\n", proc.communicate()
    return proc


def test_under_nohup_a_hangup_is_ignored_and_the_block_finishes():
    """A command started with SIGHUP ignored (`nohup kvoffload book`) survives `kill -HUP`."""
    proc = _sleeper(1.0, lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    proc.send_signal(signal.SIGHUP)
    out, err = proc.communicate(timeout=WAIT_S)
    assert (proc.returncode, out, err) == (0, "finished\n", "")


def test_with_the_default_hangup_the_block_is_stopped():
    proc = _sleeper(WAIT_S, _as_from_a_terminal)
    proc.send_signal(signal.SIGHUP)
    out, err = proc.communicate(timeout=WAIT_S)
    assert (proc.returncode, out, err) == (128 + signal.SIGHUP, "stopped by SIGHUP\n", "")


@pytest.mark.skipif(
    signal.getsignal(signal.SIGTERM) is signal.SIG_IGN, reason="SIGTERM is ignored here"
)
def test_the_first_signal_raises_and_a_later_one_lets_the_clean_up_finish():
    """Interrupted is a KeyboardInterrupt (the build's Ctrl-C handling catches it); nested blocks
    share one stop, and the handlers before the outer block are back after it."""
    before = signal.getsignal(signal.SIGTERM)
    cleaned = []
    # nested as the book's runner is inside its site build
    with pytest.raises(KeyboardInterrupt) as stop, stop_on_signals(), stop_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(WAIT_S)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # during the clean-up: does nothing
            time.sleep(0.01)
            cleaned.append(True)
    assert isinstance(stop.value, Interrupted) and stop.value.signum == signal.SIGTERM
    assert str(stop.value) == "SIGTERM" and cleaned == [True]
    assert signal.getsignal(signal.SIGTERM) is before
