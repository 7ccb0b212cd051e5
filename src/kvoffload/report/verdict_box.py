"""The verdict box a page opens with, and the Machines page's cross-machine table.

Every string from a profile or a model is escaped: the box is raw HTML on the page (one block,
no blank line, so Markdown pages can carry it as it is), the table Markdown.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence

from kvoffload.inputs.text import markdown_text
from kvoffload.studies.chapter_answers import Answer
from kvoffload.studies.fit_marks import FITS, marked
from kvoffload.studies.reuse import Headline
from kvoffload.studies.verdict import MACHINE_CONTEXTS, MachineRow, Verdict, describe


def ms(x: float) -> str:
    """Format milliseconds for the page: '9.60', '140.7', '1,052.9'."""
    return f"{x:.2f}" if x < 10 else f"{x:,.1f}"


def times(x: float) -> str:
    """Format a ratio: '14.7'."""
    return f"{x:,.1f}"


def tokens(n: int) -> str:
    """Format a token count with thousands separators: '10,210'."""
    return f"{int(n):,}"


def machine_label(name: str) -> str:
    """Return a machine's short name for titles: its GPU and link ("T4 16GB, PCIe 3.0 x16")."""
    head = ", ".join(name.split(", ")[:2])
    return head + ")" * (head.count("(") - head.count(")"))


def mid_sentence(name: str) -> str:
    """Return a machine's name as it reads inside a sentence: "the article's figures (...)"."""
    return "t" + name[1:] if name.startswith("The ") else name


def _span(cls: str, text: str) -> str:
    return f'<span class="{cls}">{html.escape(text)}</span>'


def answer_html(a: Answer) -> str:
    """Return a chapter's own answer as the box's first line (class ``verdict-answer``)."""
    figure = _span("verdict-headline", a.text)
    detail = f", {html.escape(a.detail)}" if a.detail else ""
    return (
        f'<p class="verdict-answer" data-glue="{html.escape(a.key)}">'
        f"{_span('verdict-question', a.label)}: <strong>{figure} {html.escape(a.unit)}</strong>"
        f"{detail}.</p>\n"
    )


def verdict_html(v: Verdict, answer: Answer | None = None) -> str:
    """Return the verdict box as one HTML block (class ``verdict``), every string escaped.

    With a chapter's ``answer`` the box opens with that figure; the generic step model's lines
    (cache on the GPU, cache offloaded) follow it.
    """
    budget = f"{v.budget_ms:g} ms"
    gpu_note = (
        " (weights and cache do not fit this GPU: a step it cannot hold)"
        if not v.gpu_fits
        else (f", within the {budget} budget" if v.meets_on_gpu else f", over the {budget} budget")
    )
    off_note = "" if v.offloaded_fits else " (does not fit this machine)"
    offloaded = (
        "Cache offloaded to host memory"
        if v.weights_gpu_share >= 1
        else f"Cache and {100 * (1 - v.weights_gpu_share):.0f}% of the weights in host memory"
    )
    if v.longest_offloaded == 0:
        longest = f"none ({_span('verdict-longest', '0')} tokens): even the shortest misses it"
    elif v.longest_is_window:
        longest = (
            f"{_span('verdict-longest', tokens(v.longest_offloaded))} tokens, more than the "
            f"model's whole {tokens(v.max_context or 0)}-token window"
        )
    else:
        longest = f"{_span('verdict-longest', tokens(v.longest_offloaded))} tokens"
    items = [
        f"Cache on the GPU: {_span('verdict-gpu-ms', ms(v.gpu_ms))} ms per token"
        f"{html.escape(gpu_note)}.",
        f"{offloaded}: {_span('verdict-offloaded-ms', ms(v.offloaded_ms))} ms "
        f"per token, {_span('verdict-ratio', times(v.ratio))}× the all-GPU step"
        f"{html.escape(off_note)}.",
        f"Longest context within {html.escape(budget)} with the cache offloaded: {longest}.",
        f"What fits: {html.escape(v.fits_sentence())}",
    ]
    attrs = (
        f'class="verdict" data-profile="{html.escape(v.system_id)}" '
        f'data-context="{v.workload.context}" data-batch="{v.workload.batch}"'
    )
    return (
        f"<div {attrs}>\n"
        f'<p class="verdict-head"><strong>Verdict</strong> for '
        f"{_span('verdict-machine', mid_sentence(machine_label(v.system_name)))}: "
        f"{_span('verdict-workload', describe(v.workload))}.</p>\n"
        + (answer_html(answer) if answer else "")
        + (_GENERIC_OPEN if answer else "")
        + "<ul>\n"
        + "\n".join(f"<li>{i}</li>" for i in items)
        + "\n</ul>\n"
        + ("</details>\n" if answer else "")
        + "</div>"
    )


# under a chapter's own answer the generic lines fold, so the box stays short on a phone
_GENERIC_OPEN = (
    '<details class="verdict-more">\n<summary>The same workload in the book\'s generic step model: '
    "cache on the GPU and offloaded</summary>\n"
)


def verdict_text(v: Verdict, answer: Answer | None = None) -> str:
    """Return the verdict as plain text (a notebook's text output)."""
    return re.sub(r"<[^>]+>", "", html.unescape(verdict_html(v, answer)))


class VerdictBox:
    """A verdict, and a chapter's own answer, that a notebook cell shows as the box or as text."""

    def __init__(self, v: Verdict, answer: Answer | None = None) -> None:
        self.verdict = v
        self.answer = answer

    def _repr_html_(self) -> str:
        return verdict_html(self.verdict, self.answer)

    def __repr__(self) -> str:
        return verdict_text(self.verdict, self.answer)


def box(v: Verdict, answer: Answer | None = None) -> VerdictBox:
    """Return the verdict box for a notebook cell's output, opening with the chapter's answer."""
    return VerdictBox(v, answer)


def md_escape(text: str) -> str:
    """Escape a name for MyST Markdown so it prints as it is (in a table cell too), on one line.

    Not for a role's content ({doc}`...`), where a backslash prints as itself.
    """
    return markdown_text(text)


def _fits(r: MachineRow) -> str:
    if not r.weights_fit:
        text = "no: the weights overflow it"
    elif not r.longest_on_gpu:
        text = "the weights, no cache"
    else:
        text = f"yes, cache to {tokens(r.longest_on_gpu)} tokens"
    unfit = [
        (c, cell) for c, cell in zip(MACHINE_CONTEXTS, r.gpu_fit_cells, strict=True) if cell != FITS
    ]
    if unfit:  # the first context whose all-GPU step the table marks, and what it needs
        c, cell = unfit[0]
        text += f"; at {c // 1000}K the all-GPU step {cell}"
    return text


def machine_times(r: MachineRow) -> list[str]:
    """Return a machine's "GPU / offloaded" TPOT cells, one per ``MACHINE_CONTEXTS``, each time
    marked with ``fit_marks.UNFIT_MARK`` where its setup does not fit the machine."""
    on_gpu = [
        marked(ms(g), cell == FITS) for g, cell in zip(r.on_gpu_ms, r.gpu_fit_cells, strict=True)
    ]
    offloaded = [marked(ms(o), ok) for o, ok in zip(r.offloaded_ms, r.offloaded_fits, strict=True)]
    return [f"{g} / {o}" for g, o in zip(on_gpu, offloaded, strict=True)]


def machines_table(rows: Sequence[MachineRow], link: Callable[[MachineRow], str]) -> str:
    """Return the cross-machine table as Markdown; ``link`` gives each row's (Markdown) link cell.

    A time whose setup does not fit the machine carries ``fit_marks.UNFIT_MARK``, and the fits
    column says what the first such all-GPU step needs of the GPU's memory.
    """
    head = [
        "machine",
        "link (GB/s)",
        *[f"TPOT at {c // 1000}K: GPU / offloaded (ms)" for c in MACHINE_CONTEXTS],
        "longest context within budget, offloaded",
        "model fits the GPU",
    ]
    lines = [
        "| " + " | ".join(head) + " |",
        "|" + "|".join(["---", *["--:"] * (len(head) - 2), "---"]) + "|",
    ]
    for r in rows:
        cells = [
            link(r),
            f"{r.link_gbs:,.1f}",
            *machine_times(r),
            tokens(r.longest_offloaded) if r.longest_offloaded else "none",
            _fits(r),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def answer(
    ref: Verdict, fast: Verdict, hit: Headline | None = None, *, measured: Verdict | None = None
) -> str:
    """Return the book's answer (Markdown): per-step streaming on the article's machine, then the
    catalog machine whose link makes the offloaded step fastest; with ``hit``, the other half,
    offload for reuse: a prefix reloaded once from host memory against recomputing it. With
    ``measured`` (the same request on a catalog A100 whose link was measured) the first sentence
    says the headline's link is the article's own figure and gives the measured link's ratio."""
    model, n = md_escape(ref.model_name), tokens(ref.workload.context)
    first = (
        f"On the article's machine, {model} decodes a "
        f"{n}-token request in {ms(ref.gpu_ms)} ms per token with its KV cache on the GPU and "
        f"in {ms(ref.offloaded_ms)} ms, {times(ref.ratio)} times as long, with the cache in "
        f"host memory: every layer's cache crosses the {ref.link_gbs:,.1f} GB/s link on every "
        "step."
    )
    if measured is not None:
        first += (
            " That link rate is the article's own figure, kept so the headline recomputes the "
            "article's case, though chapter 08 grades it wrong; on the "
            f"{md_escape(machine_label(measured.system_name).replace(', ', ' over ', 1))}, "
            "whose link was "
            f"measured at {measured.link_gbs:,.1f} GB/s, the same request's offloaded step is "
            f"{times(measured.ratio)} times its all-GPU step."
        )
    budget = f"{ref.budget_ms:g} ms"
    allows = (
        f"at most {tokens(ref.longest_offloaded)} tokens of context"
        if ref.longest_offloaded
        else "no context at all"
    )
    if ref.longest_on_gpu >= ref.workload.context:
        room = (
            f"while the GPU itself has room for the weights and {tokens(ref.longest_on_gpu)} "
            "tokens of cache: offloading buys room this request does not need"
        )
    else:
        room = (
            f"and the GPU itself holds the weights and only {tokens(ref.longest_on_gpu)} tokens "
            "of cache: a smaller cache format or shorter context is the cheaper way to make room"
        )
    second = f"A {budget} per-token budget then allows {allows} with the cache offloaded, {room}."
    within = f", within the {budget} budget" if fast.meets_offloaded else ""
    over = machine_label(fast.system_name).replace(", ", " over ", 1)
    third = (
        f"Only a much faster link changes the answer: on the {md_escape(over)}, "
        f"whose link copies {fast.link_gbs:,.0f} GB/s, the same request takes "
        f"{ms(fast.offloaded_ms)} ms per token with the cache offloaded{within}, "
        f"{times(fast.ratio)} times its all-GPU step."
    )
    streaming = f"{first} {second} {third}"
    if hit is None or not hit.fits:
        return streaming
    reuse = (
        "Offload for reuse is the other half, and it pays: a prefix cache (vLLM's KV offloading "
        "connector, LMCache, SGLang's HiCache) copies the blocks back once, when a later request "
        f"starts with the same tokens. On the article's machine a {tokens(hit.prompt)}-token "
        f"prompt whose first {tokens(hit.cached)} tokens sit in host memory starts in "
        f"{ms(hit.ttft_ms)} ms instead of the {ms(hit.recompute_ms)} ms it takes to recompute, "
        f"{times(hit.speedup)} times sooner, and then decodes from GPU memory."
    )
    return f"{streaming}\n\n{reuse}"
