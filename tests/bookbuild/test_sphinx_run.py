"""The Sphinx build process: started ahead, it builds only when told, and never outlives a build."""

from __future__ import annotations

import subprocess
import sys

from kvoffload.bookbuild.jupyterbook import WarmSphinx
from kvoffload.bookbuild.sphinx_run import USAGE, WHEN_TOLD

RUN = [sys.executable, "-m", "kvoffload.bookbuild.sphinx_run"]


def test_a_wrong_command_line_exits_2_with_the_usage():
    r = subprocess.run([*RUN, "only-one"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == USAGE


def test_told_nothing_it_leaves_without_building(tmp_path):
    out = tmp_path / "out"
    for told in ("", "quit\n"):  # the pipe's end, or any other line
        r = subprocess.run(
            [*RUN, WHEN_TOLD, str(tmp_path), str(out)],
            input=told,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        assert not out.exists()


def test_an_unused_warm_process_is_gone_when_the_block_ends(tmp_path):
    with WarmSphinx(tmp_path, tmp_path / "out") as warm:
        proc = warm.proc
        assert proc is not None and proc.poll() is None
    assert proc.returncode is not None and warm.proc is None
    try:
        with WarmSphinx(tmp_path, tmp_path / "out") as warm:
            proc = warm.proc
            raise KeyboardInterrupt  # an interrupted build
    except KeyboardInterrupt:
        pass
    assert proc.returncode is not None
    assert not (tmp_path / "out").exists()


def test_a_warm_process_for_other_paths_is_not_used(tmp_path):
    (tmp_path / "a").mkdir()
    with WarmSphinx(tmp_path / "a", tmp_path / "a-out") as warm:
        proc = warm.proc
        # asked to build another book: the warm process is killed, a fresh one runs (and fails:
        # there is no book there), reported as a failed build
        r = warm.run(tmp_path / "b", tmp_path / "b-out")
    assert proc.returncode is not None and proc.returncode != 0
    assert r.returncode != 0 and not (tmp_path / "a-out").exists()
