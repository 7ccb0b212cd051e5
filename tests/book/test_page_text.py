"""The words on every page: numbers written for people, never Python's reprs.

No page shows True/False, inf/nan or 1.5e+03 in its prose or table cells, doubles a word, or
turns a flag's "--" into a dash; a wide table scrolls inside its own box with its key column in
view, never the page. The fast tests hold the one number formatter, the table styling and each
sentence that used to break; the slow ones scan every page of a built book, and load each in
Chromium at a phone's width.
"""

from __future__ import annotations

import math
import re
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model
from kvoffload.inputs.units import (
    Dim,
    format_change,
    format_number,
    format_quantity,
    parse_quantity,
)
from kvoffload.report import styling
from kvoffload.studies import alternatives, beyond, calibration, claims, engines_compared, tiers
from kvoffload.studies.moe_offload import relative

# elements whose text is code, math or machinery, not prose
_SKIP = {"script", "style", "pre", "code", "kbd", "samp", "svg", "math", "head", "template"}
_VOID = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "wbr",
}
_BREAK = {
    "p",
    "td",
    "th",
    "li",
    "div",
    "br",
    "tr",
    "h1",
    "h2",
    "h3",
    "h4",
    "dd",
    "dt",
    "figcaption",
}

CHECKS = {
    "a boolean": re.compile(r"\b(?:True|False)\b"),
    "inf or nan": re.compile(r"(?<![\w.-])(?:-?inf|nan|NaN)\b"),
    "an exponent": re.compile(r"\d[eE][+-]\d"),
    "a dash before a flag": re.compile(r"(?:^|[\s(\[«\"'“])[–—]-?[A-Za-z][\w-]*"),
    "a capital article after 'for'": re.compile(r"\bfor (?:The|A|An) "),
    "a ratio to three decimals": re.compile(r"(?<![\d.])\d+\.\d{3,}\s?(?:×|x\b)"),
    "'us' for µs": re.compile(r"\d\s?us\b"),
}
_WORDS = re.compile(r"\b([A-Za-z]+)\s+([A-Za-z]+)\b")


class _Prose(HTMLParser):
    """Collect a page's visible text, one line per block, without code, math or scripts."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.skip: list[str] = []
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if self.skip or tag in _SKIP or "math" in classes:
            if tag not in _VOID:
                self.skip.append(tag)
            return
        if tag in _BREAK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if self.skip:
            if tag == self.skip[-1]:
                self.skip.pop()
            return
        if tag in ("td", "th"):
            self.parts.append(" | ")

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.parts.append(data)


def prose(html: str) -> str:
    """Return the visible prose and table cells of a page, code blocks and math left out."""
    parser = _Prose()
    parser.feed(html)
    return "".join(parser.parts)


def _doubled(text: str) -> list[str]:
    """Return doubled words ('the the', 'The the'); a name beside its lower-case path is not one."""
    found = []
    pos = 0
    while m := _WORDS.search(text, pos):
        a, b = m.groups()
        if a == b or (a == b.capitalize() and b.islower()):
            found.append(m.group())
        pos = m.start(2)
    return found


_DECIMAL = re.compile(r"^[-−+]?\d[\d,]*\.\d+$")
_UNIT = re.compile(r"\(|%|×|\b(?:ms|s|GB|MB|GiB|MiB|GB/s|tokens?/s|ratio|times|share)\b")


class _Tables(HTMLParser):
    """Collect each table's header cells and body rows as text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[tuple[list[str], list[list[str]]]] = []
        self.cell: list[str] | None = None
        self.row: list[str] = []
        self.in_head = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "table":
            self.tables.append(([], []))
        elif tag == "thead":
            self.in_head = True
        elif tag == "tr":
            self.row = []
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "thead":
            self.in_head = False
        elif tag in ("td", "th") and self.cell is not None and self.tables:
            self.row.append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "tr" and self.tables and self.row:
            head, body = self.tables[-1]
            if self.in_head:
                head[:] = self.row
            else:
                body.append(self.row)

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def unitless_columns(html: str) -> list[str]:
    """Return each table column of decimal figures whose header names no unit."""
    parser = _Tables()
    parser.feed(html)
    found = []
    for head, body in parser.tables:
        for i, title in enumerate(head):
            cells = [r[i] for r in body if i < len(r) and r[i] not in ("", "—", "none", "n/a")]
            if cells and all(_DECIMAL.match(c) for c in cells) and not _UNIT.search(title):
                found.append(f"a column of figures without a unit: {title!r} ({cells[0]}, …)")
    return found


def prose_problems(html: str) -> list[str]:
    """Return each place where a page's prose shows a repr, a doubled word or a dashed flag, a
    template slip ('for The', '1.234×', '5 us'), or a column of figures with no unit."""
    problems = unitless_columns(html)
    for line in prose(html).splitlines():
        for what, pattern in CHECKS.items():
            problems += [
                f"{what}: …{line[max(0, m.start() - 50) : m.end() + 30]}…"
                for m in pattern.finditer(line)
            ]
        problems += [f"a doubled word: {w!r} in …{line[:120]}…" for w in _doubled(line)]
    return problems


# --- the scanner itself: it finds what it must and passes what it must ---------------------------


@pytest.mark.parametrize(
    "html",
    [
        "<p>fits: True</p>",
        "<table><tr><td>False</td></tr></table>",
        "<p>the budget needs inf GB/s</p>",
        "<td>nan</td>",
        "<p>1.49e+03 ms</p>",
        "<li>2.5e-05 s</li>",
        "<p>With –cpu-offload-gb 10 a 24 GB GPU</p>",
        "<p>(—n-gpu-layers 20)</p>",
        "<p>once its payload is the the payload</p>",
        "<p>The the step</p>",
        "<p>and and the cache</p>",
        "<p>computed for The article's figures</p>",
        "<p>offloading is 1.234× slower</p>",
        "<td>0.517x</td>",
        "<p>each hand-over costs 12 us</p>",
        "<table><thead><tr><th>link time</th></tr></thead><tbody><tr><td>1.25</td></tr>"
        "<tr><td>3.5</td></tr></tbody></table>",
    ],
)
def test_the_scanner_finds_what_a_broken_template_prints(html):
    assert prose_problems(html)


@pytest.mark.parametrize(
    "html",
    [
        "<pre>fits = True\nx = float('inf')</pre>",
        "<p>run <code>--cpu-offload-gb 10</code> and <code>1e+03</code></p>",
        '<p><span class="math notranslate">\\(10^{3}\\)</span> information, infinite, nano</p>',
        "<p>With --cpu-offload-gb 10 a 24 GB GPU — holds</p>",
        "<p>layers 0–31 on the GPU; bf16—the default</p>",
        "<p>Source: FlexLLMGen flexllmgen/flex_opt.py</p>",
        "<script>var a = true, b = 1e+30; // True</script><p>1,490 ms</p>",
        "<p>that is, that</p>",
        "<p>for the article's figures, 1.23× slower, 12 µs; let us see; for a batch</p>",
        "<table><thead><tr><th>link time (ms)</th><th>batch</th></tr></thead><tbody>"
        "<tr><td>1.25</td><td>4</td></tr></tbody></table>",
    ],
)
def test_the_scanner_passes_code_math_and_ordinary_prose(html):
    assert prose_problems(html) == []


# --- the one number formatter ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "digits", "text"),
    [
        (1490.2, 3, "1,490"),
        (1406.2, 3, "1,406"),
        (123.46, 3, "123"),
        (12.346, 3, "12.3"),
        (0.30389, 3, "0.304"),
        (1.23456e-5, 3, "0.0000123"),
        (5.0, 3, "5"),
        (0.0, 3, "0"),
        (-0.0, 3, "0"),
        (-2.5, 3, "-2.5"),
        (1e16, 3, "10,000,000,000,000,000"),
        (13.8426, 4, "13.84"),
        (float("inf"), 3, "∞"),
        (float("nan"), 3, "—"),
    ],
)
def test_format_number_writes_figures_for_people(x, digits, text):
    assert format_number(x, digits) == text


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e20, max_value=1e20))
def test_format_number_never_prints_an_exponent(x):
    text = format_number(x)
    assert "e" not in text.lower() and re.fullmatch(r"-?[\d,]+(\.\d+)?", text)
    assert math.isclose(float(text.replace(",", "")), x, rel_tol=6e-3)  # three figures


@given(st.floats(min_value=1e-6, max_value=1e15, allow_nan=False))
def test_quantities_print_without_exponent_and_parse_back(x):
    for dim in (Dim.BYTES, Dim.BANDWIDTH, Dim.TIME, Dim.RATE, Dim.FLOP_RATE):
        text = format_quantity(x, dim).split(" (")[0]
        assert not re.search(r"\d[eE][+-]?\d", text), text
        assert math.isclose(parse_quantity(text, dim), x, rel_tol=1e-3), (dim, text)


def test_rates_read_as_iops_and_changes_as_signed_percentages():
    assert format_quantity(1.7e5, Dim.RATE) == "170 kIOPS"
    assert format_quantity(1.4e6, Dim.RATE) == "1.4 MIOPS"
    assert [format_change(x) for x in (4.42, -0.164, 0.0, 123.4)] == [
        "+442%",
        "-16%",
        "0%",
        "+12,340%",
    ]


# --- tables --------------------------------------------------------------------------------------


def _frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "note": ["a long note <b>", "", "same"],
            "engine": ["generic", "llama.cpp, --no-kv-offload", "x"],
            "fits": [True, False, np.bool_(True)],
            "TPOT (ms)": [1490.2, float("nan"), 0.30389],
            "needed (GB/s)": [float("inf"), 12.5, 3.0],
            "tokens": [8000, 128000, 512],
            "address": ["https://example.org/a?b=1&c=2", "", "https://example.org/x"],
        }
    )


def test_a_table_puts_key_columns_first_and_notes_under_it():
    table = styling.show(
        _frame(), "t", {"TPOT (ms)": "{:.3g}"}, key=["engine", "fits"], notes=["note"]
    )
    html = table.to_html()
    heads = re.findall(r'class="col_heading level0 col\d+" >([^<]*)<', html)
    assert heads[:3] == ["engine", "fits", "TPOT (ms)"] and "note" not in heads
    assert table.notes == ("a long note &lt;b&gt;", "same")  # escaped, one per distinct text
    assert 'href="#T_t-note-1"' in html and 'id="T_t-note-2"' in html
    assert '<div class="kvoffload-table-wrap"' in html and "kvoffload-notes" in html
    assert "<b>" not in html


def test_table_cells_are_words_and_figures_never_reprs():
    html = styling.show(_frame(), "t", {"TPOT (ms)": "{:.3g}"}, infinite="none").to_html()
    cells = re.findall(r'class="data row\d+ col\d+" >(.*?)</td>', html)
    assert {"yes", "no", "1,490", "0.304", "—", "none", "128,000"} <= set(cells)
    assert not prose_problems(html)
    assert "<code>--no-kv-offload</code>" in html  # a flag reads and copies whole
    assert '<a href="https://example.org/a?b=1&amp;c=2">example.org/a</a>' in html


def test_numbers_are_right_aligned_and_text_is_not():
    html = styling.show(_frame(), "t", key=["engine"]).to_html()
    right = set(re.findall(r"#T_t td\.(col\d+) \{\s*text-align: right", html))
    heads = re.findall(r'class="col_heading level0 (col\d+)" >([^<]*)<', html)
    by_name = {name: col for col, name in heads}
    assert {by_name["TPOT (ms)"], by_name["needed (GB/s)"], by_name["tokens"]} <= right
    assert by_name["note"] not in right and by_name["fits"] not in right


def test_a_title_links_to_its_address():
    frame = pd.DataFrame({"title": ["A <paper>"], "address": ["https://arxiv.org/abs/1"]})
    html = styling.show(frame, "s", links={"title": "address"}).to_html()
    assert '<a href="https://arxiv.org/abs/1">A &lt;paper&gt;</a>' in html
    assert ">address<" not in html


def test_a_missing_column_is_named():
    with pytest.raises(KeyError, match="no column 'nope'"):
        styling.show(_frame(), "t", notes=["nope"])


# --- each sentence that used to break --------------------------------------------------------------

ARTICLE = load_system("article-reference")
T4 = load_system("t4-pcie3")
LLAMA = load_model("llama-3.1-8b")


def test_a_link_without_latency_is_not_a_payload_of_no_payload():
    text = tiers.half_rate_sentence(ARTICLE)
    assert "no payload" not in text and "no per-copy latency" in text
    assert re.search(r"once its payload is [\d.]+ kB \(", tiers.half_rate_sentence(T4))


@pytest.mark.parametrize(
    ("perfect", "none", "says"),
    [
        (math.inf, math.inf, "no link rate meets the budget, with overlap or without"),
        (25.31, math.inf, "needs 25.31 GB/s with perfect overlap and no rate at all without it"),
        (25.31, 1234.6, "needs 25.31 GB/s with perfect overlap (1,235 GB/s without)"),
    ],
)
def test_the_needed_link_sentence_never_says_inf(perfect, none, says):
    found = beyond.NeedFindings(perfect, none, 13.84, 3, 6)
    sentence = found.sentence()
    assert (
        says in sentence and "13.84 GB/s" in sentence and not prose_problems(f"<p>{sentence}</p>")
    )
    assert "inf" not in found.need_text


def test_the_alternatives_headline_and_table_print_milliseconds_whole():
    head = alternatives.Headline(275.0, 1489.2, "16 GB", 232.0, "10 GB", "")
    assert (head.offload_tpot, head.base_tpot, head.offload_times) == ("1,489", "275", "5.42")
    article = alternatives.article_table(T4, LLAMA, 128_000)
    for cell in article["TPOT change"]:
        assert re.fullmatch(r"([+-][\d,]+|0)% \([\d,.]+ ms\)", cell), cell


def test_the_fastest_engine_sentence_and_flexgens_policy():
    frame = pd.DataFrame(
        {
            "engine": ["generic", "FlexGen, searched policy"],
            "TPOT (ms)": [1406.2, 2000.0],
            "fits": [True, True],
            "note": ["", "searched: --percent 100 0 49 51 100 0 --cpu (1,490 tokens/s)"],
        }
    )
    best = engines_compared.fastest(frame)
    assert "1,406 ms" in best.sentence()
    assert best.flexgen_policy.startswith("--percent")  # the page already says it was searched


def test_speed_ratios_and_unitless_claims_have_no_exponent():
    assert relative(150.0) == "150 times as fast as"
    assert relative(1 / 250) == "250 times slower than"
    plain = next(c for c in claims.load_claims() if not c.unit)
    assert plain.show(123456.7) == "123,457"
    values = calibration.calibration_rows("t4-pcie3")["value"]
    assert not any(re.search(r"\d[eE][+-]\d", v) for v in values)


# --- every page of a built book ------------------------------------------------------------------


def _site_pages(root):
    html = root / "_build" / "html"
    return [
        p
        for p in sorted(html.rglob("*.html"))
        if not {"_static", "_sources", "_images"} & set(p.relative_to(html).parts)
    ]


@pytest.mark.slow
def test_no_page_shows_a_repr_a_doubled_word_or_a_dashed_flag(built_book):
    root, _ = built_book
    pages = _site_pages(root)
    assert len(pages) >= 10
    found = {
        str(p.relative_to(root)): problems
        for p in pages
        if (problems := prose_problems(p.read_text(encoding="utf-8")))
    }
    assert not found, found
