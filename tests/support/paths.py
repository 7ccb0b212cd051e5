"""Where the sources are, the book's test profiles, and a copy of what a book build reads."""

from __future__ import annotations

import shutil
from pathlib import Path

BOOK_PROFILES = ["article-reference", "t4-pcie3"]
REPO = Path(__file__).resolve().parents[2]


def copy_book_sources(dest: Path) -> Path:
    """Copy what a book build reads (config, toc, pages, chapters) into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy2(REPO / name, dest / name)
    shutil.copytree(REPO / "notebooks", dest / "notebooks")
    shutil.copytree(
        REPO / "book", dest / "book", ignore=shutil.ignore_patterns("generated", "vendor")
    )
    return dest
