"""The build's failure types, importable without the book's optional dependencies."""

from __future__ import annotations


class ChapterError(RuntimeError):
    """A chapter raised while executing: names the chapter, the profile and the cell."""


class BuildError(RuntimeError):
    """The Jupyter Book build failed; the previous site is left in place."""
