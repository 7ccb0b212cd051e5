"""The forked command runner (tests/support/cli_process.py) answers as ``python -m kvoffload``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.cli_process import run_cli
from tests.support.samples import GOOD_PROFILE

CASES = [
    ("kv", "llama-3.1-8b", "--seq", "1000", "--json"),  # a command's output
    ("kv", "no-such-model", "--seq", "1000"),  # bad input: exit 2, one line
    ("kv", "llama-3.1-8b", "--seq"),  # argparse's own error and status
    ("models", "list"),
]


@pytest.mark.parametrize("args", CASES, ids=" ".join)
def test_status_stdout_and_stderr_are_a_real_processs(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the caller's folder, not the server's
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    real = subprocess.run(
        [sys.executable, "-m", "kvoffload", *args], capture_output=True, text=True, env=env
    )
    assert run_cli(list(args), 30, env) == (real.returncode, real.stdout, real.stderr)


def test_a_relative_path_is_read_from_the_callers_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text(GOOD_PROFILE, encoding="utf-8")
    code, out, err = run_cli(["hardware", "validate", "mine.yaml"], 30, dict(os.environ))
    assert (code, err) == (0, "") and "mine.yaml" in out


def test_a_run_past_its_timeout_is_killed_as_subprocess_would(tmp_path):
    args = [
        "measure",
        "--quick",
        "--quiet",
        "--out",
        str(tmp_path / "p.yaml"),
        "--dir",
        str(tmp_path),
    ]
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli(args, 0.2, dict(os.environ))
    assert not (tmp_path / "p.yaml").exists()
