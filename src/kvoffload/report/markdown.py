"""Short Markdown for the page: bullet lists of notes."""

from __future__ import annotations

from collections.abc import Iterable

from IPython.display import Markdown


def bullets(items: Iterable[str], empty: str) -> Markdown:
    """Return the items as a Markdown bullet list, or one bullet saying ``empty`` when there are none."""
    lines = [f"- {item}" for item in items]
    return Markdown("\n".join(lines) or f"- {empty}")
