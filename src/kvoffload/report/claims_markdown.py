"""Chapter 08's text: each claim with its verdict as Markdown, the corrections, the omissions."""

from __future__ import annotations

import pandas as pd
from IPython.display import Markdown

from kvoffload.spec import catalog
from kvoffload.studies.claims import load_claims, omitted

BADGES = {
    "holds": "✅ holds",
    "imprecise": "🟡 imprecise",
    "wrong": "❌ wrong",
    "not verifiable": "❔ not verifiable",
}


def _source_link(source: str) -> str:
    entry = catalog.sources().get(source)
    if not entry:
        return ""
    title = entry.get("title", source)
    return f"[{title}]({entry['url']})" if entry.get("url") else title


def section_text(section: str) -> str:
    """Return Markdown for one section's claims: quote, gloss, both values, verdict, reason, source."""
    blocks = []
    for c in (x for x in load_claims() if x.section == section):
        value = c.recomputed()
        lines = [f"**{c.gloss}** — {BADGES[c.verdict]}", "", f"> {c.quote}", ""]
        if c.claimed is not None:
            lines.append(f"The article: {c.claimed_text()} · recomputed: **{c.show(value)}**")
            lines.append("")
        lines.append(c.reason)
        if c.correct:
            lines += ["", f"Correct: {c.correct}"]
        if c.conclusion:
            lines += ["", f"*What changes:* {c.conclusion}"]
        if c.source:
            lines += ["", f"Source: {_source_link(c.source)}"]
        blocks.append("\n".join(lines))
    return "\n\n---\n\n".join(blocks)


def section(section: str) -> Markdown:
    """Return one section's claims for display."""
    return Markdown(section_text(section))


def corrections() -> Markdown:
    """Return the claims whose correction changes the article's argument, as a bullet list."""
    return Markdown(
        "\n".join(f"- **{c.gloss}** {c.conclusion}" for c in load_claims() if c.conclusion)
    )


def omissions() -> Markdown:
    """Return the article's numbers that are not claims, each with its reason, as a bullet list."""
    return Markdown("\n".join(f"- «{o['quote']}» — {o['reason']}" for o in omitted()))


def verdict_table(counts: dict[str, int]) -> pd.DataFrame:
    """Return the number of claims per verdict as a table (``studies.claims.summary``)."""
    return pd.DataFrame({"verdict": list(counts), "claims": list(counts.values())})
