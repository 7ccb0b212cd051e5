"""Short Markdown for the page: bullet lists of notes, each escaped to print as plain text."""

from __future__ import annotations

from collections.abc import Iterable

from IPython.display import Markdown

from kvoffload.inputs.text import markdown_text


def bullets(items: Iterable[str], empty: str) -> Markdown:
    """Return the items as a Markdown bullet list, or one bullet saying ``empty`` when there are none."""
    lines = [f"- {markdown_text(item)}" for item in items]
    return Markdown("\n".join(lines) or f"- {markdown_text(empty)}")
