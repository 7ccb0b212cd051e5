"""Publishing and interactive use: the CI workflow builds the book and publishes _build/html, and
`make lab` opens the chapters in a pinned JupyterLab as paired notebooks (no server started here)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvoffload.bookbuild.runner import chapters, declared_parameters
from tests.support.paths import REPO

WORKFLOW = REPO / ".github" / "workflows" / "book.yml"


def _pins(lock: Path) -> dict[str, str]:
    pins = {}
    for line in lock.read_text(encoding="utf-8").splitlines():
        m = re.match(r"([A-Za-z0-9_.-]+)==([^\s;]+)", line)
        if m:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def _steps(workflow: dict) -> list[dict]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def test_the_workflow_tests_builds_and_publishes_the_site():
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert "push" in triggers and "workflow_dispatch" in triggers
    steps = _steps(workflow)
    runs = [step.get("run", "") for step in steps]
    assert any(re.search(r"^\s*make test\b", r, re.M) for r in runs)
    book = [i for i, r in enumerate(runs) if re.search(r"^\s*make book\b", r, re.M)]
    assert book, "no step runs `make book`"
    uploads = [
        (i, s) for i, s in enumerate(steps) if "actions/upload-pages-artifact" in s.get("uses", "")
    ]
    assert uploads and uploads[0][1]["with"]["path"] == "_build/html"
    assert uploads[0][0] > book[0], "the site is uploaded before it is built"
    deploy = next(
        job
        for job in workflow["jobs"].values()
        if any("actions/deploy-pages" in s.get("uses", "") for s in job.get("steps", []))
    )
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    assert "chromium" in " ".join(runs)  # the browser tests run, never skip
    build = next(job for job in workflow["jobs"].values() if "needs" not in job)
    assert build["env"]["KVOFFLOAD_REQUIRE_BROWSER"] == "1"


def test_the_readme_says_how_to_publish_and_how_to_use_make_lab():
    readme = REPO / "README.md"
    text = readme.read_text(encoding="utf-8")
    assert re.search(r"^## Publishing", text, re.M)
    assert ".github/workflows/book.yml" in text
    assert "make lab" in text


def test_make_lab_installs_a_pinned_jupyterlab_apart_and_starts_it_in_notebooks():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    rule = re.search(r"^lab:[^\n]*\n((?:\t[^\n]*\n)+)", makefile, re.M)
    assert rule, "no `lab` target"
    assert re.search(r"cd notebooks && \S*jupyter lab", rule.group(1))
    assert "requirements-lab.lock" in makefile
    # `make book` and `make test` install requirements.lock only
    assert "-r requirements-lab.lock" not in re.search(
        r"^\$\(STAMP\):.*?(?=^\S)", makefile, re.M | re.S
    ).group(0)
    lab = _pins(REPO / "requirements-lab.lock")
    base = _pins(REPO / "requirements.lock")
    assert "jupyterlab" in lab and "jupytext" in lab
    assert "jupyterlab" not in base
    shared = {name: (lab[name], base[name]) for name in lab.keys() & base.keys()}
    assert all(a == b for a, b in shared.values()), {
        n: v for n, v in shared.items() if v[0] != v[1]
    }


def test_jupytext_pairs_the_chapters_with_notebooks():
    import tomllib

    config = tomllib.loads((REPO / "notebooks" / "jupytext.toml").read_text(encoding="utf-8"))
    assert set(config["formats"].split(",")) == {"ipynb", "md:myst"}
    assert "*.ipynb" in (REPO / ".gitignore").read_text(encoding="utf-8").split()


@pytest.mark.slow
def test_every_chapter_round_trips_through_a_notebook_with_its_parameters_cell(tmp_path):
    jupytext = shutil.which("jupytext", path=str(Path(sys.executable).parent))
    assert jupytext, "jupytext is in requirements.lock"
    work = tmp_path / "notebooks"
    work.mkdir()
    shutil.copy2(REPO / "notebooks" / "jupytext.toml", work)
    every = chapters(REPO)
    for c in every:
        shutil.copy2(c.path, work / c.path.name)
    names = [c.path.name for c in every]
    subprocess.run([jupytext, "--quiet", "--to", "ipynb", *names], cwd=work, check=True)
    for c in every:
        nb = json.loads((work / f"{c.name}.ipynb").read_text(encoding="utf-8"))
        params = [
            cell
            for cell in nb["cells"]
            if cell["cell_type"] == "code" and "parameters" in cell["metadata"].get("tags", [])
        ]
        declared = declared_parameters(c)
        assert len(params) == (1 if declared else 0), c.name
        for name in declared:  # every parameter is there to edit, a line of its own
            assert re.search(rf"^{name} = ", "".join(params[0]["source"]), re.M), (c.name, name)
        (work / c.path.name).unlink()
    ipynbs = [f"{c.name}.ipynb" for c in every]
    subprocess.run([jupytext, "--quiet", "--to", "md:myst", *ipynbs], cwd=work, check=True)
    for c in every:
        again = (work / c.path.name).read_text(encoding="utf-8")
        assert again == c.path.read_text(encoding="utf-8"), f"{c.name} changes on a save in Lab"
