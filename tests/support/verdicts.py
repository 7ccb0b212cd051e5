"""Reading a verdict box back, and the verdict a chapter's own cell gives for a profile."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from bs4 import BeautifulSoup

from kvoffload.bookbuild import page_cells
from kvoffload.bookbuild.runner import Chapter, declared_parameters
from kvoffload.studies import verdict


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def box_numbers(html: str) -> dict[str, str]:
    """Return the figures a verdict box shows, by the class of their span."""
    soup = BeautifulSoup(html, "html.parser")
    (box,) = soup.select(".verdict")
    return {
        cls: box.select_one(f".{cls}").get_text()
        for cls in ("verdict-gpu-ms", "verdict-offloaded-ms", "verdict-ratio", "verdict-longest")
    }


def assert_box_shows(html: str, v: verdict.Verdict) -> None:
    """Assert that a box's figures are the verdict's, to the digits shown."""
    shown = box_numbers(html)
    for cls, value in (
        ("verdict-gpu-ms", v.gpu_ms),
        ("verdict-offloaded-ms", v.offloaded_ms),
        ("verdict-ratio", v.ratio),
        ("verdict-longest", v.longest_offloaded),
    ):
        text = shown[cls]
        assert abs(_number(text) - value) <= 0.5 * 10 ** -_decimals(text) + 1e-9, (cls, text, value)


def chapter_verdict(chapter: Chapter, profile: str, monkeypatch) -> verdict.Verdict:
    """Return the verdict the chapter's verdict cell gives, run with the profile's values."""
    return chapter_box(chapter, profile, monkeypatch).verdict


def chapter_box(chapter: Chapter, profile: str, monkeypatch):
    """Return the box (verdict and answer) the chapter's verdict cell gives for the profile."""
    import jupytext
    import myst_nb

    monkeypatch.setattr(myst_nb, "glue", lambda *a, **k: None)
    (cell,) = [
        c
        for c in jupytext.read(chapter.path).cells
        if page_cells.VERDICT_TAG in c.metadata.get("tags", [])
    ]
    tree = ast.parse(cell.source)
    last = tree.body.pop()
    scope = {**declared_parameters(chapter), "hardware": profile}
    exec(compile(tree, chapter.name, "exec"), scope)
    return eval(compile(ast.Expression(last.value), chapter.name, "eval"), scope)


def glued(notebook: Path, key: str) -> str:
    """Return the text a glue ``key`` holds in an executed notebook (a string's quotes dropped)."""
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        for out in cell.get("outputs", []):
            if out.get("metadata", {}).get("scrapbook", {}).get("name") == key:
                text = next(v for k, v in out["data"].items() if k.endswith("text/plain"))
                text = "".join(text) if isinstance(text, list) else text
                return ast.literal_eval(text) if text[:1] in "'\"" else text
    raise KeyError(f"{notebook.name}: no glue {key!r}")
