"""A core install (numpy, pyyaml, msgspec) runs every command but the book's, which says why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.shared import once

BOOK_ONLY = (
    "pandas",
    "altair",
    "nbformat",
    "papermill",
    "jupyter_book",
    "myst_nb",
    "jupytext",
    "tqdm",
)

SCENARIO = """\
hardware: a100-80gb-sxm-pcie4
model: llama-3.1-8b
engine: generic
precision: {weights: bf16, kv: bf16}
workload: {batch: 1, prompt: 128000, generate: 1}
placement:
  weights: {gpu: 1.0}
  kv: {cpu: 1.0}
attention: gpu
overlap: none
pinned: true
"""


def _env() -> dict[str, str]:
    """Return the environment without anything that could put the checkout on sys.path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.pop("VIRTUAL_ENV", None)
    return {**env, "PYTHONDONTWRITEBYTECODE": "1"}


def _run(cmd: list[str | Path], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _core_install(shared: Path) -> Path:
    """Install kvoffload (not editable) with only its core dependencies; return the venv."""
    tmp = shared / "core-install"
    tmp.mkdir()
    # pip builds a local folder in place (build/ and *.egg-info beside the sources): build a copy
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(
        REPO / "src",
        source / "src",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"),
    )
    venv = tmp / "venv"
    # the project's venv has uv (Makefile), which makes a venv and installs what pip would, in
    # seconds (``python -m venv`` alone spends most of them installing pip, which uv never runs)
    uv = shutil.which("uv", path=str(Path(sys.executable).parent))
    make = [uv, "venv", "-q", "--python", sys.executable] if uv else [sys.executable, "-m", "venv"]
    made = _run([*make, venv], cwd=tmp)
    assert made.returncode == 0, made.stderr
    pip = (
        [uv, "pip", "install", "-q", "--python", venv / "bin" / "python", "--compile-bytecode"]
        if uv
        else [venv / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    )
    installed = _run([*pip, "-c", REPO / "requirements.lock", source], cwd=tmp, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return venv


@pytest.fixture(scope="module")
def core(tmp_path_factory) -> tuple[Path, Path]:
    """Return (venv, work folder): kvoffload installed, not editable, with only its core deps.

    The install is made once per run (every worker's tests use it read-only); the work folder
    is this module's own."""
    return once(tmp_path_factory, "core-install", _core_install), tmp_path_factory.mktemp("work")


def test_only_the_core_dependencies_are_installed(core):
    venv, work = core
    for module in (*BOOK_ONLY, "pydantic"):  # pydantic: the schemas are msgspec's
        r = _run([venv / "bin" / "python", "-c", f"import {module}"], cwd=work)
        assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr, module
    r = _run([venv / "bin" / "python", "-c", "import kvoffload; print(kvoffload.__file__)"], work)
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()).is_relative_to(venv)  # the installed copy, not the checkout


def test_every_catalog_file_is_shipped(core):
    venv, work = core
    r = _run(
        [venv / "bin" / "python", "-c", "import kvoffload, pathlib; print(kvoffload.__file__)"],
        work,
    )
    installed = Path(r.stdout.strip()).parent / "catalog"
    ours = REPO / "src" / "kvoffload" / "catalog"
    want = sorted(str(p.relative_to(ours)) for p in ours.rglob("*.yaml"))
    got = sorted(str(p.relative_to(installed)) for p in installed.rglob("*.yaml"))
    assert got == want
    assert "engine_constants.yaml" in got and "hardware/systems.yaml" in got


def test_kv_on_a_core_install(core):
    venv, work = core
    cmd = [venv / "bin" / "kvoffload", "kv", "llama-3.1-8b", "--seq", "128000", "--json"]
    r = _run(cmd, work)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["total_bytes"] == 16_777_216_000


def test_hardware_predict_and_validate_on_a_core_install(core):
    venv, work = core
    kvoffload = venv / "bin" / "kvoffload"
    r = _run([kvoffload, "hardware", "show", "a100-80gb-sxm-pcie4"], work)
    assert r.returncode == 0, r.stderr
    assert "31.5 GB/s" in r.stdout
    scenario = work / "scenario.yaml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    r = _run([kvoffload, "predict", scenario, "--json"], work)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["memory"]["cpu_bytes"] == 16_777_216_000 + 131_072
    assert out["step"]["transfer_ms"] == pytest.approx(16_777_216_000 / 25.13e9 * 1e3, rel=0.01)
    r = _run([kvoffload, "validate"], work)
    assert r.returncode == 0, r.stderr
    assert "median |error|" in r.stdout


@pytest.mark.parametrize("args", [("book",), ("run", "--hardware", "t4-pcie3")])
def test_the_book_without_its_extras_is_one_line_exit_2(core, args):
    venv, work = core
    r = _run([venv / "bin" / "kvoffload", *args], work)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("kvoffload: error: the book needs the optional dependencies")
    assert "pip install 'kvoffload[book]'" in lines[0] and "nbformat" in lines[0]
    assert r.stdout == ""


# -- the same promise in the development environment, where the book's packages are present ---
IMPORTS_AFTER = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from kvoffload.cli import main
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(sys.argv[1:])
        except SystemExit as exc:
            code = exc.code
    heavy = sorted({{m.split(".")[0] for m in sys.modules}} & set({heavy!r}))
    print(json.dumps({{"code": code, "heavy": heavy}}))
    """
).format(heavy=BOOK_ONLY)


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("kv", "llama-3.1-8b", "--seq", "128000", "--json"),
        ("hardware", "list"),
        ("hardware", "show", "a100-80gb-sxm-pcie4"),
        ("hardware", "validate", "{scenario_dir}/profile.yaml"),
        ("models", "list"),
        ("models", "show", "deepseek-v3"),
        ("predict", "{scenario_dir}/scenario.yaml"),
        ("validate",),
        ("book", "--help"),
    ],
)
def test_commands_import_none_of_the_book_packages(args, tmp_path):
    (tmp_path / "scenario.yaml").write_text(SCENARIO, encoding="utf-8")
    (tmp_path / "profile.yaml").write_text("base: t4-pcie3\n", encoding="utf-8")
    argv = [a.format(scenario_dir=tmp_path) for a in args]
    r = subprocess.run(
        [sys.executable, "-c", IMPORTS_AFTER, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["code"] == 0, r.stderr
    assert out["heavy"] == []


def test_help_imports_only_the_standard_library_and_the_cli():
    """`kvoffload --help` is answered before numpy, msgspec or yaml load (issue 16, item 4)."""
    script = textwrap.dedent(
        """
        import contextlib, io, json, sys
        from kvoffload.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                main(["--help"])
            except SystemExit:
                pass
        print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
        """
    )
    r = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert r.returncode == 0, r.stderr
    loaded = set(json.loads(r.stdout.strip().splitlines()[-1]))
    assert loaded.isdisjoint({"numpy", "msgspec", "yaml", *BOOK_ONLY})


def test_measure_on_a_core_install_writes_a_profile_that_loads(core):
    venv, work = core
    kvoffload = venv / "bin" / "kvoffload"
    out = work / "measured.yaml"
    r = _run([kvoffload, "measure", "--quick", "--out", out, "--dir", work], work)
    assert r.returncode == 0, r.stderr
    assert "measuring [1/" in r.stderr  # plain progress lines: tqdm is a book dependency
    assert "Traceback" not in r.stderr
    r = _run([kvoffload, "hardware", "validate", out], work)
    assert r.returncode == 0, r.stderr
    assert "measured" in r.stdout
