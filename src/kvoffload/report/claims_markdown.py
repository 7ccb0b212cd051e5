"""Chapter 08's text: each claim with its verdict as Markdown, the corrections, the omissions."""

from __future__ import annotations

from html import escape

import pandas as pd
from IPython.display import HTML, Markdown

from kvoffload.inputs import catalog
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
        lines = [
            f"`{c.id}` · the article says: *{c.gloss}* — **{BADGES[c.verdict]}**",
            "",
            article_quote(c.quote),
            "",
        ]
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


def article_quote(quote: str) -> str:
    """Return the article's words as a Korean blockquote marked as the article's (escaped HTML)."""
    return f'<blockquote lang="ko"><p>The article: «{escape(quote)}»</p></blockquote>'


def section(section: str) -> Markdown:
    """Return one section's claims for display."""
    return Markdown(section_text(section))


def corrections() -> Markdown:
    """Return the claims whose correction changes the article's argument, as a bullet list."""
    return Markdown(
        "\n".join(
            f"- The article: *{c.gloss}* ({BADGES[c.verdict]}) {c.conclusion}"
            for c in load_claims()
            if c.conclusion
        )
    )


def _before_after(c: Claim) -> str:
    if c.previous_verdict == NEW:
        return f"added, {c.verdict}"
    if c.previous_verdict:
        chain = " → ".join("added" if v == NEW else v for v in c.verdicts)
        return chain if c.previous_reason else f"{c.previous_verdict} → {c.verdict}"
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
                "why": c.change_reason
                + (f" Before: {c.previous_reason}" if c.previous_reason else ""),
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


_SORT_SCRIPT = """<script>
(function () {
  var t = document.currentScript.previousElementSibling.querySelector("table");
  t.querySelectorAll("th").forEach(function (th, i) {
    var b = th.querySelector("button");
    b.addEventListener("click", function () {
      var up = th.getAttribute("aria-sort") !== "ascending";
      t.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      var rows = Array.prototype.slice.call(t.tBodies[0].rows);
      rows.sort(function (a, c) {
        var x = a.cells[i].dataset.sort || a.cells[i].textContent;
        var y = c.cells[i].dataset.sort || c.cells[i].textContent;
        var nx = parseFloat(x), ny = parseFloat(y);
        var r = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
        return up ? r : -r;
      });
      rows.forEach(function (r) { t.tBodies[0].appendChild(r); });
    });
  });
})();
</script>"""

CLAIM_COLUMNS = ("claim", "the article's words", "the article's figure", "ours", "error", "verdict")
_VERDICT_ORDER = {v: i for i, v in enumerate(BADGES)}


def _error_key(c: Claim, value: float | None) -> str:
    """Return a sort key for the error column: the relative error, counts and orders by verdict."""
    if value is None or c.claimed is None:
        return "-1"
    err = c.error(value)
    return f"{min(err, 1e9):.6f}" if c.kind == "measure" else f"{1e9 if err else 0:.6f}"


def claims_table() -> HTML:
    """Return every claim in one table that sorts by any column (a small inline script, offline)."""
    head = "".join(
        f'<th scope="col"><button type="button">{escape(name)}</button></th>'
        for name in CLAIM_COLUMNS
    )
    rows = []
    for c in load_claims():
        value = c.recomputed()
        cells = [
            f"<td><code>{escape(c.id)}</code></td>",
            f'<td lang="ko">{escape(c.quote)}</td>',
            f"<td>{escape(c.claimed_text())}</td>",
            f"<td>{escape(c.show(value))}</td>",
            f'<td data-sort="{_error_key(c, value)}">'
            f"{escape('checked at its source' if value is None else error_text(c, value))}</td>",
            f'<td data-sort="{_VERDICT_ORDER[c.verdict]}">{escape(BADGES[c.verdict])}</td>',
        ]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    table = (
        '<div class="kvoffload-table-wrap" role="region" tabindex="0" aria-label="every claim">'
        '<table class="kvoffload-table dataframe kvoffload-sortable">'
        f"<caption>Every claim; select a column heading to sort by it.</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )
    return HTML(table + _SORT_SCRIPT)
