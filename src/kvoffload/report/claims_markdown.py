"""Chapter 08's text: each claim with its verdict as Markdown, the corrections, the omissions."""

from __future__ import annotations

import pandas as pd
from IPython.display import Markdown

from kvoffload.spec import catalog
from kvoffload.studies.claims import NEW, Claim, changed, load_claims, omitted

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


KIND_NOTES = {
    "count": "judged as a count: right only if equal",
    "comparison": "judged as an order: holds only if true",
}


def error_text(c: Claim, value: float) -> str:
    """Return how far the claim is from the recomputed value, as the rule reads it."""
    err = c.error(value)
    if c.kind != "measure":
        return KIND_NOTES[c.kind]
    if err == 0:
        return "inside the claimed range" if isinstance(c.claimed, dict) else "off by 0%"
    return f"off by {err:.1%}" if err < 10 else f"off by a factor of {1 + err:,.0f}"


def section_text(section: str) -> str:
    """Return Markdown for one section's claims: quote, gloss, both values, verdict, reason, source."""
    blocks = []
    for c in (x for x in load_claims() if x.section == section):
        value = c.recomputed()
        lines = [f"**{c.gloss}** — {BADGES[c.verdict]}", "", f"> {c.quote}", ""]
        if c.quantity:
            lines += [f"*Quantity:* {c.quantity}", ""]
        if c.claimed is not None and value is not None:
            lines.append(
                f"The article: {c.claimed_text()} · recomputed: **{c.show(value)}**"
                f" · {error_text(c, value)}"
            )
            lines.append("")
        lines.append(c.reason)
        if c.correct:
            lines += ["", f"Correct: {c.correct}"]
        if c.conclusion:
            lines += ["", f"*What changes:* {c.conclusion}"]
        if c.source:
            lines += ["", f"Source: {_source_link(c.source)}"]
        if c.changed:
            lines += ["", f"*Re-judged:* {_before_after(c)}. {c.change_reason}"]
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


def _before_after(c: Claim) -> str:
    if c.previous_verdict == NEW:
        return f"added, {c.verdict}"
    if c.previous_verdict:
        return f"{c.previous_verdict} → {c.verdict}"
    return f"{c.verdict}, gloss corrected"


def changes_table() -> pd.DataFrame:
    """Return every claim the re-judging changed or added: verdict before and after, and why."""
    rows = []
    for c in changed():
        value = c.recomputed()
        rows.append(
            {
                "claim": c.id,
                "gloss": c.gloss,
                "before": "not listed"
                if c.previous_verdict == NEW
                else c.previous_verdict or c.verdict,
                "after": c.verdict,
                "recomputed": "—" if value is None else f"{c.show(value)} ({error_text(c, value)})",
                "why": c.change_reason,
            }
        )
    return pd.DataFrame(rows)


def gloss_changes() -> Markdown:
    """Return the glosses the re-judging corrected: the earlier English beside the new one."""
    return Markdown(
        "\n".join(
            f"- `{c.id}`: «{c.quote}» was glossed *{c.previous_gloss}*, now *{c.gloss}*"
            for c in changed()
            if c.previous_gloss
        )
    )


def omissions() -> Markdown:
    """Return the article's numbers that are not claims, each with its reason, as a bullet list."""
    return Markdown("\n".join(f"- «{o['quote']}» — {o['reason']}" for o in omitted()))


def verdict_table(counts: dict[str, int]) -> pd.DataFrame:
    """Return the number of claims per verdict as a table (``studies.claims.summary``)."""
    return pd.DataFrame({"verdict": list(counts), "claims": list(counts.values())})
