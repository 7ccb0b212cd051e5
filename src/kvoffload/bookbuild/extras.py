"""Check, before a build starts, that the optional ``book`` dependencies are installed."""

from __future__ import annotations

from importlib.util import find_spec

from kvoffload.inputs.errors import InputError

# What executing chapters and building the site import: the `book` extra and what it brings.
BOOK_MODULES = (
    "nbformat",
    "jupytext",
    "papermill",
    "ipykernel",
    "jupyter_book",
    "tqdm",
    "pandas",
    "altair",
    "vl_convert",
    "mathjax",
)


def missing_book_modules() -> list[str]:
    """Return the book's modules that are not installed (found without importing them)."""
    return [name for name in BOOK_MODULES if find_spec(name) is None]


def require_book_extras() -> None:
    """Raise InputError naming the install command when a book dependency is missing."""
    missing = missing_book_modules()
    if missing:
        raise InputError(
            "the book needs the optional dependencies: pip install 'kvoffload[book]' "
            f"(missing: {', '.join(missing)})"
        )
